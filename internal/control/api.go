package control

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/internal/trust"
)

// DefaultSocket is where warpflowd listens unless configured otherwise.
const DefaultSocket = "/run/warpflow/warpflowd.sock"

// DefaultCaptureDir is the daemon's capture_dir unless configured
// otherwise: the one directory it makes capture files in.
const DefaultCaptureDir = "/var/lib/warpflow/captures"

// Error is a control API error: a stable code, a message for people and,
// for an invalid pipeline, every problem found (file:line:column: ...).
type Error struct {
	Code     string   `json:"code"`
	Message  string   `json:"message"`
	Problems []string `json:"problems,omitempty"`
	// Status is the HTTP status the error came with (client side).
	Status int `json:"-"`
}

func (e *Error) Error() string {
	if len(e.Problems) == 0 {
		return e.Message
	}
	return e.Message + ":\n" + strings.Join(e.Problems, "\n")
}

// Is matches errors by code, so errors.Is(err, ErrNotFound) works on what
// the client returns.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// The error codes, as sentinels for errors.Is.
var (
	ErrBadRequest      = &Error{Code: "bad_request", Message: "bad request"}
	ErrTooLarge        = &Error{Code: "too_large", Message: "request too large"}
	ErrNotFound        = &Error{Code: "not_found", Message: "not found"}
	ErrConflict        = &Error{Code: "conflict", Message: "conflict"}
	ErrInvalidPipeline = &Error{Code: "invalid_pipeline", Message: "invalid pipeline"}
	ErrRefused         = &Error{Code: "refused", Message: "refused"}
	ErrForbidden       = &Error{Code: "forbidden", Message: "forbidden"}
	ErrUnauthorized    = &Error{Code: "unauthorized", Message: "unauthorized"}
	ErrInternal        = &Error{Code: "internal", Message: "internal error"}
)

// Errorf makes an error with code's code and a formatted message.
func Errorf(code *Error, format string, args ...any) *Error {
	return &Error{Code: code.Code, Message: fmt.Sprintf(format, args...)}
}

// status is the HTTP status for an error code.
func status(code string) int {
	switch code {
	case ErrBadRequest.Code, ErrInvalidPipeline.Code:
		return http.StatusBadRequest
	case ErrTooLarge.Code:
		return http.StatusRequestEntityTooLarge
	case ErrNotFound.Code:
		return http.StatusNotFound
	case ErrConflict.Code, ErrRefused.Code:
		return http.StatusConflict
	case ErrForbidden.Code:
		return http.StatusForbidden
	case ErrUnauthorized.Code:
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

// AsError turns any error into an *Error (internal unless it is one).
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: ErrInternal.Code, Message: err.Error()}
}

// ErrorReply is the body of every error response.
type ErrorReply struct {
	Error *Error `json:"error"`
}

// LoadRequest loads a pipeline into the daemon's store (it does not run
// it: swap does). File is the name the client read it from, used in error
// messages, so they read like `warpctl pipeline validate`'s.
type LoadRequest struct {
	Name   string `json:"name,omitempty"` // default: the pipeline's own name
	File   string `json:"file"`
	Source string `json:"source"`
}

// Validate checks the request's own fields (the source is compiled by the
// daemon).
func (r LoadRequest) Validate() error {
	if r.Source == "" {
		return Errorf(ErrBadRequest, "load: source is empty")
	}
	if r.Name != "" {
		if err := ValidName(r.Name); err != nil {
			return err
		}
	}
	if len(r.File) > MaxFileLabel {
		return Errorf(ErrBadRequest, "load: file %q: longer than %d bytes", Clip(r.File), MaxFileLabel)
	}
	if i := strings.IndexFunc(r.File, unicode.IsControl); i >= 0 {
		return Errorf(ErrBadRequest, "load: file %q: a control character at byte %d", Clip(r.File), i)
	}
	return nil
}

// MaxFileLabel bounds LoadRequest.File: it is only a label for messages
// (every problem line starts with it), never opened.
const MaxFileLabel = 512

// ValidName checks a pipeline name: 1 to 64 of [A-Za-z0-9_.-], so it is
// safe in a URL path and a log line.
func ValidName(name string) error {
	if name == "" || len(name) > 64 {
		return Errorf(ErrBadRequest, "pipeline name %q: want 1 to 64 characters", Clip(name))
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return Errorf(ErrBadRequest, "pipeline name %q: only letters, digits, '_', '-' and '.'", Clip(name))
		}
	}
	return nil
}

