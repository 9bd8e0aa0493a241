package bench

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/workers"
)

// nicGen writes the stateful row's packets on a thread pinned to a core
// of its own, the way a NIC's DMA writes them into the UMEM, so that the
// row's core only receives, processes and transmits them. The two threads
// work AF_XDP's way: the row's thread hands free frames to the NIC thread
// on a fill ring, the NIC thread writes a packet into each and hands it
// back on an rx ring, and the row's thread frees every frame it is done
// with to its arena, which only it touches. Every frame has one owner at
// a time, passed by the rings.
//
// It bounds the stateful row from the other side. In-core (the row's own
// core writes every packet, the row) the core pays for the
// generator, some 117 instructions and 14 - 23 ns a packet on the AMD dev
// VM, which no NIC asks of a dataplane core (the XDP paper's 1.8 Mpps a
// core for Linux conntrack was measured with the packets sent from
// another machine), but reads every packet from its own L1. With the NIC
// thread it pays nothing for the packets' making and reads each from the
// other core's cache, a transfer a NIC's DMA into the last-level cache
// costs too, and a NIC without that costs more. warpctl bench measures
// both (the reference row RowStatefulNIC).
type nicGen struct {
	gen      *flowPort // the NIC thread's copy of the port: it writes with it
	a        *rings.Arena
	fill, rx *rings.SPSC
	total    uint64 // packets the NIC thread writes in all
	stop     atomic.Bool
	done     chan struct{} // closed when the NIC thread has returned
	err      error         // the NIC thread's error, read after done
	finished bool
	// waits counts the steady phase's receives that found fewer packets
	// on the rx ring than asked and had to wait for the NIC thread;
	// batches counts them all. A row whose receives waited often measured
	// the NIC thread, not the pipeline: Row.GeneratorWaits says how often.
	waits, batches uint64
	// oneP is set where the two threads share the runtime's only P
	// (GOMAXPROCS 1): then a waiting thread yields it. With more, neither
	// ever does: a locked thread's Gosched hands its P to another thread,
	// which the runtime may have to create (allocations in the measured
	// phase, seen in TestStatefulRowNICGen under load).
	oneP bool
	// left is the frames the NIC thread held when it was stopped early
	// (read after done): drain frees them with the rings'.
	left    []rings.Desc
	scratch [nicRingSize]rings.Desc // the row thread's, for the fill ring
}

// nicRingSize is the fill and rx rings' size: four batches each, so that
// the NIC thread can run ahead of the row by as many, and the arena's
// 1024 frames cover both rings, a batch in each thread and the engine's.
const nicRingSize = 256

// nicBatch is the most frames the NIC thread takes off the fill ring at
// once.
const nicBatch = 64

// nicStall is how long the row's thread waits for a packet before it
// gives the row up: the NIC thread writes a batch in microseconds.
const nicStall = 10 * time.Second

// startNICGen starts the NIC thread on cpu, writing the packets that rx
// (the engine's port) receives.
func startNICGen(a *rings.Arena, rx *flowPort, cpu int) (*nicGen, error) {
	fill, err := rings.NewSPSC(nicRingSize)
	if err != nil {
		return nil, err
	}
	rxr, err := rings.NewSPSC(nicRingSize)
	if err != nil {
		return nil, err
	}
	gen := newFlowPort(a, rx.flows, rx.steady)
	g := &nicGen{gen: gen, a: a, fill: fill, rx: rxr, total: gen.warm + gen.steady, done: make(chan struct{}), oneP: runtime.GOMAXPROCS(0) < 2}
	for i := range g.scratch {
		g.scratch[i].Len = flowPacketLen
	}
	g.refill()
	started := make(chan error, 1)
	go g.run(cpu, started)
	if err := <-started; err != nil {
		<-g.done
		g.drain()
		return nil, fmt.Errorf("generator on cpu %d: %w", cpu, err)
	}
	return g, nil
}

