package dataplane

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/warpflow/warpflow/internal/convgen"
	"github.com/warpflow/warpflow/pipelines"
)

// Attacks on how conntrack/NAT state survives swaps: re-steering to
// another worker count, chains of swaps faster than the workers' batches,
// and the entries counter after each.

// attackEngine runs g on an input that replays n UDP flows once and then
// idles like a live port; it returns once the engine received them all.
func attackEngine(t *testing.T, g *pipelines.Graph, n int) (*Engine, func()) {
	t.Helper()
	var convs []*convgen.Conv
	for i := range n {
		c := netip.AddrFrom4([4]byte{10, 3, byte(i / 200), byte(1 + i%200)})
		s := netip.AddrFrom4([4]byte{198, 51, 100, byte(1 + i%7)})
		cv := convgen.NewConv(convgen.Endpoint{Addr: c, Port: uint16(5000 + i)}, convgen.Endpoint{Addr: s, Port: 53}, convgen.Endpoint{}, 0, time.Microsecond, 1, 1)
		convs = append(convs, cv.UDP(0, 10))
	}
	arena, in := idleConvs(t, convs)
	o := DefaultOptions()
	o.Workers = -1 // each pipeline's own
	e, err := NewEngine(g, arena, in, Outputs{Ports: map[string]Port{"out": NewNullPort("out")}}, o)
	if err != nil {
		t.Fatal(err)
	}
	stop := runLive(t, e)
	waitReceived(t, e, uint64(n))
	return e, func() {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
}

func attackSwap(t *testing.T, e *Engine, g *pipelines.Graph, wait bool) SwapResult {
	t.Helper()
	res, err := e.Swap(g, Outputs{Ports: map[string]Port{"out": NewNullPort("out")}}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if wait {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if !e.WaitActive(ctx, res) {
			t.Fatal("the swap never took effect")
		}
	}
	return res
}

// flowCount lists the flows (which makes every worker run) and checks
// that the entries counter agrees with the tables.
func flowCount(t *testing.T, e *Engine, what string) (entries int, evictions uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := e.Flows(ctx, FlowQuery{})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	// The workers publish their counters at their next idle turn after
	// serving the listing: the counter is read until it agrees or the
	// deadline passes.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		c := e.stageCounter("ct", "entries")
		if c == uint64(r.Entries) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: the entries counter says %d (%d as signed), the tables hold %d flows", what, c, int64(c), r.Entries)
			break
		}
	}
	return r.Entries, e.stageCounter("ct", "evictions")
}

// TestSwapAttackWorkerCountEntries: 1 worker -> 2 workers -> 1 worker
// with 100 flows: the tables are re-steered; every flow is either kept or
// counted as evicted, and the entries counter equals the flows held.
func TestSwapAttackWorkerCountEntries(t *testing.T) {
	g1 := statefulGraphW(t, "w1", 64, 23, 1)
	g2 := statefulGraphW(t, "w2", 64, 23, 2)
	e, stop := attackEngine(t, g1, 100)
	defer stop()
	n0, ev0 := flowCount(t, e, "before")
	if n0 != 100 || ev0 != 0 {
		t.Fatalf("before: %d flows, %d evictions", n0, ev0)
	}
	for i, g := range []*pipelines.Graph{g2, g1, g2} {
		res := attackSwap(t, e, g, false)
		if fmt.Sprint(res.StateKept) != "[ct]" || len(res.StateReset) != 0 {
			t.Fatalf("swap %d: kept %v reset %v", i, res.StateKept, res.StateReset)
		}
		n, ev := flowCount(t, e, fmt.Sprint("after swap ", i))
		if uint64(n)+ev != 100 {
			t.Errorf("swap %d: %d flows kept + %d evicted != 100", i, n, ev)
		}
	}
}

// TestSwapAttackChainBeforeRun: 1 worker -> 2 workers -> 2 workers
// (another filter), the second swap before any packet or request reached
// the 2-worker plan's runners: the flows must reach the third plan (or be
// counted as evicted), since its reply says the table was kept.
func TestSwapAttackChainBeforeRun(t *testing.T) {
	g1 := statefulGraphW(t, "w1", 64, 23, 1)
	g2 := statefulGraphW(t, "w2", 64, 23, 2)
	g3 := statefulGraphW(t, "w3", 64, 24, 2)
	e, stop := attackEngine(t, g1, 100)
	defer stop()
	if n, _ := flowCount(t, e, "before"); n != 100 {
		t.Fatalf("before: %d flows", n)
	}
	attackSwap(t, e, g2, false)
	res := attackSwap(t, e, g3, false)
	if fmt.Sprint(res.StateKept) != "[ct]" || len(res.StateReset) != 0 {
		t.Fatalf("second swap: kept %v reset %v", res.StateKept, res.StateReset)
	}
	n, ev := flowCount(t, e, "after the chain")
	if uint64(n)+ev != 100 || n == 0 {
		t.Fatalf("after 1->2->2 workers: %d flows kept, %d evicted, of 100 (state_kept said ct)", n, ev)
	}
}

// TestSwapAttackPoolAddressRemoved (reproduction, not fixed): 2 workers,
// SNAT to two pool addresses; a swap with the same worker count drops
// the second address from the pool. The table is kept whole (state_kept,
// no eviction), but the new plan steers replies to the removed address
// by the addresses' hash, not by the port the NAT chose so that it
// steered back: some of the kept sessions' replies reach a worker that
// does not hold them (not reverse-translated; a TCP reply is invalid).
func TestSwapAttackPoolAddressRemoved(t *testing.T) {
	ga, gb := poolGraphs(t, 2, "")
	e, stop := attackEngine(t, ga, 100)
	defer stop()
	res := attackSwap(t, e, gb, false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := e.Flows(ctx, FlowQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	st := gb.Steering()
	removed := netip.MustParseAddr("192.0.2.2")
	stranded := 0
	for _, f := range r.Flows {
		if f.ReplyDst != removed {
			continue
		}
		// Kept on the worker its original direction steers to (the
		// carry-over puts it there); its replies must go there too.
		holder := st.TupleWorker(v4key(f.Src), v4key(f.Dst), f.SrcPort, f.DstPort, true, f.Proto, false, 2)
		if st.TupleWorker(v4key(f.ReplySrc), v4key(f.ReplyDst), f.ReplySrcPort, f.ReplyDstPort, true, f.Proto, false, 2) != holder {
			stranded++
		}
	}
	if stranded > 0 {
		t.Errorf("state_kept %v, reset %v, evictions %d: %d kept sessions translated to the removed address %v have their replies steered to the other worker",
			res.StateKept, res.StateReset, e.stageCounter("ct", "evictions"), stranded, removed)
	}
}

// v4key is IPv4 address a as steering reads it: in the first four bytes.
func v4key(a netip.Addr) *[16]byte {
	var k [16]byte
	a4 := a.As4()
	copy(k[:4], a4[:])
	return &k
}
