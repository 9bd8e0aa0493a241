package dataplane

import (
	"fmt"
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
	Bytes   uint64 `json:"bytes"`
}

// StageReport is one graph node's counters.
type StageReport struct {
	Name     string              `json:"name"`
	Kind     string              `json:"kind"`
	Calls    uint64              `json:"calls"`
	Packets  uint64              `json:"packets"`
	Bytes    uint64              `json:"bytes"`
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
	r := Report{
		Pipeline:      e.graph.Name(),
		Input:         e.in.Name(),
		Received:      c.received,
		ReceivedBytes: c.receivedBytes,
		Passed:        c.passPackets,
		PassedBytes:   c.passBytes,
	}
	for i, name := range e.graph.Ports() {
		r.Ports = append(r.Ports, PortCount{Port: name, Packets: c.txPackets[i], Bytes: c.txBytes[i]})
		r.Transmitted += c.txPackets[i]
	}
	reasons := append(append([]string(nil), e.graph.Reasons()...), reasonTxFull, reasonTxError, reasonNoVerdict)
	for i, reason := range reasons {
		if c.dropPackets[i] == 0 && i >= len(e.graph.Reasons()) {
			continue // engine reasons appear only when they happened
		}
		r.Drops = append(r.Drops, DropCount{Reason: reason, Packets: c.dropPackets[i], Bytes: c.dropBytes[i]})
		r.Dropped += c.dropPackets[i]
	}
	r.Balanced = r.Received == r.Transmitted+r.Dropped+r.Passed

	var stats []pipelines.NodeStats
	for i, run := range e.runners {
		if i == 0 {
			stats = run.Stats(nil)
			continue
		}
		more := run.Stats(nil)
		for j := range stats {
			stats[j].Calls += more[j].Calls
			stats[j].Packets += more[j].Packets
			stats[j].Bytes += more[j].Bytes
			stats[j].Nanos += more[j].Nanos
		}
	}
	counters := map[string][]pipelines.Counter{}
	for _, run := range e.runners {
		for _, sc := range run.Counters(nil) {
			counters[sc.Stage] = mergeCounter(counters[sc.Stage], sc.Counter)
		}
	}
	for _, s := range stats {
		r.Stages = append(r.Stages, StageReport{
			Name: s.Name, Kind: s.Kind, Calls: s.Calls, Packets: s.Packets, Bytes: s.Bytes,
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
	for _, s := range e.samples {
		r.Samples = append(r.Samples, SampleCount{Stage: s.info.Stage, File: s.info.File, Candidates: s.candidate, Written: s.written})
	}
	r.Timing.Workers = e.workers
	r.Timing.BatchSize = e.batch
	r.Timing.Batches = c.batches
	r.Timing.ElapsedNs = e.elapsed.Nanoseconds()
	if e.elapsed > 0 && c.received > 0 {
		r.Timing.Mpps = float64(c.received) / e.elapsed.Seconds() / 1e6
		r.Timing.NsPerPkt = float64(e.elapsed.Nanoseconds()) / float64(c.received)
	}
	return r
}

// mergeCounter adds c into list, summing counters with the same key and
// keeping first-seen order (each runner reports in the same stable order).
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
