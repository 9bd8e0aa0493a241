package lab

import (
	"testing"
	"time"
)

// waitDeadline bounds a wait for a child process to finish: generous for
// a loaded 2-core CI machine, short of go test's 10-minute timeout.
const waitDeadline = 30 * time.Second

// recvWithin receives from ch, failing the test if nothing comes within d;
// what names what the test waited for ("cat /proc/net/dev to exit").
func recvWithin[T any](t testing.TB, ch <-chan T, what string, d time.Duration) T {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("gave up after %v waiting for %s", d, what)
	}
	var zero T // not reached: Fatalf ends the test's goroutine
	return zero
}
