package workers

import (
	"runtime"

	"github.com/warpflow/warpflow/internal/cpuaffinity"
)

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
	return cpuaffinity.PinThread(cpu)
}

// validCPUs checks Options.CPUs up front, naming the bad value: pinning
// must be supported here and every number in cpuaffinity's range.
// Whether the process may run on them is the kernel's call: pinning
// reports EINVAL from the worker, and NewPool fails naming the CPU.
func validCPUs(cpus []int) error {
	if !cpuaffinity.Supported {
		return badOption("cpus %v: pinning is not supported on %s", cpus, runtime.GOOS)
	}
	for i, c := range cpus {
		if cpuaffinity.CheckCPU(c) != nil {
			return badOption("cpus[%d] %d: must be in [0, %d)", i, c, cpuaffinity.MaxCPU)
		}
	}
	return nil
}
