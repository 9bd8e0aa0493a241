package dataplane

import (
	"testing"
	"time"

	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// TestReassembleGaugeAcrossResteer: a swap that keeps the worker count
// and the reassemble stage but changes the steering without carrying a
// table (here conntrack and SNAT to a pool are removed) is no pool
// change: the old workers run on while the new plan starts. carryState
// handed every new runner all the old ones, so new runner 0 took worker
// 1's old reassemble instance's gauge account too and read it while
// worker 1 still ran the old plan: a data race (-race, every run) and a
// pending gauge left above zero after every datagram had expired (3 of 6
// runs without -race). Each runner now takes its own old one.
func TestReassembleGaugeAcrossResteer(t *testing.T) {
	const ra = "  - {name: ra, type: reassemble, timeout: 2, max_datagrams: 32768}\n"
	ya := "name: a\nsettings: {batch_size: 64, workers: 2}\nstages:\n  - {name: parse, type: parse}\n" + ra +
		"  - {name: ct, type: conntrack, size: 4096}\n  - name: nat\n    type: nat\n    conntrack: ct\n" +
		"    snat: [{match: {src: 10.0.0.0/8}, to: [192.0.2.1, 192.0.2.2]}]\n  - {name: out, type: tx, port: out}\n"
	yb := "name: b\nsettings: {batch_size: 64, workers: 2}\nstages:\n  - {name: parse, type: parse}\n" + ra +
		"  - {name: out, type: tx, port: out}\n"
	now := fakeClock(t)
	ga, err := pipelines.Load("a.yaml", []byte(ya))
	if err != nil {
		t.Fatal(err)
	}
	gb, err := pipelines.Load("b.yaml", []byte(yb))
	if err != nil {
		t.Fatal(err)
	}
	// Lost datagrams from 250 clients: on both workers.
	var pkts [][]byte
	for i := range 60000 {
		pkts = append(pkts, firstFragment(t, 1+i%250, uint16(i)))
	}
	arena, err := rings.NewArena(rings.ArenaOptions{Frames: 4096, FrameSize: 2048, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	in := &floodPort{a: arena, pkts: pkts}
	o := DefaultOptions()
	o.Workers = -1
	e, err := NewEngine(ga, arena, in, Outputs{Ports: map[string]Port{"out": NewNullPort("out")}}, o)
	if err != nil {
		t.Fatal(err)
	}
	stop := runLive(t, e)
	waitReceived(t, e, 5000)
	if res := attackSwap(t, e, gb, true); res.PoolChange {
		t.Fatal("the swap was a pool change: the test needs the old workers running on")
	}
	waitReceived(t, e, e.Stats().Received+20000)
	in.stop.Store(true)
	// Idle now: the ticks expire every datagram.
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, x := e.stageCounter("ra", "pending"), e.stageCounter("ra", "expiries")
		if p == 0 && x > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pending %d (%d signed) after 10 s idle, every datagram past its timeout (expiries %d)", p, int64(p), x)
		}
		time.Sleep(time.Millisecond)
		now.Add(100)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
