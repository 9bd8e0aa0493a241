package dataplane

import (
	"context"
	"testing"
	"time"
)

// TestResteerAfterCountKeepsFlows: two steered workers, SNAT, live
// traffic that all steers to worker 0 (worker 1 idle). A conntrack count
// served by both workers makes worker 1's table then, with no clock. The
// link goes quiet and the SNAT pool changes (a re-steering swap; every
// flow still steers to worker 0); the idle link's ticks do the copy. The
// clockless table's zero time used to move the new table's clock after
// the busy one's flows were copied, and with the engine's clock at or
// past 2^30 in its 32-bit cycle (some 37 of every 49.7 days, the real
// clock moved there) every flow expired: 100 before the swap, 0 after.
func TestResteerAfterCountKeepsFlows(t *testing.T) {
	base := uint64(time.Now().UnixMilli())
	base = base - base%(1<<32) + 0x60000000
	t0 := time.Now()
	was := clockMS
	clockMS = func() uint64 { return base + uint64(time.Since(t0).Milliseconds()) }
	t.Cleanup(func() { clockMS = was })

	ga, gb := poolGraphs(t, 2, "")
	e, in, stop := floodEngine(t, ga, worker0Flows(ga, gb, 2, 100))
	waitReceived(t, e, 5000)
	in.stop.Store(true)
	before, _ := flowCount(t, e, "before the swap") // worker 1 makes its (clockless) table here
	if before != len(in.pkts) {
		t.Fatalf("%d flows before the swap, want %d", before, len(in.pkts))
	}
	res, err := e.Swap(gb, Outputs{Ports: map[string]Port{"out": NewNullPort("out")}}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.WaitTakenUp(ctx, res); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // a few idle ticks (the copy happens at the first)
	after, _ := flowCount(t, e, "after the swap")
	if after != before {
		t.Errorf("%d flows before the re-steering swap, %d after (pool change %v, kept %v)", before, after, res.PoolChange, res.StateKept)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
