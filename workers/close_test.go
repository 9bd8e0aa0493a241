package workers

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warpflow/warpflow/rings"

	"github.com/warpflow/warpflow/internal/testwait"
)

// slowKernel marks each descriptor after sleeping, so Close finds it busy.
type slowKernel struct{ d time.Duration }

func (k slowKernel) Process(b *rings.Batch) {
	time.Sleep(k.d)
	markKernel{}.Process(b)
}

func TestCloseWhileBusy(t *testing.T) {
	base := runtime.NumGoroutine()
	o := testOptions(t, 2)
	o.Slots = 8
	p, err := NewPool(o, kernelsOf(2, func(int) Kernel { return slowKernel{2 * time.Millisecond} }))
	if err != nil {
		t.Fatal(err)
	}
	const submitted = 8
	for i := range submitted {
		b, ok := p.Acquire()
		if !ok {
			t.Fatalf("Acquire %d failed", i)
		}
		b.SetLen(1)
		b.Descs[0] = rings.Desc{Addr: uint64(i)}
		p.Submit()
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitGoroutines(t, base)
	if _, ok := p.Acquire(); ok {
		t.Fatal("Acquire after Close succeeded")
	}
	// Everything submitted before Close was processed and can be drained.
	for i := range submitted {
		b, ok := p.Completed()
		if !ok {
			t.Fatalf("batch %d not completed after Close", i)
		}
		if b.Descs[0].Addr != uint64(i) || b.Descs[0].Options != 1 {
			t.Fatalf("batch %d: got seq %d processed %d times", i, b.Descs[0].Addr, b.Descs[0].Options)
		}
		p.Release()
	}
	if p.InFlight() != 0 {
		t.Fatalf("InFlight %d after drain", p.InFlight())
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestCloseWhileIdle(t *testing.T) {
	base := runtime.NumGoroutine()
	o := testOptions(t, 3)
	o.Idle.MaxPark = 0 // park until woken: Close must wake them itself
	p, err := NewPool(o, kernelsOf(3, func(int) Kernel { return markKernel{} }))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "all workers parked", func() bool { return p.sleepers.Load() == 3 })
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Close of an idle pool hung")
	}
	waitGoroutines(t, base)
}

func TestConcurrentClose(t *testing.T) {
	base := runtime.NumGoroutine()
	p, err := NewPool(testOptions(t, 2), kernelsOf(2, func(int) Kernel { return markKernel{} }))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := p.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	testwait.Group(t, &wg, "4 concurrent Close calls to return", 30*time.Second)
	waitGoroutines(t, base)
}

// TestSubmitAfterClose: a slot acquired before Close and submitted after it
// is still processed exactly once, so its frames come back to the consumer.
func TestSubmitAfterClose(t *testing.T) {
	p := newTestPool(t, testOptions(t, 2), kernelsOf(2, func(int) Kernel { return markKernel{} }))
	b, ok := p.Acquire()
	if !ok {
		t.Fatal("Acquire failed")
	}
	b.SetLen(1)
	b.Descs[0] = rings.Desc{Addr: 99}
	p.Close()
	p.Submit()
	got, ok := p.Completed()
	if !ok {
		t.Fatal("late-submitted batch not completed")
	}
	if got.Descs[0].Addr != 99 || got.Descs[0].Options != 1 {
		t.Fatalf("late batch: seq %d processed %d times, want 99 once", got.Descs[0].Addr, got.Descs[0].Options)
	}
	p.Release()
}

// TestCloseRacesSubmit closes the pool from another goroutine while the
// producer keeps submitting: every batch that was submitted must complete
// exactly once, whichever side of Close it landed on.
func TestCloseRacesSubmit(t *testing.T) {
	for round := range 20 {
		base := runtime.NumGoroutine()
		p, err := NewPool(testOptions(t, 2), kernelsOf(2, func(int) Kernel { return markKernel{} }))
		if err != nil {
			t.Fatal(err)
		}
		var closed atomic.Bool
		go func() {
			time.Sleep(time.Duration(round*50) * time.Microsecond)
			p.Close()
			closed.Store(true)
		}()
		submitted, drained := 0, 0
		// Bounded by time, not count: on a loaded 2-core CI box the closing
		// goroutine can wait several scheduler quanta before it runs, while
		// the producer submits at full speed.
		deadline := time.Now().Add(10 * time.Second)
		for iter := 0; ; iter++ {
			if b, ok := p.Acquire(); ok {
				b.SetLen(1)
				b.Descs[0] = rings.Desc{Addr: uint64(submitted)}
				p.Submit()
				submitted++
			} else if closed.Load() && p.InFlight() == 0 {
				break
			}
			for {
				b, ok := p.Completed()
				if !ok {
					break
				}
				if b.Descs[0].Addr != uint64(drained) || b.Descs[0].Options != 1 {
					t.Fatalf("round %d: batch %d: seq %d processed %d times", round, drained, b.Descs[0].Addr, b.Descs[0].Options)
				}
				p.Release()
				drained++
			}
			if iter&1023 == 0 && time.Now().After(deadline) {
				t.Fatalf("round %d: Close never took effect (%d batches submitted in 10s)", round, submitted)
			}
		}
		if drained != submitted {
			t.Fatalf("round %d: drained %d of %d submitted", round, drained, submitted)
		}
		waitGoroutines(t, base)
	}
}
