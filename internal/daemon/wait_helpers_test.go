package daemon_test

import (
	"testing"
	"time"
)

// waitDeadline bounds a wait for a test's goroutine or a child process
// to finish, beyond any run length the test sets itself (a tcpreplay's
// packets at its rate): generous for a loaded 2-core CI machine, short
// of go test's 10-minute timeout.
const waitDeadline = 30 * time.Second

// recvWithin receives from ch, failing the test if nothing comes within d;
// what names what the test waited for ("warpflowd to exit after
// SIGKILL").
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

// replayWithin is how long tcpreplay may take to send n packets at pps:
// the run's own length plus waitDeadline.
func replayWithin(n, pps int) time.Duration {
	return time.Duration(n)*time.Second/time.Duration(pps) + waitDeadline
}
