package livebench

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// pinProcess binds every thread of this process to cpu. Threads made later
// inherit the mask of the thread that makes them, so the whole process,
// and the children it starts, stay on cpu unless they pin themselves.
func pinProcess(cpu int) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("list threads: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := pinTask(tid, cpu); err != nil && err != unix.ESRCH {
			return err
		}
	}
	return nil
}

// pinTask binds one thread (or a kernel thread) to cpu.
func pinTask(tid, cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(tid, &set); err != nil {
		return fmt.Errorf("pin task %d to cpu %d: %w", tid, cpu, err)
	}
	return nil
}

// taskCPUs returns the CPUs a task may run on.
func taskCPUs(tid int) ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(tid, &set); err != nil {
		return nil, fmt.Errorf("affinity of task %d: %w", tid, err)
	}
	var cpus []int
	for c := range 1024 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// napiThreads lists the threaded-NAPI kernel threads of interfaces named
// iface (napi/IFACE-ID). Kernel threads live in no network namespace, so
// another lab's dp0 shows here too: callers compare lists taken before and
// after their own program attached.
func napiThreads(iface string) (map[int]string, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	prefix := "napi/" + iface + "-"
	out := map[int]string{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err != nil {
			continue // gone
		}
		comm := strings.TrimSpace(string(b))
		if strings.HasPrefix(comm, prefix) {
			out[pid] = comm
		}
	}
	return out, nil
}
