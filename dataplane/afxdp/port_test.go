package afxdp_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/warpflow/warpflow/dataplane/afxdp"
	"github.com/warpflow/warpflow/internal/gen"
	"github.com/warpflow/warpflow/internal/lab"
	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/xdp"

	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/internal/testwait"
)

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("AF_XDP test needs root, and CI runs as root: not skipping under CI=true")
		}
		t.Skip("AF_XDP test: needs root (network namespaces, veth, XDP, AF_XDP)")
	}
}

// waitOnRX waits (5 s at most) until at least n frames sent to rx's queue
// wait on its RX ring, and fails the test if they do not.
func waitOnRX(t testing.TB, rx *afxdp.Port, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for rx.Places().RX < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d frames sent waiting on the RX ring after 5s", rx.Places().RX, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// labQueue builds a lab and, inside its dataplane namespace, attaches the
// redirect program to dp0 and opens queue 0 of dp0 with dp1 as an output.
func labQueue(t testing.TB, frames int) (*lab.Topology, *afxdp.Queue) {
	t.Helper()
	return labQueueOpts(t, frames, false)
}

// labQueueOpts is labQueue; txCopy forces dp1's output to copy (a
// CopyPort, as when the kernel refuses to share the UMEM).
func labQueueOpts(t testing.TB, frames int, txCopy bool) (*lab.Topology, *afxdp.Queue) {
	t.Helper()
	requireRoot(t)
	var b [3]byte
	rand.Read(b[:])
	o := lab.DefaultOptions()
	o.Prefix = "p" + hex.EncodeToString(b[:])
	topo, err := lab.Up(o)
	if err != nil {
		t.Fatalf("lab up: %v", err)
	}
	t.Cleanup(func() {
		if err := lab.Down(o.Prefix); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	var (
		q    *afxdp.Queue
		prog *xdp.Program
	)
	err = lab.Do(topo.DP0.Namespace, func() error {
		var err error
		prog, err = xdp.LoadProgram(xdp.ProgramOptions{Interface: topo.DP0.Name, Attach: xdp.AttachNative, Queues: 1})
		if err != nil {
			return err
		}
		so := xdp.DefaultSocketOptions(topo.DP0.Name, 0)
		so.FillSize, so.RXSize = 4096, 4096
		q, err = afxdp.OpenQueue(afxdp.QueueOptions{
			Interface: topo.DP0.Name, Queue: 0, Outputs: []string{topo.DP1.Name},
			UMEM:        xdp.UMEMOptions{Frames: frames, FrameSize: 4096},
			Socket:      so,
			ForceTXCopy: txCopy,
		})
		if err != nil {
			prog.Close()
			return err
		}
		return prog.Register(0, q.RX().Socket())
	})
	if err != nil {
		t.Fatalf("open queue: %v", err)
	}
	t.Cleanup(func() {
		// A test may have closed it itself (a second Close says so).
		if err := q.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			t.Errorf("close queue: %v", err)
		}
		if err := prog.Close(); err != nil {
			t.Errorf("close program: %v", err)
		}
	})
	return topo, q
}

// send has the generator namespace send n 64-byte UDP frames to dp0.
func send(t *testing.T, topo *lab.Topology, n uint64) {
	t.Helper()
	if err := sendErr(topo, n); err != nil {
		t.Fatal(err)
	}
}

func sendErr(topo *lab.Topology, n uint64) error {
	o := gen.DefaultOptions()
	o.Netns, o.Interface = topo.Gen.Namespace, topo.Gen.Name
	o.Engine = gen.EngineAFXDP
	o.Size, o.Flows = 64, 16
	o.SrcMAC, o.DstMAC = lab.GenMAC, lab.DP0MAC
	o.SrcIP, o.DstIP = lab.GenAddr.Addr(), lab.SinkAddr.Addr()
	o.SrcPort, o.DstPort = 1000, 9
	o.Count, o.Duration, o.Rate = n, 10*time.Second, 50000
	res, err := gen.Run(context.Background(), o)
	if err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	if res.Sent != n {
		return fmt.Errorf("gen sent %d of %d", res.Sent, n)
	}
	return nil
}

func sinkRX(t *testing.T, topo *lab.Topology) uint64 {
	t.Helper()
	var n uint64
	if err := lab.Do(topo.Sink.Namespace, func() error {
		l, err := netlink.LinkByName(topo.Sink.Name)
		if err == nil {
			n = l.Attrs().Statistics.RxPackets
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestForwardAcrossInterfaces drives a queue the way the engine does:
// frames received on dp0 are transmitted by dp1's shared-UMEM socket
// without a copy, come back through Complete, and are recycled to the fill
// ring; at every step the places sum to the frame count, the sink gets
// every frame once, and the steady loop allocates nothing.
func TestForwardAcrossInterfaces(t *testing.T) {
	const frames = 8192
	topo, q := labQueue(t, frames)
	rx, tx := q.RX(), q.TX(topo.DP1.Name)
	if tx == nil || tx == rx {
		t.Fatal("no separate transmit port on dp1")
	}
	if got := rx.Socket().Bound(); got != xdp.BindCopy {
		t.Errorf("veth bind mode %v, want copy (veth has no zero-copy)", got)
	}
	arena := q.Arena()
	check := func(when string) {
		t.Helper()
		total := arena.FreeFrames() + rx.Places().Total() + tx.Places().Total()
		if total != frames {
			t.Fatalf("%s: free %d + rx port %+v + tx port %+v = %d, want %d",
				when, arena.FreeFrames(), rx.Places(), tx.Places(), total, frames)
		}
	}
	b := rings.NewBatch(64, arena)
	done := make([]rings.Desc, 0, 256)
	var received, transmitted uint64
	// step is one turn of an engine loop: receive, transmit, complete,
	// recycle. Frames in b between Receive and Transmit are the caller's.
	step := func() {
		b.Clear()
		n, err := rx.Receive(b)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		received += uint64(n)
		if n > 0 {
			sent, err := tx.Transmit(arena, b.Descs)
			if err != nil {
				t.Fatalf("transmit: %v", err)
			}
			transmitted += uint64(sent)
			rx.Recycle(b.Descs[sent:])
		}
		done = tx.Complete(done[:0])
		rx.Recycle(done)
	}

	step() // fills the fill ring
	check("after the first fill")
	const first = 1000 // fewer than the RX ring holds: they wait there
	send(t, topo, first)
	waitOnRX(t, rx, first)
	check("with frames waiting on the RX ring")
	if n := allocs.Count(10, step); n != 0 {
		t.Errorf("receive/transmit/complete/recycle allocated %d times in 10 turns, want 0", n)
	}
	deadline := time.Now().Add(5 * time.Second) // the loop below fails after it
	for (received < first || tx.Outstanding() > 0) && time.Now().Before(deadline) {
		step()
	}
	if received != first || transmitted != first || tx.Outstanding() != 0 {
		t.Fatalf("received %d, transmitted %d, outstanding %d; want %d, %d, 0", received, transmitted, tx.Outstanding(), first, first)
	}
	check("at rest")
	// A second, larger wave while the loop runs, sent in chunks with
	// credit from the loop: a chunk goes out only once everything before
	// it was received and completed, and a chunk is smaller than the fill
	// and RX rings, so however late this goroutine is scheduled on a
	// loaded machine the kernel never finds the fill ring empty (an
	// unpaced wave lost frames to RXFillRingEmpty whenever the loop
	// stalled for the ~80 ms the fill ring lasts at the generator's rate).
	const second, chunk = 20000, 2000
	var settled atomic.Uint64 // frames received with nothing outstanding, published by the loop
	stop := make(chan struct{})
	genErr := make(chan error, 1)
	go func() {
		for sent := uint64(0); sent < second; sent += chunk {
			for settled.Load() < first+sent {
				select {
				case <-stop:
					genErr <- fmt.Errorf("the loop stopped before the chunk at %d was sent", sent)
					return
				case <-time.After(time.Millisecond):
				}
			}
			if err := sendErr(topo, chunk); err != nil {
				genErr <- err
				return
			}
		}
		genErr <- nil
	}()
	deadline = time.Now().Add(60 * time.Second)
	for (received < first+second || tx.Outstanding() > 0) && time.Now().Before(deadline) {
		step()
		if tx.Outstanding() == 0 {
			settled.Store(received)
		}
	}
	close(stop)
	if err := testwait.Recv(t, genErr, "the chunked generator to return after stop", testwait.Deadline); err != nil {
		t.Fatal(err)
	}
	if received != first+second {
		st, _ := rx.Socket().Stats()
		t.Fatalf("received %d of %d (socket stats %+v, port rx %d polls %d)", received, first+second, st, rx.Counter("rx"), rx.Counter("polls"))
	}
	check("after the second wave")
	for i := 0; i < 100 && sinkRX(t, topo) < first+second; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if got := sinkRX(t, topo); got != first+second {
		t.Errorf("sink received %d frames, dp1 transmitted %d", got, transmitted)
	}
	if sent, done := tx.Counter("tx"), tx.Counter("completions"); sent != done || sent != uint64(transmitted) {
		t.Errorf("tx counters: tx %d, completions %d; transmitted %d", sent, done, transmitted)
	}
}

// TestCopyPortSendsWholeBatch: one Transmit on a copying output puts every
// packet it accepts on the wire, with no later call to push the rest. A
// copy-mode socket's sendto sends 32 frames at most (the kernel's default
// budget) and leaves the rest on the TX ring, and the engine never polls a
// CopyPort between batches: before CopyPort kicked until its ring was
// empty, the last batch's frames beyond the 32nd stayed there, counted as
// transmitted, and a daemon stopped after a burst never sent them
// (TestLiveForwardMatchesReplay/copying_output under load, where a
// descheduled daemon takes 64-packet batches).
func TestCopyPortSendsWholeBatch(t *testing.T) {
	const n = 200 // several times the kernel's budget per sendto
	topo, q := labQueueOpts(t, 4096, true)
	rx := q.RX()
	out, ok := q.Output(topo.DP1.Name).(*afxdp.CopyPort)
	if !ok {
		t.Fatalf("dp1's output is %T, want the forced *afxdp.CopyPort", q.Output(topo.DP1.Name))
	}
	arena := q.Arena()
	b := rings.NewBatch(rings.MaxBatch, arena)
	if _, err := rx.Receive(b); err != nil { // fills the fill ring
		t.Fatalf("receive: %v", err)
	}
	send(t, topo, n)
	waitOnRX(t, rx, n)
	b.Clear()
	got, err := rx.Receive(b)
	if err != nil || got != n {
		t.Fatalf("receive: %d frames, %v; want %d at once", got, err, n)
	}
	before := sinkRX(t, topo)
	sent, err := out.Transmit(arena, b.Descs)
	if err != nil || sent != n {
		t.Fatalf("transmit: %d of %d, %v", sent, n, err)
	}
	rx.Recycle(b.Descs) // copied: the engine's frames are free again
	// Nothing more is called on the port: what it accepted must reach the
	// sink on its own. (The sink's counter moves within microseconds of
	// the send; the deadline is for a loaded machine.)
	var arrived uint64
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if arrived = sinkRX(t, topo) - before; arrived >= n {
			break
		}
	}
	tx := out.Port()
	if arrived != n || out.Copied() != n || tx.Counter("tx") != n {
		t.Fatalf("one Transmit of %d on the copying port: the sink received %d within 2s (copied %d, port tx %d, kicks %d)",
			n, arrived, out.Copied(), tx.Counter("tx"), tx.Counter("kicks"))
	}
	// All of them left: settling finds nothing to abandon.
	if got := q.Settle(); got != 0 || tx.Counter("tx") != tx.Counter("completions") {
		t.Errorf("Settle after every frame left: tx_abandoned %d, tx %d, completions %d; want 0 and tx = completions",
			got, tx.Counter("tx"), tx.Counter("completions"))
	}
}

// receiveAll fills q's fill ring, has the generator send n frames and
// receives them in one batch (n at most rings.MaxBatch).
func receiveAll(t *testing.T, topo *lab.Topology, q *afxdp.Queue, n int) *rings.Batch {
	t.Helper()
	rx := q.RX()
	b := rings.NewBatch(rings.MaxBatch, q.Arena())
	if _, err := rx.Receive(b); err != nil { // fills the fill ring
		t.Fatalf("receive: %v", err)
	}
	send(t, topo, uint64(n))
	waitOnRX(t, rx, n)
	b.Clear()
	if got, err := rx.Receive(b); err != nil || got != n {
		t.Fatalf("receive: %d frames, %v; want %d at once", got, err, n)
	}
	return b
}

// setLink sets topo's dp1 (the output) down or up.
func setLink(t *testing.T, topo *lab.Topology, up bool) {
	t.Helper()
	if err := lab.Do(topo.DP1.Namespace, func() error {
		l, err := netlink.LinkByName(topo.DP1.Name)
		if err != nil {
			return err
		}
		if up {
			return netlink.LinkSetUp(l)
		}
		return netlink.LinkSetDown(l)
	}); err != nil {
		t.Fatalf("set %s up=%v: %v", topo.DP1.Name, up, err)
	}
}

// TestStuckTXCountedAtClose: frames an output accepted (so the engine
// counts them as transmitted) that can never leave, because the output's
// link went down, are counted as tx_abandoned when the port settles and
// closes, for a copying port (whose flush gives up on them) and for a
// sharing one (whose completions never come) alike: tx = completions +
// tx_abandoned, the sink got none of them, and after Settle the port
// refuses to take more; Close alone settles the same. Before, they went
// with the socket, counted only as transmitted.
func TestStuckTXCountedAtClose(t *testing.T) {
	for _, tc := range []struct {
		name             string
		copying, settled bool // settled: Settle before Close, as the daemon does
	}{
		{"copying", true, true}, {"copying_close_only", true, false},
		{"sharing", false, true}, {"sharing_close_only", false, false},
	} {
		copying := tc.copying
		t.Run(tc.name, func(t *testing.T) {
			const n = 200 // more than a copy-mode sendto's budget
			topo, q := labQueueOpts(t, 4096, copying)
			out := q.Output(topo.DP1.Name)
			if _, isCopy := out.(*afxdp.CopyPort); isCopy != copying {
				t.Fatalf("dp1's output is %T, want a CopyPort: %v", out, copying)
			}
			tx := q.TX(topo.DP1.Name)
			if copying {
				tx = out.(*afxdp.CopyPort).Port()
			}
			b := receiveAll(t, topo, q, n)
			setLink(t, topo, false)
			before := sinkRX(t, topo)
			sent, err := out.Transmit(q.Arena(), b.Descs)
			if err != nil || sent != n {
				t.Fatalf("transmit with dp1 down: %d of %d, %v (a link down is no error)", sent, n, err)
			}
			if copying {
				q.RX().Recycle(b.Descs) // copied: the engine's frames are free again
			}
			if tx.Counter("link_down") == 0 {
				t.Errorf("no kick refused for the link down (link_down 0, kicks %d)", tx.Counter("kicks"))
			}
			if tc.settled {
				if got := q.Settle(); got != n {
					t.Errorf("Settle: queue tx_abandoned %d, want the %d frames stuck on dp1's TX ring", got, n)
				}
				if _, err := out.Transmit(q.Arena(), b.Descs[:1]); !errors.Is(err, net.ErrClosed) {
					t.Errorf("transmit after Settle: %v, want net.ErrClosed", err)
				}
			}
			if err := q.Close(); err != nil {
				t.Fatalf("close queue: %v", err)
			}
			// Read after Close: the counters outlive the socket.
			if got, tc, c := tx.Counter("tx_abandoned"), tx.Counter("tx"), tx.Counter("completions"); got != n || tx.Abandoned() != n || tc != c+got {
				t.Errorf("after Close: tx_abandoned %d (Abandoned %d), tx %d, completions %d; want %d and tx = completions + tx_abandoned",
					got, tx.Abandoned(), tc, c, n)
			}
			if got := q.RX().Abandoned(); got != 0 {
				t.Errorf("receive port tx_abandoned %d, want 0 (it sent nothing)", got)
			}
			setLink(t, topo, true)
			if got := sinkRX(t, topo) - before; got != 0 {
				t.Errorf("the sink received %d frames that were counted abandoned", got)
			}
		})
	}
}

// TestOpenQueueFailsCleanly: a queue whose socket cannot be made (no such
// interface) fails with an error, after unwinding its UMEM; no panic.
func TestOpenQueueFailsCleanly(t *testing.T) {
	requireRoot(t)
	q, err := afxdp.OpenQueue(afxdp.QueueOptions{
		Interface: "nonexist0", Queue: 0,
		UMEM:   xdp.UMEMOptions{Frames: 4096, FrameSize: 2048},
		Socket: xdp.DefaultSocketOptions("nonexist0", 0),
	})
	if err == nil || q != nil {
		t.Fatalf("OpenQueue on a missing interface: %v, %v", q, err)
	}
}
