package xdp

import (
	"testing"
	"time"

	"github.com/warpflow/warpflow/rings"
)

// TestCrossQueueRedirectRefused holds the running kernel to the fact the
// split's planner relies on (pipelines.BalanceKernelReason): an XDP
// redirect into an AF_XDP socket bound to another queue than the one the
// frame arrived on is refused (net/xdp/xsk.c xsk_rcv_check, -EINVAL; the
// frame is dropped), even when both sockets share one UMEM. Linux 6.9
// allowed that case; 6.10 reverted it. So the XDP program cannot run a
// balance stage's choice of queue.
//
// The two queues' sockets are registered crossed (queue 0's slot holds
// queue 1's socket and the other way round), so every frame, whichever
// queue the veth gives it, is redirected to the other queue's socket:
// none may arrive. Registered straight, the same frames do arrive, which
// shows the setup works and the refusal is the crossing's.
func TestCrossQueueRedirectRefused(t *testing.T) {
	requireRoot(t)
	inNewNetns(t)
	v := newVeth(t, "wfxq0", "wfxq1", 2)
	u := newTestUMEM(t, 256)
	s0 := newTestSocket(t, u, smallOptions(v.name, 0))
	o1 := smallOptions(v.name, 1)
	o1.SharedWith = s0
	s1 := newTestSocket(t, nil, o1)
	p, err := LoadProgram(ProgramOptions{Interface: v.name, Queues: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	fillFrames(t, s0, 0, 64)
	fillFrames(t, s1, 64, 64)
	if err := p.objs.Xsks.Put(uint32(0), uint32(s1.FD())); err != nil {
		t.Fatal(err)
	}
	if err := p.objs.Xsks.Put(uint32(1), uint32(s0.FD())); err != nil {
		t.Fatal(err)
	}
	redirected := func() uint64 {
		var n uint64
		for q := range 2 {
			c, err := p.Counters(q)
			if err != nil {
				t.Fatal(err)
			}
			n += c.Redirected
		}
		return n
	}
	arrived := func() int {
		n := 0
		buf := make([]rings.Desc, 64)
		for _, s := range []*Socket{s0, s1} {
			n += s.RX().Consume(buf)
		}
		return n
	}
	const k = 32
	peer := newPacketSocket(t, v.peerIdx)
	send := func(from uint32) {
		for i := range uint32(k) {
			peer.send(t, testFrame(v.mac, v.peerMAC, from+i))
		}
	}
	send(0)
	deadline := time.Now().Add(2 * time.Second)
	for redirected() < k && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if r := redirected(); r != k {
		t.Fatalf("the program redirected %d of %d frames", r, k)
	}
	c0, _ := p.Counters(0)
	c1, _ := p.Counters(1)
	t.Logf("redirected crossed: %d on queue 0 (to queue 1's socket), %d on queue 1 (to queue 0's)", c0.Redirected, c1.Redirected)
	time.Sleep(50 * time.Millisecond) // not a wait for a condition: time for frames that must not arrive to do so
	if n := arrived(); n != 0 {
		t.Fatalf("%d of %d frames redirected to another queue's socket arrived: this kernel steers across queues now, so the split could run a balance stage (pipelines.BalanceKernelReason is out of date)", n, k)
	}

	if err := p.Register(0, s0); err != nil {
		t.Fatal(err)
	}
	if err := p.Register(1, s1); err != nil {
		t.Fatal(err)
	}
	send(k)
	got := 0
	for deadline := time.Now().Add(2 * time.Second); got < k && time.Now().Before(deadline); {
		got += arrived()
		time.Sleep(5 * time.Millisecond)
	}
	if got != k {
		t.Fatalf("registered straight, %d of %d frames arrived", got, k)
	}
}
