package afxdp

import (
	"errors"
	"fmt"

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
}

// Queue is one served receive queue: its UMEM, the arena on it, the
// receive port and one transmit port per output interface.
type Queue struct {
	opts  QueueOptions
	umem  *xdp.UMEM
	arena *rings.Arena
	rx    *Port
	tx    map[string]*Port // by interface, including Interface itself
}

// OpenQueue maps the queue's UMEM and binds its sockets. On failure it
// unwinds what it made.
func OpenQueue(o QueueOptions) (q *Queue, err error) {
	q = &Queue{opts: o, tx: map[string]*Port{}}
	defer func() {
		if err != nil {
			q.Close()
			q = nil
		}
	}()
	q.umem, err = xdp.NewUMEM(o.UMEM)
	if err != nil {
		return nil, fmt.Errorf("umem for %s queue %d: %w", o.Interface, o.Queue, err)
	}
	// Packets land XDP_PACKET_HEADROOM (256) bytes past the frame start
	// plus the UMEM's own headroom; the arena's headroom matches, so a
	// pushed header has the same room as on the kernel's path.
	q.arena, err = rings.NewArenaOn(q.umem.Mem(), rings.ArenaOptions{
		Frames:    o.UMEM.Frames,
		FrameSize: o.UMEM.FrameSize,
		Headroom:  256 + o.UMEM.Headroom,
	})
	if err != nil {
		return nil, fmt.Errorf("arena on the umem of %s queue %d: %w", o.Interface, o.Queue, err)
	}
	so := o.Socket
	so.Interface, so.Queue, so.SharedWith = o.Interface, o.Queue, nil
	rxSock, err := xdp.NewSocket(q.umem, so)
	if err != nil {
		return nil, err
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
		s, err := xdp.NewSocket(q.umem, so)
		if err != nil {
			return nil, fmt.Errorf("transmit socket on %s queue %d sharing the umem of %s: %w", out, o.Queue, o.Interface, err)
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

// PortName is the name a queue's port has in logs and stats.
func PortName(iface string, queue int) string { return fmt.Sprintf("%s/q%d", iface, queue) }

// Arena returns the arena on the queue's UMEM.
func (q *Queue) Arena() *rings.Arena { return q.arena }

// RX returns the receive port.
func (q *Queue) RX() *Port { return q.rx }

// TX returns the transmit port on iface (the receive port for the queue's
// own interface), or nil.
func (q *Queue) TX(iface string) *Port { return q.tx[iface] }

// Ports returns every distinct port of the queue, the receive port first.
func (q *Queue) Ports() []*Port {
	ps := []*Port{q.rx}
	for _, out := range q.opts.Outputs {
		if p := q.tx[out]; p != nil && p != q.rx {
			ps = append(ps, p)
		}
	}
	return ps
}

// Interface and Queue name the queue.
func (q *Queue) Interface() string { return q.opts.Interface }
func (q *Queue) Queue() int        { return q.opts.Queue }

// Close closes every socket, then unmaps the UMEM.
func (q *Queue) Close() error {
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
