package allocs

import (
	"runtime"
	"testing"
)

var sink []byte

// everyTenth returns a function that allocates (a slice escaped to sink)
// on its 10th, 20th, 30th... call, and nothing on the others.
func everyTenth() func() {
	calls := 0
	return func() {
		calls++
		if calls%10 == 0 {
			sink = make([]byte, 64)
		}
	}
}

// An allocation every tenth run is counted exactly, where AllocsPerRun's
// integer average reads it as 0 allocations per run.
func TestCountSeesRareAllocations(t *testing.T) {
	// The warm-up is call 1; the 100 counted runs are calls 2 to 101, of
	// which 10, 20, ... 100 allocate: 10 allocations.
	if n := Count(100, everyTenth()); n != 10 {
		t.Errorf("Count(100, every tenth call allocates) = %d, want 10", n)
	}
	// The same 10 allocations in 100 runs, averaged in integers: 0.
	if a := testing.AllocsPerRun(100, everyTenth()); a != 0 {
		t.Errorf("testing.AllocsPerRun(100, every tenth call allocates) = %v, want 0 (the integer average this package exists for)", a)
	}
	// Fewer runs than the allocation's period: the warm-up and 8 runs are
	// calls 1 to 9, none of which allocates; 9 runs reach call 10.
	if n := Count(8, everyTenth()); n != 0 {
		t.Errorf("Count(8, ...) = %d, want 0", n)
	}
	if n := Count(9, everyTenth()); n != 1 {
		t.Errorf("Count(9, ...) = %d, want 1", n)
	}
}

func TestCountEveryRun(t *testing.T) {
	if n := Count(50, func() { sink = make([]byte, 64) }); n != 50 {
		t.Errorf("Count(50, one allocation a call) = %d, want 50", n)
	}
}

func TestCountNoAllocations(t *testing.T) {
	x := 0
	if n := Count(1000, func() { x++ }); n != 0 {
		t.Errorf("Count(1000, no allocation) = %d, want 0", n)
	}
	if x != 1001 {
		t.Errorf("f ran %d times, want 1001 (the warm-up and 1000 runs)", x)
	}
}

// Count leaves GOMAXPROCS as it found it and measures with 1.
func TestCountGOMAXPROCS(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	during := 0
	Count(3, func() { during = runtime.GOMAXPROCS(0) })
	if during != 1 {
		t.Errorf("GOMAXPROCS during the runs = %d, want 1", during)
	}
	if after := runtime.GOMAXPROCS(0); after != before {
		t.Errorf("GOMAXPROCS after Count = %d, want %d as before", after, before)
	}
}
