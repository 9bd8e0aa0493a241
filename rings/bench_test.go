package rings

import (
	"fmt"
	"runtime"
	"sync"
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
	b.ResetTimer()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]Desc, batch)
		idle := 0
		for next := uint64(0); next < total; {
			want := int(min(uint64(batch), total-next))
			if copying {
				for i := range buf[:want] {
					buf[i].Addr = next + uint64(i)
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
				a[i].Addr = next + uint64(i)
			}
			for i := range c {
				c[i].Addr = next + uint64(len(a)+i)
			}
			r.Submit(n)
			next += uint64(n)
		}
	}()
	buf := make([]Desc, batch)
	idle := 0
	for want := uint64(0); want < total; {
		if copying {
			n := r.Dequeue(buf)
			if n == 0 {
				spin(&idle)
				continue
			}
			if buf[0].Addr != want || buf[n-1].Addr != want+uint64(n-1) {
				b.Fatalf("got %d..%d, want %d", buf[0].Addr, buf[n-1].Addr, want)
			}
			want += uint64(n)
			continue
		}
		idx, n := r.Peek(batch)
		if n == 0 {
			spin(&idle)
			continue
		}
		if r.At(idx).Addr != want || r.At(idx+uint32(n-1)).Addr != want+uint64(n-1) {
			b.Fatalf("got %d..%d, want %d", r.At(idx).Addr, r.At(idx+uint32(n-1)).Addr, want)
		}
		r.Release(n)
		want += uint64(n)
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
	b.ResetTimer()
	var wg sync.WaitGroup
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]Desc, batch)
			idle := 0
			for next := uint64(0); next < perProducer; {
				want := min(uint64(batch), perProducer-next)
				for i := range buf[:want] {
					buf[i].Addr = next + uint64(i)
				}
				n := r.Enqueue(buf[:want])
				if n == 0 {
					spin(&idle)
				}
				next += uint64(n)
			}
		}()
	}
	var mu sync.Mutex
	got := uint64(0)
	for range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]Desc, batch)
			idle := 0
			for {
				mu.Lock()
				done := got >= total
				mu.Unlock()
				if done {
					return
				}
				n := r.Dequeue(buf)
				if n == 0 {
					spin(&idle)
					continue
				}
				mu.Lock() // once per batch, and only in the benchmark's own bookkeeping
				got += uint64(n)
				mu.Unlock()
			}
		}()
	}
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
