package afxdp_test

import (
	"context"
	"testing"
	"time"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/dataplane/afxdp"
	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/internal/gen"
	"github.com/warpflow/warpflow/internal/lab"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/xdp"
)

// livePipeline is the live path under test: parse, swap the MACs, send out
// of dp1 (to the sink).
const livePipeline = `name: live-bench
settings: {batch_size: 64, workers: 0}
stages:
  - {name: parse, type: parse}
  - {name: swap, type: rewrite, swap_macs: true}
  - {name: out, type: tx, port: out0}
`

// txGen is a generator that allocates nothing per frame: an AF_XDP socket
// on gen0 that transmits frames prebuilt in its own UMEM and takes them
// back from its completion ring. Driven by one goroutine.
type txGen struct {
	umem   *xdp.UMEM
	sock   *xdp.Socket
	slots  uint64
	sub    uint64
	done   uint64
	frameN uint32
	descs  []rings.Desc
	comp   []uint64
}

func newTxGen(t testing.TB, topo *lab.Topology) *txGen {
	t.Helper()
	frame, err := gen.BuildUDP(gen.UDPTemplate{SrcMAC: lab.GenMAC, DstMAC: lab.DP0MAC,
		SrcIP: lab.GenAddr.Addr(), DstIP: lab.SinkAddr.Addr(), SrcPort: 1000, DstPort: 9, Size: 64})
	if err != nil {
		t.Fatal(err)
	}
	g := &txGen{slots: 4096, frameN: uint32(len(frame)), descs: make([]rings.Desc, 64), comp: make([]uint64, 2048)}
	err = lab.Do(topo.Gen.Namespace, func() error {
		var err error
		if g.umem, err = xdp.NewUMEM(xdp.UMEMOptions{Frames: int(g.slots), FrameSize: 2048}); err != nil {
			return err
		}
		mem := g.umem.Mem()
		for i := range int(g.slots) {
			copy(mem[i*2048:], frame)
		}
		so := xdp.DefaultSocketOptions(topo.Gen.Name, 0)
		so.RXSize, so.FillSize = 0, 64
		if g.sock, err = xdp.NewSocket(g.umem, so); err != nil {
			g.umem.Close()
		}
		return err
	})
	if err != nil {
		t.Fatalf("generator socket on %s: %v", topo.Gen.Name, err)
	}
	t.Cleanup(func() {
		g.sock.Close()
		g.umem.Close()
	})
	return g
}

// burst reaps completions and puts up to 64 frames on the TX ring.
func (g *txGen) burst() {
	g.done += uint64(g.sock.Completion().ConsumeAddrs(g.comp))
	n := min(uint64(len(g.descs)), g.slots-(g.sub-g.done))
	for i := range n {
		g.descs[i] = rings.Desc{Addr: (g.sub + i) % g.slots * 2048, Len: g.frameN}
	}
	g.sub += uint64(g.sock.TX().Produce(g.descs[:n]))
	_ = g.sock.KickTX()
}

// liveEngine builds a lab, opens dp0's queue with dp1 as output and runs
// an inline engine on it until the test ends.
func liveEngine(t testing.TB) (*lab.Topology, *afxdp.Queue, *dataplane.Engine) {
	t.Helper()
	topo, q := labQueue(t, 8192)
	g, err := pipelines.Load("live-bench.yaml", []byte(livePipeline))
	if err != nil {
		t.Fatal(err)
	}
	o := dataplane.DefaultOptions()
	o.Workers, o.Timing = 0, false
	e, err := dataplane.NewEngine(g, q.Arena(), q.RX(), dataplane.Outputs{Ports: map[string]dataplane.Port{"out0": q.TX(topo.DP1.Name)}}, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.RunContext(ctx, nil) }()
	// Registered after labQueue's cleanups, so it runs first: the engine
	// stops before the queue closes.
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("engine: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("engine did not stop")
		}
	})
	return topo, q, e
}

// pump sends until the receive port has counted n more packets, bounded
// by timeout.
func pump(tb testing.TB, g *txGen, rx *afxdp.Port, n uint64, timeout time.Duration) {
	target := rx.Counter("rx") + n
	deadline := time.Now().Add(timeout)
	for i := 0; rx.Counter("rx") < target; i++ {
		g.burst()
		if i&1023 == 0 && time.Now().After(deadline) {
			tb.Fatalf("received %d of %d within %s", rx.Counter("rx")-(target-n), n, timeout)
		}
	}
}

