package cpuaffinity

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestCheckCPU(t *testing.T) {
	for _, c := range []struct {
		cpu  int
		want string // "" for nil
	}{
		{0, ""},
		{MaxCPU - 1, ""},
		{-1, "cpu -1: cpu number outside [0, 4096)"},
		{MaxCPU, "cpu 4096: cpu number outside [0, 4096)"},
		{1 << 40, "cpu 1099511627776: cpu number outside [0, 4096)"},
	} {
		err := CheckCPU(c.cpu)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("CheckCPU(%d) = %v, want nil", c.cpu, err)
		case c.want != "" && (err == nil || err.Error() != c.want || !errors.Is(err, ErrCPURange)):
			t.Errorf("CheckCPU(%d) = %v, want %q wrapping ErrCPURange", c.cpu, err, c.want)
		}
	}
}

// TestOutOfRangeNamesCPU: every entry point refuses an out-of-range CPU
// before any system call, naming it, on every system.
func TestOutOfRangeNamesCPU(t *testing.T) {
	for name, pin := range map[string]func(int) error{
		"PinThread":  PinThread,
		"PinTask":    func(cpu int) error { return PinTask(1<<30, cpu) }, // no such task: the range is checked first
		"PinProcess": func(cpu int) error { return PinProcess(1<<30, cpu) },
	} {
		for _, cpu := range []int{-1, MaxCPU} {
			err := pin(cpu)
			if !Supported {
				if !errors.Is(err, ErrNotSupported) {
					t.Errorf("%s(%d) = %v, want ErrNotSupported", name, cpu, err)
				}
				continue
			}
			if !errors.Is(err, ErrCPURange) || !strings.Contains(err.Error(), "cpu "+strconv.Itoa(cpu)+":") {
				t.Errorf("%s(%d) = %v, want ErrCPURange naming the cpu", name, cpu, err)
			}
		}
	}
}