// PipelineInfo is one stored pipeline.
type PipelineInfo struct {
	Name     string    `json:"name"`
	File     string    `json:"file"`
	Pipeline string    `json:"pipeline"` // the name inside the file
	Stages   int       `json:"stages"`
	Ports    []string  `json:"ports"`
	Reasons  []string  `json:"drop_reasons"`
	Workers  int       `json:"workers"`
	Batch    int       `json:"batch_size"`
	Running  bool      `json:"running"`
	LoadedAt time.Time `json:"loaded_at"`
	// LoadedBy is the peer that loaded it ("uid 0 pid 1234"; "config" for
	// the startup pipeline).
	LoadedBy string `json:"loaded_by"`
}

// PipelineList is every stored pipeline, the running one marked.
type PipelineList struct {
	Running    string         `json:"running"`
	Generation uint64         `json:"generation"`
	Pipelines  []PipelineInfo `json:"pipelines"`
}

// PipelineDetail is one pipeline's compiled graph.
type PipelineDetail struct {
	PipelineInfo
	Graph  []StageNode `json:"graph"`
	Source string      `json:"source"`
	DOT    string      `json:"dot"`
	// Split is how the pipeline divides between the interfaces' XDP
	// programs and the workers: for the running pipeline the split in
	// force (InForce), for a stored one the split a swap to it would make.
	Split *Split `json:"split,omitempty"`
}

// Where a stage runs (StageNode.RunsIn).
const (
	RunsOnWorkers = "workers"
	// RunsInXDP marks a stage part of which the XDP program runs before
	// the workers: the entry parse (the kernel parses the outer headers
	// for its rules), the filter whose first rules it runs and the
	// terminals those rules lead to. The workers still run the whole
	// stage on every frame the kernel steers to them.
	RunsInXDP = "xdp+workers"
)

// StageNode is one node of a compiled graph.
type StageNode struct {
	Name     string   `json:"name"`
	Kind     string   `json:"kind"`
	Terminal bool     `json:"terminal,omitempty"`
	Edges    []string `json:"edges,omitempty"`
	Target   string   `json:"target,omitempty"`
	// RunsIn is RunsOnWorkers or RunsInXDP (set where the detail has a
	// Split).
	RunsIn string `json:"runs_in,omitempty"`
}

// Split is a pipeline's partition between the XDP program and the
// workers (pipelines.Graph.Offload).
type Split struct {
	Mode string `json:"mode"` // the daemon's offload option: auto or none
	// InForce: these rules are loaded in the programs now (the running
	// pipeline); Generation is their rule set's generation on the first
	// interface.
	InForce    bool   `json:"in_force"`
	Generation uint64 `json:"generation,omitempty"`
	Filter     string `json:"filter,omitempty"` // the filter stage split
	// Why says why nothing could be planned at all.
	Why string `json:"why,omitempty"`
	// KernelRules is how many of Filter's first rules run in the kernel;
	// StopReason why the next one cannot.
	KernelRules int    `json:"kernel_rules"`
	StopReason  string `json:"stop_reason,omitempty"`
	// After says why the split ends at the filter when every rule moved
	// and its default leads to a stage the kernel cannot run (a balance).
	After string      `json:"after,omitempty"`
	Rules []SplitRule `json:"rules,omitempty"`
}

// SplitRule is one rule of the split filter.
type SplitRule struct {
	Index  int    `json:"index"`
	Line   int    `json:"line"`
	Action string `json:"action"`
	Kernel bool   `json:"kernel"`
	// Idle marks a kernel rule that no frame the kernel decides can match
	// (a class or ARP rule): it fires on the workers.
	Idle bool `json:"idle,omitempty"`
	// Packets and Bytes are what the kernel decided by this rule (in
	// force only: the rule set loaded now, summed over the interfaces).
	Packets uint64 `json:"kernel_packets"`
	Bytes   uint64 `json:"kernel_bytes"`
}

