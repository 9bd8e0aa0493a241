package xdp

import (
	"os/exec"
	"sync"
	"testing"
	"time"
)

// waitDeadline bounds a wait for a test's goroutine, or a child process,
// to finish: generous for a loaded 2-core CI machine under -race, short
// of go test's 10-minute timeout.
const waitDeadline = 30 * time.Second

// recvWithin receives from ch, failing the test if nothing comes within d;
// what names what the test waited for ("the fake kernel to read every
// value").
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

// waitGroupWithin waits for wg, failing the test if it is not done within
// d. On failure the goroutine that waits on wg stays behind until wg is
// done.
func waitGroupWithin(t testing.TB, wg *sync.WaitGroup, what string, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	recvWithin(t, done, what, d)
}

// waitInBackground calls cmd.Wait (once) in a goroutine of its own and
// returns a channel closed when it has returned, so that every wait for
// the process's end, the test's and its cleanup's, can go through
// recvWithin. cmd must have been started.
func waitInBackground(cmd *exec.Cmd) <-chan struct{} {
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	return exited
}
