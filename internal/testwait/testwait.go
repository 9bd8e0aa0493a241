package testwait

import (
	"os/exec"
	"sync"
	"testing"
	"time"
)

// Deadline bounds a wait for a test's goroutine or child process to
// finish beyond any run length the test sets itself: generous for a loaded
// 2-core CI machine under -race, short of go test's 10-minute timeout.
const Deadline = 30 * time.Second

// Recv receives from ch, failing the test if nothing comes within d; what
// names what the test waited for ("RunContext to return after cancel").
func Recv[T any](t testing.TB, ch <-chan T, what string, d time.Duration) T {
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

// Group waits for wg, failing the test if it is not done within d. On
// failure the goroutine that waits on wg stays behind until wg is done.
func Group(t testing.TB, wg *sync.WaitGroup, what string, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	Recv(t, done, what, d)
}

// Exited calls cmd.Wait (once) in a goroutine of its own and returns a
// channel closed when it has returned, so that every wait for the
// process's end (the test's and its cleanup's) can go through Recv. cmd
// must have been started.
func Exited(cmd *exec.Cmd) <-chan struct{} {
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	return exited
}

// Kill kills a started cmd and waits for its Wait to return, failing the
// test if it has not within d ("what to exit after SIGKILL"). On failure
// the goroutine in Wait stays behind until the process is gone.
func Kill(t testing.TB, cmd *exec.Cmd, what string, d time.Duration) {
	t.Helper()
	cmd.Process.Kill()
	Recv(t, Exited(cmd), what+" to exit after SIGKILL", d)
}
