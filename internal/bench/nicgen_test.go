package bench

import (
	"bytes"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/rings"
)

// TestNICGenSamePackets: the NIC thread writes the same packets, in the
// same order and in the same runs of the two phases, as the row's own
// core does in-core, and every frame is back in the arena at the end.
func TestNICGenSamePackets(t *testing.T) {
	const flows, steady = 1000, 5000
	inA, err := rings.NewArena(rings.ArenaOptions{Frames: 1024, FrameSize: 2048, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	nicA, err := rings.NewArena(rings.ArenaOptions{Frames: 1024, FrameSize: 2048, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	in, rx := newFlowPort(inA, flows, steady), newFlowPort(nicA, flows, steady)
	g, err := startNICGen(nicA, rx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.finish()
	rx.nic = g
	bi, bn := rings.NewBatch(64, inA), rings.NewBatch(64, nicA)
	total := in.warm + in.steady
	for got := uint64(0); ; {
		bi.Clear()
		bn.Clear()
		ni, erri := in.Receive(bi)
		nn, errn := rx.Receive(bn)
		if ni != nn || (erri == nil) != (errn == nil) {
			t.Fatalf("after %d packets: in-core gave %d (%v), the NIC thread %d (%v)", got, ni, erri, nn, errn)
		}
		if erri != nil {
			if got != total {
				t.Fatalf("%d packets, want %d", got, total)
			}
			break
		}
		for i := range ni {
			pi, pn := bi.Packet(i), bn.Packet(i)
			if !bytes.Equal(pi, pn) {
				t.Fatalf("packet %d differs:\nin-core %x\nNIC     %x", got+uint64(i), pi, pn)
			}
		}
		// The first steady batch starts at the phase boundary, in both.
		if got < in.warm && got+uint64(ni) > in.warm {
			t.Fatalf("a batch straddles the set-up phase's end: %d + %d over %d", got, ni, in.warm)
		}
		got += uint64(ni)
		inA.FreeDescs(bi.Descs)
		nicA.FreeDescs(bn.Descs)
	}
	if !g.finished {
		t.Fatal("the port's EOF did not stop the NIC thread")
	}
	if free := nicA.FreeFrames(); free != nicA.Frames() {
		t.Fatalf("%d of %d frames back in the arena after the run", free, nicA.Frames())
	}
	if g.batches == 0 {
		t.Fatal("no steady batch counted")
	}
}

// TestNICGenStopEarly: a row that ends before the generator (an engine
// error) stops the NIC thread, and every frame comes back.
func TestNICGenStopEarly(t *testing.T) {
	a, err := rings.NewArena(rings.ArenaOptions{Frames: 1024, FrameSize: 2048, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	rx := newFlowPort(a, 1000, 1_000_000)
	g, err := startNICGen(a, rx, 0)
	if err != nil {
		t.Fatal(err)
	}
	rx.nic = g
	b := rings.NewBatch(64, a)
	for range 10 {
		b.Clear()
		if n, err := rx.Receive(b); err != nil || n != 64 {
			t.Fatalf("receive: %d, %v", n, err)
		}
		a.FreeDescs(b.Descs)
	}
	g.finish()
	g.finish() // twice is fine
	if free := a.FreeFrames(); free != a.Frames() {
		t.Fatalf("%d of %d frames back in the arena after an early stop", free, a.Frames())
	}
}

// TestNICGenBadCPU: a generator core that cannot be had is an error that
// names it, with the arena's frames all back.
func TestNICGenBadCPU(t *testing.T) {
	a, err := rings.NewArena(rings.ArenaOptions{Frames: 1024, FrameSize: 2048, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	_, err = startNICGen(a, newFlowPort(a, 10, 10), 1<<20)
	if err == nil || !strings.Contains(err.Error(), "generator on cpu 1048576") {
		t.Fatalf("err %v, want one naming the cpu", err)
	}
	if free := a.FreeFrames(); free != a.Frames() {
		t.Fatalf("%d of %d frames free after the failed start", free, a.Frames())
	}
}

// TestStatefulRowNICGen runs the stateful row small with its packets
// written on CPU 0 by the NIC thread: every packet transmitted, every
// flow in the table, no allocation to speak of, and the row says where
// its packets came from.
func TestStatefulRowNICGen(t *testing.T) {
	const flows, steady = 20_000, 400_000
	r, err := statefulRow(statefulPipeline, flows, steady, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Flows != flows || r.Packets != steady || r.Generator != "cpu 0" {
		t.Fatalf("row %+v", r)
	}
	if r.Allocs > 16 {
		t.Fatalf("%d allocations in the steady phase of %d packets", r.Allocs, steady)
	}
	if r.GeneratorWaits < 0 || r.GeneratorWaits > 1 {
		t.Fatalf("generator waits %v: not a share", r.GeneratorWaits)
	}
}
