package dataplane

import (
	"fmt"
	"testing"

	"github.com/warpflow/warpflow/pipelines"
)

// TestResteerWithoutCarriedStateNoPoolChange: a swap that changes the
// steering and keeps a stateful stage's name, but carries no state (the
// kept name is a reassemble stage, which starts empty; the conntrack
// stage is renamed), copies nothing between workers: it needs no pool
// change. resteers looked at names alone and made it one.
func TestResteerWithoutCarriedStateNoPoolChange(t *testing.T) {
	const y = `name: %s
settings: {batch_size: 64, workers: 2}
stages:
  - {name: parse, type: parse}
  - {name: ra, type: reassemble}
  - {name: %s, type: conntrack, size: 4096}
  - name: nat
    type: nat
    conntrack: %s
    snat: [{match: {src: 10.0.0.0/8}, to: [%s]}]
  - {name: out, type: tx, port: out}
`
	ga, err := pipelines.Load("a.yaml", fmt.Appendf(nil, y, "a", "ct1", "ct1", "192.0.2.1, 192.0.2.2"))
	if err != nil {
		t.Fatal(err)
	}
	gb, err := pipelines.Load("b.yaml", fmt.Appendf(nil, y, "b", "ct2", "ct2", "192.0.2.1"))
	if err != nil {
		t.Fatal(err)
	}
	arena, rp := loopingReplay(t)
	e, err := NewEngine(ga, arena, rp, Outputs{Ports: map[string]Port{"out": NewNullPort("out")}}, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Swap(gb, Outputs{Ports: map[string]Port{"out": NewNullPort("out")}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.StateKept) == 0 && res.PoolChange {
		t.Fatalf("no state kept (reset %v), yet a pool change", res.StateReset)
	}
}
