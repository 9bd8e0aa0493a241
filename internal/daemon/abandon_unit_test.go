package daemon_test

import (
	"testing"

	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/daemon"
)

// TestTXAbandonedDeclaredOnce: tx_abandoned is one socket counter,
// declared once, exported as one metric family, and the stats line shows
// the totals' sum of it right after transmitted.
func TestTXAbandonedDeclaredOnce(t *testing.T) {
	n := 0
	for _, d := range daemon.DeclaredCounters() {
		if d.Name != "tx_abandoned" {
			continue
		}
		n++
		if d.Owner != control.OwnerSocket {
			t.Errorf("tx_abandoned declared by %s, want the socket", d.Owner)
		}
		if ms := d.Metrics(); len(ms) != 1 || ms[0].Name != "warpflow_socket_tx_abandoned_packets_total" {
			t.Errorf("tx_abandoned's metrics: %+v", ms)
		}
	}
	if n != 1 {
		t.Fatalf("tx_abandoned declared %d times, want once", n)
	}
	attrs := daemon.StatsLine(control.Stats{Totals: control.Counts{Transmitted: 9, TXAbandoned: 3}})
	for i := 0; i+3 < len(attrs); i += 2 {
		if attrs[i] == "transmitted" {
			if attrs[i+2] != "tx_abandoned" || attrs[i+3] != uint64(3) {
				t.Errorf("stats line after transmitted: %v=%v, want tx_abandoned=3", attrs[i+2], attrs[i+3])
			}
			return
		}
	}
	t.Errorf("stats line has no transmitted: %v", attrs)
}
