package rings

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// descsPerOp is how many descriptors one benchmark op hands over, so that a
// short -benchtime Nx run still moves enough to measure.
const descsPerOp = 1 << 16

// reportPerDesc reports ns/desc and Mpps for n descriptors moved in the
// benchmark's elapsed time.
func reportPerDesc(b *testing.B, n int) {
	ns := float64(b.Elapsed().Nanoseconds()) / float64(n)
	b.ReportMetric(ns, "ns/desc")
	b.ReportMetric(1e3/ns, "Mpps")
}

// sink keeps the consumers' reads from being optimised away.
var sink atomic.Uint64

// spin is the benchmarks' idle strategy: busy-poll briefly, then yield so a
// peer sharing the core can run.
func spin(idle *int) {
	*idle++
	if *idle&63 == 0 {
		runtime.Gosched()
	}
}

func BenchmarkSPSCHandoff(b *testing.B) {
	for _, batch := range []int{1, 16, 64, 256} {
		b.Run(fmt.Sprintf("reserve/batch=%d", batch), func(b *testing.B) {
			benchSPSC(b, batch, false)
		})
	}
	b.Run("enqueue/batch=64", func(b *testing.B) { benchSPSC(b, 64, true) })
}

// benchSPSC hands b.N*descsPerOp sequence-numbered descriptors from a
// producer goroutine to the benchmark goroutine, which checks the order.
func benchSPSC(b *testing.B, batch int, copying bool) {
	r := newTestSPSC(b, 1024)
	total := uint64(b.N) * descsPerOp
	b.ReportAllocs()
	// Goroutines and buffers are made before the timer starts, so allocs/op
	// counts only the handoff itself.
	start := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	pbuf := make([]Desc, batch)
	go func() {
		defer wg.Done()
		buf := pbuf
		idle := 0
		<-start
		for next := uint64(0); next < total; {
			want := int(min(uint64(batch), total-next))
			if copying {
				for i := range buf[:want] {
					buf[i] = Desc{Addr: next + uint64(i), Len: 64}
				}
				n := r.Enqueue(buf[:want])
				if n == 0 {
					spin(&idle)
				}
				next += uint64(n)
				continue
			}
			idx, n := r.Reserve(want)
			if n == 0 {
				spin(&idle)
				continue
			}
			a, c := r.Slots(idx, n)
			for i := range a {
				a[i] = Desc{Addr: next + uint64(i), Len: 64}
			}
			for i := range c {
				c[i] = Desc{Addr: next + uint64(len(a)+i), Len: 64}
			}
			r.Submit(n)
			next += uint64(n)
		}
	}()
	buf := make([]Desc, batch)
	idle := 0
	b.ResetTimer()
	close(start)
	for want := uint64(0); want < total; {
		if copying {
			n := r.Dequeue(buf)
			if n == 0 {
				spin(&idle)
				continue
			}
			for _, d := range buf[:n] {
				if d.Addr != want {
					b.Fatalf("got %d, want %d", d.Addr, want)
				}
				want++
			}
			continue
		}
		idx, n := r.Peek(batch)
		if n == 0 {
			spin(&idle)
			continue
		}
		// Read every descriptor in place, as a real consumer would.
		x, y := r.Slots(idx, n)
		for _, s := range [2][]Desc{x, y} {
			for _, d := range s {
				if d.Addr != want {
					b.Fatalf("got %d, want %d", d.Addr, want)
				}
				want++
			}
		}
		r.Release(n)
	}
	wg.Wait()
	b.StopTimer()
	reportPerDesc(b, int(total))
}

func BenchmarkMPMCHandoff(b *testing.B) {
	for _, c := range []struct{ producers, consumers, batch int }{
		{1, 1, 1}, {1, 1, 64}, {2, 2, 64},
	} {
		b.Run(fmt.Sprintf("p=%d/c=%d/batch=%d", c.producers, c.consumers, c.batch), func(b *testing.B) {
			benchMPMC(b, c.producers, c.consumers, c.batch)
		})
	}
}

