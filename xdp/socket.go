package xdp

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/warpflow/warpflow/rings"
)

// BusyPollOptions are the socket's busy-poll settings; zero values leave
// the kernel's defaults. Where the kernel lacks an option, NewSocket fails
// with an error wrapping ErrNotSupported.
type BusyPollOptions struct {
	Prefer bool // SO_PREFER_BUSY_POLL: prefer busy polling over softirq processing
	Usec   int  // SO_BUSY_POLL: microseconds to busy poll in a blocking receive; 0 leaves it
	Budget int  // SO_BUSY_POLL_BUDGET: packets per busy-poll round; 0 leaves the default
}

// SocketOptions configure one AF_XDP socket: one queue of one interface.
type SocketOptions struct {
	Interface string
	Queue     int
	// Ring sizes, in slots: powers of two. RXSize or TXSize may be 0 for a
	// socket that only transmits or only receives (not both).
	// FillSize and CompletionSize are used where the socket has its own
	// fill and completion rings (it registers the UMEM, or shares it with
	// a socket on another interface or queue).
	RXSize, TXSize, FillSize, CompletionSize int
	Bind                                     BindMode
	// NeedWakeup binds with XDP_USE_NEED_WAKEUP: the kernel says when it
	// needs a syscall (KickTX, WakeRX) and otherwise none is made.
	NeedWakeup bool
	BusyPoll   BusyPollOptions
	// SharedWith, when set, shares that socket's UMEM (XDP_SHARED_UMEM).
	// On the same interface and queue the two sockets share its fill and
	// completion rings too; on another queue or interface this socket gets
	// its own (kernel >= 5.10). A socket created on a UMEM that an open
	// socket has registered shares with that socket even when SharedWith
	// is nil. A sharing socket inherits the bind mode and need-wakeup
	// setting of the socket it shares with: Bind must be BindAuto or the
	// granted mode, NeedWakeup must match.
	SharedWith *Socket
}

// DefaultSocketOptions returns rings of 2048 slots each, BindAuto and
// need-wakeup on.
func DefaultSocketOptions(iface string, queue int) SocketOptions {
	return SocketOptions{
		Interface: iface, Queue: queue,
		RXSize: 2048, TXSize: 2048, FillSize: 2048, CompletionSize: 2048,
		Bind: BindAuto, NeedWakeup: true,
	}
}

const maxRingSize = 1 << 20

func checkRingSize(name string, n int, zeroOK bool) error {
	if n == 0 && zeroOK {
		return nil
	}
	if n <= 0 || n > maxRingSize || n&(n-1) != 0 {
		return fmt.Errorf("%s ring size %d: must be a power of two in [1, %d]", name, n, maxRingSize)
	}
	return nil
}

func (o *SocketOptions) validate() error {
	if o.Interface == "" {
		return errors.New("socket options: no interface")
	}
	if o.Queue < 0 {
		return fmt.Errorf("queue %d: must not be negative", o.Queue)
	}
	if !o.Bind.valid() {
		return fmt.Errorf("bind mode %d: unknown", int(o.Bind))
	}
	if o.RXSize == 0 && o.TXSize == 0 {
		return errors.New("socket options: rx and tx ring sizes are both 0")
	}
	for _, c := range []struct {
		name string
		n    int
	}{{"rx", o.RXSize}, {"tx", o.TXSize}, {"fill", o.FillSize}, {"completion", o.CompletionSize}} {
		if err := checkRingSize(c.name, c.n, c.name == "rx" || c.name == "tx"); err != nil {
			return err
		}
	}
	if o.BusyPoll.Usec < 0 || o.BusyPoll.Budget < 0 {
		return fmt.Errorf("busy poll usec %d, budget %d: must not be negative", o.BusyPoll.Usec, o.BusyPoll.Budget)
	}
	return nil
}

// Socket is one AF_XDP socket bound to one queue of one interface, with
// its rings mapped. Each ring is driven by one goroutine at a time (one
// per ring side); the other methods are safe for concurrent use.
type Socket struct {
	fd      int
	umem    *UMEM
	iface   string
	ifindex int
	queue   int
	bound   BindMode
	wakeup  bool // bound with XDP_USE_NEED_WAKEUP

	fill, comp *AddrRing
	rx, tx     *DescRing

	mu      sync.Mutex // serialises Close
	closed  atomic.Bool
	sockErr atomic.Pointer[error] // first SO_ERROR seen; SO_ERROR clears on read
}

