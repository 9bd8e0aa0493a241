package gen

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/warpflow/warpflow/internal/allocs"
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

// TestPeerWithoutXDP records this kernel's veth behaviour (6.18): with no
// XDP program and no GRO on dp0, the live engine's XDP_TX frames vanish
// without any counter (Run warns), while the AF_XDP engine's frames (copy
// mode: the skb transmit path) arrive.
func TestPeerWithoutXDP(t *testing.T) {
	topo := newLab(t)
	const n = 1000
	before := linkStats(t, topo.DP0.Namespace, topo.DP0.Name)
	res, err := Run(context.Background(), labOptions(topo, EngineLive, n))
	if err != nil {
		t.Fatal(err)
	}
	mid := linkStats(t, topo.DP0.Namespace, topo.DP0.Name)
	if res.Sent != n || mid.RxPackets != before.RxPackets || res.IfaceTXPackets != 0 || len(res.Warnings) == 0 {
		t.Errorf("live into a bare veth: sent %d, dp0 rx +%d, gen0 tx +%d, warnings %q; want %d sent, none received, a warning",
			res.Sent, mid.RxPackets-before.RxPackets, res.IfaceTXPackets, res.Warnings, n)
	}
	res, err = Run(context.Background(), labOptions(topo, EngineAFXDP, n))
	if err != nil {
		t.Fatal(err)
	}
	after := linkStats(t, topo.DP0.Namespace, topo.DP0.Name)
	if res.Sent != n || after.RxPackets-mid.RxPackets != n || len(res.Warnings) != 0 {
		t.Errorf("afxdp into a bare veth: sent %d, dp0 rx +%d, warnings %q; want %d received", res.Sent, after.RxPackets-mid.RxPackets, res.Warnings, n)
	}
}

// TestBounds checks that a rate paces the run and that duration and
// cancellation end it, with the count still what the kernel took.
func TestBounds(t *testing.T) {
	topo := newLab(t)
	if err := lab.AttachDrop(topo.DP0.Namespace, topo.DP0.Name); err != nil {
		t.Fatal(err)
	}
	for _, e := range []Engine{EngineLive, EngineAFXDP} {
		// 4000 frames at 10000/s: about 0.4 s.
		o := labOptions(topo, e, 4000)
		o.Rate = 10000
		var progress int
		o.Progress = func(Progress) { progress++ }
		res, err := Run(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if res.Sent != 4000 || res.Elapsed < 350*time.Millisecond || res.Elapsed > 2*time.Second {
			t.Errorf("%s at 10000/s: sent %d in %s, want 4000 in about 0.4s", e, res.Sent, res.Elapsed)
		}
		// A huge count stops at the duration.
		o = labOptions(topo, e, 1<<40)
		o.Duration = 1200 * time.Millisecond
		o.Rate = 50000
		progress = 0
		o.Progress = func(Progress) { progress++ }
		before := linkStats(t, topo.DP0.Namespace, topo.DP0.Name)
		res, err = Run(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		after := linkStats(t, topo.DP0.Namespace, topo.DP0.Name)
		if res.Stopped != "duration" || res.Elapsed > 3*time.Second || progress < 1 {
			t.Errorf("%s: stopped %q after %s with %d progress reports, want duration after 1.2s, >= 1 report", e, res.Stopped, res.Elapsed, progress)
		}
		if got := after.RxPackets - before.RxPackets; got != res.Sent || res.Sent < 30000 || res.Sent > 70000 {
			t.Errorf("%s: sent %d, dp0 received %d; want equal, about 60000", e, res.Sent, got)
		}
		// Cancellation.
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		o = labOptions(topo, e, 1<<40)
		o.Rate = 10000
		res, err = Run(ctx, o)
		cancel()
		if err != nil || res.Stopped != "canceled" || res.Elapsed > time.Second {
			t.Errorf("%s canceled: %q after %s, %v", e, res.Stopped, res.Elapsed, err)
		}
	}
}

// TestFlowsArrive sends to a UDP socket on dp0's own address and checks
// that every flow's source port arrives equally often.
func TestFlowsArrive(t *testing.T) {
	topo := newLab(t)
	if err := lab.AttachPass(topo.DP0.Namespace, topo.DP0.Name); err != nil {
		t.Fatal(err)
	}
	var conn *net.UDPConn
	err := lab.Do(topo.DP0.Namespace, func() (err error) {
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IP(lab.DP0Addr.Addr().AsSlice()), Port: 9})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const flows, per = 20, 5
	// An skb made from an XDP frame carries a whole page of truesize, so the
	// default receive buffer holds only ~50 of the 100 frames: a reader
	// scheduled late on a loaded machine lost the rest. 4 MiB holds every
	// frame of a run however late the reader runs (SO_RCVBUFFORCE: root may
	// pass net.core.rmem_max, which caps SetReadBuffer).
	if err := forceReadBuffer(conn, 4<<20); err != nil {
		t.Fatal(err)
	}
	for _, e := range []Engine{EngineLive, EngineAFXDP} {
		o := labOptions(topo, e, flows*per)
		o.Flows = flows
		o.DstIP = lab.DP0Addr.Addr()
		o.Rate = 2000
		seen := map[int]int{}
		rerr := make(chan error, 1)
		go func() {
			buf := make([]byte, 2048)
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			for range flows * per {
				_, from, err := conn.ReadFromUDP(buf)
				if err != nil {
					rerr <- err
					return
				}
				seen[from.Port]++
			}
			rerr <- nil
		}()
		res, err := Run(context.Background(), o)
		if err != nil || res.Sent != flows*per {
			t.Fatalf("%s: sent %d, %v", e, res.Sent, err)
		}
		// Bounded without a select: the reader's 5 s read deadline ends it.
		if err := <-rerr; err != nil {
			t.Fatalf("%s: received %v: %v", e, seen, err)
		}
		for p := int(o.SrcPort); p < int(o.SrcPort)+flows; p++ {
			if seen[p] != per {
				t.Errorf("%s: source port %d seen %d times, want %d (all: %v)", e, p, seen[p], per, seen)
			}
		}
	}
}

// forceReadBuffer sets conn's receive buffer to bytes past the sysctl cap.
func forceReadBuffer(conn *net.UDPConn, bytes int) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, bytes)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("SO_RCVBUFFORCE %d: %w", bytes, serr)
	}
	return nil
}

