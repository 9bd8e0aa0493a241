package xdp

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Capability is a Linux capability (a unix.CAP_* number). The package's
// operations each need a few; when the kernel refuses one with EPERM or
// EACCES the error says which of those the process lacks, read from its
// effective set at that moment, instead of listing every capability the
// dataplane could need (which sent people to look for ones they had).
type Capability uint

// The capabilities the package's operations need.
const (
	CapNetAdmin Capability = unix.CAP_NET_ADMIN // load and attach XDP programs, XSKMAP, raise busy-poll settings
	CapNetRaw   Capability = unix.CAP_NET_RAW   // create AF_XDP sockets
	CapBPF      Capability = unix.CAP_BPF       // load BPF programs and maps (CAP_SYS_ADMIN before Linux 5.8)
	CapIPCLock  Capability = unix.CAP_IPC_LOCK  // pin a UMEM beyond RLIMIT_MEMLOCK
	CapSysAdmin Capability = unix.CAP_SYS_ADMIN
)

var capNames = map[Capability]string{
	CapNetAdmin: "CAP_NET_ADMIN", CapNetRaw: "CAP_NET_RAW", CapBPF: "CAP_BPF",
	CapIPCLock: "CAP_IPC_LOCK", CapSysAdmin: "CAP_SYS_ADMIN",
}

func (c Capability) String() string {
	if n, ok := capNames[c]; ok {
		return n
	}
	return fmt.Sprintf("capability %d", uint(c))
}

// CapSet is a list of capabilities; it prints as "CAP_A, CAP_B and CAP_C".
type CapSet []Capability

func (s CapSet) String() string {
	n := make([]string, len(s))
	for i, c := range s {
		n[i] = c.String()
	}
	if len(n) <= 1 {
		return strings.Join(n, "")
	}
	return strings.Join(n[:len(n)-1], ", ") + " and " + n[len(n)-1]
}

// DataplaneCapabilities returns every capability a dataplane built on
// this package needs (a new slice each call), which is what warpflowd's
// systemd unit grants. CAP_IPC_LOCK is needed only where the UMEMs exceed
// RLIMIT_MEMLOCK.
func DataplaneCapabilities() CapSet {
	return CapSet{CapNetAdmin, CapNetRaw, CapBPF, CapIPCLock}
}

// MissingCapabilities returns those of caps that the calling thread does
// not hold in its effective set, in caps' order. CAP_SYS_ADMIN stands in
// for CAP_BPF, as the kernel lets it (and as kernels before 5.8, which
// have no CAP_BPF, require).
func MissingCapabilities(caps ...Capability) (CapSet, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil, fmt.Errorf("read the process's capabilities: %w", err)
	}
	held := func(c Capability) bool {
		return c/32 < 2 && data[c/32].Effective&(1<<(c%32)) != 0
	}
	var missing CapSet
	for _, c := range caps {
		if !held(c) && !(c == CapBPF && held(CapSysAdmin)) {
			missing = append(missing, c)
		}
	}
	return missing, nil
}

// PermissionError is an operation the kernel refused for want of
// privilege: EPERM or EACCES, or ENOBUFS from a UMEM over RLIMIT_MEMLOCK.
// Need is what the operation takes, Missing those of Need the process
// lacked when it was refused (empty: it held them all, and something
// else refused it). errors.Is sees the errno through it.
type PermissionError struct {
	Need, Missing CapSet
	Err           error
}

func (e *PermissionError) Error() string {
	if len(e.Missing) > 0 {
		if len(e.Missing) == len(e.Need) {
			return fmt.Sprintf("missing %s: %v", e.Missing, e.Err)
		}
		return fmt.Sprintf("missing %s (this needs %s): %v", e.Missing, e.Need, e.Err)
	}
	return fmt.Sprintf("%v, although the process has %s, all this needs: something else refused it (an LSM such as SELinux or AppArmor, a seccomp filter, or a user namespace without them)", e.Err, e.Need)
}

func (e *PermissionError) Unwrap() error { return e.Err }

// permError returns err as a *PermissionError naming need when it is an
// EPERM or EACCES, and err unchanged otherwise. The verifier's refusal of
// a program is EACCES with its log: that is about the program, not about
// the capabilities the load needs (the kernel checks those first, and
// answers EPERM), and stays as it is.
func permError(err error, need ...Capability) error {
	var ve *ebpf.VerifierError
	if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) ||
		errors.Is(err, unix.EACCES) && errors.As(err, &ve) {
		return err
	}
	return newPermissionError(err, CapSet(need))
}

func newPermissionError(err error, need CapSet) error {
	missing, cerr := MissingCapabilities(need...)
	if cerr != nil {
		return fmt.Errorf("%w (needs %s; %v)", err, need, cerr)
	}
	return &PermissionError{Need: need, Missing: missing, Err: err}
}

// umemRegError explains a refused XDP_UMEM_REG of size bytes. Without
// CAP_IPC_LOCK the kernel charges every UMEM's pages to the user's locked
// memory (all of that user's processes together) and refuses with ENOBUFS
// past RLIMIT_MEMLOCK.
func umemRegError(err error, size int) error {
	if !errors.Is(err, unix.ENOBUFS) {
		return permError(err, CapIPCLock)
	}
	var lim unix.Rlimit
	limit := "unknown"
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) == nil {
		limit = fmt.Sprintf("%d bytes", lim.Cur)
		if lim.Cur == unix.RLIM_INFINITY {
			limit = "unlimited"
		}
	}
	pe := newPermissionError(err, CapSet{CapIPCLock})
	return fmt.Errorf("%w; the UMEM's %d bytes, with the memory this user already has locked, exceed RLIMIT_MEMLOCK (%s): grant CAP_IPC_LOCK or raise the limit (LimitMEMLOCK=infinity in a unit, ulimit -l)", pe, size, limit)
}
