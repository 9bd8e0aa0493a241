package afxdp

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/xdp"
)

// QueueOptions configures one served receive queue.
type QueueOptions struct {
	// Interface and Queue name the receive queue.
	Interface string
	Queue     int
	// Outputs are the other interfaces this queue's pipeline transmits
	// on; each gets a transmit socket on queue Queue sharing the UMEM.
	// Interface itself needs no entry: its receive socket transmits too.
	Outputs []string
	// UMEM sizes the queue's frame memory.
	UMEM xdp.UMEMOptions
	// Socket is the template for every socket of the queue; its
	// Interface, Queue and SharedWith are set per socket.
	Socket xdp.SocketOptions
	// InPort tags received packets (Meta.InPort).
	InPort uint16
	// Shared, when set, is the interface's one UMEM that this queue shares
	// with the interface's other queues (XDP_SHARED_UMEM); the queue takes
	// part Part of its frames. UMEM is then ignored. Nil: the queue maps a
	// UMEM of its own.
	Shared *SharedUMEM
	Part   int
	// ForceTXCopy makes every output interface's port copy packets into a
	// UMEM of its own (a CopyPort) instead of sharing the queue's UMEM: for
	// tests, and for drivers that misbehave with a shared UMEM. Without it,
	// a port copies only where the kernel refuses the shared bind.
	ForceTXCopy bool
}

// SharedUMEM is one UMEM for several queues of an interface, bound with
// XDP_SHARED_UMEM: the first queue's receive socket registers it, every
// other socket (other queues, their transmit sockets) shares it with fill
// and completion rings of its own, and its frames are split into one arena
// per queue (rings.Arena.Split) so each queue's engine keeps a free stack
// of its own and takes no lock. Addresses are offsets into the whole UMEM.
type SharedUMEM struct {
	umem  *xdp.UMEM
	parts []*rings.Arena
	taken []bool
	first *xdp.Socket // the socket that registered the UMEM
}

// NewSharedUMEM maps a UMEM of perQueue frames for each of queues queues
// and splits it.
func NewSharedUMEM(perQueue xdp.UMEMOptions, queues int) (*SharedUMEM, error) {
	if queues < 1 {
		return nil, fmt.Errorf("shared umem for %d queues: %w: want at least one", queues, ErrBadOptions)
	}
	o := perQueue
	o.Frames *= queues
	u, err := xdp.NewUMEM(o)
	if err != nil {
		return nil, fmt.Errorf("shared umem: %w", err)
	}
	a, err := rings.NewArenaOn(u.Mem(), rings.ArenaOptions{Frames: o.Frames, FrameSize: o.FrameSize, Headroom: u.RXHeadroom()})
	if err == nil {
		var parts []*rings.Arena
		if parts, err = a.Split(queues); err == nil {
			return &SharedUMEM{umem: u, parts: parts, taken: make([]bool, queues)}, nil
		}
	}
	u.Close()
	return nil, fmt.Errorf("arena on the shared umem: %w", err)
}

// Close unmaps the UMEM; every queue on it must be closed first.
func (s *SharedUMEM) Close() error { return s.umem.Close() }

// Queue is one served receive queue: its UMEM, the arena on it, the
// receive port and one transmit port per output interface.
type Queue struct {
	opts  QueueOptions
	umem  *xdp.UMEM
	arena *rings.Arena
	rx    *Port
	tx    map[string]*Port // by interface, including Interface itself
	// copies are the output interfaces whose socket could not share the
	// UMEM: they copy (CopyPort), and say so.
	copies map[string]*CopyPort
	closed bool // by Close: a second Close returns net.ErrClosed
}