// NewSocket creates an AF_XDP socket on u (nil means SharedWith's UMEM),
// maps its rings and binds it to o.Interface, queue o.Queue. Errors name
// the cause and the fix: no such interface, no permission, a queue out of
// range or already bound (wraps ErrBusy), zero-copy or AF_XDP or a
// busy-poll option missing (wraps ErrNotSupported).
func NewSocket(u *UMEM, o SocketOptions) (*Socket, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if u == nil {
		if o.SharedWith == nil {
			return nil, errors.New("new socket: no umem and no socket to share one with")
		}
		u = o.SharedWith.umem
	}
	if o.SharedWith != nil && o.SharedWith.umem != u {
		return nil, errors.New("new socket: SharedWith is on another umem")
	}
	ctx := fmt.Sprintf("xsk %s queue %d", o.Interface, o.Queue)
	ifc, err := net.InterfaceByName(o.Interface)
	if err != nil {
		return nil, fmt.Errorf("%s: interface %q not found (check the name and network namespace): %w", ctx, o.Interface, unix.ENODEV)
	}
	// (TX-only sockets are checked by the kernel against the TX queues.)
	if n, err := RXQueues(o.Interface); err == nil && o.RXSize > 0 && o.Queue >= n {
		return nil, fmt.Errorf("%s: queue out of range: %s has %d queue(s): %w", ctx, o.Interface, n, unix.EINVAL)
	}

	// A queue whose socket was closed moments ago stays bound in the
	// kernel until its deferred release runs (a work item, usually a few
	// milliseconds): a daemon restarting, or a port reopened, would be
	// refused. So EBUSY is retried briefly before it is reported.
	//
	// setupMu makes the first socket's registration and a second one's
	// decision to share it one step, so concurrent NewSocket calls on a
	// UMEM do not both register it.
	u.setupMu.Lock()
	defer u.setupMu.Unlock()
	deadline := time.Now().Add(busyRetry)
	for {
		s := &Socket{fd: -1, umem: u, iface: o.Interface, ifindex: ifc.Index, queue: o.Queue}
		reg, err := u.attach(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ctx, err)
		}
		sharer := o.SharedWith
		if sharer == nil {
			sharer = reg
		}
		err = s.setup(o, sharer)
		if err == nil {
			u.setRegistered(s)
			return s, nil
		}
		s.teardown()
		if errors.Is(err, unix.EBUSY) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		return nil, fmt.Errorf("%s: %w", ctx, err)
	}
}

// busyRetry is how long NewSocket retries a bind refused with EBUSY.
const busyRetry = 500 * time.Millisecond

