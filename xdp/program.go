package xdp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// MaxQueues bounds ProgramOptions.Queues.
const MaxQueues = 4096

// ProgramOptions configure LoadProgram.
type ProgramOptions struct {
	Interface string
	Attach    AttachMode
	// Queues is the number of receive queues the program steers (the
	// XSKMAP's size); 0 means all of the interface's (RXQueues).
	Queues int
}

// Program is Warpflow's XDP program (xsk_redirect.c) loaded and attached
// to one interface through a bpf_link: frames of receive queue q go to the
// AF_XDP socket registered for q, and to the kernel's stack (XDP_PASS)
// when there is none. The link is owned by this process's file
// descriptor, so the program leaves the interface when Close is called or
// the process dies, even by SIGKILL.
type Program struct {
	iface    string
	ifindex  int
	queues   int
	attached AttachMode
	objs     xskRedirectObjects
	link     link.Link
	off      offloadState // guarded by its own mutex
	// rulesErr, when not nil, is why this kernel cannot run rule sets
	// (LoadRules refuses them): the program was loaded steering only.
	rulesErr error

	mu     sync.Mutex
	closed bool
}

var (
	memlockOnce sync.Once
	memlockErr  error
)

// MemlockWarning returns the error of raising RLIMIT_MEMLOCK (tried once,
// by the first LoadProgram), nil if it worked. Kernels since 5.11 account
// BPF memory to the memory cgroup and do not need it, so a failure is a
// warning to log, not a reason to stop.
func MemlockWarning() error {
	memlockOnce.Do(func() { memlockErr = rlimit.RemoveMemlock() })
	return memlockErr
}

// rawCounters is struct queue_counters of xsk_redirect.c.
type rawCounters struct {
	Packets, Redirected, NoSocket, RedirectFailed      uint64
	Dropped, Passed, OffUnparsed, OffNoMatch, OffRaced uint64
}

// QueueCounters are one queue's counters in the XDP program, summed over
// CPUs. Packets = Redirected + NoSocket + RedirectFailed + Dropped +
// Passed: a frame is steered (or passed for want of a socket) unless a
// kernel rule (LoadRules) decided it.
type QueueCounters struct {
	Packets        uint64 // frames the program saw on this queue
	Redirected     uint64 // handed to the queue's socket (bpf_redirect_map said XDP_REDIRECT; the socket may still drop: see Socket.Stats)
	NoSocket       uint64 // no socket registered for the queue: passed to the kernel's stack
	RedirectFailed uint64 // the socket left between lookup and redirect: passed
	Dropped        uint64 `json:",omitempty"` // a kernel rule dropped it (XDP_DROP)
	Passed         uint64 `json:",omitempty"` // a kernel rule passed it to the kernel's stack (XDP_PASS)
	// Of the frames steered on while a rule set was loaded: why the
	// kernel did not decide them. Sub-counts of Redirected + NoSocket +
	// RedirectFailed.
	OffUnparsed uint64 `json:",omitempty"` // not parsed in the kernel (malformed, or headers it leaves to the workers)
	OffNoMatch  uint64 `json:",omitempty"` // parsed, no kernel rule matched
	OffRaced    uint64 `json:",omitempty"` // its rule slot was being rewritten
}

// LoadProgram loads the XDP program and attaches it to o.Interface. An
// interface that already has an XDP program (another daemon's) gets a
// refusal wrapping ErrBusy that names it; a kernel or driver without XDP
// one wrapping ErrNotSupported.
func LoadProgram(o ProgramOptions) (*Program, error) {
	return loadProgram(o, kernelRulesSupported())
}

