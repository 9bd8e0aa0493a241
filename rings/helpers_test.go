package rings

import (
	"runtime"
	"testing"
	"time"
)

// checkNoLeak fails the test if it ends with more goroutines than it began
// with. Tests that use it must not run in parallel.
func checkNoLeak(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				t.Errorf("goroutine leak: %d before, %d after\n%s", before, n, buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// backoff is the stress tests' idle strategy: spin a little, then yield
// the P, then sleep. Sleeping matters on a loaded machine: Gosched keeps the
// OS thread on its core, while the peer goroutine's thread may be waiting
// in the OS run queue for exactly that core.
type backoff int

func (b *backoff) wait() {
	*b++
	switch {
	case *b <= 16:
	case *b <= 64:
		runtime.Gosched()
	default:
		time.Sleep(time.Microsecond)
	}
}

func (b *backoff) reset() { *b = 0 }
