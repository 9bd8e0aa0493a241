package workers

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/rings"

	"github.com/warpflow/warpflow/internal/testwait"
)

// jitterKernel marks each descriptor, counts it in a shared per-sequence
// array, and takes a random time, so workers finish out of order.
type jitterKernel struct {
	rng  *rand.Rand
	seen []atomic.Uint32 // indexed by sequence number (Desc.Addr)
}

func (k *jitterKernel) Process(b *rings.Batch) {
	for i := range b.Descs {
		b.Descs[i].Options++
		b.Meta[i].Seq = b.Descs[i].Addr
		k.seen[b.Descs[i].Addr].Add(1)
	}
	switch r := k.rng.IntN(16); {
	case r == 0:
		time.Sleep(time.Duration(k.rng.IntN(200)) * time.Microsecond)
	case r < 4:
		runtime.Gosched()
	default:
		for range k.rng.IntN(2000) { // busy work of random length
			k.rng.Uint64()
		}
	}
}

// runOrdered pushes packets through p with the given producer/consumer
// arrangement and checks that the consumer sees every sequence number once,
// in order, each processed exactly once.
func runOrdered(t *testing.T, workers, packets int, separate, lock bool) {
	seen := make([]atomic.Uint32, packets)
	o := testOptions(t, workers)
	o.LockOSThread = lock
	o.Slots = 4 // small, so the producer laps the ring many times
	if o.Slots < workers {
		o.Slots = ceilPow2(workers)
	}
	p := newTestPool(t, o, kernelsOf(workers, func(i int) Kernel {
		return &jitterKernel{rng: rand.New(rand.NewPCG(uint64(i), 42)), seen: seen}
	}))
	rng := rand.New(rand.NewPCG(7, 7))

	next := uint64(0) // next sequence number to produce
	produce := func() bool {
		if next == uint64(packets) {
			return false
		}
		b, ok := p.Acquire()
		if !ok {
			return false
		}
		if b.Len() != 0 {
			t.Errorf("Acquire returned a batch of length %d, want cleared", b.Len())
		}
		n := min(1+rng.IntN(testBatchCap), packets-int(next))
		b.SetLen(n)
		for i := range n {
			b.Descs[i] = rings.Desc{Addr: next, Len: 64}
			b.Meta[i] = rings.Meta{}
			next++
		}
		p.Submit()
		return true
	}
	want := uint64(0) // next sequence number the consumer expects
	consume := func() bool {
		b, ok := p.Completed()
		if !ok {
			return false
		}
		for i := range b.Descs {
			d := b.Descs[i]
			if d.Addr != want {
				t.Fatalf("consumer got sequence %d, want %d", d.Addr, want)
			}
			if d.Options != 1 || b.Meta[i].Seq != d.Addr {
				t.Fatalf("sequence %d: processed %d times (meta seq %d), want once", d.Addr, d.Options, b.Meta[i].Seq)
			}
			want++
		}
		p.Release()
		return true
	}

	deadline := time.Now().Add(5 * time.Second)
	if separate {
		var wg sync.WaitGroup
		wg.Go(func() {
			for next < uint64(packets) && time.Now().Before(deadline) {
				if !produce() {
					runtime.Gosched()
				}
			}
		})
		for want < uint64(packets) && time.Now().Before(deadline) {
			if !consume() {
				runtime.Gosched()
			}
		}
		testwait.Group(t, &wg, "the producer goroutine to stop", 30*time.Second)
	} else {
		for want < uint64(packets) && time.Now().Before(deadline) {
			if !produce() && !consume() {
				runtime.Gosched()
			}
			if p.InFlight() > p.Slots() || p.InFlight() < 0 {
				t.Fatalf("InFlight %d outside [0, %d]", p.InFlight(), p.Slots())
			}
		}
	}
	if want != uint64(packets) {
		t.Fatalf("timed out: consumed %d of %d packets", want, packets)
	}
	for i := range seen {
		if c := seen[i].Load(); c != 1 {
			t.Fatalf("sequence %d seen by kernels %d times, want 1", i, c)
		}
	}
	if p.InFlight() != 0 {
		t.Errorf("InFlight %d after draining, want 0", p.InFlight())
	}
	tot := p.Stats().Total()
	if tot.Packets != uint64(packets) {
		t.Errorf("Stats packets %d, want %d", tot.Packets, packets)
	}
}

func TestOrderPreserved(t *testing.T) {
	packets := 20000
	if raceEnabled {
		packets = 4000
	}
	for _, tc := range []struct {
		name     string
		workers  int
		separate bool
		lock     bool
	}{
		{"1worker", 1, false, false},
		{"3workers", 3, false, false},
		{"2workers/locked-threads", 2, false, true},
		{"4workers/separate-consumer", 4, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) { runOrdered(t, tc.workers, packets, tc.separate, tc.lock) })
	}
}

