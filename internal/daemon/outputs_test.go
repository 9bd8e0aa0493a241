package daemon

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/xdp"
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

// TestAddStages: the queues' stages sum by name, their drops by reason
// and their own counters by family and key, in the first queue's order,
// keys only later queues counted appended; the queues' own lists are not
// changed by the sum.
func TestAddStages(t *testing.T) {
	rule := counters.Decl{Name: "rule", Unit: "packets", Bytes: true, Label: "rule", Help: "Hits."}
	total := counters.Decl{Name: "total", Unit: "packets", Bytes: true, Help: "Total."}
	q0 := []control.StageStats{
		{Name: "acl", Kind: "filter", Packets: 3, Drops: []control.DropCount{{Reason: "x", Packets: 1}},
			Counters: []counters.Group{{Decl: rule, Values: []counters.KeyValue{{Key: "default", Value: 2, Bytes: 128}, {Key: "10", Value: 1, Bytes: 64}}}}},
	}
	q1 := []control.StageStats{
		{Name: "acl", Kind: "filter", Packets: 8, Drops: []control.DropCount{{Reason: "x", Packets: 2}, {Reason: "y", Packets: 1}},
			Counters: []counters.Group{{Decl: rule, Values: []counters.KeyValue{{Key: "2", Value: 5, Bytes: 320}, {Key: "10", Value: 3, Bytes: 192}}}}},
		{Name: "flows", Kind: "count", Counters: []counters.Group{{Decl: total, Values: []counters.KeyValue{{Value: 8, Bytes: 512}}}}},
	}
	sum := addStages(addStages(nil, q0), q1)
	if len(sum) != 2 || sum[0].Name != "acl" || sum[0].Packets != 11 || sum[1].Name != "flows" {
		t.Fatalf("stages %+v", sum)
	}
	if got := fmt.Sprint(sum[0].Drops); got != "[{x 3 0 0} {y 1 0 0}]" {
		t.Errorf("acl drops %s", got)
	}
	if got := fmt.Sprint(sum[0].Counters[0].Values); got != "[{default 2 128 false} {10 4 256 false} {2 5 320 false}]" {
		t.Errorf("acl counters %s", got)
	}
	if sum[0].Counter("rule", "10") != 4 || sum[1].Counter("total", "") != 8 {
		t.Errorf("Counter: rule=10 %d, total %d", sum[0].Counter("rule", "10"), sum[1].Counter("total", ""))
	}
	if q0[0].Counters[0].Values[1].Value != 1 || q0[0].Drops[0].Packets != 1 {
		t.Errorf("queue 0's lists changed: %+v", q0[0])
	}
}

// TestKernelDropsCountedOnce: the sockets' XDP_STATISTICS make kernel
// drops once. In copy mode the kernel counts a packet dropped for want of
// a fill frame in rx_dropped and in rx_fill_ring_empty both; the second
// is the times it found the ring empty, kept apart, not added.
func TestKernelDropsCountedOnce(t *testing.T) {
	var k socketDrops
	k.add(xdp.Statistics{RXDropped: 5, RXFillRingEmpty: 5, RXRingFull: 2})
	k.add(xdp.Statistics{TXInvalidDescs: 1})
	var c Counts
	k.into(&c)
	if c.KernelDropped != 8 || c.FillRingEmpty != 5 || len(c.KernelDrops) != 4 {
		t.Fatalf("kernel dropped %d (want 8: 5 without a fill frame, 2 ring full, 1 invalid), fill ring empty %d, drops %+v", c.KernelDropped, c.FillRingEmpty, c.KernelDrops)
	}
	var sum uint64
	for _, d := range c.KernelDrops {
		sum += d.Packets
	}
	if sum != c.KernelDropped {
		t.Errorf("kernel drops %+v sum to %d, kernel_dropped %d", c.KernelDrops, sum, c.KernelDropped)
	}
}
