package dataplane

import (
	"testing"

	"github.com/warpflow/warpflow/pipelines"
)

func TestSortCountersIsIndependentOfArrivalOrder(t *testing.T) {
	want := []string{"total", "class=truncated", "proto=tcp", "proto=udp", "rule[2]", "rule[10]", "vlan=10", "vlan=100", "vlan=none", "default"}
	// Two arrival orders, as two workers might report them.
	for _, order := range [][]int{{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, {3, 0, 9, 5, 1, 7, 2, 8, 6, 4}} {
		var list []pipelines.Counter
		for _, i := range order {
			list = mergeCounter(list, pipelines.Counter{Key: want[i], Packets: 1})
		}
		list = mergeCounter(list, pipelines.Counter{Key: "rule[2]", Packets: 2})
		sortCounters(list)
		for i, c := range list {
			if c.Key != want[i] {
				t.Fatalf("order %v: position %d is %q, want %q", order, i, c.Key, want[i])
			}
		}
		if list[4].Packets != 3 {
			t.Fatalf("rule[2] merged to %d packets, want 3", list[4].Packets)
		}
	}
}

func TestStageDropsNameReasons(t *testing.T) {
	g, err := pipelines.Load("t.yaml", []byte(`name: t
stages:
  - {name: parse, type: parse}
  - name: acl
    type: filter
    rules:
      - {proto: tcp, action: "drop:no-tcp"}
      - {proto: udp, action: "drop:no-udp"}
  - {name: out, type: tx, port: p}
`))
	if err != nil {
		t.Fatal(err)
	}
	info := g.Stages()
	var acl pipelines.StageInfo
	for _, s := range info {
		if s.Name == "acl" {
			acl = s
		}
	}
	counts := make([]uint64, len(acl.Edges)+1) // one bad-edge entry at the end
	for e, name := range acl.Edges {
		switch name {
		case "drop:no-tcp":
			counts[e] = 5
		case "drop:no-udp":
			counts[e] = 3
		default:
			counts[e] = 11
		}
	}
	counts[len(acl.Edges)] = 2
	got := stageDrops(info, pipelines.NodeStats{Name: "acl", Edges: counts})
	want := map[string]uint64{"no-tcp": 5, "no-udp": 3, pipelines.BadEdgeReason: 2}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %v", got, want)
	}
	for _, d := range got {
		if want[d.Reason] != d.Packets {
			t.Fatalf("got %+v, want %v", got, want)
		}
	}
}
