package allocs

import "runtime"

// Count calls f once to warm it up, then runs more times, and returns
// the exact number of heap allocations (runtime.MemStats.Mallocs) made
// during those runs: the total, not an average. It measures as
// testing.AllocsPerRun does, with GOMAXPROCS set to 1 and restored after,
// and like it counts every goroutine's mallocs, not only f's. Unlike
// AllocsPerRun, whose integer average (mallocs / runs) reads a rare
// allocation as 0, a single allocation in all the runs counts as 1.
func Count(runs int, f func()) uint64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f() // warm up, as AllocsPerRun does: first-call setup is not counted
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	before := m.Mallocs
	for range runs {
		f()
	}
	runtime.ReadMemStats(&m)
	return m.Mallocs - before
}
