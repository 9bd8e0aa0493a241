package dataplane

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/warpflow/warpflow/pipelines"
)

// Report is everything a run counted. The counters are deterministic: the
// same input and pipeline give the same Report (timing fields aside) for any
// worker count and batch size.
type Report struct {
	Pipeline string `json:"pipeline"`
	Input    string `json:"input"`

	Received      uint64 `json:"received"`
	ReceivedBytes uint64 `json:"received_bytes"`
	Transmitted   uint64 `json:"transmitted"`
	Dropped       uint64 `json:"dropped"`
	Passed        uint64 `json:"passed"`
	PassedBytes   uint64 `json:"passed_bytes"`

	// Records is how many capture records the input read; InputDrops are
	// those it could not turn into packets (each with a named reason).
	Records    uint64      `json:"records,omitempty"`
	InputDrops []DropCount `json:"input_drops,omitempty"`
	// Cut is how many received packets the capture cut short (captured
	// length below the original length, as with tcpdump -s 96); they are
	// parsed as far as their bytes go and carry rings.FlagCut.
	Cut uint64 `json:"cut_by_capture,omitempty"`

	Ports   []PortCount   `json:"ports"`
	Drops   []DropCount   `json:"drops"`
	Stages  []StageReport `json:"stages"`
	Samples []SampleCount `json:"samples,omitempty"`

	// Balanced is Received == Transmitted + Dropped + Passed.
	Balanced bool `json:"balanced"`

	Timing Timing `json:"timing"`
}

// Timing holds the run's non-deterministic measurements, kept apart so
// goldens can ignore them.
type Timing struct {
	Workers   int     `json:"workers"`
	BatchSize int     `json:"batch_size"`
	Batches   uint64  `json:"batches"`
	ElapsedNs int64   `json:"elapsed_ns"`
	Mpps      float64 `json:"mpps"`
	NsPerPkt  float64 `json:"ns_per_packet"`
	// StageNs is nanoseconds per packet per stage, in Stages order, when
	// timing was on.
	StageNs []float64 `json:"stage_ns_per_packet,omitempty"`
}

// PortCount is what one output port transmitted.
type PortCount struct {
	Port    string `json:"port"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// DropCount is the packets dropped for one reason.
type DropCount struct {
	Reason  string `json:"reason"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes,omitempty"`
}

// StageReport is one graph node's counters.
type StageReport struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Calls   uint64 `json:"calls,omitempty"` // batches; depends on batching, so not in counters.json
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	// Drops is what this stage sent to drop terminals, by reason, packets
	// and bytes (the runner counts both per edge).
	Drops    []DropCount         `json:"drops,omitempty"`
	Counters []pipelines.Counter `json:"counters,omitempty"`
}

// SampleCount is what one sample stage kept.
type SampleCount struct {
	Stage      string `json:"stage"`
	File       string `json:"file"`
	Candidates uint64 `json:"candidates"`
	Written    uint64 `json:"written"`
}

// Report builds the run's report. Call it after Run returns.
func (e *Engine) Report() Report {
	c := &e.counts
	p := e.cur
	r := Report{
		Pipeline:      p.graph.Name(),
		Input:         e.in.Name(),
		Received:      c.received,
		ReceivedBytes: c.receivedBytes,
		Passed:        c.passPackets,
		PassedBytes:   c.passBytes,
	}
	for i, name := range e.lay.ports {
		r.Ports = append(r.Ports, PortCount{Port: name, Packets: c.txPackets[i], Bytes: c.txBytes[i]})
		r.Transmitted += c.txPackets[i]
	}
	reasons := e.lay.reasons
	for i, reason := range reasons {
		if c.dropPackets[i] == 0 && (i >= e.lay.engineBase || strings.HasPrefix(reason, "internal_")) {
			continue // engine and internal reasons appear only when they happened
		}
		r.Drops = append(r.Drops, DropCount{Reason: reason, Packets: c.dropPackets[i], Bytes: c.dropBytes[i]})
		r.Dropped += c.dropPackets[i]
	}
	r.Balanced = r.Received == r.Transmitted+r.Dropped+r.Passed

	stats := e.finalStages(p)
	info := p.graph.Stages()
	counters, samples := e.finalCounters(p)
	for _, s := range stats {
		r.Stages = append(r.Stages, StageReport{
			Name: s.Name, Kind: s.Kind, Calls: s.Calls, Packets: s.Packets, Bytes: s.Bytes,
			Drops:    stageDrops(info, s),
			Counters: counters[s.Name],
		})
		ns := 0.0
		if s.Packets > 0 {
			ns = float64(s.Nanos) / float64(s.Packets)
		}
		r.Timing.StageNs = append(r.Timing.StageNs, ns)
	}
	if !e.opts.Timing {
		r.Timing.StageNs = nil
	}
	r.Samples = samples
	r.Timing.Workers = p.workers
	r.Timing.BatchSize = p.batch
	r.Timing.Batches = c.batches
	r.Timing.ElapsedNs = e.elapsed.Nanoseconds()
	if e.elapsed > 0 && c.received > 0 {
		r.Timing.Mpps = float64(c.received) / e.elapsed.Seconds() / 1e6
		r.Timing.NsPerPkt = float64(e.elapsed.Nanoseconds()) / float64(c.received)
	}
	return r
}

