package daemon

import (
	"slices"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/pipelines"
)

// TestTxInterfaces: transmit sockets are opened at start on the startup
// pipeline's interfaces, every interface of the ports map and every
// transmit-only interface; a port naming no configured interface opens
// nothing.
func TestTxInterfaces(t *testing.T) {
	no := false
	cfg := &Config{
		Interfaces: []InterfaceConfig{{Name: "dp0"}, {Name: "dp1", Receive: &no}, {Name: "dp2"}, {Name: "dp3", Receive: &no}},
		Ports:      map[string]string{"out0": "dp1", "back": "dp2", "gone": "nowhere"},
	}
	got := txInterfaces(cfg, map[string]string{"out0": "dp1"})
	if want := []string{"dp1", "dp2", "dp3"}; !slices.Equal(got, want) {
		t.Fatalf("txInterfaces = %v, want %v", got, want)
	}
}

// fakeQueue has transmit ports on the interfaces it names.
type fakeQueue struct {
	iface string
	tx    []string
}

func (q fakeQueue) Interface() string { return q.iface }
func (q fakeQueue) Output(iface string) dataplane.Port {
	if iface == q.iface || slices.Contains(q.tx, iface) {
		return dataplane.NewNullPort(iface + "/q0")
	}
	return nil
}

// TestCheckOutputs: a pipeline whose every port has a transmit socket on
// every queue passes; one that needs an interface a queue did not open
// is refused in one line naming the pipeline, port, interface and queue,
// and the config change that fixes it.
func TestCheckOutputs(t *testing.T) {
	queues := []outputter{fakeQueue{"dp0", []string{"dp1"}}, fakeQueue{"dp2", []string{"dp1"}}}
	if err := checkOutputs("f", map[string]string{"out0": "dp1"}, queues); err != nil {
		t.Fatalf("outputs every queue has: %v", err)
	}
	err := checkOutputs("h", map[string]string{"out0": "dp1", "back": "dp2"}, queues)
	if err == nil {
		t.Fatal("a port to dp2, which queue dp0/q0 cannot transmit on, was accepted")
	}
	msg := err.Error()
	for _, want := range []string{`pipeline "h"`, `port "back"`, "interface dp2", "dp0/q0", "`ports: {back: dp2}`", "restart"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("refusal is not one line: %q", msg)
	}
}

// TestSumStageCounters: the queues' stage counters and sample counts sum
// by stage and key, in stage order and Report's key order, whichever
// queue saw a key first.
func TestSumStageCounters(t *testing.T) {
	q0 := control.QueueStats{Stages: []control.StageStats{
		{Name: "acl", Kind: "filter", Counters: []pipelines.Counter{{Key: "rule[10]", Packets: 1, Bytes: 64}, {Key: "default", Packets: 2, Bytes: 128}}},
		{Name: "smp", Kind: "sample", Sample: &dataplane.SampleCount{Stage: "smp", File: "s.pcap", Candidates: 10, Written: 1}},
	}}
	q1 := control.QueueStats{Stages: []control.StageStats{
		{Name: "acl", Kind: "filter", Counters: []pipelines.Counter{{Key: "rule[2]", Packets: 5, Bytes: 320}, {Key: "rule[10]", Packets: 3, Bytes: 192}}},
		{Name: "flows", Kind: "count", Counters: []pipelines.Counter{{Key: "total", Packets: 8, Bytes: 512}}},
		{Name: "smp", Kind: "sample", Sample: &dataplane.SampleCount{Stage: "smp", File: "s.pcap", Candidates: 20, Written: 2}},
	}}
	sets, samples := sumStageCounters([]control.QueueStats{q0, q1})
	want := []control.StageCounterSet{
		{Stage: "acl", Kind: "filter", Counters: []pipelines.Counter{{Key: "rule[2]", Packets: 5, Bytes: 320}, {Key: "rule[10]", Packets: 4, Bytes: 256}, {Key: "default", Packets: 2, Bytes: 128}}},
		{Stage: "flows", Kind: "count", Counters: []pipelines.Counter{{Key: "total", Packets: 8, Bytes: 512}}},
	}
	if len(sets) != len(want) {
		t.Fatalf("sets %+v", sets)
	}
	for i := range want {
		if sets[i].Stage != want[i].Stage || !slices.Equal(sets[i].Counters, want[i].Counters) {
			t.Errorf("set %d: %+v, want %+v", i, sets[i], want[i])
		}
	}
	if len(samples) != 1 || samples[0].Candidates != 30 || samples[0].Written != 3 {
		t.Errorf("samples %+v", samples)
	}
	// The queues' own lists are not changed by the sum.
	if q0.Stages[0].Counters[0].Packets != 1 {
		t.Errorf("queue 0's counter changed to %d", q0.Stages[0].Counters[0].Packets)
	}
}
