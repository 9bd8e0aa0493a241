package dataplane

import (
	"testing"
	"time"
)

// TestMonoClockMS: the engine's clock reads Unix milliseconds from the
// wall time it started at and moves with the monotonic clock. A step of
// the wall clock cannot be made in a test (it is the machine's); what
// this holds is the arithmetic and that the reading comes from
// time.Since (monotonic where start has a monotonic reading, as
// time.Now's does), not from the wall clock read again.
func TestMonoClockMS(t *testing.T) {
	start := time.Now()
	c := monoClockMS(start)
	if d := int64(c()) - start.UnixMilli(); d < 0 || d > 1000 {
		t.Fatalf("the clock reads %d ms from its start, want 0 to 1000", d)
	}
	a := c()
	time.Sleep(30 * time.Millisecond)
	if b := c(); b < a+30 || b > a+5000 {
		t.Fatalf("30 ms of sleep moved the clock %d ms", int64(b)-int64(a))
	}
	// A start an hour ago (its monotonic reading too): the clock reads
	// now, as the wall clock does when nothing stepped it.
	c = monoClockMS(time.Now().Add(-time.Hour))
	if d := int64(c()) - time.Now().UnixMilli(); d < -1000 || d > 1000 {
		t.Fatalf("a clock started an hour ago is %d ms off the wall clock", d)
	}
}
