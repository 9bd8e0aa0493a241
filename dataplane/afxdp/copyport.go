package afxdp

import (
	"fmt"
	"net"
	"sync/atomic"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/xdp"
)

// CopyPort transmits on an interface whose socket could not share the
// queue's UMEM (a kernel before 5.10, or a driver that refuses a UMEM bound
// on another device): it has a UMEM and an arena of its own, and copies
// each packet's bytes into one of its frames before putting it on its TX
// ring. That is a copy of packet bytes, so it is never silent: OpenQueue
// logs why it fell back (Queue.TXCopyReason) and Copied counts every
// packet copied.
//
// It only borrows the engine's frames (it is done with their bytes when
// Transmit returns, so it is no dataplane.Completer); its own frames come
// back from its completion ring to its own free stack.
type CopyPort struct {
	inner  *Port // over the port's own UMEM and arena
	arena  *rings.Arena
	umem   *xdp.UMEM
	copies []rings.Desc
	done   []rings.Desc
	reason string
	copied atomic.Uint64
}

// newCopyPort maps a UMEM like o's for a transmit socket on iface.
func newCopyPort(name string, uo xdp.UMEMOptions, so xdp.SocketOptions, reason string) (c *CopyPort, err error) {
	c = &CopyPort{reason: reason}
	c.umem, err = xdp.NewUMEM(uo)
	if err != nil {
		return nil, fmt.Errorf("umem of the copying port %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			c.umem.Close()
		}
	}()
	c.arena, err = rings.NewArenaOn(c.umem.Mem(), rings.ArenaOptions{Frames: uo.Frames, FrameSize: uo.FrameSize, Headroom: c.umem.RXHeadroom()})
	if err != nil {
		return nil, err
	}
	so.SharedWith = nil
	s, err := xdp.NewSocket(c.umem, so)
	if err != nil {
		return nil, err
	}
	c.inner, err = NewPort(name, s, c.arena, false, 0)
	if err != nil {
		s.Close()
		return nil, err
	}
	c.copies = make([]rings.Desc, 0, so.TXSize)
	c.done = make([]rings.Desc, 0, so.CompletionSize)
	return c, nil
}

// Name returns the port's name.
func (c *CopyPort) Name() string { return c.inner.Name() }

// Receive: a copying port only transmits.
func (c *CopyPort) Receive(*rings.Batch) (int, error) { return 0, dataplane.ErrNotReceiver }

// Transmit copies as many of descs as it has free frames for (after taking
// back its completed ones) into its own UMEM and sends them; the engine
// counts the rest as tx_full.
func (c *CopyPort) Transmit(a *rings.Arena, descs []rings.Desc) (int, error) {
	if c.inner.settled.Load() {
		return 0, net.ErrClosed
	}
	c.reclaim()
	n := min(len(descs), c.arena.FreeFrames(), cap(c.copies))
	c.copies = c.copies[:0]
	for _, d := range descs[:n] {
		addr, _ := c.arena.Alloc()
		src := a.Bytes(d)
		copy(c.arena.Frame(addr)[addr&c.inner.frameMask:], src)
		c.copies = append(c.copies, rings.Desc{Addr: addr, Len: d.Len, Options: d.Options})
	}
	sent, err := c.inner.Transmit(c.arena, c.copies)
	for _, d := range c.copies[sent:] {
		c.arena.Free(d.Addr)
	}
	c.copied.Add(uint64(sent))
	if err == nil {
		err = c.flush()
	}
	return sent, err
}

// copyModeTXBudget is how many frames one sendto on a copy-mode socket
// sends at most by default (the kernel's TX_BATCH_SIZE; a socket may raise
// it with XDP_MAX_TX_SKB_BUDGET, Linux 6.17+, never lower it).
const copyModeTXBudget = 32

// flush sends what Transmit left on the TX ring of a copy-mode socket. There
// the kernel sends inside the kick's sendto, synchronously, and at most a
// budget of frames per call (copyModeTXBudget), returning EAGAIN with the
// rest still on the ring; it also publishes its consumer index only when it
// finds the ring empty, so the index does not show a partial send. A
// sharing Port is kicked again by every Complete the engine polls, but the
// engine never polls a CopyPort (it is no Completer), so without this the
// tail of a burst larger than the budget stayed on the ring, counted as
// transmitted, until the next Transmit: for good when none came before the
// daemon stopped. flush kicks (taking back completions between kicks, so
// the completion ring has room) until the ring is seen empty or as many
// kicks as the frames on it need at the default budget, and one more, were
// made: a ring still not empty then (the device refused frames, or the
// completion ring is full) waits for the next Transmit, or for Settle at
// the end, which counts what never left as tx_abandoned. A zero-copy
// socket's driver sends from its own NAPI after one kick: nothing to do.
func (c *CopyPort) flush() error {
	if c.inner.sock.Bound() != xdp.BindCopy {
		return nil
	}
	tx := c.inner.sock.TX()
	pending := int(tx.Producer() - tx.Consumer())
	for kicks := 0; pending > 0 && kicks <= pending/copyModeTXBudget; kicks++ {
		if err := c.inner.kick(); err != nil {
			return err
		}
		c.reclaim()
		if tx.Producer() == tx.Consumer() {
			return nil
		}
	}
	return nil
}

// reclaim returns completed frames to the port's own free stack.
func (c *CopyPort) reclaim() {
	for c.inner.Outstanding() > 0 {
		c.done = c.inner.Complete(c.done[:0])
		if len(c.done) == 0 {
			return
		}
		for _, d := range c.done {
			c.arena.Free(d.Addr)
		}
	}
}

// Recycle: the engine recycles frames only to the port they came from,
// and a copying port hands out none.
func (c *CopyPort) Recycle([]rings.Desc) {}

// Copied is how many packets the port copied and sent.
func (c *CopyPort) Copied() uint64 { return c.copied.Load() }

// Reason says why the port copies.
func (c *CopyPort) Reason() string { return c.reason }

// Port returns the AF_XDP port under the copy (for its counters and
// socket).
func (c *CopyPort) Port() *Port { return c.inner }

// Settle ends the port's transmitting: a last bounded flush of its TX
// ring, then the frames still on it are counted as tx_abandoned (see
// Port.Settle). The engine never polls a CopyPort, so without it the
// frames a refused flush left on the ring were counted as transmitted and
// went with the socket, named by no counter. Close calls it; the daemon
// calls it (Queue.Settle) as soon as the queue's engine stops, so the
// final stats have it.
func (c *CopyPort) Settle() { c.inner.Settle() }

// Abandoned is the port's tx_abandoned count (Settle).
func (c *CopyPort) Abandoned() uint64 { return c.inner.Abandoned() }

// Close settles the port, closes the socket and unmaps the port's UMEM.
func (c *CopyPort) Close() error {
	err := c.inner.Close()
	if uerr := c.umem.Close(); err == nil {
		err = uerr
	}
	return err
}