func benchMPMC(b *testing.B, producers, consumers, batch int) {
	r := newTestMPMC(b, 1024)
	perProducer := uint64(b.N) * descsPerOp / uint64(producers)
	total := perProducer * uint64(producers)
	b.ReportAllocs()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range producers {
		wg.Add(1)
		buf := make([]Desc, batch)
		go func() {
			defer wg.Done()
			idle := 0
			<-start
			for next := uint64(0); next < perProducer; {
				want := min(uint64(batch), perProducer-next)
				for i := range buf[:want] {
					buf[i] = Desc{Addr: next + uint64(i), Len: 64}
				}
				n := r.Enqueue(buf[:want])
				if n == 0 {
					spin(&idle)
				}
				next += uint64(n)
			}
		}()
	}
	var got atomic.Uint64 // descriptors dequeued by all consumers: the benchmark's bookkeeping, once per batch
	for range consumers {
		wg.Add(1)
		buf := make([]Desc, batch)
		go func() {
			defer wg.Done()
			idle := 0
			var sum uint64
			<-start
			for got.Load() < total {
				n := r.Dequeue(buf)
				if n == 0 {
					spin(&idle)
					continue
				}
				for _, d := range buf[:n] {
					sum += d.Addr
				}
				got.Add(uint64(n))
			}
			sink.Add(sum)
		}()
	}
	b.ResetTimer()
	close(start)
	wg.Wait()
	b.StopTimer()
	reportPerDesc(b, int(total))
}

func BenchmarkArena(b *testing.B) {
	a := newTestArena(b, 4096, 4096, 256)
	b.Run("Alloc+Free", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			addr, _ := a.Alloc()
			a.Free(addr)
		}
	})
	b.Run("AllocN+FreeN/batch=64", func(b *testing.B) {
		addrs := make([]uint64, 64)
		b.ReportAllocs()
		for b.Loop() {
			n := a.AllocN(addrs)
			a.FreeN(addrs[:n])
		}
		reportPerDesc(b, b.N*64)
	})
}

// BenchmarkRingSameGoroutine moves batches of 64 through each ring within
// one goroutine: the protocol's own instruction cost, without cross-core
// cache traffic or scheduling, and so far less sensitive to a noisy machine
// than the handoff benchmarks.
func BenchmarkRingSameGoroutine(b *testing.B) {
	const batch = 64
	ds := make([]Desc, batch)
	b.Run("SPSC/reserve", func(b *testing.B) {
		r := newTestSPSC(b, 1024)
		b.ReportAllocs()
		for b.Loop() {
			idx, n := r.Reserve(batch)
			x, y := r.Slots(idx, n)
			for i := range x {
				x[i] = Desc{Addr: uint64(i), Len: 64}
			}
			for i := range y {
				y[i] = Desc{Addr: uint64(i), Len: 64}
			}
			r.Submit(n)
			idx, n = r.Peek(batch)
			x, y = r.Slots(idx, n)
			var sum uint64
			for _, d := range x {
				sum += d.Addr
			}
			for _, d := range y {
				sum += d.Addr
			}
			r.Release(n)
			sink.Store(sum)
		}
		reportPerDesc(b, b.N*batch)
	})
	b.Run("SPSC/enqueue", func(b *testing.B) {
		r := newTestSPSC(b, 1024)
		b.ReportAllocs()
		for b.Loop() {
			r.Enqueue(ds)
			r.Dequeue(ds)
		}
		reportPerDesc(b, b.N*batch)
	})
	b.Run("MPMC", func(b *testing.B) {
		r := newTestMPMC(b, 1024)
		b.ReportAllocs()
		for b.Loop() {
			r.Enqueue(ds)
			r.Dequeue(ds)
		}
		reportPerDesc(b, b.N*batch)
	})
}
