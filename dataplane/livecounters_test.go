package dataplane

import (
	"context"
	"encoding/binary"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/warpflow/warpflow/pipelines"

	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/internal/testwait"
)

// liveA and liveA2 differ only in their names: every stage is configured
// the same, so a swap between them carries every counter. liveC changes
// the filter's rules: its rule hits start again, the rest carries.
const (
	liveStages = "stages:\n  - {name: parse, type: parse}\n" +
		"  - {name: flows, type: count, by: [protocol]}\n" +
		"  - {name: smp, type: sample, every: 10, file: s.pcap}\n" +
		"  - {name: acl, type: filter, rules: [{proto: udp, dst_port: %d, action: \"drop:%s\"}], default: out}\n" +
		"  - {name: out, type: tx, port: a}\n"
	liveSettings = "settings: {workers: 1, batch_size: 32}\n"
)

func liveGraph(t *testing.T, name string, port int, reason string) *pipelines.Graph {
	t.Helper()
	g, err := pipelines.Load(name+".yaml", fmt.Appendf(nil, "name: "+name+"\n"+liveSettings+liveStages, port, reason))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// newLiveEngine is an engine running g on loopingReplay's packets into a
// seqSink as port a (seqs and calls: the capacity of its records), its
// options DefaultOptions changed by tune; outs are its outputs.
func newLiveEngine(t *testing.T, g *pipelines.Graph, seqs, calls int, tune func(*Options)) (*Engine, Outputs) {
	t.Helper()
	arena, rp := loopingReplay(t)
	sink := &seqSink{name: "a", seqs: make([]uint64, 0, seqs), calls: make([]uint64, 0, calls)}
	outs := Outputs{Ports: map[string]Port{"a": sink}}
	o := DefaultOptions()
	tune(&o)
	e, err := NewEngine(g, arena, seqPort{rp}, outs, o)
	if err != nil {
		t.Fatal(err)
	}
	return e, outs
}

// runLive runs e in a goroutine until stop is called or the test ends;
// stop returns what RunContext returned.
func runLive(t *testing.T, e *Engine) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- e.RunContext(ctx, nil) }()
	t.Cleanup(cancel)
	return func() error {
		t.Helper()
		cancel()
		return testwait.Recv(t, runErr, "RunContext to return after cancel", testwait.Deadline)
	}
}

