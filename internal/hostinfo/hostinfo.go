package hostinfo

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strings"
)

// CPU returns the CPU model and the number of CPUs the OS reports, such
// as "AMD EPYC, 2 CPUs (virtual machine)"; where /proc/cpuinfo has no model
// name (not Linux, or an architecture that does not print one) the
// architecture stands in for it.
func CPU() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return fmt.Sprintf("%s, %d CPUs", runtime.GOARCH, runtime.NumCPU())
	}
	return parse(b, runtime.GOARCH, runtime.NumCPU())
}

// parse is CPU's reading of a /proc/cpuinfo text.
func parse(cpuinfo []byte, arch string, ncpu int) string {
	model, guest := "", false
	sc := bufio.NewScanner(bytes.NewReader(cpuinfo))
	sc.Buffer(make([]byte, 0, 4096), 1<<20) // the flags line is long
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(key) {
		case "model name":
			if model == "" {
				model = strings.Join(strings.Fields(val), " ")
			}
		case "flags":
			guest = guest || strings.Contains(" "+val+" ", " hypervisor ")
		}
	}
	if model == "" {
		model = arch
	}
	s := fmt.Sprintf("%s, %d CPUs", model, ncpu)
	if guest {
		s += " (virtual machine)"
	}
	return s
}