func (s *Socket) setup(o SocketOptions, sharer *Socket) error {
	if sharer != nil {
		if sharer.closed.Load() {
			return fmt.Errorf("share umem: socket %s queue %d: %w", sharer.iface, sharer.queue, net.ErrClosed)
		}
		if o.Bind != BindAuto && o.Bind != sharer.bound {
			return fmt.Errorf("bind mode %s: a socket sharing a umem inherits the mode of %s queue %d, which is %s",
				o.Bind, sharer.iface, sharer.queue, sharer.bound)
		}
		if o.NeedWakeup != sharer.wakeup {
			return fmt.Errorf("need wakeup %v: a socket sharing a umem inherits %v from %s queue %d",
				o.NeedWakeup, sharer.wakeup, sharer.iface, sharer.queue)
		}
	}
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EAFNOSUPPORT) {
			return wrapNotSupported("create AF_XDP socket: kernel without CONFIG_XDP_SOCKETS: %w", err)
		}
		return fmt.Errorf("create AF_XDP socket: %w", permError(err, CapNetRaw))
	}
	s.fd = fd

	ownRings := sharer == nil || sharer.ifindex != s.ifindex || sharer.queue != s.queue
	if sharer == nil {
		uo := s.umem.opts
		if err := registerUMEM(fd, s.umem.mem, uo.FrameSize, uo.Headroom); err != nil {
			return fmt.Errorf("register umem (XDP_UMEM_REG): %w", umemRegError(err, len(s.umem.mem)))
		}
	}
	type ringOpt struct {
		name string
		opt  int
		size int
	}
	opts := []ringOpt{{"rx", unix.XDP_RX_RING, o.RXSize}, {"tx", unix.XDP_TX_RING, o.TXSize}}
	if ownRings {
		opts = append(opts, ringOpt{"fill", unix.XDP_UMEM_FILL_RING, o.FillSize},
			ringOpt{"completion", unix.XDP_UMEM_COMPLETION_RING, o.CompletionSize})
	}
	for _, r := range opts {
		if r.size == 0 {
			continue
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, r.opt, r.size); err != nil {
			return fmt.Errorf("set %s ring size %d: %w", r.name, r.size, err)
		}
	}
	off, err := mmapOffsets(fd)
	if err != nil {
		return fmt.Errorf("get ring offsets (XDP_MMAP_OFFSETS): %w", err)
	}
	if o.RXSize > 0 {
		r, err := mapRing(fd, off.Rx, unix.XDP_PGOFF_RX_RING, uint32(o.RXSize), unsafe.Sizeof(rings.Desc{}), false)
		if err != nil {
			return fmt.Errorf("rx: %w", err)
		}
		s.rx = newDescRing(r, r.descBase(off.Rx))
	}
	if o.TXSize > 0 {
		r, err := mapRing(fd, off.Tx, unix.XDP_PGOFF_TX_RING, uint32(o.TXSize), unsafe.Sizeof(rings.Desc{}), true)
		if err != nil {
			return fmt.Errorf("tx: %w", err)
		}
		s.tx = newDescRing(r, r.descBase(off.Tx))
	}
	if ownRings {
		r, err := mapRing(fd, off.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, uint32(o.FillSize), 8, true)
		if err != nil {
			return fmt.Errorf("fill: %w", err)
		}
		s.fill = newAddrRing(r, r.descBase(off.Fr))
		r, err = mapRing(fd, off.Cr, unix.XDP_UMEM_PGOFF_COMPLETION_RING, uint32(o.CompletionSize), 8, false)
		if err != nil {
			return fmt.Errorf("completion: %w", err)
		}
		s.comp = newAddrRing(r, r.descBase(off.Cr))
	} else {
		s.umem.mu.Lock()
		s.fill, s.comp = sharer.fill, sharer.comp
		s.fill.refs++
		s.comp.refs++
		s.umem.mu.Unlock()
	}
	if err := s.setBusyPoll(o.BusyPoll); err != nil {
		return err
	}

	sa := &unix.SockaddrXDP{Ifindex: uint32(s.ifindex), QueueID: uint32(s.queue)}
	if sharer != nil {
		sa.Flags = unix.XDP_SHARED_UMEM
		sa.SharedUmemFD = uint32(sharer.fd)
	} else {
		if o.NeedWakeup {
			sa.Flags |= unix.XDP_USE_NEED_WAKEUP
		}
		switch o.Bind {
		case BindZeroCopy:
			sa.Flags |= unix.XDP_ZEROCOPY
		case BindCopy:
			sa.Flags |= unix.XDP_COPY
		}
	}
	if err := unix.Bind(fd, sa); err != nil {
		return s.bindError(o, sharer, err)
	}
	v, err := xdpOptions(fd)
	if err != nil {
		return fmt.Errorf("read granted bind mode (XDP_OPTIONS): %w", err)
	}
	s.bound = BindCopy
	if v&unix.XDP_OPTIONS_ZEROCOPY != 0 {
		s.bound = BindZeroCopy
	}
	s.wakeup = o.NeedWakeup
	return nil
}

func (s *Socket) bindError(o SocketOptions, sharer *Socket, err error) error {
	switch {
	case errors.Is(err, unix.EBUSY):
		return busy{fmt.Errorf("bind: the queue is already bound by another AF_XDP socket (another process or daemon?); stop it or pick another queue: %w", err)}
	case errors.Is(err, unix.EOPNOTSUPP) && (o.Bind == BindZeroCopy || sharer != nil && sharer.bound == BindZeroCopy):
		return wrapNotSupported("bind zero-copy: the driver of %s has no AF_XDP zero-copy (veth never has); use bind mode copy or auto: %w", s.iface, err)
	case errors.Is(err, unix.EOPNOTSUPP):
		return wrapNotSupported("bind: %s does not support AF_XDP: %w", s.iface, err)
	case errors.Is(err, unix.ENETDOWN):
		return fmt.Errorf("bind: interface %s is down; bring it up first: %w", s.iface, err)
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("bind: %w", permError(err, CapNetRaw))
	case errors.Is(err, unix.EINVAL):
		if n, qerr := RXQueues(s.iface); qerr == nil && s.queue >= n {
			return fmt.Errorf("bind: queue %d out of range: %s has %d queue(s): %w", s.queue, s.iface, n, err)
		}
		if sharer != nil {
			return fmt.Errorf("bind shared umem with %s queue %d (another queue or interface needs kernel >= 5.10): %w", sharer.iface, sharer.queue, err)
		}
	}
	return fmt.Errorf("bind: %w", err)
}

