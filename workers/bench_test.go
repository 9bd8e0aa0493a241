package workers

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/warpflow/warpflow/rings"
)

// BenchmarkHandoff measures the pool's cost per batch of 64 descriptors
// with a no-op kernel: Acquire, Submit, a worker's claim and done, then
// Completed and Release, all in sequence order. The producer and consumer
// are one goroutine that keeps the ring full, as the engine's I/O loop does.
// slots=0 is the default (4*workers rounded up); more slots let the status
// words' cache lines move between cores in bursts rather than one by one.
func BenchmarkHandoff(b *testing.B) {
	const batch = 64
	for _, workers := range []int{1, 2} {
		for _, slots := range []int{0, 64} {
			b.Run(fmt.Sprintf("workers=%d/slots=%d/batch=%d", workers, slots, batch), func(b *testing.B) {
				benchHandoff(b, workers, slots, batch)
			})
		}
	}
}

func benchHandoff(b *testing.B, workers, slots, batch int) {
	o := DefaultOptions()
	o.Workers = workers
	o.Slots = slots
	o.NewBatch = batchMaker(b, batch)
	p := newTestPool(b, o, kernelsOf(workers, func(int) Kernel { return kernelFunc(func(*rings.Batch) {}) }))
	b.ReportAllocs()
	b.ResetTimer()
	submitted, done := 0, 0
	for done < b.N {
		progress := false
		if submitted < b.N {
			if bt, ok := p.Acquire(); ok {
				bt.SetLen(batch)
				p.Submit()
				submitted++
				progress = true
			}
		}
		if _, ok := p.Completed(); ok {
			p.Release()
			done++
			progress = true
		}
		if !progress {
			runtime.Gosched() // workers may share our core
		}
	}
	b.StopTimer()
	perBatch := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(perBatch, "ns/batch")
	b.ReportMetric(perBatch/float64(batch), "ns/desc")
	b.ReportMetric(float64(p.Stats().Total().Parks)/float64(b.N), "parks/batch")
}