// SwapReply says what a swap did, across every queue.
type SwapReply struct {
	From       string   `json:"from"`
	To         string   `json:"to"`
	Generation uint64   `json:"generation"`
	PoolChange bool     `json:"pool_change"`
	Kept       []string `json:"kept"`
	Reset      []string `json:"reset"`
	Added      []string `json:"added"`
	Removed    []string `json:"removed"`
	// ActiveAfterNs is, per queue, how long after its new plan was
	// published the queue's I/O loop took it up at a batch boundary: from
	// then on every frame it receives goes to the new pipeline, and the
	// queue's interface runs the new kernel rules (the first of its
	// queues to take the plan up flips them). An idle queue takes a plan
	// up at its next turn: no traffic is needed.
	ActiveAfterNs []int64 `json:"active_after_ns"`
	// Timing says where the swap's time went.
	Timing SwapTiming `json:"timing"`
	Queues int        `json:"queues"`
	// CountersReset are the kept stages whose own counters (rule hits,
	// count keys, sample counts) start again because the stage's
	// configuration changed.
	CountersReset []string `json:"counters_reset,omitempty"`
	// StateKept are the stateful stages (conntrack) whose flow tables
	// the new pipeline took over (same name and kind); StateReset those
	// of either pipeline whose tables start empty or are gone.
	StateKept  []string `json:"state_kept,omitempty"`
	StateReset []string `json:"state_reset,omitempty"`
	// Capture says what the swap did to a running capture: "follows"
	// (the new pipeline has the tapped stage and edge) or why it ended.
	Capture string `json:"capture,omitempty"`
}

// SwapTiming is where a swap's time went, in nanoseconds. No YAML is
// parsed in a swap: a pipeline is compiled, its kernel half too, when it
// is loaded.
type SwapTiming struct {
	// PrepareNs: building and checking every queue's plan for the new
	// pipeline (and starting a worker pool where it needs another one).
	PrepareNs int64 `json:"prepare_ns"`
	// KernelLoadNs: writing the new kernel rules into the idle slot of
	// every XDP program; none of them is in force yet.
	KernelLoadNs int64 `json:"kernel_load_ns"`
	// FlipNs: from publishing the first queue's plan to the last queue
	// taking its plan up (and with it the kernel rules flipping in).
	FlipNs int64 `json:"flip_ns"`
	// TotalNs: the whole swap as the daemon saw it, checks included.
	TotalNs int64 `json:"total_ns"`
}

// Stats is what the daemon counted, in total and per queue: each queue's
// engine's snapshot (dataplane.Stats, one consistent read per queue) with
// the kernel's counters the daemon reads beside it (the XDP program's, the
// sockets'), in plain JSON. Every field is read without pausing the data
// path.
//
// What each counter means (received = transmitted + dropped + passed +
// xdp_dropped + xdp_passed, the kernel's drops before the pipeline, the
// fill per batch, the frame places, what is one snapshot) is written once,
// in docs/COUNTERS.md, whose tables are generated from the lists the code
// iterates.
type Stats struct {
	Pipeline   string       `json:"pipeline"`
	Generation uint64       `json:"generation"`
	Swaps      uint64       `json:"swaps"`
	UptimeNs   int64        `json:"uptime_ns"`
	Totals     Counts       `json:"totals"`
	Queues     []QueueStats `json:"queues"`
	LinkLosses uint64       `json:"link_losses"`
	Capture    *CaptureInfo `json:"capture,omitempty"`
	// Watch is the pipeline file watch's account (config watch: true).
	Watch *WatchStats `json:"watch,omitempty"`
	// KernelRules are the split pipeline's kernel rules in force on each
	// receiving interface, with what the XDP program decided by each
	// since that rule set was loaded (a swap starts a new set; the old
	// set's counts stay in the totals' drops).
	KernelRules []KernelRuleStats `json:"kernel_rules,omitempty"`
	// Stages are the running pipeline's stages summed over the queues,
	// in stage order: packets, bytes, drops by reason and their own
	// counters.
	Stages []StageStats `json:"stages"`
	// SampleFiles are the files the daemon writes the sample stages'
	// kept packets to, one per sample stage's file.
	SampleFiles []SampleFile `json:"sample_files,omitempty"`
	// RSS is what came of making each receiving interface's RSS hash
	// symmetric for the stateful stages (absent while no pipeline with
	// one has run).
	RSS []RSSState `json:"rss,omitempty"`
}

