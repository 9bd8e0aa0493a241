// Package allocs counts a function's heap allocations exactly, for the
// tests' zero-allocation checks.
//
// testing.AllocsPerRun returns the average number of allocations per run,
// but it divides the malloc count by the runs in integers before it
// converts to float64: an allocation rarer than one a run (2 in 200 runs,
// a slice that grows every thousandth call, a cache miss now and then)
// reads as 0 and passes every "== 0" check. One such hid in the pipeline
// runner's Publish (a per-call interface type assertion that allocated on
// a random cache miss). Count returns the total number of allocations
// over the runs instead, so "want 0" means not one.
//
// Tests only: nothing outside a _test.go file imports it.
package allocs
