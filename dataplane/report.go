package dataplane

import (
	"fmt"
	"time"
)

// Report is everything a run counted: the engine's Stats as the run left
// them and what only a replay has (the capture's records, input drops and
// cut packets, the timing). The counters are deterministic: the same input
// and pipeline give the same Report (the run's own fields aside:
// Deterministic) for any worker count and batch size.
type Report struct {
	Pipeline string `json:"pipeline"`
	Input    string `json:"input"`

	Stats

	// Records is how many capture records the input read; InputDrops are
	// those it could not turn into packets (each with a named reason).
	Records    uint64      `json:"records,omitempty"`
	InputDrops []DropCount `json:"input_drops,omitempty"`
	// Cut is how many received packets the capture cut short (captured
	// length below the original length, as with tcpdump -s 96); they are
	// parsed as far as their bytes go and carry rings.FlagCut.
	Cut uint64 `json:"cut_by_capture,omitempty"`

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

// Report builds the run's report: Stats after the run, when every counter
// is exact. Call it after Run returns.
func (e *Engine) Report() Report {
	p := e.cur
	r := Report{Pipeline: p.graph.Name(), Input: e.in.Name(), Stats: e.Stats()}
	r.Balanced = r.Stats.Balanced()
	for _, s := range r.Stages {
		r.Timing.StageNs = append(r.Timing.StageNs, s.NsPerPacket())
	}
	if !e.opts.Timing {
		r.Timing.StageNs = nil
	}
	r.Timing.Workers = p.workers
	r.Timing.BatchSize = p.batch
	r.Timing.Batches = r.Batches
	r.Timing.ElapsedNs = e.elapsed.Nanoseconds()
	if e.elapsed > 0 && r.Received > 0 {
		r.Timing.Mpps = float64(r.Received) / e.elapsed.Seconds() / 1e6
		r.Timing.NsPerPkt = float64(e.elapsed.Nanoseconds()) / float64(r.Received)
	}
	return r
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