// run is the NIC thread: frames off the fill ring, packets into them, onto
// the rx ring, until every packet is written or stop is set.
func (g *nicGen) run(cpu int, started chan<- error) {
	defer close(g.done)
	if err := workers.PinCurrentGoroutine(cpu); err != nil {
		started <- err
		return
	}
	started <- nil
	var local [nicBatch]rings.Desc
	spins := 0
	for g.gen.written < g.total {
		want := int(min(nicBatch, g.total-g.gen.written))
		if g.gen.written < g.gen.warm {
			want = int(min(uint64(want), g.gen.warm-g.gen.written)) // one phase a call to write
		}
		n := g.fill.Dequeue(local[:want])
		if n == 0 {
			if g.idle(&spins) {
				return
			}
			continue
		}
		g.gen.write(local[:n])
		for m := 0; m < n; {
			k := g.rx.Enqueue(local[m:n])
			if k == 0 && g.idle(&spins) {
				g.left = append(g.left, local[m:n]...) // stopped early: the row has failed
				return
			}
			m += k
		}
	}
}

// idle is a spin of a waiting NIC thread: it says whether the row has
// asked it to stop (and yields the P now and then where there is one).
func (g *nicGen) idle(spins *int) bool {
	if *spins++; g.oneP && *spins&1023 == 0 {
		runtime.Gosched()
	}
	return g.stop.Load()
}

// refill hands the NIC thread as many free frames as its fill ring has
// room for (the row thread's; the arena is its own).
func (g *nicGen) refill() {
	room := g.fill.Cap() - g.fill.Len()
	if room < nicBatch && g.fill.Len() > 0 {
		return // top up a batch at a time
	}
	n := g.a.AllocDescs(g.scratch[:room])
	g.fill.Enqueue(g.scratch[:n]) // fits: only this thread adds to the ring
}

// receive fills dst from the rx ring, waiting for the NIC thread where it
// has fewer ready (a saturated NIC always has a batch; a wait is counted
// in the steady phase). It fails if the NIC thread stopped early or wrote
// nothing for nicStall.
func (g *nicGen) receive(dst []rings.Desc, steady bool) (int, error) {
	g.refill()
	n := g.rx.Dequeue(dst)
	if steady {
		g.batches++
		if n < len(dst) {
			g.waits++
		}
	}
	var since time.Time
	for spins := 1; n < len(dst); spins++ {
		g.refill()
		k := g.rx.Dequeue(dst[n:])
		n += k
		if k > 0 || spins&4095 != 0 {
			if k > 0 {
				since = time.Time{}
			}
			continue
		}
		if g.oneP {
			runtime.Gosched()
		}
		select {
		case <-g.done:
			if k = g.rx.Dequeue(dst[n:]); k == 0 {
				g.a.FreeDescs(dst[:n]) // written, never to be processed
				if g.err != nil {
					return 0, fmt.Errorf("generator: %w", g.err)
				}
				return 0, errors.New("generator: stopped before writing every packet")
			}
			n += k
			continue
		default:
		}
		if since.IsZero() {
			since = time.Now()
		} else if time.Since(since) > nicStall {
			g.a.FreeDescs(dst[:n])
			return 0, fmt.Errorf("generator: no packet for %v", nicStall)
		}
	}
	return n, nil
}

// finish stops the NIC thread (it has written everything when the row
// ends normally), waits for it and gives the frames left on the rings
// back to the arena. Safe to call more than once.
func (g *nicGen) finish() {
	if g.finished {
		return
	}
	g.finished = true
	g.stop.Store(true)
	<-g.done
	g.drain()
}

func (g *nicGen) drain() {
	g.a.FreeDescs(g.left)
	g.left = nil
	for _, r := range []*rings.SPSC{g.fill, g.rx} {
		for {
			n := r.Dequeue(g.scratch[:])
			if n == 0 {
				break
			}
			g.a.FreeDescs(g.scratch[:n])
		}
	}
}

// waitShare is the share of the steady phase's receives that waited.
func (g *nicGen) waitShare() float64 {
	if g.batches == 0 {
		return 0
	}
	return float64(g.waits) / float64(g.batches)
}