func (s *Socket) setBusyPoll(b BusyPollOptions) error {
	set := func(name string, opt, v int) error {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, opt, v); err != nil {
			if errors.Is(err, unix.ENOPROTOOPT) || errors.Is(err, unix.EOPNOTSUPP) {
				return wrapNotSupported("set %s: %w", name, err)
			}
			return fmt.Errorf("set %s %d: %w", name, v, permError(err, CapNetAdmin))
		}
		return nil
	}
	if b.Prefer {
		if err := set("SO_PREFER_BUSY_POLL", unix.SO_PREFER_BUSY_POLL, 1); err != nil {
			return err
		}
	}
	if b.Usec > 0 {
		if err := set("SO_BUSY_POLL", unix.SO_BUSY_POLL, b.Usec); err != nil {
			return err
		}
	}
	if b.Budget > 0 {
		if err := set("SO_BUSY_POLL_BUDGET", unix.SO_BUSY_POLL_BUDGET, b.Budget); err != nil {
			return err
		}
	}
	return nil
}

// FD returns the socket's file descriptor (for the XSKMAP, and poll).
func (s *Socket) FD() int { return s.fd }

// Interface returns the interface name the socket is bound to.
func (s *Socket) Interface() string { return s.iface }

// Queue returns the queue index the socket is bound to.
func (s *Socket) Queue() int { return s.queue }

// Ifindex returns the interface index the socket is bound to.
func (s *Socket) Ifindex() int { return s.ifindex }

// UMEM returns the UMEM the socket works on.
func (s *Socket) UMEM() *UMEM { return s.umem }

// Bound returns the mode the kernel granted: BindZeroCopy or BindCopy,
// never BindAuto.
func (s *Socket) Bound() BindMode { return s.bound }

// NeedWakeup reports whether the socket was bound with XDP_USE_NEED_WAKEUP.
func (s *Socket) NeedWakeup() bool { return s.wakeup }

// Fill returns the fill ring. For a socket sharing another's rings (same
// interface and queue) it is that socket's fill ring: one goroutine must
// drive it for both.
func (s *Socket) Fill() *AddrRing { return s.fill }

// Completion returns the completion ring (shared like Fill).
func (s *Socket) Completion() *AddrRing { return s.comp }

// RX returns the RX ring, nil when RXSize was 0.
func (s *Socket) RX() *DescRing { return s.rx }

// TX returns the TX ring, nil when TXSize was 0.
func (s *Socket) TX() *DescRing { return s.tx }

// transient errors of a wakeup syscall: the kernel is busy or out of
// buffers and will make progress without us.
func transient(e unix.Errno) bool {
	return e == unix.EAGAIN || e == unix.EBUSY || e == unix.ENOBUFS || e == unix.EINTR
}

// KickTX tells the kernel to send what is on the TX ring: a non-blocking
// sendto, made only when the kernel set need_wakeup on the TX ring (always
// when the socket was bound without need-wakeup). EAGAIN, EBUSY, ENOBUFS
// and EINTR are not errors. In zero-copy mode the driver's NAPI keeps
// sending after the call; in copy mode the kernel sends inside the call,
// at most its TX budget (32 frames unless raised, SetTXBudget), and EAGAIN
// means frames were left on the ring that only another kick sends (the
// callers kick again: afxdp's Port on every Complete, CopyPort until its
// ring is empty). While the interface is down the error wraps
// ErrLinkDown. It does not allocate.
func (s *Socket) KickTX() error {
	if s.tx == nil {
		return nil
	}
	if s.wakeup && !s.tx.needWakeup() {
		return nil
	}
	_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	if e != 0 && !transient(e) {
		return kickError(e)
	}
	return nil
}

// kickError is a failed send or wake-up's errno, wrapped in ErrLinkDown
// when it is ENETDOWN (the kernel's answer while the interface is not
// up). The errno itself is returned otherwise, as it was, so the calls
// allocate only on an error.
func kickError(e unix.Errno) error {
	if e == unix.ENETDOWN {
		return linkDown{e}
	}
	return e
}

