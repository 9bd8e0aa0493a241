package cpuaffinity

import (
	"errors"
	"fmt"
	"runtime"
)

// MaxCPU is one more than the largest CPU number this package can name:
// the size, in bits, of the mask it hands the kernel.
const MaxCPU = 4096

// ErrCPURange is wrapped by every error for a CPU number outside
// [0, MaxCPU).
var ErrCPURange = fmt.Errorf("cpu number outside [0, %d)", MaxCPU)

// ErrNotSupported is wrapped by every error from a system without
// sched_setaffinity (anything but Linux).
var ErrNotSupported = errors.New("cpu affinity is not supported on " + runtime.GOOS)

// CheckCPU reports whether cpu is a number this package can pin to:
// nil, or an error naming cpu that wraps ErrCPURange. Whether the kernel
// grants it is known only when pinning.
func CheckCPU(cpu int) error {
	if cpu < 0 || cpu >= MaxCPU {
		return fmt.Errorf("cpu %d: %w", cpu, ErrCPURange)
	}
	return nil
}