// mergeCounter adds c into list, summing counters with the same key.
func mergeCounter(list []pipelines.Counter, c pipelines.Counter) []pipelines.Counter {
	for i := range list {
		if list[i].Key == c.Key {
			list[i].Packets += c.Packets
			list[i].Bytes += c.Bytes
			return list
		}
	}
	return append(list, c)
}

// sortCounters puts merged counters in an order that does not depend on
// which worker saw which key first: "total" first, "default" last, the
// rest in natural order (digit runs compared as numbers, so rule[2] comes
// before rule[10] and vlan=10 before vlan=none).
func sortCounters(list []pipelines.Counter) {
	rank := func(k string) int {
		switch k {
		case "total":
			return 0
		case "default":
			return 2
		}
		return 1
	}
	sort.SliceStable(list, func(i, j int) bool {
		a, b := list[i].Key, list[j].Key
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra < rb
		}
		return naturalLess(a, b)
	})
}

// naturalLess compares strings with runs of digits compared by value.
func naturalLess(a, b string) bool {
	for a != "" && b != "" {
		da, db := digitRun(a), digitRun(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if len(na) != len(nb) {
				return len(na) < len(nb)
			}
			if na != nb {
				return na < nb
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func digitRun(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// AccountingLine says in one line whether every packet is accounted for.
func (r Report) AccountingLine() string {
	verdict := "OK"
	if !r.Balanced {
		verdict = "MISMATCH"
	}
	line := fmt.Sprintf("accounting %s: received %d = transmitted %d + dropped %d + passed %d",
		verdict, r.Received, r.Transmitted, r.Dropped, r.Passed)
	if len(r.InputDrops) > 0 {
		var n uint64
		for _, d := range r.InputDrops {
			n += d.Packets
		}
		line += fmt.Sprintf("; %d records not received (input drops)", n)
	}
	if r.Records > 0 {
		// tshark numbers every record, an empty one too: errors name
		// records by the same numbers.
		line += fmt.Sprintf("; %d capture records (tshark's frame count)", r.Records)
	}
	return line
}

// ticker calls a Progress about five times a second, reading the clock only
// every 64 calls.
type ticker struct {
	fn    Progress
	calls uint
	last  time.Time
}

func newTicker(fn Progress) *ticker { return &ticker{fn: fn, last: time.Now()} }

func (t *ticker) maybe(received uint64) {
	if t.fn == nil {
		return
	}
	t.calls++
	if t.calls%64 != 0 {
		return
	}
	if now := time.Now(); now.Sub(t.last) >= 200*time.Millisecond {
		t.last = now
		t.fn(received)
	}
}

// stageDrops lists the packets node s sent over edges that lead to drop
// terminals, by reason, in edge order.
func stageDrops(info []pipelines.StageInfo, s pipelines.NodeStats) []DropCount {
	var me *pipelines.StageInfo
	for i := range info {
		if info[i].Name == s.Name {
			me = &info[i]
		}
	}
	if me == nil {
		return nil
	}
	var out []DropCount
	add := func(reason string, n, bytes uint64) {
		for i := range out {
			if out[i].Reason == reason {
				out[i].Packets += n
				out[i].Bytes += bytes
				return
			}
		}
		out = append(out, DropCount{Reason: reason, Packets: n, Bytes: bytes})
	}
	for e, n := range s.Edges {
		if n == 0 {
			continue
		}
		var bytes uint64
		if e < len(s.EdgeBytes) {
			bytes = s.EdgeBytes[e]
		}
		if e >= len(me.Edges) {
			add(pipelines.BadEdgeReason, n, bytes)
			continue
		}
		for _, t := range info {
			if t.Name == me.Edges[e] && t.Kind == "drop" {
				add(t.Target, n, bytes)
			}
		}
	}
	return out
}