// RSSState is one receiving interface's symmetric-RSS outcome: result
// "set" (a symmetric key written), "symmetric" (it was already),
// "unsupported" (the driver has no RSS key: veth, lo) or "failed" (the
// driver refused: a flow's directions may arrive on different queues),
// and why, in words.
type RSSState struct {
	Interface string `json:"interface"`
	Result    string `json:"result"`
	Detail    string `json:"detail,omitempty"`
}

// KernelRuleStats is one kernel rule of the split on one interface.
type KernelRuleStats struct {
	Interface  string `json:"interface"`
	Pipeline   string `json:"pipeline"`
	Generation uint64 `json:"generation"` // the rule set's, on this interface
	Filter     string `json:"filter"`
	Rule       int    `json:"rule"` // index in the filter
	Line       int    `json:"line"`
	Action     string `json:"action"` // "drop:<reason>" or the pass action
	Packets    uint64 `json:"packets"`
	Bytes      uint64 `json:"bytes"`
}

// Counts are the verdict counters, the kernel's beside them and the frame
// accounting, summed or per queue (see Stats for what they mean).
type Counts struct {
	Received      uint64 `json:"received"`
	ReceivedBytes uint64 `json:"received_bytes"`
	Transmitted   uint64 `json:"transmitted"`
	Dropped       uint64 `json:"dropped"`
	Passed        uint64 `json:"passed"`
	XDPDropped    uint64 `json:"xdp_dropped"`
	XDPPassed     uint64 `json:"xdp_passed"`
	// Balanced is received == transmitted + dropped + passed +
	// xdp_dropped + xdp_passed.
	Balanced bool `json:"balanced"`
	// EngineReceived is what the engine read from the RX rings.
	EngineReceived uint64 `json:"engine_received"`
	// Drops is every reason that dropped something, in the pipeline's
	// order.
	Drops []DropCount `json:"drops"`
	// Ports is what each tx port took.
	Ports []PortCount `json:"tx_ports"`
	// Batches is how many batches the engines completed; BatchFill is
	// engine_received / batches.
	Batches   uint64  `json:"batches"`
	BatchFill float64 `json:"batch_fill"`
	// Redirected is what the XDP programs handed to the queues' sockets;
	// NoSocket what they passed to the kernel's stack for want of a
	// socket on the frame's queue.
	Redirected uint64 `json:"xdp_redirected"`
	NoSocket   uint64 `json:"xdp_no_socket"`
	// TXCopied counts packets an output copied into a UMEM of its own
	// because it could not share the receiving queue's (afxdp.CopyPort).
	TXCopied uint64 `json:"tx_copied"`
	// TXAbandoned is the share of Transmitted that never left: frames
	// still on a TX ring (not completed) when its port stopped, after a
	// last bounded flush, summed over the queue's sockets (each socket's
	// tx_abandoned). Zero while the daemon runs; transmitted minus it is
	// what was sent.
	TXAbandoned uint64 `json:"tx_abandoned"`
	// FramesLost counts UMEM frames, not verdicts: the frames an output
	// that owns what it transmits (a sharing AF_XDP output, a
	// dataplane.Completer) had not given back when the queue's engine
	// stopped, after Options.DrainTimeout (dataplane.Stats.FramesLost,
	// the engine's ErrFramesLost). Each was counted as transmitted when
	// the output took it, so it is a share of Transmitted and Balanced
	// holds whatever it is. Zero while the queue's engine runs. The
	// frames place "lost" has only those of an output that does not
	// report its places; a reporting one's stay in its ring places.
	FramesLost uint64 `json:"frames_lost"`
	// KernelDropped is the sum of KernelDrops: frames the kernel dropped
	// before the pipeline saw them.
	KernelDropped uint64      `json:"kernel_dropped"`
	KernelDrops   []DropCount `json:"kernel_drops"`
	// FillRingEmpty counts the times the kernel found a fill ring empty
	// (in copy mode each is also one of kernel_drops' rx_dropped).
	FillRingEmpty uint64 `json:"rx_fill_ring_empty"`
	Frames        Frames `json:"frames"`
}

// Drop returns the packets dropped for reason by the workers and the
// engine, and by the kernel rules.
func (c *Counts) Drop(reason string) (packets, xdp uint64) {
	for _, d := range c.Drops {
		if d.Reason == reason {
			return d.Packets, d.XDPPackets
		}
	}
	return 0, 0
}

