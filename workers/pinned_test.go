package workers

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/warpflow/warpflow/rings"
)

// TestPinnedAssignsSequences: in a pinned pool sequence s runs on worker
// s % Workers, every sequence once, and completions come back in order;
// workers that park are woken for their own sequences (a Submit to a
// parked worker must not wait for MaxPark).
func TestPinnedAssignsSequences(t *testing.T) {
	const workers, batches = 3, 3000
	var wrong, ran atomic.Int64
	o := testOptions(t, workers)
	o.Pinned = true
	o.Slots = 8
	o.Idle = IdlePolicy{Spins: 1, Yields: 1, MaxPark: time.Hour} // a lost wake-up would hang
	p := newTestPool(t, o, kernelsOf(workers, func(i int) Kernel {
		return kernelFunc(func(b *rings.Batch) {
			if int(b.Meta[0].Seq)%workers != i {
				wrong.Add(1)
			}
			ran.Add(1)
		})
	}))
	next, done := 0, 0
	deadline := time.Now().Add(20 * time.Second)
	for done < batches {
		if time.Now().After(deadline) {
			t.Fatalf("stuck at %d of %d batches (a worker missed its wake-up)", done, batches)
		}
		if next < batches {
			if b, ok := p.Acquire(); ok {
				b.Append(rings.Desc{Addr: uint64(next)}, uint64(next), 0)
				p.Submit()
				next++
				if next%97 == 0 {
					time.Sleep(200 * time.Microsecond) // let workers park
				}
				continue
			}
		}
		if b, ok := p.Completed(); ok {
			if int(b.Meta[0].Seq) != done {
				t.Fatalf("completion %d is sequence %d", done, b.Meta[0].Seq)
			}
			p.Release()
			done++
		}
	}
	if wrong.Load() != 0 || ran.Load() != batches {
		t.Fatalf("%d batches ran on the wrong worker, %d ran of %d", wrong.Load(), ran.Load(), batches)
	}
	for i, w := range p.Stats().Workers {
		if w.Batches != batches/workers {
			t.Fatalf("worker %d ran %d batches, want %d", i, w.Batches, batches/workers)
		}
	}
}

// TestPinnedCloseDrains: batches submitted around Close still complete,
// each on its own worker's kernel.
func TestPinnedCloseDrains(t *testing.T) {
	const workers = 2
	var wrong atomic.Int64
	o := testOptions(t, workers)
	o.Pinned = true
	o.Slots = 8
	p := newTestPool(t, o, kernelsOf(workers, func(i int) Kernel {
		return kernelFunc(func(b *rings.Batch) {
			if int(b.Meta[0].Seq)%workers != i {
				wrong.Add(1)
			}
			b.Descs[0].Options++
		})
	}))
	for s := range 6 {
		b, ok := p.Acquire()
		if !ok {
			t.Fatal("acquire")
		}
		b.Append(rings.Desc{}, uint64(s), 0)
		p.Submit()
	}
	p.Close()
	for s := range 6 {
		b, ok := p.Completed()
		if !ok || b.Descs[0].Options != 1 || int(b.Meta[0].Seq) != s {
			t.Fatalf("batch %d after Close: ok %v options %d", s, ok, b.Descs[0].Options)
		}
		p.Release()
	}
	if wrong.Load() != 0 {
		t.Fatalf("%d ran on the wrong worker", wrong.Load())
	}
}
