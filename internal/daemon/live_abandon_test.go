package daemon_test

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLiveAbandonedAtStop: with the output's link down, every packet the
// pipeline forwards is accepted onto dp1's TX ring (transmitted, by the
// engine's count) and can never leave. When the daemon stops, each port
// makes its last flush and counts what is still on its ring: the final
// stats line has tx_abandoned equal to transmitted (and still balanced:
// they are a share of transmitted, not another verdict), a warning names
// the queue, and the sink got none. Before, a copying output's stuck
// frames went with its socket at Close, named by no counter.
//
// A sharing output's stuck frames are also ones its engine waits for in
// vain (they never complete): the engine counts them as frames lost and
// the queue stops with that error, so the daemon exits 1, as it did
// before, and the final stats line's frames_lost equals transmitted, with
// a warning; the copying output borrows frames, so its stop is clean and
// its frames_lost 0.
func TestLiveAbandonedAtStop(t *testing.T) {
	for _, tc := range []struct {
		name     string
		txCopy   bool
		wantCode int
	}{{"copying", true, 0}, {"sharing", false, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			requireLive(t, "tcpreplay")
			const pipeline = "../../testdata/live/lab-forward.yaml"
			const capture = "../../testdata/captures/mixed.pcap"
			want, _ := replayOracle(t, pipeline, capture)
			if want.Transmitted == 0 {
				t.Fatal("the oracle forwards nothing: the test would check nothing")
			}
			topo := newLab(t)
			extra := "tx_copy: false\n"
			if tc.txCopy {
				extra = "tx_copy: true\n"
			}
			d := startDaemon(t, topo.DP0.Namespace, "--config", labConfig(t, pipeline, extra), "--stats-interval", "50ms")
			d.waitFor(t, "running", 10*time.Second)
			setLink(t, topo.DP1.Namespace, topo.DP1.Name, "down")
			before := linkRXPackets(t, topo.Sink.Namespace, topo.Sink.Name)
			if sent := tcpreplay(t, topo, capture, 20000); sent != int(want.Received) {
				t.Fatalf("tcpreplay sent %d of %d", sent, want.Received)
			}
			waitReceived(t, d, want.Received)
			if code := d.stop(t, syscall.SIGTERM, 15*time.Second); code != tc.wantCode {
				t.Fatalf("warpflowd exited %d after SIGTERM with dp1 down, want %d:\n%s", code, tc.wantCode, d.log())
			}
			if tc.wantCode != 0 && !strings.Contains(d.log(), "frames still held") {
				t.Errorf("the sharing output's stop did not say which frames its engine lost:\n%s", d.log())
			}
			st := d.find("final stats")
			if st == nil {
				t.Fatalf("no final stats line:\n%s", d.log())
			}
			tx, ab := num(st, "transmitted"), num(st, "tx_abandoned")
			if tx == 0 || ab != tx {
				t.Errorf("final stats: transmitted %d, tx_abandoned %d; want every transmitted packet abandoned (dp1 was down)", tx, ab)
			}
			if b, ok := st["balanced"].(bool); !ok || !b {
				t.Errorf("final stats balanced=%v", st["balanced"])
			}
			w := d.find("frames still on TX rings at stop, never sent")
			if w == nil || w["level"] != "WARN" || num(w, "tx_abandoned") != ab {
				t.Errorf("warning at stop: %v, want a WARN with tx_abandoned %d", w, ab)
			}
			// frames_lost: the sharing output owns the frames it took and
			// gave none back (none completed), so every transmitted
			// packet's frame is lost, counted in the stats line (still
			// balanced: a share of transmitted) and warned of; the copying
			// output gave each back as it copied it, so it lost none.
			lost, lw := num(st, "frames_lost"), d.find("frames lost at stop, never given back by their output")
			if _, ok := st["frames_lost"]; !ok {
				t.Errorf("final stats line has no frames_lost: %v", st)
			}
			if tc.txCopy {
				if lost != 0 || lw != nil {
					t.Errorf("copying output: final stats frames_lost %d, warning %v; want 0 and none", lost, lw)
				}
			} else {
				if lost != tx {
					t.Errorf("sharing output: final stats frames_lost %d, transmitted %d; want every transmitted frame lost (dp1 was down)", lost, tx)
				}
				if lw == nil || lw["level"] != "WARN" || num(lw, "frames_lost") != lost || num(lw, "queue") != 0 || lw["interface"] != topo.DP0.Name {
					t.Errorf("warning at stop: %v, want a WARN for %s queue 0 with frames_lost %d", lw, topo.DP0.Name, lost)
				}
			}
			setLink(t, topo.DP1.Namespace, topo.DP1.Name, "up")
			if got := linkRXPackets(t, topo.Sink.Namespace, topo.Sink.Name) - before; got != 0 {
				t.Errorf("the sink received %d packets with dp1 down", got)
			}
		})
	}
}