func TestBackPressure(t *testing.T) {
	block := make(chan struct{})
	unblock := sync.OnceFunc(func() { close(block) })
	o := testOptions(t, 1)
	o.Slots = 2
	p := newTestPool(t, o, []Kernel{kernelFunc(func(*rings.Batch) { <-block })})
	// The kernel's receive is not the test's wait: it holds the worker
	// until the test unblocks it. Registered after newTestPool, this
	// cleanup runs before p.Close, so a test that fails while the worker
	// is held still ends instead of hanging in Close.
	t.Cleanup(unblock)
	for i := range 2 {
		if _, ok := p.Acquire(); !ok {
			t.Fatalf("Acquire %d: slot not free", i)
		}
		p.Submit()
	}
	if _, ok := p.Acquire(); ok {
		t.Fatal("Acquire with every slot in flight succeeded")
	}
	if got := p.InFlight(); got != 2 {
		t.Fatalf("InFlight %d, want 2", got)
	}
	if _, ok := p.Completed(); ok {
		t.Fatal("Completed returned a batch the kernel has not finished")
	}
	unblock()
	drainOne(t, p, nil)
	if _, ok := p.Acquire(); !ok {
		t.Fatal("Acquire after Release: slot not free")
	}
	drainOne(t, p, nil)
	if got := p.InFlight(); got != 0 {
		t.Fatalf("InFlight %d, want 0", got)
	}
}

func TestStatsCounts(t *testing.T) {
	p := newTestPool(t, testOptions(t, 2), kernelsOf(2, func(int) Kernel { return markKernel{} }))
	const batches = 50
	for i := range batches {
		waitFor(t, "a free slot", func() bool { _, ok := p.Acquire(); return ok })
		b, _ := p.Acquire()
		b.SetLen(1 + i%testBatchCap)
		p.Submit()
		drainOne(t, p, nil)
	}
	tot := p.Stats().Total()
	wantPkts := uint64(0)
	for i := range batches {
		wantPkts += uint64(1 + i%testBatchCap)
	}
	if tot.Batches != batches || tot.Packets != wantPkts {
		t.Fatalf("Stats total batches %d packets %d, want %d and %d", tot.Batches, tot.Packets, batches, wantPkts)
	}
	if n := len(p.Stats().Workers); n != 2 {
		t.Fatalf("Stats has %d workers, want 2", n)
	}
}

func TestMisusePanics(t *testing.T) {
	p := newTestPool(t, testOptions(t, 1), []Kernel{markKernel{}})
	for name, f := range map[string]func(){
		"Submit without Acquire":    p.Submit,
		"Release without Completed": p.Release,
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f()
		})
	}
}

// TestSteadyStateAllocs proves the handoff, worker side included, does not
// allocate: allocs.Count counts every goroutine's mallocs.
func TestSteadyStateAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	// Each handoff has handoffDeadline to finish. The spins below read
	// the clock every 256 turns (time.Now does not allocate) and, past the
	// deadline, record what they waited for in stuck (a constant: no
	// allocation) and return; every later step returns at once, and the
	// test fails after AllocsPerRun returns, before its count is trusted.
	const handoffDeadline = 30 * time.Second
	for _, workers := range []int{1, 2} {
		p := newTestPool(t, testOptions(t, workers), kernelsOf(workers, func(int) Kernel { return markKernel{} }))
		var stuck string
		step := func() {
			if stuck != "" {
				return
			}
			start := time.Now()
			for i := 1; ; i++ {
				if b, ok := p.Acquire(); ok {
					b.SetLen(testBatchCap)
					p.Submit()
					break
				}
				if i%256 == 0 && time.Since(start) > handoffDeadline {
					stuck = "a free slot to Acquire"
					return
				}
				runtime.Gosched()
			}
			for i := 1; ; i++ {
				if _, ok := p.Completed(); ok {
					p.Release()
					return
				}
				if i%256 == 0 && time.Since(start) > handoffDeadline {
					stuck = "the submitted batch to complete"
					return
				}
				runtime.Gosched()
			}
		}
		// The warm-up runs under allocs.Count too, for its GOMAXPROCS(1):
		// shrinking to one P destroys the other and its sudog cache, and
		// moves its timers, so the runtime refills the survivor's caches
		// once (a sudog for the parking worker's select, the timer heap's
		// growth for its MaxPark timer: 1 to 4 allocations, seen when
		// this test ran alone with the warm-up at full GOMAXPROCS). Those
		// are the runtime's, once; the count below is the handoff's, and
		// is exact (AllocsPerRun's integer average read them as 0).
		allocs.Count(100, step)
		n := allocs.Count(2000, step)
		if stuck != "" {
			t.Fatalf("%d workers: gave up after %v waiting for %s", workers, handoffDeadline, stuck)
		}
		if n != 0 {
			t.Errorf("%d workers: %d allocations in 2000 batch handoffs, want 0", workers, n)
		}
	}
}