// Port returns what tx port name took.
func (c *Counts) Port(name string) PortCount {
	for _, p := range c.Ports {
		if p.Port == name {
			return p
		}
	}
	return PortCount{Port: name}
}

// DropCount is what was dropped for one reason.
type DropCount struct {
	Reason  string `json:"reason"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes,omitempty"`
	// XDPPackets are the kernel rules' drops for the reason (totals
	// only).
	XDPPackets uint64 `json:"xdp_packets,omitempty"`
}

// PortCount is one tx port's packets and bytes.
type PortCount struct {
	Port    string `json:"port"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// Frames says where a queue's frames are: every place (in the order
// frames go round: free, fill, kernel_rx, rx, port, engine, tx, kernel_tx,
// completion, output, lost, unreported) and their total, the UMEM's frame
// count in every read.
type Frames struct {
	Total  int          `json:"total"`
	Places []FramePlace `json:"places"`
}

// FramePlace is the frames in one place.
type FramePlace struct {
	Place  string `json:"place"`
	Frames int    `json:"frames"`
}

// Get returns the frames in place.
func (f *Frames) Get(place string) int {
	for _, p := range f.Places {
		if p.Place == place {
			return p.Frames
		}
	}
	return 0
}

// Add adds o's places into f (summing queues).
func (f *Frames) Add(o Frames) {
	f.Total += o.Total
	for _, p := range o.Places {
		i := slices.IndexFunc(f.Places, func(q FramePlace) bool { return q.Place == p.Place })
		if i < 0 {
			f.Places = append(f.Places, p)
			continue
		}
		f.Places[i].Frames += p.Frames
	}
}

// LogValue logs a frame account as a group of its places (text logs would
// print the nested struct otherwise); zero places are left out.
func (f Frames) LogValue() slog.Value {
	attrs := []slog.Attr{slog.Int("total", f.Total)}
	for _, p := range f.Places {
		if p.Frames != 0 {
			attrs = append(attrs, slog.Int(p.Place, p.Frames))
		}
	}
	return slog.GroupValue(attrs...)
}

// QueueStats is one queue's view.
type QueueStats struct {
	Queue  string `json:"queue"`
	Attach string `json:"attach"`
	Bind   string `json:"bind"`
	Counts
	// Program is the XDP program's counters for this queue.
	Program ProgramCounters `json:"program"`
	// Sockets are the queue's AF_XDP sockets' own counters (kicks,
	// wake-ups, a TX ring found full, a fill ring left starved), by port.
	Sockets []SocketCounters `json:"sockets"`
	// Stages are the pipeline's per-stage counters on this queue (carried
	// across swaps where name and kind match).
	Stages []StageStats `json:"stages"`
	// Executor is what runs the queue's pipeline.
	Executor Executor `json:"executor"`
}

// ProgramCounters are what the XDP program counted on one queue.
type ProgramCounters struct {
	Packets        uint64 `json:"packets"`         // frames it saw
	Redirected     uint64 `json:"redirected"`      // handed to the queue's socket
	NoSocket       uint64 `json:"no_socket"`       // no socket on the queue: passed to the kernel's stack
	RedirectFailed uint64 `json:"redirect_failed"` // the socket left between lookup and redirect: passed
	Dropped        uint64 `json:"dropped"`         // a kernel rule dropped it
	Passed         uint64 `json:"passed"`          // a kernel rule passed it to the kernel's stack
	// Of the frames steered on while a rule set was loaded, why the
	// kernel did not decide them: not parsed there, no rule matched, the
	// rule slot was being rewritten.
	OffUnparsed uint64 `json:"off_unparsed"`
	OffNoMatch  uint64 `json:"off_no_match"`
	OffRaced    uint64 `json:"off_raced"`
}

// SocketCounters are one AF_XDP socket's own counters, as the port
// declares them.
type SocketCounters struct {
	Port     string           `json:"port"`
	Counters []counters.Group `json:"counters"`
}

// StageStats is one stage's counters.
type StageStats struct {
	Name    string      `json:"name"`
	Kind    string      `json:"kind"`
	Calls   uint64      `json:"calls"`
	Packets uint64      `json:"packets"`
	Bytes   uint64      `json:"bytes"`
	Drops   []DropCount `json:"drops,omitempty"`
	// NsPerPacket is the time spent per packet, when the daemon measures
	// stage time (config timing: true); 0 otherwise.
	NsPerPacket float64 `json:"ns_per_packet"`
	Nanos       uint64  `json:"nanos"`
	// Counters are the stage's own, read live, as its kind declares them
	// (each family's name, kind, unit, label and help; pipelines.Kind):
	// a filter's hits per rule (rule=3, rule=default), a count stage's
	// keys (total, proto=tcp, vlan=10, class=ok), a rewrite's exceptions,
	// a sample stage's kept packets. A keyed family lists the keys that
	// counted something, bounded by the stage's own table. Each counter
	// is exact as of its worker's last publish (at most 1024 packets old
	// under load, exact at rest) and never goes down; carried across
	// swaps where the stage keeps its name, kind and configuration.
	Counters []counters.Group `json:"counters,omitempty"`
	// File is a sample stage's file name (SampleFiles says where the
	// daemon writes it).
	File string `json:"file,omitempty"`
}

// Counter returns the value of the stage's own counter name (key for a
// keyed family).
func (s *StageStats) Counter(name, key string) uint64 {
	for _, g := range s.Counters {
		if g.Name != name {
			continue
		}
		for _, kv := range g.Values {
			if kv.Key == key {
				return kv.Value
			}
		}
	}
	return 0
}

// Stage returns the stage of that name, or nil.
func (s *Stats) Stage(name string) *StageStats {
	for i := range s.Stages {
		if s.Stages[i].Name == name {
			return &s.Stages[i]
		}
	}
	return nil
}

// Executor says what runs a queue's pipeline and what it counted.
type Executor struct {
	// Backend is inline (the I/O loop runs the pipeline), cpu (CPU
	// workers) or cuda (the GPU's persistent kernel, with CPU workers
	// for the packets it hands back).
	Backend string   `json:"backend"`
	Workers []Worker `json:"workers,omitempty"`
	// Counters are the backend's own (cuda: packets by path, device or
	// fallback, and the slots in flight).
	Counters []counters.Group `json:"counters,omitempty"`
}

// Worker is one CPU worker's counters.
type Worker struct {
	Batches uint64 `json:"batches"`
	Packets uint64 `json:"packets"`
	Parks   uint64 `json:"parks"`
}

// SampleFile is where the daemon writes one sample stage's kept packets
// (a pcap in capture_dir, rotated at the configured size).
type SampleFile struct {
	Stage string `json:"stage"`
	// File is the full path of the file being written.
	File string `json:"file"`
	// Written packets went to the file (its rotations included); Missed
	// ones were kept while the writer's buffer was full (the data path
	// never waits for the disk).
	Written uint64 `json:"written"`
	Missed  uint64 `json:"missed"`
	// Bytes is the current file's size; Rotations how many times it was
	// moved to FILE.1 (the one older file kept).
	Bytes     int64  `json:"bytes"`
	Rotations uint64 `json:"rotations"`
	// Error is the write error that stopped the file, if any.
	Error string `json:"error,omitempty"`
}

// PortsReply lists the daemon's interfaces and queues.
type PortsReply struct {
	Interfaces []InterfaceInfo `json:"interfaces"`
	Queues     []QueuePorts    `json:"queues"`
}

// InterfaceInfo is one configured interface.
type InterfaceInfo struct {
	Name     string `json:"name"`
	Receives bool   `json:"receives"`
	Queues   []int  `json:"queues"`
	Attach   string `json:"attach"` // the mode granted: native or generic
	// AttachAsked and BindAsked are what the config asked for.
	AttachAsked string `json:"attach_asked"`
	BindAsked   string `json:"bind_asked"`
}

// QueuePorts is one served queue: its sockets and frame accounting.
type QueuePorts struct {
	Queue   string       `json:"queue"`
	Sockets []SocketInfo `json:"sockets"`
	Frames  Frames       `json:"frames"`
	UMEM    UMEMInfo     `json:"umem"`
}

// SocketInfo is one AF_XDP socket (a port) of a queue.
type SocketInfo struct {
	Port      string           `json:"port"`
	Interface string           `json:"interface"`
	Queue     int              `json:"queue"`
	Bind      string           `json:"bind"` // granted: zerocopy or copy
	Counters  []counters.Group `json:"counters"`
}

// UMEMInfo sizes a queue's frame memory.
type UMEMInfo struct {
	Frames    int `json:"frames"`
	FrameSize int `json:"frame_size"`
	Headroom  int `json:"headroom"`
}

// CaptureRequest starts a tap: the packets arriving at Stage (or, with
// Edge, leaving it by that edge) are written to File (a pcap) on the
// daemon's host, at most Count of them, each cut to Snaplen bytes. File
// is a name (trust.ValidName: no '/', no leading '.', at most 128 bytes),
// never a path: the daemon makes it in its capture_dir, and the reply's
// CaptureInfo.File says where.
type CaptureRequest struct {
	Stage   string `json:"stage"`
	Edge    string `json:"edge,omitempty"`
	Count   int    `json:"count"`
	Snaplen int    `json:"snaplen"`
	File    string `json:"file"`
}

// maxStageName bounds the stage and edge names a capture request echoes.
const maxStageName = 256

// MaxCaptureCount bounds a capture's packet count.
const MaxCaptureCount = 10_000_000

// Validate checks a capture request's fields.
func (r *CaptureRequest) Validate() error {
	if r.Stage == "" {
		return Errorf(ErrBadRequest, "capture: stage is required")
	}
	if len(r.Stage) > maxStageName || len(r.Edge) > maxStageName {
		return Errorf(ErrBadRequest, "capture: stage %q edge %q: want names of at most %d bytes", Clip(r.Stage), Clip(r.Edge), maxStageName)
	}
	if err := trust.ValidName(r.File); err != nil {
		return Errorf(ErrBadRequest, "capture: file: %s; the daemon makes it in its capture_dir and the reply says where", strings.TrimPrefix(err.Error(), trust.ErrBadName.Error()+": "))
	}
	if r.Count == 0 {
		r.Count = 1000
	}
	if r.Count < 0 || r.Count > MaxCaptureCount {
		return Errorf(ErrBadRequest, "capture: count %d: want 1..%d", r.Count, MaxCaptureCount)
	}
	if r.Snaplen == 0 {
		r.Snaplen = 65535
	}
	if r.Snaplen < 14 || r.Snaplen > 65535 {
		return Errorf(ErrBadRequest, "capture: snaplen %d: want 14..65535", r.Snaplen)
	}
	return nil
}

// CaptureInfo is the state of the capture.
type CaptureInfo struct {
	Active bool   `json:"active"`
	Stage  string `json:"stage,omitempty"`
	Edge   string `json:"edge,omitempty"`
	// File is the capture's full path on the daemon's host (in its
	// capture_dir).
	File    string `json:"file,omitempty"`
	Count   int    `json:"count,omitempty"`
	Snaplen int    `json:"snaplen,omitempty"`
	// Written packets are in the file; Missed ones passed the tap while
	// its buffer was full (the tap never slows the data path).
	Written uint64 `json:"written"`
	Missed  uint64 `json:"missed"`
	// Stopped says why a capture ended: count reached, stopped, the stage
	// left the pipeline in a swap, a write error.
	Stopped string `json:"stopped,omitempty"`
	// KernelRulesOnWorkers: the split pipeline's kernel rules run on the
	// workers while this capture runs, because the XDP program would
	// decide frames before they reach the tap; they go back when it ends.
	KernelRulesOnWorkers bool `json:"kernel_rules_on_workers,omitempty"`
}

// CounterRow is one counter of a set of groups, as people read it.
type CounterRow struct {
	// Text is its key as the family names it (name, or name=key).
	Text         string
	Value, Bytes uint64
	Kind         counters.Kind
}

// TopCounters returns the n busiest counters of groups (by value; all of
// them when n < 0), in the groups' order.
func TopCounters(groups []counters.Group, n int) []CounterRow {
	var rows []CounterRow
	for i := range groups {
		g := &groups[i]
		for _, kv := range g.Values {
			rows = append(rows, CounterRow{Text: g.Text(kv), Value: kv.Value, Bytes: kv.Bytes, Kind: g.Kind})
		}
	}
	if n < 0 || len(rows) <= n {
		return rows
	}
	idx := make([]int, len(rows))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(rows[b].Value, rows[a].Value) })
	idx = idx[:n]
	slices.Sort(idx)
	out := make([]CounterRow, 0, n)
	for _, i := range idx {
		out = append(out, rows[i])
	}
	return out
}
