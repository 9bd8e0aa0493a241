package pipelines

import (
	"testing"
	"time"
)

// TestTickHasClockChainCost: an idle stage whose flows come through
// swaps that re-steered (or changed the worker count) while no packet
// reached the stage: each swap's instances carry every instance of the
// plan before, none of which ever set up. hasClock walked that tree path
// by path: 4 workers and 12 swaps took 61 ms a tick, each swap more 4
// times that. It walks a plan at a time now (4 x 14 instances here, some
// microseconds). The bound is a guard on the walk's growth, far from
// both (4^14 paths would take about a second), not a speed figure.
func TestTickHasClockChainCost(t *testing.T) {
	const workers, depth = 4, 14
	g, err := Load("t.yaml", []byte(ctYAML(", size: 1024", "")))
	if err != nil {
		t.Fatal(err)
	}
	own := func(src, dst *[16]byte, sport, dport uint16, proto uint8, v6 bool) bool { return true }
	carried := func(string) bool { return true }
	var level []*Runner
	for i := 0; i < workers; i++ {
		level = append(level, g.NewRunner(RunnerOptions{Worker: i, Workers: workers}))
	}
	for d := 0; d < depth; d++ {
		var next []*Runner
		for i := 0; i < workers; i++ {
			r := g.NewRunner(RunnerOptions{Worker: i, Workers: workers})
			if got := r.CarryState(level, own, carried); len(got) != 1 {
				t.Fatalf("carried %v", got)
			}
			next = append(next, r)
		}
		level = next
	}
	start := time.Now()
	level[0].Tick(1 << 40)
	el := time.Since(start)
	t.Logf("one tick after %d re-steering swaps on %d workers: %v", depth, workers, el)
	if el > 50*time.Millisecond {
		t.Fatalf("one idle tick took %v after %d re-steering swaps on %d workers (walked path by path?)", el, depth, workers)
	}
}