// WakeRX wakes a driver that stopped receiving because the fill ring ran
// dry: a non-blocking recvfrom, made only when the kernel set need_wakeup on
// the fill ring. Without need-wakeup the driver never sleeps and this does
// nothing. It does not allocate.
func (s *Socket) WakeRX() error {
	if !s.wakeup || s.fill == nil || !s.fill.needWakeup() {
		return nil
	}
	_, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	if e != 0 && !transient(e) {
		return kickError(e)
	}
	return nil
}

// Poll waits up to timeout (0: just look; negative: forever) for the RX
// ring to have descriptors. Poll never reports a deleted interface; check
// Err for that.
func (s *Socket) Poll(timeout time.Duration) (readable bool, err error) {
	if s.closed.Load() {
		return false, net.ErrClosed
	}
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	fds := [1]unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds[:], ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("poll xsk %s queue %d: %w", s.iface, s.queue, err)
		}
		return n > 0 && fds[0].Revents&unix.POLLIN != 0, nil
	}
}

// Err returns the socket's pending error (SO_ERROR): ENETDOWN once the
// interface was deleted or went away under the socket. The first error
// seen sticks, since reading SO_ERROR clears it in the kernel.
func (s *Socket) Err() error {
	if p := s.sockErr.Load(); p != nil {
		return *p
	}
	if s.closed.Load() {
		return net.ErrClosed
	}
	v, err := unix.GetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return fmt.Errorf("xsk %s queue %d: read SO_ERROR: %w", s.iface, s.queue, err)
	}
	if v == 0 {
		return nil
	}
	e := error(fmt.Errorf("xsk %s queue %d: %w", s.iface, s.queue, unix.Errno(v)))
	s.sockErr.CompareAndSwap(nil, &e)
	return *s.sockErr.Load()
}

// Statistics are the kernel's per-socket counters (XDP_STATISTICS).
type Statistics struct {
	RXDropped       uint64 // dropped for reasons other than an invalid descriptor (e.g. RX ring full in copy mode)
	RXInvalidDescs  uint64 // invalid descriptors dropped on RX
	TXInvalidDescs  uint64 // invalid descriptors on the TX ring (bad address or length)
	RXRingFull      uint64 // packets dropped because the RX ring was full
	RXFillRingEmpty uint64 // times the fill ring was empty when a packet arrived
	TXRingEmpty     uint64 // times the kernel found the TX ring empty when woken
}

// Stats reads the kernel's counters for this socket.
func (s *Socket) Stats() (Statistics, error) {
	if s.closed.Load() {
		return Statistics{}, net.ErrClosed
	}
	st, err := xdpStatistics(s.fd)
	if err != nil {
		return Statistics{}, fmt.Errorf("xsk %s queue %d: read XDP_STATISTICS: %w", s.iface, s.queue, err)
	}
	return Statistics{
		RXDropped: st.Rx_dropped, RXInvalidDescs: st.Rx_invalid_descs, TXInvalidDescs: st.Tx_invalid_descs,
		RXRingFull: st.Rx_ring_full, RXFillRingEmpty: st.Rx_fill_ring_empty_descs, TXRingEmpty: st.Tx_ring_empty_descs,
	}, nil
}

// Close unmaps the rings and closes the socket; the kernel unbinds it,
// removes it from any XSKMAP and stops using its frames. Stop the
// goroutines driving its rings first: a ring used after Close faults.
// Err, Stats and Poll return net.ErrClosed after Close. Fill and completion rings shared with another
// open socket stay mapped until the last of them closes. Frames on the
// fill, RX, TX and completion rings at Close are the caller's again (the
// UMEM is intact). A second Close returns net.ErrClosed.
func (s *Socket) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return net.ErrClosed
	}
	s.closed.Store(true)
	return s.teardown()
}

// teardown releases whatever setup got to, in reverse.
func (s *Socket) teardown() error {
	var errs []error
	if s.rx != nil {
		errs = append(errs, s.rx.unmap())
	}
	if s.tx != nil {
		errs = append(errs, s.tx.unmap())
	}
	s.umem.mu.Lock()
	for _, r := range []*AddrRing{s.fill, s.comp} {
		if r == nil {
			continue
		}
		if r.refs--; r.refs == 0 {
			errs = append(errs, r.unmap())
		}
	}
	s.umem.mu.Unlock()
	if s.fd >= 0 {
		errs = append(errs, unix.Close(s.fd))
	}
	s.umem.detach(s)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close xsk %s queue %d: %w", s.iface, s.queue, err)
	}
	return nil
}