// loadProgram is LoadProgram with the kernel-rules probe's answer given:
// rulesErr != nil loads the program steering only.
func loadProgram(o ProgramOptions, rulesErr error) (*Program, error) {
	if o.Interface == "" {
		return nil, errors.New("program options: no interface")
	}
	if !o.Attach.valid() {
		return nil, fmt.Errorf("attach mode %d: unknown", int(o.Attach))
	}
	if o.Queues < 0 || o.Queues > MaxQueues {
		return nil, fmt.Errorf("queues %d: must be in [0, %d]", o.Queues, MaxQueues)
	}
	ctx := "xdp program on " + o.Interface
	ifc, err := net.InterfaceByName(o.Interface)
	if err != nil {
		return nil, fmt.Errorf("%s: interface not found (check the name and network namespace): %w", ctx, unix.ENODEV)
	}
	queues := o.Queues
	if queues == 0 {
		if queues, err = RXQueues(o.Interface); err != nil {
			return nil, fmt.Errorf("%s: %w", ctx, err)
		}
	}
	if err := checkNoXDP(o.Interface, ifc.Index); err != nil {
		return nil, fmt.Errorf("%s: %w", ctx, err)
	}
	_ = MemlockWarning()

	spec, err := loadXskRedirect()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ctx, err)
	}
	spec.Maps[xskRedirectMapXsks].MaxEntries = uint32(queues)
	spec.Maps[xskRedirectMapCounters].MaxEntries = uint32(queues + 1)
	if err := spec.Variables[xskRedirectVarNqueues].Set(uint32(queues)); err != nil {
		return nil, fmt.Errorf("%s: set nqueues: %w", ctx, err)
	}
	kernelRules := uint32(1)
	if rulesErr != nil {
		kernelRules = 0 // steering only: that code never calls the helpers
	}
	if err := spec.Variables[xskRedirectVarKernelRules].Set(kernelRules); err != nil {
		return nil, fmt.Errorf("%s: set kernel_rules: %w", ctx, err)
	}
	p := &Program{iface: o.Interface, ifindex: ifc.Index, queues: queues, rulesErr: rulesErr}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			return nil, wrapNotSupported("%s: load: %w", ctx, err)
		}
		return nil, fmt.Errorf("%s: load: %w", ctx, permError(err, CapBPF, CapNetAdmin))
	}
	if err := p.attach(o.Attach); err != nil {
		p.objs.Close()
		return nil, fmt.Errorf("%s: %w", ctx, err)
	}
	return p, nil
}

// kernelRulesSupported reports whether the kernel has the helpers the
// program's kernel rules read frames with (xsk_redirect.c, "Reading the
// frame": they are what lets it load without CAP_PERFMON). nil: it has;
// otherwise an error wrapping ErrNotSupported that names them. The probe
// loads a small program once per helper; cilium/ebpf caches the answer.
func kernelRulesSupported() error {
	for _, h := range []struct {
		fn   asm.BuiltinFunc
		name string
	}{{asm.FnXdpLoadBytes, "bpf_xdp_load_bytes"}, {asm.FnXdpGetBuffLen, "bpf_xdp_get_buff_len"}} {
		if err := features.HaveProgramHelper(ebpf.XDP, h.fn); err != nil {
			if errors.Is(err, ebpf.ErrNotSupported) {
				return wrapNotSupported("kernel rules need the XDP helper %s (Linux >= 5.18): %w", h.name, err)
			}
			return fmt.Errorf("probe XDP helper %s: %w", h.name, permError(err, CapBPF, CapNetAdmin))
		}
	}
	return nil
}

// checkNoXDP refuses an interface that already has an XDP program: we
// would otherwise fail later with a bare EBUSY, or (attaching native over
// someone's generic program) EEXIST.
func checkNoXDP(iface string, ifindex int) error {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return nil // the attach itself will tell
	}
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		return busy{fmt.Errorf("an XDP program (id %d%s) is already attached, by another program or daemon: "+
			"stop its owner or detach it (%s) first", x.ProgId, progName(x.ProgId), detachCommand(iface, x.AttachMode))}
	}
	return nil
}

// progName is ", NAME" for the program of that id, or "" when it cannot
// be read: the name tells a leftover (a lab's wf_lab_drop, a tool's
// program) from another daemon's.
func progName(id uint32) string {
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		return ""
	}
	defer p.Close()
	if info, err := p.Info(); err == nil && info.Name != "" {
		return ", " + info.Name
	}
	return ""
}

// detachCommand is the ip(8) command that detaches the program attached
// to iface in mode (an IFLA_XDP_ATTACHED value; 0: unknown, taken as
// native), run from where the user is: the interface lives in this
// thread's network namespace, so when that is a named one (warpflowd
// started with nsenter --net=/run/netns/NAME, or ip netns exec) the
// command says -n NAME; run from the host's namespace without it, it
// fails with "Cannot find device".
func detachCommand(iface string, mode uint32) string {
	kw := "xdp" // native where the driver has it, as the kernel's own default
	switch mode {
	case 2:
		kw = "xdpgeneric"
	case 3:
		kw = "xdpoffload"
	}
	if ns := namedNetns(); ns != "" {
		return fmt.Sprintf("ip -n %s link set dev %s %s off", ns, iface, kw)
	}
	return fmt.Sprintf("ip link set dev %s %s off", iface, kw)
}

// namedNetns is the name under /run/netns (ip-netns(8)'s) of this
// thread's network namespace, "" when it has none (the host's, or one
// made without a name), as `ip netns identify` finds it.
func namedNetns() string {
	var self unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &self); err != nil {
		return ""
	}
	ents, err := os.ReadDir("/run/netns")
	if err != nil {
		return ""
	}
	for _, e := range ents {
		var st unix.Stat_t
		if unix.Stat(filepath.Join("/run/netns", e.Name()), &st) == nil && st.Dev == self.Dev && st.Ino == self.Ino {
			return e.Name()
		}
	}
	return ""
}

