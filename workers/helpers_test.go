package workers

import (
	"runtime"
	"testing"
	"time"

	"github.com/warpflow/warpflow/rings"
)

const testBatchCap = 8

// batchMaker returns a NewBatch function over one small arena. Tests put
// sequence numbers, not arena offsets, in Desc.Addr, so no kernel here
// touches packet bytes.
func batchMaker(t testing.TB, capacity int) func() *rings.Batch {
	t.Helper()
	a, err := rings.NewArena(rings.ArenaOptions{Frames: 1, FrameSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	return func() *rings.Batch { return rings.NewBatch(capacity, a) }
}

// testOptions returns options for n workers with a short idle policy so
// idle workers park quickly on the shared test machine.
func testOptions(t testing.TB, n int) Options {
	return Options{
		Workers:  n,
		NewBatch: batchMaker(t, testBatchCap),
		Idle:     IdlePolicy{Spins: 64, Yields: 16, MaxPark: 20 * time.Millisecond},
	}
}

func newTestPool(t testing.TB, o Options, kernels []Kernel) *Pool {
	t.Helper()
	p, err := NewPool(o, kernels)
	if err != nil {
		t.Fatalf("NewPool: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// kernelFunc adapts a function to Kernel.
type kernelFunc func(b *rings.Batch)

func (f kernelFunc) Process(b *rings.Batch) { f(b) }

// markKernel counts each descriptor it sees in Options: a descriptor
// processed exactly once leaves with Options == 1.
type markKernel struct{}

func (markKernel) Process(b *rings.Batch) {
	for i := range b.Descs {
		b.Descs[i].Options++
	}
}

func kernelsOf(n int, mk func(i int) Kernel) []Kernel {
	ks := make([]Kernel, n)
	for i := range ks {
		ks[i] = mk(i)
	}
	return ks
}

// waitGoroutines polls until the goroutine count drops to base, failing
// after a second: a pool's workers must all be gone after Close.
func waitGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("goroutines: %d after Close, want <= %d\n%s", n, base, buf)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitFor polls cond for up to ten seconds (generous for a loaded CI box).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// drainOne waits for the next completed batch, calls check on it and
// releases it.
func drainOne(t *testing.T, p *Pool, check func(b *rings.Batch)) {
	t.Helper()
	waitFor(t, "a completed batch", func() bool {
		_, ok := p.Completed()
		return ok
	})
	b, _ := p.Completed()
	if check != nil {
		check(b)
	}
	p.Release()
}
