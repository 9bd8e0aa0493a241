package control_test

import (
	"os/exec"
	"testing"
	"time"
)

// waitDeadline bounds a wait for a child process to exit after it was
// killed: generous for a loaded 2-core CI machine, short of go test's
// 10-minute timeout.
const waitDeadline = 30 * time.Second

// recvWithin receives from ch, failing the test if nothing comes within d;
// what names what the test waited for ("the listener to exit after
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

// killWithin kills a started cmd and waits for its Wait to return,
// failing the test if it has not within d. On failure the goroutine in
// Wait stays behind until the process is gone.
func killWithin(t testing.TB, cmd *exec.Cmd, what string, d time.Duration) {
	t.Helper()
	cmd.Process.Kill()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	recvWithin(t, exited, what+" to exit after SIGKILL", d)
}
