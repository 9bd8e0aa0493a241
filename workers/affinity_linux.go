package workers

import (
	"fmt"
	"syscall"
	"unsafe"
)

// CPU affinity through sched_setaffinity(2) on the calling thread.
// The standard syscall package is enough here, so the module needs no
// golang.org/x/sys; this file is the package's only use of unsafe.

// cpuMask is a cpu_set_t. Sized for 4096 CPUs, beyond any kernel's default
// nr_cpu_ids we are likely to meet; the kernel rejects a too-small mask with
// EINVAL, which we report.
type cpuMask [maxCPU / 64]uint64

const maxCPU = 4096

func (m *cpuMask) set(cpu int) { m[cpu/64] |= 1 << (cpu % 64) }

// validCPUs checks the CPU numbers' range. Whether the process may run on
// them is the kernel's call: pinning reports EINVAL from the worker, and
// NewPool fails naming the CPU.
func validCPUs(cpus []int) error {
	for i, c := range cpus {
		if c < 0 || c >= maxCPU {
			return badOption("cpus[%d] %d: must be in [0, %d)", i, c, maxCPU)
		}
	}
	return nil
}

// pinThread binds the calling OS thread (the caller must hold
// runtime.LockOSThread) to one CPU.
func pinThread(cpu int) error {
	var m cpuMask
	m.set(cpu) // validCPUs checked the range
	_, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(m), uintptr(unsafe.Pointer(&m)))
	if errno != 0 {
		return fmt.Errorf("pin to cpu %d: sched_setaffinity: %w", cpu, errno)
	}
	return nil
}
