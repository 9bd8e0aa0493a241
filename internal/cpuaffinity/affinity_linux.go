package cpuaffinity

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Supported reports whether this system can pin threads.
const Supported = true

// mask is a cpu_set_t of MaxCPU bits. x/sys/unix's CPUSet holds only
// 1024, too few to name every CPU in range, so the calls below pass this
// one to the raw system calls. Neither call blocks, hence RawSyscall; the
// pointer is converted to uintptr in the call's own argument list, the
// one place unsafe's rules let that conversion keep the mask alive.
type mask [MaxCPU / 64]uint64

func (m *mask) set(cpu int)        { m[cpu/64] |= 1 << (cpu % 64) }
func (m *mask) isSet(cpu int) bool { return m[cpu/64]&(1<<(cpu%64)) != 0 }
func (m *mask) cpus() []int {
	var cpus []int
	for c := range MaxCPU {
		if m.isSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

// setTask binds task tid (0: the calling thread) to cpu.
func setTask(tid, cpu int) error {
	if err := CheckCPU(cpu); err != nil {
		return err
	}
	var m mask
	m.set(cpu)
	if _, _, errno := unix.RawSyscall(unix.SYS_SCHED_SETAFFINITY, uintptr(tid), unsafe.Sizeof(m), uintptr(unsafe.Pointer(&m))); errno != 0 {
		return errno
	}
	return nil
}

// PinThread binds the calling OS thread to cpu. The caller must hold
// runtime.LockOSThread and keep it (see the package doc).
func PinThread(cpu int) error {
	if err := setTask(0, cpu); err != nil {
		return pinError("pin to cpu %d", err, cpu)
	}
	return nil
}

// PinTask binds the thread whose id is tid (a TID, as listed in
// /proc/PID/task; for a single-threaded process, its PID) to cpu.
func PinTask(tid, cpu int) error {
	if err := setTask(tid, cpu); err != nil {
		return pinError("pin task %d to cpu %d", err, tid, cpu)
	}
	return nil
}

// pinError words a failed pin: the range error as it is (it names the
// CPU), the kernel's errno with the call that returned it.
func pinError(format string, err error, args ...any) error {
	ctx := fmt.Sprintf(format, args...)
	if errors.Is(err, ErrCPURange) {
		return fmt.Errorf("%s: %w", ctx, ErrCPURange)
	}
	return fmt.Errorf("%s: sched_setaffinity: %w", ctx, err)
}

// maxPasses bounds PinProcess's passes over a process's threads.
const maxPasses = 8

// PinProcess binds every thread of process pid (0: this process) to cpu;
// threads made later inherit it (see the package doc). A thread that
// exits while being pinned is skipped.
func PinProcess(pid, cpu int) error {
	if err := CheckCPU(cpu); err != nil {
		return fmt.Errorf("pin process %d to cpu %d: %w", pid, cpu, ErrCPURange)
	}
	dir := "/proc/self/task"
	if pid != 0 {
		dir = "/proc/" + strconv.Itoa(pid) + "/task"
	}
	pinned := map[int]bool{}
	for range maxPasses {
		tasks, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("list threads of process %d: %w", pid, err)
		}
		fresh := 0
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil || pinned[tid] {
				continue
			}
			if err := PinTask(tid, cpu); err != nil && !errors.Is(err, unix.ESRCH) {
				return err
			}
			pinned[tid] = true
			fresh++
		}
		if fresh == 0 {
			return nil
		}
	}
	return fmt.Errorf("pin process %d to cpu %d: new threads still appearing after %d passes", pid, cpu, maxPasses)
}

// ThreadCPUs returns the CPUs the calling OS thread may run on, in
// ascending order. Meaningful only while the goroutine holds
// runtime.LockOSThread: otherwise the answer is about whichever thread
// ran the call.
func ThreadCPUs() ([]int, error) {
	cpus, err := getTask(0)
	if err != nil {
		return nil, fmt.Errorf("affinity of this thread: sched_getaffinity: %w", err)
	}
	return cpus, nil
}

// TaskCPUs returns the CPUs thread tid may run on, in ascending order.
// For a process's own PID that is its main thread's set, which is what
// /proc/PID/status calls Cpus_allowed_list.
func TaskCPUs(tid int) ([]int, error) {
	cpus, err := getTask(tid)
	if err != nil {
		return nil, fmt.Errorf("affinity of task %d: sched_getaffinity: %w", tid, err)
	}
	return cpus, nil
}

func getTask(tid int) ([]int, error) {
	var m mask
	if _, _, errno := unix.RawSyscall(unix.SYS_SCHED_GETAFFINITY, uintptr(tid), unsafe.Sizeof(m), uintptr(unsafe.Pointer(&m))); errno != 0 {
		return nil, errno
	}
	return m.cpus(), nil
}