// waitCounter polls until stage's key counts more than past (bounded).
func waitCounter(t *testing.T, e *Engine, stage, key string, past uint64) uint64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if n := e.stageCounter(stage, key); n > past {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s stayed at %d or below for 10s", stage, key, past)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestStageCountersLiveAcrossSwaps reads the stage-specific counters and
// sample counts while a looping replay runs, across a swap that keeps
// every stage's configuration and one that changes the filter's, and
// checks the final report against the verdict counters: the filter's one
// rule hit exactly what its drop reason counts, the count stage's total
// is what was received.
func TestStageCountersLiveAcrossSwaps(t *testing.T) {
	ga, ga2, gc := liveGraph(t, "a", 9, "nine"), liveGraph(t, "a2", 9, "nine"), liveGraph(t, "c", 7, "seven")
	e, outs := newLiveEngine(t, ga, 1<<16, 1<<12, func(o *Options) { o.Timing = false })
	stop := runLive(t, e)

	// Live, before any swap: the rule's hits and the sampler's counts grow.
	n1 := waitCounter(t, e, "acl", "rule=0", 0)
	n2 := waitCounter(t, e, "acl", "rule=0", n1)
	if s := e.statsSamples(); len(s) != 1 || s[0].Candidates == 0 || s[0].Written == 0 || s[0].Written > s[0].Candidates {
		t.Fatalf("live samples %+v", s)
	}
	total := waitCounter(t, e, "flows", "total", 0)

	// Same configuration: nothing resets, and a read right after the swap
	// is not below one before it.
	res, err := e.Swap(ga2, outs, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.CountersReset) != 0 {
		t.Fatalf("swap a -> a2 reset %v", res.CountersReset)
	}
	if got := e.stageCounter("acl", "rule=0"); got < n2 {
		t.Fatalf("acl rule[0] went from %d to %d across a swap that keeps it", n2, got)
	}
	if got := e.stageCounter("flows", "total"); got < total {
		t.Fatalf("flows total went from %d to %d across the swap", total, got)
	}
	waitCounter(t, e, "flows", "total", total)
	samplesBefore := e.statsSamples()[0]

	// Another rule list: the filter's hits start again, the count's and
	// the sampler's carry on.
	res, err = e.Swap(gc, outs, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.CountersReset, []string{"acl"}) {
		t.Fatalf("swap a2 -> c: counters reset %v, want [acl]", res.CountersReset)
	}
	if s := e.statsSamples()[0]; s.Candidates < samplesBefore.Candidates || s.Written < samplesBefore.Written {
		t.Fatalf("samples went from %+v to %+v across the swap", samplesBefore, s)
	}
	waitCounter(t, e, "acl", "rule=0", 0)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	rep := e.Report()
	if !rep.Balanced {
		t.Fatalf("report not balanced: %+v", rep)
	}
	drops := map[string]uint64{}
	for _, d := range rep.Drops {
		drops[d.Reason] = d.Packets
	}
	if got, want := e.stageCounter("acl", "rule=0"), drops["seven"]; got != want || want == 0 {
		t.Errorf("final acl rule=0 = %d, want c's drops %d (the earlier plans' rule counted other packets)", got, want)
	}
	if got, _ := rep.counter("flows", "total"); got != rep.Received {
		t.Errorf("final flows total = %d, want every packet received, %d", got, rep.Received)
	}
	if drops["nine"] == 0 {
		t.Error("the first two plans dropped nothing")
	}
	if len(rep.samples()) != 1 || rep.samples()[0].Candidates != rep.Received {
		t.Errorf("final samples %+v, want %d candidates", rep.samples(), rep.Received)
	}
	// At rest the live view is the final one.
	if got := e.Stats(); !reflect.DeepEqual(got.Stages, rep.Stages) {
		t.Errorf("after the run, Stats' stages %+v, report %+v", got.Stages, rep.Stages)
	}
}

// TestStageCountersNoAllocs: a loop turn of a pipeline with a filter, a
// count and a sampler (all published live) allocates nothing, across a
// swap too, while another goroutine's reads are not part of the turn.
func TestStageCountersNoAllocs(t *testing.T) {
	ga, ga2 := liveGraph(t, "a", 9, "nine"), liveGraph(t, "a2", 9, "nine")
	// Workers 0, inline: the test drives the loop turn itself.
	e, outs := newLiveEngine(t, ga, 1<<20, 1<<16, func(o *Options) { o.Workers = 0 })
	b := e.inline
	turn := func() {
		p := e.cur
		if np := e.planPtr.Load(); np != p {
			e.adopt(np)
			p = np
		}
		b.Clear()
		if n, _ := e.in.Receive(b); n > 0 {
			p.runners[0].Process(b)
			e.complete(p, b)
		}
		e.turnDone()
		p.runners[0].Publish()
		e.publish()
	}
	for range 10 {
		turn()
	}
	if n := allocs.Count(100, turn); n != 0 {
		t.Fatalf("%d allocations in 100 turns, want 0", n)
	}
	e.ctl.started, e.ctl.running = true, true // the swap is published, not applied
	if _, err := e.Swap(ga2, outs, time.Second); err != nil {
		t.Fatal(err)
	}
	if n := allocs.Count(100, turn); n != 0 {
		t.Fatalf("%d allocations in 100 turns across and after the swap, want 0", n)
	}
	if got := e.stageCounter("flows", "total"); got == 0 {
		t.Fatal("nothing counted live")
	}
	if s := e.statsSamples(); len(s) != 1 || s[0].Candidates == 0 {
		t.Fatalf("samples %+v", s)
	}
}

// TestTapAcrossSwap: a tap followed onto the pipeline a swap publishes
// (Outputs.Tap) takes every packet of its point across the swap: the
// sequence numbers it took are exactly those the filter accepted, with
// none missing around the swap, before and after it.
func TestTapAcrossSwap(t *testing.T) {
	ga, ga2 := liveGraph(t, "a", 9, "nine"), liveGraph(t, "a2", 9, "nine")
	e, outs := newLiveEngine(t, ga, 1<<16, 1<<12, func(o *Options) { o.Timing = false })
	stop := runLive(t, e)
	for deadline := time.Now().Add(10 * time.Second); e.Stats().Received < 2048; {
		if time.Now().After(deadline) {
			t.Fatalf("received %d of 2048 packets in 10s", e.Stats().Received)
		}
		time.Sleep(100 * time.Microsecond)
	}
	const count = 60000
	tap, err := ga.NewTap("acl", "out", count, 64, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetTap(ga, tap); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	var stamps []time.Time
	drain := func() {
		tap.Drain(func(ts time.Time, data []byte, _ int) {
			seqs = append(seqs, binary.BigEndian.Uint64(data[seqOffset:]))
			stamps = append(stamps, ts)
		})
	}
	for deadline := time.Now().Add(10 * time.Second); tap.Taken() < 1000; {
		drain()
		if time.Now().After(deadline) {
			t.Fatalf("the tap took %d of 1000 before the swap in 10s", tap.Taken())
		}
		time.Sleep(100 * time.Microsecond)
	}
	swapAt := time.Now()
	followed, err := tap.Follow(ga2)
	if err != nil {
		t.Fatal(err)
	}
	outs2 := outs
	outs2.Tap = followed
	res, err := e.Swap(ga2, outs2, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !tap.Done(); {
		drain()
		if time.Now().After(deadline) {
			t.Fatalf("the tap took %d of %d in 10s", tap.Taken(), count)
		}
		time.Sleep(200 * time.Microsecond)
	}
	drain()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if tap.Missed() != 0 {
		t.Fatalf("the tap missed %d (its buffer filled: the test's drain fell behind)", tap.Missed())
	}
	if len(seqs) != count {
		t.Fatalf("drained %d records, want %d", len(seqs), count)
	}
	// Every accepted sequence number from the first to the last, in order:
	// the filter drops port 9 (sequence numbers 1 mod 4).
	want := seqs[0]
	for i, s := range seqs {
		for want%4 == 1 {
			want++
		}
		if s != want {
			t.Fatalf("record %d is sequence number %d, want %d: the tap lost or reordered packets around the swap", i, s, want)
		}
		want++
	}
	active := res.ActiveAt()
	var before, after int
	for _, ts := range stamps {
		if ts.Before(swapAt) {
			before++
		}
		if ts.After(active) {
			after++
		}
	}
	if active.IsZero() || before == 0 || after == 0 {
		t.Fatalf("records before the swap %d, after the new plan's first batch %d (active at %v)", before, after, active)
	}
}
