package daemon

import (
	"testing"

	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/xdp"
)

// TestKernelAccounting: the kernel's decisions join a queue's counts so
// that they balance, and rule hits map to their reasons (passes apart).
func TestKernelAccounting(t *testing.T) {
	g, err := pipelines.Load("p.yaml", []byte(`name: p
stages:
  - {name: parse, type: parse}
  - name: f
    type: filter
    rules:
      - {proto: udp, dst_port: 9, action: "drop:nine"}
      - {proto: udp, dst_port: 7, action: k}
      - {proto: tcp, action: "drop:nine"}
  - {name: out, type: tx, port: o}
  - {name: k, type: pass}
`))
	if err != nil {
		t.Fatal(err)
	}
	mode, plan, err := planOffload("auto", g)
	if err != nil || mode != pipelines.OffloadAuto || plan != g.Offload(pipelines.OffloadAuto) {
		t.Fatalf("plan: mode %v, %v (the graph's own plan: %v)", mode, err, plan == g.Offload(pipelines.OffloadAuto))
	}
	if plan.Moved != 3 {
		t.Fatalf("moved %d:\n%s", plan.Moved, plan.Explain())
	}
	m := map[string]uint64{}
	addRuleHits(m, plan, []xdp.RuleCount{{Packets: 5}, {Packets: 2}, {Packets: 1}})
	if m["nine"] != 6 || m["pass"] != 2 || len(m) != 2 {
		t.Errorf("hits by reason %v", m)
	}
	qs := QueueStats{Counts: Counts{Received: 10, Transmitted: 7, Dropped: 3}}
	addKernelVerdicts(&qs, xdp.QueueCounters{Packets: 20, Redirected: 10, Dropped: 8, Passed: 2})
	if qs.Received != 20 || qs.Dropped != 3 || qs.Passed != 0 || !balanced(&qs.Counts) || qs.XDPDropped != 8 || qs.XDPPassed != 2 {
		t.Errorf("queue stats %+v", qs.Counts)
	}
	if _, _, err := planOffload("off", g); err == nil {
		t.Error("offload off: no error")
	}
}
