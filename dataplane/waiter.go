package dataplane

import "time"

// Waiter is an optional interface of an input Port that can wait for
// packets: a live port gives its CPU to the kernel (which may need that
// very CPU to deliver the frames) instead of the engine spinning on an
// empty ring or calling runtime.Gosched, which does not give up the OS
// thread.
//
// The I/O loop calls Wait after a turn that received nothing and completed
// nothing, when no worker batch is in flight (with one, the loop keeps its
// own backoff so that it sees the batch finish). Wait returns when the port
// may have packets, when it decides to spin instead of sleeping, or after
// timeout at the latest, so the loop still notices a stop within timeout.
// It is called by the I/O loop only and must not allocate.
type Waiter interface {
	Wait(timeout time.Duration)
}

// waitTimeout bounds one Wait: how late the I/O loop may see a stop or a
// Completer's frames when the input stays idle.
const waitTimeout = time.Millisecond

// idleWait is the I/O loop's wait after idle turns with nothing to do: the
// input's Wait when it has one and nothing is in flight, else ioBackoff.
func (e *Engine) idleWait(idle int, inFlight bool) {
	if e.waiter != nil && !inFlight {
		e.waiter.Wait(waitTimeout)
		return
	}
	ioBackoff(idle)
}