// BenchmarkLiveForward measures the live path per packet: frames sent from
// gen0 by AF_XDP arrive on dp0 (native XDP, copy mode on veth), the engine
// receives them from the AF_XDP socket, runs parse + MAC swap, transmits
// them out of dp1 over the shared UMEM, takes the completions back and
// refills. The generator and the engine both run in this process, so
// allocs/op covers the whole loop; it must be 0. The rate is the veth's
// and this machine's, not a figure (warpctl bench live measures those).
func BenchmarkLiveForward(b *testing.B) {
	topo, q, _ := liveEngine(b)
	g := newTxGen(b, topo)
	rx := q.RX()
	pump(b, g, rx, 10000, 10*time.Second) // warm up: fill ring primed, pages touched
	b.ReportAllocs()
	b.ResetTimer()
	pump(b, g, rx, uint64(b.N), time.Duration(b.N)*10*time.Microsecond+10*time.Second)
}

// TestLiveForwardAllocs is the same loop under allocs.Count: a
// batch of 64 sent and received, pipeline run, transmitted and completed,
// then an idle pause in which the engine waits in poll(2), with no
// allocation anywhere in the process.
func TestLiveForwardAllocs(t *testing.T) {
	topo, q, e := liveEngine(t)
	g := newTxGen(t, topo)
	rx := q.RX()
	pump(t, g, rx, 5000, 10*time.Second)
	polls := rx.Counter("polls")
	n := allocs.Count(200, func() {
		pump(t, g, rx, 64, 5*time.Second)
		time.Sleep(200 * time.Microsecond) // idle: the engine's wait reaches poll(2)
	})
	if rx.Counter("polls") == polls {
		t.Error("the engine never waited in poll(2): the idle path went untested")
	}
	if n != 0 {
		t.Errorf("live receive -> pipeline -> transmit -> complete allocated %d times in 200 rounds of 64 packets, want 0", n)
	}
	// The loop did forward: the engine transmitted what it received.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		s := e.Stats()
		if s.Received > 5000+200*64 && s.Received == s.Transmitted+s.Dropped {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("engine snapshot %+v: want at least %d received, all transmitted or dropped", e.Stats(), 5000+200*64)
}

// TestWaitSleepsWhenIdle checks the port's idle wait: on an empty RX ring
// it spins a couple of turns, then sleeps in poll(2) for the timeout; with
// packets waiting it returns at once, without a syscall.
//
// poll(2) is the wait's only sleep and the Polls counter counts every
// call, so the counter tells spinning from sleeping. The timeout is long
// (a sleeping wait lasts all of it) so that the wall-clock checks keep a
// wide margin over a loaded machine's preemptions, which made a 1 ms bound
// on a spinning wait fail.
func TestWaitSleepsWhenIdle(t *testing.T) {
	const timeout = 400 * time.Millisecond
	topo, q := labQueue(t, 8192)
	rx := q.RX()
	b := rings.NewBatch(64, q.Arena())
	if _, err := rx.Receive(b); err != nil { // fills the fill ring
		t.Fatal(err)
	}
	spins := 0
	for rx.Counter("polls") == 0 && spins < 100 {
		start := time.Now()
		rx.Wait(timeout)
		if rx.Counter("polls") == 0 {
			spins++
			if d := time.Since(start); d >= timeout/2 {
				t.Fatalf("a spinning wait took %s, as long as a sleep", d)
			}
		} else if d := time.Since(start); d < timeout*9/10 {
			t.Fatalf("the wait that slept in poll returned after %s on an idle port, want the %s timeout", d, timeout)
		}
	}
	if spins == 0 || spins >= 100 {
		t.Fatalf("%d spinning waits before the first poll, want a few", spins)
	}
	send(t, topo, 100)
	waitOnRX(t, rx, 100)
	polls := rx.Counter("polls")
	start := time.Now()
	for range 10 {
		rx.Wait(timeout)
	}
	if d := time.Since(start); rx.Counter("polls") != polls || d >= timeout/2 {
		t.Fatalf("with packets waiting, 10 waits made %d polls and took %s; want none, at once", rx.Counter("polls")-polls, d)
	}
	b.Clear()
	if n, err := rx.Receive(b); err != nil || n != 64 {
		t.Fatalf("receive after the waits: %d, %v", n, err)
	}
	rx.Recycle(b.Descs)
}
