package daemon_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/control/client"
	"github.com/warpflow/warpflow/internal/lab"
)

// setLink sets iface in ns up or down, or deletes it.
func setLink(t *testing.T, ns, iface, to string) {
	t.Helper()
	err := lab.Do(ns, func() error {
		l, err := netlink.LinkByName(iface)
		if err != nil {
			return err
		}
		switch to {
		case "up":
			return netlink.LinkSetUp(l)
		case "down":
			return netlink.LinkSetDown(l)
		}
		return netlink.LinkDel(l)
	})
	if err != nil {
		t.Fatalf("%s %s in %s: %v", to, iface, ns, err)
	}
}

// linkRXPackets reads iface's received-packet counter in ns.
func linkRXPackets(t *testing.T, ns, iface string) uint64 {
	t.Helper()
	var n uint64
	if err := lab.Do(ns, func() error {
		l, err := netlink.LinkByName(iface)
		if err != nil {
			return err
		}
		n = l.Attrs().Statistics.RxPackets
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// linesWith returns the daemon's log lines with msg whose interface is
// iface.
func linesWith(d *daemonProc, msg, iface string) []map[string]any {
	var out []map[string]any
	for _, m := range d.all(msg) {
		if m["interface"] == iface {
			out = append(out, m)
		}
	}
	return out
}

// TestLiveTransmitLinkFlap: the transmit interface goes down for 2 s and
// comes back while traffic flows. The daemon logs the link going down and
// coming back, once each; sends refused meanwhile are counted as the
// link's state (link_down), not taken for the port's failure; afterwards
// it forwards exactly what the offline replay forwards; and SIGTERM then
// stops it cleanly (exit 0). Before, the refused sends were the queue's
// first error: the SIGTERM after the flap failed with "queue stopped ...
// network is down" and exit 1.
func TestLiveTransmitLinkFlap(t *testing.T) {
	requireLive(t, "tcpreplay")
	const pipeline = "../../testdata/live/lab-forward.yaml"
	const capture = "../../testdata/captures/mixed.pcap"
	want, _ := replayOracle(t, pipeline, capture)
	topo := newLab(t)
	d := startDaemon(t, topo.DP0.Namespace, "--config", labConfig(t, pipeline, ""))
	d.waitFor(t, "running", 10*time.Second)
	c := client.New(socketOf(d))

	// Traffic across the flap: 3000 packets at 1000 a second, bounded.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	load := exec.CommandContext(ctx, "nsenter", "--net="+filepath.Join(lab.NamespaceDir, topo.Gen.Namespace), "--",
		"tcpreplay", "-q", "-i", topo.Gen.Name, "--pps", "1000", "--loop", "10", capture)
	if err := load.Start(); err != nil {
		t.Fatal(err)
	}
	loadDone := make(chan error, 1)
	go func() { loadDone <- load.Wait() }()
	time.Sleep(300 * time.Millisecond)
	setLink(t, topo.DP1.Namespace, topo.DP1.Name, "down")
	time.Sleep(2 * time.Second)
	setLink(t, topo.DP1.Namespace, topo.DP1.Name, "up")
	select {
	case err := <-loadDone:
		if err != nil {
			t.Fatalf("tcpreplay across the flap: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("tcpreplay across the flap did not finish within 20s")
	}
	st := statsAfterReplay(t, c, topo, 3000)
	var linkDown uint64
	for _, q := range st.Queues {
		for _, so := range q.Sockets {
			for _, c := range control.TopCounters(so.Counters, -1) {
				if c.Text == "link_down" {
					linkDown += c.Value
				}
			}
		}
	}
	if linkDown == 0 {
		t.Fatal("no send was refused while dp1 was down: the test did not exercise the flap")
	}

	// Forwarding resumed: a fresh pass arrives at the sink in full.
	before := linkRXPackets(t, topo.Sink.Namespace, topo.Sink.Name)
	if sent := tcpreplay(t, topo, capture, 20000); sent != int(want.Received) {
		t.Fatalf("tcpreplay sent %d of %d", sent, want.Received)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		got := linkRXPackets(t, topo.Sink.Namespace, topo.Sink.Name) - before
		if got == want.Transmitted {
			break
		}
		if got > want.Transmitted || time.Now().After(deadline) {
			t.Fatalf("after the flap the sink received %d of a pass, the replay forwards %d", got, want.Transmitted)
		}
		time.Sleep(20 * time.Millisecond)
	}

	if code := d.stop(t, syscall.SIGTERM, 10*time.Second); code != 0 {
		t.Fatalf("warpflowd exited %d after SIGTERM following the flap, want 0", code)
	}
	if down := linesWith(d, "link down", "dp1"); len(down) == 1 && (down[0]["admin_up"] != false || down[0]["level"] != "WARN") {
		t.Errorf("link down line %v: want a WARN saying dp1 is administratively down", down[0])
	}
	if n, m := len(linesWith(d, "link down", "dp1")), len(linesWith(d, "link up", "dp1")); n != 1 || m != 1 {
		t.Errorf("dp1 logged down %d and up %d times, want once each:\n%s", n, m, d.log())
	}
	if d.find("queue stopped") != nil || d.find("interface lost") != nil {
		t.Errorf("a flap was taken for a failure or a loss:\n%s", d.log())
	}
}

// TestLiveContinueLostQueueQuiet: under on_link_loss: continue, a queue
// whose interface was deleted stops and the daemon keeps serving the other
// one; the lost queue's sockets are not checked again, so their error is
// logged at most once, not every 250 ms as before (8 lines in 2 s).
func TestLiveContinueLostQueueQuiet(t *testing.T) {
	requireLive(t)
	// dp1 receives too, on its queue 1 (dp0's queue 0 transmits on dp1's
	// queue 0): that queue transmits on itself and uses nothing of dp0's,
	// so it survives dp0's deletion.
	topo := newLabQueues(t, 2)
	cfg := labConfig(t, "../../testdata/live/lab-forward.yaml", "on_link_loss: continue\n")
	cfg = rewriteConfig(t, cfg, "  - {name: dp0, attach: native, bind: auto}", "  - {name: dp0, attach: native, bind: auto, queues: [0]}")
	cfg = rewriteConfig(t, cfg, "  - {name: dp1, receive: false, bind: auto}", "  - {name: dp1, attach: native, bind: auto, queues: [1]}")
	d := startDaemon(t, topo.DP0.Namespace, "--config", cfg)
	d.waitFor(t, "running", 10*time.Second)
	if n := len(d.all("queue up")); n != 2 {
		t.Fatalf("%d queues up, want dp0's and dp1's", n)
	}
	setLink(t, topo.DP0.Namespace, topo.DP0.Name, "delete")
	lost := d.waitFor(t, "interface lost", 3*time.Second)
	if lost["interface"] != topo.DP0.Name {
		t.Fatalf("interface lost line %v, want dp0", lost)
	}
	time.Sleep(2 * time.Second) // eight of the watcher's 250 ms checks
	if n := len(d.all("socket error")); n > 1 {
		t.Errorf("%d socket error lines in the 2s after dp0 went, want at most one:\n%s", n, d.log())
	}
	select {
	case err := <-d.done:
		d.done <- err
		t.Fatalf("warpflowd exited (%v) with dp1's queue still to serve:\n%s", err, d.log())
	default:
	}
	if code := d.stop(t, syscall.SIGTERM, 10*time.Second); code != 0 {
		t.Fatalf("warpflowd exited %d after SIGTERM, want 0", code)
	}
	if n := len(d.all("interface lost")); n != 1 {
		t.Errorf("interface lost logged %d times, want once", n)
	}
}

// TestLiveContinueNothingLeft: under on_link_loss: continue, losing the
// interface the only queue receives on, or the only one it transmits on,
// leaves nothing to serve: the daemon drains and exits 1 (so that
// Restart=on-failure restarts it), where it used to exit 0 "stopped
// cleanly".
func TestLiveContinueNothingLeft(t *testing.T) {
	for _, tc := range []struct{ name, iface string }{{"receive", lab.DP0Iface}, {"transmit", lab.DP1Iface}} {
		t.Run(tc.name, func(t *testing.T) {
			requireLive(t)
			topo := newLab(t)
			d := startDaemon(t, topo.DP0.Namespace, "--config", labConfig(t, "../../testdata/live/lab-forward.yaml", "on_link_loss: continue\n"))
			d.waitFor(t, "running", 10*time.Second)
			setLink(t, topo.DP0.Namespace, tc.iface, "delete")
			if code := d.wait(t, 10*time.Second); code != 1 {
				t.Fatalf("warpflowd exited %d after losing %s, its only %s interface, under continue; want 1:\n%s", code, tc.iface, tc.name, d.log())
			}
			if !strings.Contains(d.log(), "nothing left to serve") {
				t.Errorf("the exit does not say why:\n%s", d.log())
			}
			if d.find("stopped cleanly") != nil {
				t.Error("logged stopped cleanly")
			}
		})
	}
}

// rewriteConfig replaces old, which must occur once, with new in the
// config file at path.
func rewriteConfig(t *testing.T, path, old, new string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), old); n != 1 {
		t.Fatalf("config %s has %q %d times, want once:\n%s", path, old, n, data)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
