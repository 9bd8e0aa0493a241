package capset

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// names are the capabilities by bit number (linux/capability.h, up to
// CAP_CHECKPOINT_RESTORE, Linux 5.9).
var names = [...]string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
	"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT",
	"CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
	"CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL",
	"CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
	"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// Set is a capability bit set.
type Set uint64

// Bit returns the bit number of a capability name ("CAP_BPF" or "BPF",
// any case).
func Bit(name string) (int, error) {
	n := strings.ToUpper(name)
	if !strings.HasPrefix(n, "CAP_") {
		n = "CAP_" + n
	}
	for i, c := range names {
		if c == n {
			return i, nil
		}
	}
	return -1, fmt.Errorf("unknown capability %q", name)
}

// Of is the set of the named capabilities.
func Of(list ...string) (Set, error) {
	var s Set
	for _, c := range list {
		b, err := Bit(c)
		if err != nil {
			return 0, err
		}
		s |= 1 << b
	}
	return s, nil
}

// Has reports whether s holds every capability in t.
func (s Set) Has(t Set) bool { return s&t == t }

// Names are the set's capabilities in bit order; a bit without a name
// (a kernel newer than this table) is "cap_N".
func (s Set) Names() []string {
	var out []string
	for i := range 64 {
		if s&(1<<i) == 0 {
			continue
		}
		if i < len(names) {
			out = append(out, names[i])
		} else {
			out = append(out, "cap_"+strconv.Itoa(i))
		}
	}
	return out
}

func (s Set) String() string { return strings.Join(s.Names(), " ") }

// Sets are one process's capability sets.
type Sets struct {
	Effective, Permitted, Inheritable, Bounding, Ambient Set
	// UID is the process's effective user ID.
	UID int
}

// Read reads process pid's sets from /proc/PID/status (pid 0: this
// process).
func Read(pid int) (Sets, error) {
	path := "/proc/self/status"
	if pid > 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	f, err := os.Open(path)
	if err != nil {
		return Sets{}, fmt.Errorf("capabilities: %w", err)
	}
	defer f.Close()
	var s Sets
	seen := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		var dst *Set
		switch key {
		case "CapEff":
			dst = &s.Effective
		case "CapPrm":
			dst = &s.Permitted
		case "CapInh":
			dst = &s.Inheritable
		case "CapBnd":
			dst = &s.Bounding
		case "CapAmb":
			dst = &s.Ambient
		case "Uid":
			if f := strings.Fields(value); len(f) >= 2 {
				s.UID, _ = strconv.Atoi(f[1])
			}
			continue
		default:
			continue
		}
		v, err := strconv.ParseUint(value, 16, 64)
		if err != nil {
			return Sets{}, fmt.Errorf("capabilities: %s: %s %q: %w", path, key, value, err)
		}
		*dst = Set(v)
		seen++
	}
	if err := sc.Err(); err != nil {
		return Sets{}, fmt.Errorf("capabilities: %s: %w", path, err)
	}
	if seen < 4 {
		return Sets{}, fmt.Errorf("capabilities: %s has no Cap* lines", path)
	}
	return s, nil
}
