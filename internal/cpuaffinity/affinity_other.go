//go:build !linux

package cpuaffinity

import "fmt"

// Supported reports whether this system can pin threads.
const Supported = false

// PinThread returns an error wrapping ErrNotSupported.
func PinThread(cpu int) error { return fmt.Errorf("pin to cpu %d: %w", cpu, ErrNotSupported) }

// PinTask returns an error wrapping ErrNotSupported.
func PinTask(tid, cpu int) error {
	return fmt.Errorf("pin task %d to cpu %d: %w", tid, cpu, ErrNotSupported)
}

// PinProcess returns an error wrapping ErrNotSupported.
func PinProcess(pid, cpu int) error {
	return fmt.Errorf("pin process %d to cpu %d: %w", pid, cpu, ErrNotSupported)
}

// ThreadCPUs returns an error wrapping ErrNotSupported.
func ThreadCPUs() ([]int, error) {
	return nil, fmt.Errorf("affinity of this thread: %w", ErrNotSupported)
}

// TaskCPUs returns an error wrapping ErrNotSupported.
func TaskCPUs(tid int) ([]int, error) {
	return nil, fmt.Errorf("affinity of task %d: %w", tid, ErrNotSupported)
}
