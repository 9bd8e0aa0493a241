package dataplane

import (
	"testing"

	"github.com/warpflow/warpflow/pipelines"
)

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
	got := stageDrops(info, &pipelines.NodeStats{Name: "acl", Edges: counts})
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
