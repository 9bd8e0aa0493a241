package workers

import "runtime"

// PinCurrentGoroutine locks the calling goroutine to its OS thread and binds
// that thread to one CPU, for code that runs a pipeline inline (no pool) on
// a chosen core, such as a benchmark. It never unlocks: call it from a
// goroutine of its own, and when that goroutine exits the runtime destroys
// the pinned thread instead of reusing it for other goroutines. Where
// pinning is not supported (anything but Linux) it returns an
// ErrInvalidOptions error without locking.
func PinCurrentGoroutine(cpu int) error {
	if err := validCPUs([]int{cpu}); err != nil {
		return err
	}
	runtime.LockOSThread()
	return pinThread(cpu)
}
