package workers

import (
	"errors"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/warpflow/warpflow/internal/cpuaffinity"
	"github.com/warpflow/warpflow/rings"
)

// threadAffinity returns the CPUs the calling thread may run on.
func threadAffinity(t testing.TB) []int {
	cpus, err := cpuaffinity.ThreadCPUs()
	if err != nil {
		t.Error(err)
	}
	return cpus
}

func TestPinning(t *testing.T) {
	allowed := threadAffinity(t)
	if len(allowed) == 0 {
		t.Fatal("no allowed CPUs")
	}
	cpu := allowed[len(allowed)-1]
	seen := make(chan []int, 1)
	o := testOptions(t, 1)
	o.CPUs = []int{cpu}
	p := newTestPool(t, o, []Kernel{kernelFunc(func(*rings.Batch) {
		select {
		case seen <- threadAffinity(t):
		default:
		}
	})})
	b, _ := p.Acquire()
	b.SetLen(1)
	p.Submit()
	drainOne(t, p, nil)
	got := <-seen // not a wait: the kernel sent before its batch completed
	if len(got) != 1 || got[0] != cpu {
		t.Fatalf("worker thread affinity %v, want [%d]", got, cpu)
	}
}

func TestPinningToForbiddenCPU(t *testing.T) {
	allowed := threadAffinity(t)
	bad := cpuaffinity.MaxCPU - 1
	for _, c := range allowed {
		if c == bad {
			t.Skip("skipping: this machine allows CPU 4095, so there is no forbidden CPU to try")
		}
	}
	base := runtime.NumGoroutine()
	o := testOptions(t, 2)
	o.CPUs = []int{allowed[0], bad}
	p, err := NewPool(o, kernelsOf(2, func(int) Kernel { return markKernel{} }))
	if err == nil {
		p.Close()
		t.Fatal("NewPool pinned a worker to a CPU outside the affinity set")
	}
	if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "cpu 4095") {
		t.Fatalf("error %q: want EINVAL naming cpu 4095", err)
	}
	waitGoroutines(t, base) // the worker that did pin was stopped
}
