package doctor

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/warpflow/warpflow/internal/capset"
	"github.com/warpflow/warpflow/xdp"
	"golang.org/x/sys/unix"
)

// kernelVersion is the running kernel's major and minor version.
func kernelVersion() (release string, major, minor int) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown", 0, 0
	}
	release = unix.ByteSliceToString(u.Release[:])
	parts := strings.SplitN(release, ".", 3)
	if len(parts) >= 2 {
		major, _ = strconv.Atoi(parts[0])
		minor, _ = strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	}
	return release, major, minor
}

func atLeast(major, minor, wantMajor, wantMinor int) bool {
	return major > wantMajor || major == wantMajor && minor >= wantMinor
}

// system is the findings about the kernel and this process.
func system() []Finding {
	var out []Finding
	add := func(check string, l Level, msg, fix string) {
		out = append(out, Finding{Check: check, Level: l, Message: msg, Fix: fix})
	}
	rel, maj, min := kernelVersion()
	if atLeast(maj, min, 5, 10) {
		add("kernel", OK, "Linux "+rel, "")
	} else {
		add("kernel", Fail, "Linux "+rel+": warpflowd needs 5.10 or later (AF_XDP with XDP through bpf_link and shared UMEM across queues)", "run a newer kernel")
	}
	if err := xdp.Probe(); err != nil {
		fix := "a kernel with CONFIG_XDP_SOCKETS and CONFIG_BPF_SYSCALL"
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			fix = "run as root or with " + strings.Join(Required, ", ")
		}
		add("af_xdp", Fail, err.Error(), fix)
	} else {
		add("af_xdp", OK, "AF_XDP sockets, XDP programs and XSKMAP: present", "")
	}
	if atLeast(maj, min, 5, 9) {
		add("bpf_link", OK, "XDP through bpf_link (Linux >= 5.9): a daemon that crashes leaves no program attached", "")
	} else {
		add("bpf_link", Fail, "no XDP bpf_link before Linux 5.9: warpflowd attaches only through one", "run Linux 5.10 or later")
	}
	if atLeast(maj, min, 5, 10) {
		add("shared_umem", OK, "XDP_SHARED_UMEM across queues and devices with their own fill and completion rings (Linux >= 5.10): umem.shared works", "")
	} else {
		add("shared_umem", Warn, "XDP_SHARED_UMEM across queues needs Linux 5.10: keep umem.shared false", "")
	}
	out = append(out, busyPoll())
	if atLeast(maj, min, 6, 6) {
		add("multi_buffer", OK, "AF_XDP multi-buffer exists in this kernel (6.6+); warpflowd does not use it: a frame holds one whole packet", "")
	} else {
		add("multi_buffer", OK, "no AF_XDP multi-buffer before Linux 6.6; warpflowd does not use it: a frame holds one whole packet", "")
	}
	out = append(out, capabilities())
	return out
}

// busyPoll tries SO_PREFER_BUSY_POLL (Linux >= 5.11) on a socket and
// reports the busy-poll sysctls of this namespace.
func busyPoll() Finding {
	f := Finding{Check: "busy_poll"}
	sysctl := func(name string) string {
		b, err := os.ReadFile("/proc/sys/net/core/" + name)
		if errors.Is(err, os.ErrNotExist) {
			return "(global: shown only in the initial network namespace)"
		}
		if err != nil {
			return "unreadable: " + err.Error()
		}
		return strings.TrimSpace(string(b))
	}
	settings := fmt.Sprintf("net.core.busy_poll=%s, net.core.busy_read=%s", sysctl("busy_poll"), sysctl("busy_read"))
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		f.Level, f.Message = Warn, "preferred busy poll not tried: "+err.Error()+"; "+settings
		return f
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PREFER_BUSY_POLL, 1); err != nil {
		f.Level = Warn
		f.Message = "SO_PREFER_BUSY_POLL refused (" + err.Error() + "): this kernel (< 5.11?) has no preferred busy polling, so busy_poll.prefer cannot be used; " + settings
		f.Fix = "keep busy_poll.prefer false, or run Linux 5.11 or later"
		return f
	}
	f.Level, f.Message = OK, "preferred busy polling (SO_PREFER_BUSY_POLL): accepted; "+settings
	return f
}

// capabilities compares what this process holds with Required.
func capabilities() Finding {
	f := Finding{Check: "capabilities"}
	s, err := capset.Read(0)
	if err != nil {
		f.Level, f.Message = Warn, err.Error()
		return f
	}
	need, err := capset.Of(Required...)
	if err != nil {
		f.Level, f.Message = Fail, err.Error()
		return f
	}
	if s.Effective.Has(need) {
		f.Level = OK
		f.Message = fmt.Sprintf("uid %d holds what warpflowd needs (%s)", s.UID, need)
		return f
	}
	missing := need &^ s.Effective
	f.Level = Fail
	f.Message = fmt.Sprintf("uid %d lacks %s of what warpflowd needs (%s): this process could not run the dataplane, and the binds below were refused or not tried", s.UID, missing, need)
	f.Fix = "run as root, or with the systemd unit's capabilities (cmd/warpflowd/warpflowd.service)"
	return f
}
