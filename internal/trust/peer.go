package trust

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Cred is a unix socket peer's credentials as the kernel recorded them
// when it connected.
type Cred struct {
	UID, GID, PID int
	// Groups are the peer's supplementary groups.
	Groups []int
	// GroupsFrom says where Groups came from: "SO_PEERGROUPS" (the
	// kernel's record at connect time), "/proc" (the fallback on kernels
	// before 4.13) or "" when they could not be read (then only GID
	// counts).
	GroupsFrom string
}

// InGroup reports whether gid is the peer's primary group or one of its
// supplementary groups.
func (c Cred) InGroup(gid int) bool {
	if c.GID == gid {
		return true
	}
	for _, g := range c.Groups {
		if g == gid {
			return true
		}
	}
	return false
}

// maxGroups bounds the groups read (the kernel's NGROUPS_MAX).
const maxGroups = 65536

// PeerCred reads the credentials of the peer of the connected unix socket
// fd: SO_PEERCRED, then SO_PEERGROUPS, or /proc/PID/status where the
// kernel lacks it.
func PeerCred(fd int) (Cred, error) {
	uc, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return Cred{UID: -1, GID: -1, PID: -1}, fmt.Errorf("SO_PEERCRED: %w", err)
	}
	c := Cred{UID: int(uc.Uid), GID: int(uc.Gid), PID: int(uc.Pid)}
	groups, err := peerGroups(fd)
	switch {
	case err == nil:
		c.Groups, c.GroupsFrom = groups, "SO_PEERGROUPS"
	case errors.Is(err, unix.ENOPROTOOPT):
		if g, err := procGroups(c.PID, c.UID); err == nil {
			c.Groups, c.GroupsFrom = g, "/proc"
		}
	default:
		return c, fmt.Errorf("SO_PEERGROUPS: %w", err)
	}
	return c, nil
}

// peerGroups reads SO_PEERGROUPS: an array of gid_t. The kernel answers
// ERANGE with the length it needs when the buffer is short.
func peerGroups(fd int) ([]int, error) {
	buf := make([]uint32, 32)
	for range 2 {
		n := uint32(len(buf) * 4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		if e == unix.ERANGE && n/4 > uint32(len(buf)) && n/4 <= maxGroups {
			buf = make([]uint32, n/4)
			continue
		}
		if e != 0 {
			return nil, e
		}
		out := make([]int, n/4)
		for i := range out {
			out[i] = int(buf[i])
		}
		return out, nil
	}
	return nil, unix.ERANGE
}

// procGroups reads a process's groups from /proc/PID/status, and only if
// the process's effective uid is still uid: a pid reused by another
// user's process is refused (one of the same user is the race left).
func procGroups(pid, uid int) ([]int, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil, err
	}
	var groups []int
	uidOK := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		switch k {
		case "Uid":
			uidOK = len(f) >= 2 && f[1] == strconv.Itoa(uid)
		case "Groups":
			for _, s := range f {
				g, err := strconv.Atoi(s)
				if err != nil {
					return nil, fmt.Errorf("/proc/%d/status: group %q", pid, clip(s))
				}
				groups = append(groups, g)
			}
		}
	}
	if !uidOK {
		return nil, fmt.Errorf("/proc/%d: not the peer's process any more", pid)
	}
	return groups, nil
}
