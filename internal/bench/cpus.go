package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/warpflow/warpflow/internal/cpuaffinity"
)

// ParseCPUList parses a Linux CPU list ("0-3,8,10-11", the format of
// /proc/self/status Cpus_allowed_list and of taskset -c) into CPU numbers
// in the order written. Empty input is an empty list; a repeated CPU, a
// reversed range or a negative number is an error naming it.
func ParseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var cpus []int
	seen := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("cpu list %q: bad cpu %q", s, part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
			}
		}
		for c := a; c <= b; c++ {
			if seen[c] {
				return nil, fmt.Errorf("cpu list %q: cpu %d given twice", s, c)
			}
			seen[c] = true
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// allowedCPUs is the process's CPU affinity set (its main thread's, the
// set /proc/self/status calls Cpus_allowed_list); nil where that cannot be
// read (not Linux).
func allowedCPUs() []int {
	cpus, err := cpuaffinity.TaskCPUs(os.Getpid())
	if err != nil {
		return nil
	}
	return cpus
}

// physicalFirst orders cpus so that one hardware thread of every physical
// core comes before any core's second thread (SMT siblings), keeping the
// numeric order within each round: the first N workers of a scaling run
// then get N cores of their own while there are cores. Topology is read
// from sysfs (root is the directory holding cpuN/topology); a CPU whose
// topology cannot be read counts as a core of its own.
func physicalFirst(cpus []int, root string) []int {
	type key struct{ pkg, core string }
	rank := map[int]int{} // cpu -> its index among its core's threads
	seen := map[key]int{}
	for _, c := range cpus {
		topo := filepath.Join(root, fmt.Sprintf("cpu%d", c), "topology")
		pkg, err1 := os.ReadFile(filepath.Join(topo, "physical_package_id"))
		core, err2 := os.ReadFile(filepath.Join(topo, "core_id"))
		if err1 != nil || err2 != nil {
			continue
		}
		k := key{strings.TrimSpace(string(pkg)), strings.TrimSpace(string(core))}
		rank[c] = seen[k]
		seen[k]++
	}
	out := append([]int(nil), cpus...)
	sort.SliceStable(out, func(i, j int) bool { return rank[out[i]] < rank[out[j]] })
	return out
}

// defaultScalingCPUs returns the I/O loop's CPU and the workers' (and
// engines') CPUs: the first allowed CPU for the I/O loop, the rest for the
// workers, one thread per physical core first. With fewer than two allowed
// CPUs nothing is pinned (-1, nil).
func defaultScalingCPUs() (io int, cpus []int) {
	allowed := allowedCPUs()
	if len(allowed) < 2 {
		return -1, nil
	}
	return allowed[0], physicalFirst(allowed[1:], "/sys/devices/system/cpu")
}

// FormatCPUList writes cpus as a CPU list, ranges collapsed ("1-4,9").
func FormatCPUList(cpus []int) string {
	var sb strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if sb.Len() > 0 {
			sb.WriteByte(',')
		}
		if j > i {
			fmt.Fprintf(&sb, "%d-%d", cpus[i], cpus[j])
		} else {
			fmt.Fprintf(&sb, "%d", cpus[i])
		}
		i = j + 1
	}
	return sb.String()
}
