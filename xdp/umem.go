package xdp

import (
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// UMEMOptions sizes a UMEM.
type UMEMOptions struct {
	// Frames is the number of frames (the kernel calls them chunks).
	Frames int
	// FrameSize is the size of one frame: 2048 or 4096 (aligned chunk mode
	// needs a power of two no larger than a page).
	FrameSize int
	// Headroom is extra space the kernel leaves free at the start of every
	// received frame, on top of its own XDP_PACKET_HEADROOM (256 bytes):
	// a received packet starts at frame + 256 + Headroom. 0 is usual.
	Headroom int
}

// DefaultUMEMOptions returns 4096 frames of 4096 bytes with no extra
// headroom: 16 MiB, enough for a fill and an RX ring of 2048 each plus
// frames in flight.
func DefaultUMEMOptions() UMEMOptions {
	return UMEMOptions{Frames: 4096, FrameSize: 4096, Headroom: 0}
}

func (o UMEMOptions) validate() error {
	if o.FrameSize != 2048 && o.FrameSize != 4096 {
		return fmt.Errorf("umem frame size %d: must be 2048 or 4096", o.FrameSize)
	}
	if o.Frames <= 0 || o.Frames > 1<<22 {
		return fmt.Errorf("umem frame count %d: must be in [1, %d]", o.Frames, 1<<22)
	}
	// The kernel refuses headroom that leaves no room for a packet
	// (headroom >= chunk size - XDP_PACKET_HEADROOM); keep at least a full
	// 1518-byte frame after it, measured against 2048-byte frames' budget.
	if o.Headroom < 0 || o.Headroom > o.FrameSize-unix.XDP_PACKET_HEADROOM-1536 {
		return fmt.Errorf("umem headroom %d: must be in [0, %d] for %d-byte frames",
			o.Headroom, o.FrameSize-unix.XDP_PACKET_HEADROOM-1536, o.FrameSize)
	}
	return nil
}

// UMEM is the memory AF_XDP sockets receive into and transmit from: one
// anonymous, page-aligned, pre-faulted mapping carved into equal frames. A
// descriptor's Addr is a byte offset into it. The kernel learns of it when
// the first socket registers it (XDP_UMEM_REG, done by NewSocket); later
// sockets share it (XDP_SHARED_UMEM).
//
// The UMEM does not allocate frames: the caller's frame allocator
// (rings.NewArenaOn(u.Mem(), ...)) owns that, and this package only moves
// addresses.
type UMEM struct {
	opts UMEMOptions
	mem  []byte

	setupMu sync.Mutex // held by NewSocket for a whole socket setup

	mu      sync.Mutex
	sockets map[*Socket]struct{} // open sockets on this UMEM
	reg     *Socket              // the socket that registered it, while open
	closed  bool
}

// NewUMEM maps the UMEM's memory. Nothing is registered with the kernel
// until a socket is created on it.
func NewUMEM(o UMEMOptions) (*UMEM, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	size := o.Frames * o.FrameSize
	page := os.Getpagesize()
	size = (size + page - 1) &^ (page - 1)
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mmap umem of %d bytes: %w", size, err)
	}
	return &UMEM{opts: o, mem: mem[:o.Frames*o.FrameSize], sockets: make(map[*Socket]struct{})}, nil
}

// Mem returns the UMEM's memory: Frames*FrameSize bytes. It is valid until
// Close; while sockets are open the kernel reads and writes frames it owns
// (those on the fill, RX, TX and completion rings in between) at any time.
func (u *UMEM) Mem() []byte { return u.mem }

// Options returns the options the UMEM was made with.
func (u *UMEM) Options() UMEMOptions { return u.opts }

// RXHeadroom is where the kernel puts a received packet in its frame:
// XDP_PACKET_HEADROOM (256) + Options().Headroom bytes from the frame's
// start. An arena on the UMEM (rings.NewArenaOn) uses it as its headroom so
// that frames it builds and frames the kernel fills agree.
func (u *UMEM) RXHeadroom() int { return unix.XDP_PACKET_HEADROOM + u.opts.Headroom }

// FrameMask is FrameSize-1: addr &^ FrameMask() is the base of the frame
// holding addr.
func (u *UMEM) FrameMask() uint64 { return uint64(u.opts.FrameSize - 1) }

// Close unmaps the memory. It refuses, with an error wrapping ErrBusy,
// while sockets on the UMEM are open, since the kernel may still write to
// it. A second Close returns net.ErrClosed.
func (u *UMEM) Close() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return net.ErrClosed
	}
	if n := len(u.sockets); n > 0 {
		return busy{fmt.Errorf("close umem: %d socket(s) still open on it: close them first", n)}
	}
	u.closed = true
	mem := u.mem[:cap(u.mem)]
	u.mem = nil
	if err := unix.Munmap(mem); err != nil {
		return fmt.Errorf("munmap umem: %w", err)
	}
	return nil
}

// attach records s as open on u. It reports the socket that owns the
// kernel registration, nil when s must register the UMEM itself.
func (u *UMEM) attach(s *Socket) (registered *Socket, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return nil, fmt.Errorf("umem: %w", net.ErrClosed)
	}
	u.sockets[s] = struct{}{}
	return u.reg, nil
}

func (u *UMEM) setRegistered(s *Socket) {
	u.mu.Lock()
	if u.reg == nil {
		u.reg = s
	}
	u.mu.Unlock()
}

// detach forgets s. When s was the registering socket another open socket
// on the UMEM (which holds the kernel's reference too) takes its place as
// the one later sockets share with.
func (u *UMEM) detach(s *Socket) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.sockets, s)
	if u.reg == s {
		u.reg = nil
		for o := range u.sockets {
			if o.bound != 0 {
				u.reg = o
				break
			}
		}
	}
}
