package daemon

import (
	"slices"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/dataplane"
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