func (p *Program) attach(m AttachMode) error {
	try := []AttachMode{m}
	if m == AttachAuto {
		try = []AttachMode{AttachNative, AttachGeneric}
	}
	var errs []error
	for _, mode := range try {
		flags := link.XDPDriverMode
		if mode == AttachGeneric {
			flags = link.XDPGenericMode
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: p.objs.XskRedirect, Interface: p.ifindex, Flags: flags})
		if err == nil {
			p.link, p.attached = l, mode
			return nil
		}
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) {
			return busy{fmt.Errorf("attach %s: an XDP program is already attached, by another program or daemon: "+
				"stop its owner or detach it (%s) first: %w", mode, detachCommand(p.iface, 0), err)}
		}
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return fmt.Errorf("attach %s: %w", mode, permError(err, CapNetAdmin))
		}
		if mode == AttachNative && errors.Is(err, unix.EOPNOTSUPP) {
			err = fmt.Errorf("the driver of %s has no native XDP; use attach mode generic or auto: %w", p.iface, err)
		}
		errs = append(errs, fmt.Errorf("attach %s: %w", mode, err))
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EINVAL) && !errors.Is(err, ebpf.ErrNotSupported) {
			break
		}
	}
	err := errors.Join(errs...)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, ebpf.ErrNotSupported) {
		return notSupported{err}
	}
	return err
}

// Interface returns the interface the program is attached to.
func (p *Program) Interface() string { return p.iface }

// Queues returns the number of queues the program steers.
func (p *Program) Queues() int { return p.queues }

// Attached returns the mode the kernel granted: AttachNative or
// AttachGeneric, never AttachAuto.
func (p *Program) Attached() AttachMode { return p.attached }

func (p *Program) checkQueue(queue int) error {
	if queue < 0 || queue >= p.queues {
		return fmt.Errorf("queue %d out of range: the program on %s steers queues [0, %d)", queue, p.iface, p.queues)
	}
	return nil
}

// Register steers frames of queue to s. The socket must be bound to this
// interface and queue: the kernel drops frames redirected to a socket of
// another queue.
func (p *Program) Register(queue int, s *Socket) error {
	if err := p.checkQueue(queue); err != nil {
		return err
	}
	if s.Ifindex() != p.ifindex || s.Queue() != queue {
		return fmt.Errorf("register queue %d: socket is bound to %s queue %d, program is on %s", queue, s.Interface(), s.Queue(), p.iface)
	}
	if err := p.objs.Xsks.Put(uint32(queue), uint32(s.FD())); err != nil {
		return fmt.Errorf("register queue %d of %s in xskmap: %w", queue, p.iface, err)
	}
	return nil
}

// Unregister stops steering queue to a socket: its frames go to the
// kernel's stack again. Unregistering an empty queue is not an error.
func (p *Program) Unregister(queue int) error {
	if err := p.checkQueue(queue); err != nil {
		return err
	}
	if err := p.objs.Xsks.Delete(uint32(queue)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("unregister queue %d of %s: %w", queue, p.iface, err)
	}
	return nil
}

// Counters returns queue's counters summed over CPUs. Queue index
// Queues() holds frames of queues the program does not steer.
func (p *Program) Counters(queue int) (QueueCounters, error) {
	if queue < 0 || queue > p.queues {
		return QueueCounters{}, fmt.Errorf("counters of queue %d: out of range [0, %d]", queue, p.queues)
	}
	var per []rawCounters
	if err := p.objs.Counters.Lookup(uint32(queue), &per); err != nil {
		return QueueCounters{}, fmt.Errorf("counters of queue %d of %s: %w", queue, p.iface, err)
	}
	var c QueueCounters
	for _, v := range per {
		c.Packets += v.Packets
		c.Redirected += v.Redirected
		c.NoSocket += v.NoSocket
		c.RedirectFailed += v.RedirectFailed
		c.Dropped += v.Dropped
		c.Passed += v.Passed
		c.OffUnparsed += v.OffUnparsed
		c.OffNoMatch += v.OffNoMatch
		c.OffRaced += v.OffRaced
	}
	return c, nil
}

// Close detaches the program (closing the bpf_link) and frees its maps.
// A second Close returns net.ErrClosed.
func (p *Program) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return net.ErrClosed
	}
	p.closed = true
	err := p.link.Close()
	if cerr := p.objs.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("close xdp program on %s: %w", p.iface, err)
	}
	return nil
}