// OpenQueue maps the queue's UMEM and binds its sockets. On failure it
// unwinds what it made.
func OpenQueue(o QueueOptions) (q *Queue, err error) {
	// made, not q: every `return nil, err` below sets q to nil before
	// this runs.
	made := &Queue{opts: o, tx: map[string]*Port{}, copies: map[string]*CopyPort{}}
	q = made
	defer func() {
		if err != nil {
			made.Close()
			q = nil
		}
	}()
	umem := (*xdp.UMEM)(nil)
	var shareWith *xdp.Socket
	if sh := o.Shared; sh != nil {
		if o.Part < 0 || o.Part >= len(sh.parts) || sh.taken[o.Part] {
			return nil, fmt.Errorf("%s queue %d: %w: part %d of a shared umem of %d parts is not free", o.Interface, o.Queue, ErrBadOptions, o.Part, len(sh.parts))
		}
		umem, q.arena, shareWith = sh.umem, sh.parts[o.Part], sh.first
	} else {
		q.umem, err = xdp.NewUMEM(o.UMEM)
		if err != nil {
			return nil, fmt.Errorf("umem for %s queue %d: %w", o.Interface, o.Queue, err)
		}
		umem = q.umem
		// Packets land RXHeadroom bytes past the frame start
		// (XDP_PACKET_HEADROOM plus the UMEM's own headroom); the
		// arena's headroom matches, so a pushed header has the same room
		// as on the kernel's path.
		q.arena, err = rings.NewArenaOn(q.umem.Mem(), rings.ArenaOptions{
			Frames:    o.UMEM.Frames,
			FrameSize: o.UMEM.FrameSize,
			Headroom:  q.umem.RXHeadroom(),
		})
		if err != nil {
			return nil, fmt.Errorf("arena on the umem of %s queue %d: %w", o.Interface, o.Queue, err)
		}
	}
	so := o.Socket
	so.Interface, so.Queue, so.SharedWith = o.Interface, o.Queue, shareWith
	rxSock, err := xdp.NewSocket(umem, so)
	if err != nil {
		return nil, err
	}
	if sh := o.Shared; sh != nil {
		sh.taken[o.Part] = true
		if sh.first == nil {
			sh.first = rxSock
		}
	}
	q.rx, err = NewPort(PortName(o.Interface, o.Queue), rxSock, q.arena, true, o.InPort)
	if err != nil {
		rxSock.Close()
		return nil, err
	}
	q.tx[o.Interface] = q.rx
	for _, out := range o.Outputs {
		if _, ok := q.tx[out]; ok {
			continue
		}
		so := o.Socket
		so.Interface, so.Queue, so.SharedWith = out, o.Queue, rxSock
		so.RXSize = 0 // transmit only: nothing is redirected to it
		var s *xdp.Socket
		reason := "forced (tx_copy)"
		if !o.ForceTXCopy {
			s, err = xdp.NewSocket(umem, so)
			if err != nil && !sharingRefused(err) {
				return nil, fmt.Errorf("transmit socket on %s queue %d sharing the umem of %s: %w", out, o.Queue, o.Interface, err)
			}
			if err != nil {
				reason = fmt.Sprintf("the kernel refused to share %s's umem: %v", o.Interface, err)
			}
		}
		if s == nil {
			uo := o.UMEM
			if o.Shared != nil {
				uo = o.Shared.umem.Options()
				uo.Frames = q.arena.Frames()
			}
			c, err := newCopyPort(PortName(out, o.Queue), uo, so, reason)
			if err != nil {
				return nil, fmt.Errorf("copying transmit port on %s queue %d (%s): %w", out, o.Queue, reason, err)
			}
			q.copies[out] = c
			continue
		}
		p, err := NewPort(PortName(out, o.Queue), s, q.arena, false, 0)
		if err != nil {
			s.Close()
			return nil, err
		}
		q.tx[out] = p
	}
	return q, nil
}

// sharingRefused reports a bind error that means the kernel will not let
// this socket share the UMEM (rather than a missing interface, a busy
// queue or a lack of permission): EINVAL from kernels before 5.10, which
// share only within one device and queue, or EOPNOTSUPP from a driver.
func sharingRefused(err error) bool {
	return errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, xdp.ErrNotSupported)
}

// PortName is the name a queue's port has in logs and stats.
func PortName(iface string, queue int) string { return fmt.Sprintf("%s/q%d", iface, queue) }

// Arena returns the arena on the queue's UMEM.
func (q *Queue) Arena() *rings.Arena { return q.arena }

// RX returns the receive port.
func (q *Queue) RX() *Port { return q.rx }

// TX returns the sharing transmit port on iface (the receive port for the
// queue's own interface), or nil (none, or a copying one: see Output).
func (q *Queue) TX(iface string) *Port { return q.tx[iface] }

// Output returns the port that transmits on iface for the engine: the
// sharing port, or the CopyPort where the UMEM could not be shared.
func (q *Queue) Output(iface string) dataplane.Port {
	if c := q.copies[iface]; c != nil {
		return c
	}
	if p := q.tx[iface]; p != nil {
		return p
	}
	return nil
}

// Copies returns the queue's copying ports, by interface.
func (q *Queue) Copies() map[string]*CopyPort { return q.copies }

// Ports returns every distinct AF_XDP port of the queue, the receive port
// first (a CopyPort's own port included).
func (q *Queue) Ports() []*Port {
	ps := []*Port{q.rx}
	for _, out := range q.opts.Outputs {
		if p := q.tx[out]; p != nil && p != q.rx {
			ps = append(ps, p)
		}
		if c := q.copies[out]; c != nil {
			ps = append(ps, c.inner)
		}
	}
	return ps
}

// Interface and Queue name the queue.
func (q *Queue) Interface() string { return q.opts.Interface }
func (q *Queue) Queue() int        { return q.opts.Queue }

// Settle ends the transmitting of every port of the queue (Port.Settle): a
// last bounded flush of each TX ring, then what is still on it is counted
// as its tx_abandoned. It returns the queue's tx_abandoned in all. Call it
// when the queue's engine has stopped; Close settles too.
func (q *Queue) Settle() (abandoned uint64) {
	for _, p := range q.Ports() {
		p.Settle()
		abandoned += p.Abandoned()
	}
	return abandoned
}

// Close closes every socket, then unmaps the UMEM unless it is shared
// (its SharedUMEM's Close does that, after every queue on it). Each port
// settles first (Settle). A second Close returns net.ErrClosed.
func (q *Queue) Close() error {
	if q.closed {
		return net.ErrClosed
	}
	q.closed = true
	var errs []error
	closed := map[*Port]bool{}
	for _, p := range q.tx {
		if p != nil && !closed[p] {
			closed[p] = true
			if err := p.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, c := range q.copies {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if q.rx != nil && !closed[q.rx] {
		if err := q.rx.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if q.umem != nil {
		if err := q.umem.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
