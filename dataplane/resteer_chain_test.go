package dataplane

import (
	"testing"
	"time"
)

// TestResteerChainTickCost: four steered workers on a live link whose
// packets never reach the conntrack stage (a filter before it drops
// them), and 12 swaps that alternate the SNAT pool (each re-steers: a
// pool change). No ct instance ever has a clock; each new instance's
// carry pointed at all four of the plan before, and a tick walked the
// 4^d paths (61 ms after 12 swaps) and kept every old plan alive. A tick
// now lets go of a carry with no clock in it, and walks a plan at a time.
// The bound guards the growth, not a speed.
func TestResteerChainTickCost(t *testing.T) {
	ga, gb := poolGraphs(t, 4, "  - {name: acl, type: filter, default: \"drop:policy\"}\n")
	e, in, stop := floodEngine(t, ga, worker0Flows(ga, gb, 4, 64))
	waitReceived(t, e, 1000)
	const swaps = 12
	for i := range swaps {
		g := gb
		if i%2 == 1 {
			g = ga
		}
		if res := attackSwap(t, e, g, true); !res.PoolChange {
			t.Fatalf("swap %d: no pool change", i)
		}
	}
	in.stop.Store(true)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	r := e.cur.runners[0]
	start := time.Now()
	r.Tick(clockMS())
	el := time.Since(start)
	t.Logf("one idle tick after %d re-steering swaps, 4 workers: %v", swaps, el)
	if el > 50*time.Millisecond {
		t.Fatalf("an idle tick took %v after %d swaps (4^%d carries walked)", el, swaps, swaps)
	}
}
