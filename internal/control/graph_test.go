package control_test

import (
	"strings"
	"testing"

	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/pipelines"
)

// splitPipeline's filter has one rule the kernel can run (a UDP drop),
// then one that leads to a stage (so it stops the prefix) and a drop
// after it that stays on the workers.
const splitPipeline = `name: sp
stages:
  - {name: parse, type: parse}
  - name: acl
    type: filter
    default: rewrite
    rules:
      - {proto: udp, dst_port: 9, action: "drop:nine"}
      - {proto: tcp, dst_port: 22, action: rewrite}
      - {proto: udp, dst_port: 7, action: "drop:seven"}
  - {name: rewrite, type: rewrite, src_mac: "02:00:00:00:00:01"}
  - {name: out, type: tx, port: out0}
`

// TestSplitMarksStages: the API's split names the kernel rules and the
// rule that stops the prefix, and marks the entry parse and the split
// filter as run partly in the XDP program (the DOT too), every other
// stage as the workers'; with offload none, or no kernel rule, every
// stage is the workers'.
func TestSplitMarksStages(t *testing.T) {
	g, plan, err := pipelines.LoadOffload("sp.yaml", []byte(splitPipeline), pipelines.OffloadAuto)
	if err != nil {
		t.Fatal(err)
	}
	sp := control.SplitOf(plan)
	if sp.Mode != "auto" || sp.Filter != "acl" || sp.KernelRules != 1 || len(sp.Rules) != 3 || sp.Why != "" {
		t.Fatalf("split %+v", sp)
	}
	if r := sp.Rules; !r[0].Kernel || r[1].Kernel || r[2].Kernel || r[0].Action != "drop:nine" || r[0].Line != 8 || r[2].Line != 10 {
		t.Fatalf("rules %+v", r)
	}
	if !strings.Contains(sp.StopReason, `stage "rewrite"`) {
		t.Fatalf("stop reason %q", sp.StopReason)
	}
	nodes := control.Nodes(g)
	control.MarkSplit(nodes, sp)
	runs := map[string]string{}
	for _, n := range nodes {
		runs[n.Name] = n.RunsIn
	}
	if runs["parse"] != control.RunsInXDP || runs["acl"] != control.RunsInXDP || runs["drop:nine"] != control.RunsInXDP ||
		runs["drop:seven"] != control.RunsOnWorkers || runs["rewrite"] != control.RunsOnWorkers || runs["out"] != control.RunsOnWorkers {
		t.Fatalf("runs in: %v", runs)
	}
	dot := control.DOT("sp", nodes)
	if !strings.Contains(dot, `"acl" [shape=box, label="acl\n(filter)\n[xdp+workers]", style=filled`) || strings.Contains(dot, `rewrite)\n[xdp`) {
		t.Fatalf("dot:\n%s", dot)
	}

	_, none, err := pipelines.LoadOffload("sp.yaml", []byte(splitPipeline), pipelines.OffloadNone)
	if err != nil {
		t.Fatal(err)
	}
	sn := control.SplitOf(none)
	nodes = control.Nodes(g)
	control.MarkSplit(nodes, sn)
	for _, n := range nodes {
		if n.RunsIn != control.RunsOnWorkers {
			t.Errorf("offload none: stage %s runs in %s", n.Name, n.RunsIn)
		}
	}
	if sn.Mode != "none" || sn.KernelRules != 0 || sn.Why == "" {
		t.Errorf("offload none: %+v", sn)
	}
	if control.SplitOf(nil) != nil {
		t.Error("SplitOf(nil) != nil")
	}
}