// TestCaptureLoop loops a capture with both engines: dp0 receives exactly
// the count, and the byte count is the capture's frames in order.
func TestCaptureLoop(t *testing.T) {
	frames, _, err := ReadCapture("../../testdata/captures/mixed.pcap")
	if err != nil {
		t.Fatal(err)
	}
	topo := newLab(t)
	if err := lab.AttachDrop(topo.DP0.Namespace, topo.DP0.Name); err != nil {
		t.Fatal(err)
	}
	n := uint64(3*len(frames) + 1)
	var want uint64
	for i := range n {
		want += uint64(len(frames[i%uint64(len(frames))]))
	}
	for _, e := range []Engine{EngineLive, EngineAFXDP} {
		o := labOptions(topo, e, n)
		o.Capture = "../../testdata/captures/mixed.pcap"
		before := linkStats(t, topo.DP0.Namespace, topo.DP0.Name)
		res, err := Run(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		after := linkStats(t, topo.DP0.Namespace, topo.DP0.Name)
		if res.Sent != n || after.RxPackets-before.RxPackets != n || res.Bytes != want {
			t.Errorf("%s: sent %d (%d bytes), dp0 received %d; want %d (%d bytes)", e, res.Sent, res.Bytes, after.RxPackets-before.RxPackets, n, want)
		}
	}
}

// TestAFXDPBurstAllocs: the AF_XDP engine's send loop allocates nothing.
func TestAFXDPBurstAllocs(t *testing.T) {
	topo := newLab(t)
	o := labOptions(topo, EngineAFXDP, 1<<40)
	frame, err := framesFor(o)
	if err != nil {
		t.Fatal(err)
	}
	err = lab.Do(topo.Gen.Namespace, func() error {
		a, err := newAFXDP(o, frame)
		if err != nil {
			return err
		}
		defer a.close()
		n := allocs.Count(200, func() {
			if err := a.burst(64); err != nil {
				t.Error(err)
			}
			a.sent()
		})
		if n != 0 {
			t.Errorf("afxdp burst: %d allocations in 200 calls, want 0", n)
		}
		return a.drain(time.Now().Add(time.Second))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestInterfaceDeleted: deleting the interface under a run ends it with an
// error within a second, for both engines.
func TestInterfaceDeleted(t *testing.T) {
	for _, e := range []Engine{EngineLive, EngineAFXDP} {
		topo := newLab(t)
		if err := lab.AttachDrop(topo.DP0.Namespace, topo.DP0.Name); err != nil {
			t.Fatal(err)
		}
		o := labOptions(topo, e, 1<<40)
		o.Rate = 100000
		o.Duration = 5 * time.Second
		type out struct {
			res Result
			err error
		}
		done := make(chan out, 1)
		go func() {
			r, err := Run(context.Background(), o)
			done <- out{r, err}
		}()
		time.Sleep(300 * time.Millisecond) // not a wait for a condition: the run is under way when its interface goes
		err := lab.Do(topo.Gen.Namespace, func() error {
			l, err := netlink.LinkByName(topo.Gen.Name)
			if err != nil {
				return err
			}
			return netlink.LinkDel(l)
		})
		if err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		select {
		case r := <-done:
			if r.err == nil || r.res.Stopped != "error" {
				t.Errorf("%s: stopped %q, err %v; want an error", e, r.res.Stopped, r.err)
			}
			if d := time.Since(deleted); d > 2*time.Second {
				t.Errorf("%s: noticed after %s", e, d)
			}
			t.Logf("%s: %v (after %s)", e, r.err, time.Since(deleted))
		case <-time.After(6 * time.Second):
			t.Fatalf("%s: run did not end after its interface was deleted", e)
		}
	}
}

// TestLivePaced checks the live engine's program pacing (Rate with Burst):
// at 200 kpps for half a second it sends about 100k frames, not the
// million runs a call makes, dp0 gets exactly what was sent, and a count
// bound still holds exactly.
func TestLivePaced(t *testing.T) {
	topo := newLab(t)
	if err := lab.AttachPass(topo.DP0.Namespace, topo.DP0.Name); err != nil {
		t.Fatal(err)
	}
	before := linkStats(t, topo.DP0.Namespace, topo.DP0.Name)
	o := labOptions(topo, EngineLive, 1<<30)
	o.Rate, o.Burst, o.Duration = 200000, 16, 500*time.Millisecond
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
