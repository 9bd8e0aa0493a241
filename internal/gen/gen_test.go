package gen

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/warpflow/warpflow/internal/lab"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("needs root (netns, veth, XDP, AF_XDP), and CI=true forbids skipping")
	}
	t.Skip("needs root (netns, veth, XDP, AF_XDP)")
}

// newLab builds a lab with a unique prefix, removed at cleanup.
func newLab(t *testing.T) *lab.Topology {
	t.Helper()
	requireRoot(t)
	b := make([]byte, 2)
	rand.Read(b)
	o := lab.DefaultOptions()
	o.Prefix = "wt" + hex.EncodeToString(b)
	topo, err := lab.Up(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Down(o.Prefix); err != nil && !errors.Is(err, lab.ErrNoLab) {
			t.Errorf("lab down: %v", err)
		}
	})
	return topo
}

func linkStats(t *testing.T, ns, iface string) *netlink.LinkStatistics {
	t.Helper()
	var st *netlink.LinkStatistics
	err := lab.Do(ns, func() error {
		l, err := netlink.LinkByName(iface)
		if err != nil {
			return err
		}
		st = l.Attrs().Statistics
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func labOptions(topo *lab.Topology, e Engine, n uint64) Options {
	o := DefaultOptions()
	o.Netns = topo.Gen.Namespace
	o.Engine = e
	o.Count = n
	o.Duration = 10 * time.Second
	return o
}

// TestSendExact sends N frames from gen0 with each engine and checks that
// dp0 received exactly N (dp0 carries an XDP_PASS program: without one, or
// GRO, a veth drops what its peer transmits by XDP_TX or AF_XDP).
func TestSendExact(t *testing.T) {
	topo := newLab(t)
	if err := lab.AttachPass(topo.DP0.Namespace, topo.DP0.Name); err != nil {
		t.Fatal(err)
	}
	const n = 10000
	for _, tc := range []struct {
		e     Engine
		flows int
		size  int
	}{{EngineLive, 1, 64}, {EngineLive, 100, 128}, {EngineAFXDP, 1, 64}, {EngineAFXDP, 100, 1518}} {
		before := linkStats(t, topo.DP0.Namespace, topo.DP0.Name)
		o := labOptions(topo, tc.e, n)
		o.Flows, o.Size = tc.flows, tc.size
		res, err := Run(context.Background(), o)
		if err != nil {
			t.Fatalf("%s: %v (%+v)", tc.e, err, res)
		}
		after := linkStats(t, topo.DP0.Namespace, topo.DP0.Name)
		got := after.RxPackets - before.RxPackets
		t.Logf("%s flows %d size %d: sent %d in %s (%.0f pps), dp0 rx %d, gen0 tx %d tx_dropped %d, mode %s",
			tc.e, tc.flows, tc.size, res.Sent, res.Elapsed, res.PPS, got, res.IfaceTXPackets, res.IfaceTXDropped, res.Mode)
		if res.Sent != n || got != n || res.Stopped != "count" {
			t.Errorf("%s: sent %d, dp0 received %d, stopped %q; want exactly %d, count", tc.e, res.Sent, got, res.Stopped, n)
		}
		if res.Bytes != n*uint64(tc.size) {
			t.Errorf("%s: bytes %d, want %d", tc.e, res.Bytes, n*tc.size)
		}
		// veth counts rx bytes of frames from its peer's XDP transmit path
		// (live) whole, and of skbs from its peer's ndo_start_xmit (AF_XDP
		// copy mode) without the 14-byte Ethernet header.
		wantBytes := n * uint64(tc.size)
		if tc.e == EngineAFXDP {
			wantBytes = n * uint64(tc.size-14)
		}
		if b := after.RxBytes - before.RxBytes; b != wantBytes {
			t.Errorf("%s: dp0 rx bytes %d, want %d", tc.e, b, wantBytes)
		}
	}
}

// TestLivePaced checks that the live engine's program paces a run: at
// 200 kpps for half a second it sends about 100k frames (not the million a
// call repeats), dp0 gets exactly what was sent, and a count bound still
// holds exactly.
func TestLivePaced(t *testing.T) {
	topo := newLab(t)
	if err := lab.AttachPass(topo.DP0.Namespace, topo.DP0.Name); err != nil {
		t.Fatal(err)
	}
	before := linkStats(t, topo.DP0.Namespace, topo.DP0.Name)
	o := labOptions(topo, EngineLive, 1<<30)
	o.Rate, o.Duration = 200000, 500*time.Millisecond
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	after := linkStats(t, topo.DP0.Namespace, topo.DP0.Name)
	t.Logf("paced 200 kpps: sent %d in %s (%.0f pps), dp0 rx %d", res.Sent, res.Elapsed, res.PPS, after.RxPackets-before.RxPackets)
	if res.PPS > 1.1*o.Rate || res.PPS < 0.3*o.Rate {
		t.Errorf("paced at %g pps: sent %.0f pps", o.Rate, res.PPS)
	}
	if got := after.RxPackets - before.RxPackets; got != res.Sent {
		t.Errorf("dp0 received %d, the generator sent %d", got, res.Sent)
	}
	o.Count, o.Duration = 30000, 10*time.Second
	res, err = Run(context.Background(), o)
	if err != nil || res.Sent != 30000 || res.Stopped != "count" {
		t.Errorf("paced run of 30000: sent %d, stopped %q, %v", res.Sent, res.Stopped, err)
	}
}
