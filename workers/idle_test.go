package workers

import (
	"syscall"
	"testing"
	"time"
)

// cpuTime returns the process's user+system CPU time so far.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestIdlePoolCPU: once parked, an idle pool costs close to nothing. A
// worker that kept spinning or yielding would burn most of a core over the
// window, far above the bound.
func TestIdlePoolCPU(t *testing.T) {
	const workers = 2
	o := testOptions(t, workers)
	o.Idle = DefaultIdlePolicy()
	p := newTestPool(t, o, kernelsOf(workers, func(int) Kernel { return markKernel{} }))
	waitFor(t, "all workers parked", func() bool { return p.sleepers.Load() == workers })

	const window = 200 * time.Millisecond
	before := cpuTime(t)
	time.Sleep(window)
	used := cpuTime(t) - before
	t.Logf("idle pool of %d workers used %v CPU in %v", workers, used, window)
	if used > 40*time.Millisecond {
		t.Fatalf("idle pool used %v CPU in %v, want well under 40ms", used, window)
	}
	// And it still wakes for work.
	b, ok := p.Acquire()
	if !ok {
		t.Fatal("Acquire failed")
	}
	b.SetLen(1)
	p.Submit()
	drainOne(t, p, nil)
	st := p.Stats().Total()
	if st.Parks < workers || st.Spins == 0 {
		t.Fatalf("stats %+v: want every worker to have spun and parked", st)
	}
}

// TestParkedWorkerWakesPromptly: with no park timeout, only the producer's
// wake-up can bring a parked worker back; it must, quickly.
func TestParkedWorkerWakesPromptly(t *testing.T) {
	o := testOptions(t, 1)
	o.Idle.MaxPark = 0
	p := newTestPool(t, o, []Kernel{markKernel{}})
	for i := range 20 {
		waitFor(t, "worker parked", func() bool { return p.sleepers.Load() == 1 })
		start := time.Now()
		b, _ := p.Acquire()
		b.SetLen(1)
		p.Submit()
		drainOne(t, p, nil)
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Fatalf("round %d: parked worker took %v to process a batch", i, d)
		}
	}
}
