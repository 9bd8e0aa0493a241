package rings

import (
	"errors"
	"fmt"
	"reflect"
)

// Arena is the frame arena: one contiguous region carved into fixed-size,
// power-of-two frames, and a stack of free frame addresses. It is the
// in-process twin of an AF_XDP UMEM: a descriptor's Addr is an offset into
// it, and frames move between owners by address, never by copying.
//
// Alloc and Free are O(1) and touch only the free stack. They are not safe
// for concurrent use: the arena's free list belongs to one goroutine (the
// engine's I/O loop), which is the only place frames are allocated and
// freed. Workers only read and write frame bytes through descriptors they own.
type Arena struct {
	mem       []byte
	frameSize int
	headroom  int
	free      []uint64 // stack of free frame base addresses
	// first and frames are the arena's own frames within mem: all of it,
	// or one part after Split (whose addresses stay offsets into the
	// whole memory, as a shared UMEM's must).
	first, frames int
}

// ErrArenaEmpty is what callers wrap when they run out of frames. Alloc and
// AllocN themselves report an empty arena by count (ok=false, fewer
// allocated), so the hot path builds no error.
var ErrArenaEmpty = errors.New("frame arena exhausted")

// ArenaOptions configures an Arena.
type ArenaOptions struct {
	Frames    int // number of frames
	FrameSize int // bytes per frame: a power of two between 2048 and 65536
	Headroom  int // bytes reserved at each frame's start for pushed headers
}

// DefaultArenaOptions returns the options used by replay: 4096 frames of
// 4096 bytes (the AF_XDP default chunk size) with 256 bytes of headroom
// (XDP_PACKET_HEADROOM).
func DefaultArenaOptions() ArenaOptions {
	return ArenaOptions{Frames: 4096, FrameSize: 4096, Headroom: 256}
}

// NewArena allocates an arena with every frame free.
func NewArena(o ArenaOptions) (*Arena, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	return newArena(make([]byte, o.Frames*o.FrameSize), o), nil
}

// MemAlign is the alignment NewArenaOn requires of the memory it is given:
// a page, as the kernel requires of a UMEM and the CUDA driver gives pinned
// host memory. (On a system with larger pages, the caller that maps a UMEM
// checks the real page size too.)
const MemAlign = 4096

// ErrArenaMemory is wrapped by NewArenaOn's errors for memory it cannot
// carve into o.Frames frames.
var ErrArenaMemory = errors.New("arena memory unusable")

// NewArenaOn returns an arena over caller-supplied memory (the UMEM that
// xdp/ maps, pinned host memory shared with a GPU), with every frame free.
// mem must start at a MemAlign boundary and hold at least
// o.Frames*o.FrameSize bytes; the arena uses that prefix. The arena never
// frees or resizes mem: the caller keeps it mapped for as long as the arena
// and any descriptor into it are in use, and unmaps it only after.
func NewArenaOn(mem []byte, o ArenaOptions) (*Arena, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	n := o.Frames * o.FrameSize
	if len(mem) < n {
		return nil, fmt.Errorf("memory of %d bytes for %d frames of %d (%d bytes): %w", len(mem), o.Frames, o.FrameSize, n, ErrArenaMemory)
	}
	// reflect, not unsafe, for the address: rings stays free of unsafe.
	if p := reflect.ValueOf(mem).Pointer(); p%MemAlign != 0 {
		return nil, fmt.Errorf("memory at %#x: not aligned to %d bytes: %w", p, MemAlign, ErrArenaMemory)
	}
	return newArena(mem[:n:n], o), nil
}

func (o ArenaOptions) validate() error {
	if o.FrameSize < 2048 || o.FrameSize > 65536 || o.FrameSize&(o.FrameSize-1) != 0 {
		return fmt.Errorf("frame size %d: must be a power of two in [2048, 65536]", o.FrameSize)
	}
	if o.Frames <= 0 || o.Frames > 1<<22 {
		return fmt.Errorf("frame count %d: must be in [1, %d]", o.Frames, 1<<22)
	}
	if o.Headroom < 0 || o.Headroom >= o.FrameSize/2 {
		return fmt.Errorf("headroom %d: must be in [0, %d)", o.Headroom, o.FrameSize/2)
	}
	return nil
}

// newArena makes an arena over mem (validated: o.Frames frames of
// o.FrameSize) with every frame free.
func newArena(mem []byte, o ArenaOptions) *Arena {
	a := &Arena{
		mem:       mem,
		frameSize: o.FrameSize,
		headroom:  o.Headroom,
		free:      make([]uint64, o.Frames),
		frames:    o.Frames,
	}
	// Lowest addresses on top of the stack, so a fresh arena hands out
	// frames in address order (deterministic, cache friendly).
	for i := range a.free {
		a.free[i] = uint64((o.Frames - 1 - i) * o.FrameSize)
	}
	return a
}

// FrameSize returns the size of one frame in bytes.
func (a *Arena) FrameSize() int { return a.frameSize }

// Headroom returns the bytes reserved before a freshly allocated packet.
func (a *Arena) Headroom() int { return a.headroom }

// Frames returns the total number of frames.
func (a *Arena) Frames() int { return a.frames }

// FirstFrame is the number of the arena's first frame in Mem: 0, or where
// its part starts after Split.
func (a *Arena) FirstFrame() int { return a.first }

// Split carves an arena whose every frame is free into n arenas over the
// same memory, each owning a contiguous 1/n of the frames (the first ones
// get one more when n does not divide the count). Addresses in every part
// stay offsets into the whole memory, so one UMEM shared by several
// sockets (XDP_SHARED_UMEM) can feed one engine per part, each with a free
// stack of its own and no lock. a must not be used afterwards.
func (a *Arena) Split(n int) ([]*Arena, error) {
	if n < 1 || n > a.frames {
		return nil, fmt.Errorf("split %d frames %d ways: want 1 to %d parts", a.frames, n, a.frames)
	}
	if len(a.free) != a.frames {
		return nil, fmt.Errorf("split an arena with %d of %d frames in use: every frame must be free", a.frames-len(a.free), a.frames)
	}
	parts := make([]*Arena, n)
	first := a.first
	for i := range parts {
		count := a.frames / n
		if i < a.frames%n {
			count++
		}
		p := &Arena{mem: a.mem, frameSize: a.frameSize, headroom: a.headroom, first: first, frames: count, free: make([]uint64, count)}
		for j := range p.free {
			p.free[j] = uint64((first + count - 1 - j) * a.frameSize)
		}
		parts[i] = p
		first += count
	}
	return parts, nil
}

// FreeFrames returns how many frames are on the free stack.
func (a *Arena) FreeFrames() int { return len(a.free) }

// Mem returns the arena's whole memory, for registering it as a UMEM.
func (a *Arena) Mem() []byte { return a.mem }

// Alloc takes a frame off the free stack and returns the address where a
// new packet starts (frame base + headroom).
func (a *Arena) Alloc() (addr uint64, ok bool) {
	n := len(a.free)
	if n == 0 {
		return 0, false
	}
	base := a.free[n-1]
	a.free = a.free[:n-1]
	return base + uint64(a.headroom), true
}

// Free returns the frame holding addr to the free stack. Any address inside
// the frame names it. Freeing a frame twice corrupts the stack; the
// accounting Tracker catches it in tests.
func (a *Arena) Free(addr uint64) {
	a.free = append(a.free, addr&^uint64(a.frameSize-1))
}

// Frame returns the whole frame holding addr: a view valid for as long as the
// caller owns that frame.
func (a *Arena) Frame(addr uint64) []byte {
	base := addr &^ uint64(a.frameSize-1)
	return a.mem[base : base+uint64(a.frameSize) : base+uint64(a.frameSize)]
}

// Bytes returns the packet a descriptor names: a view valid for as long as the
// caller owns the descriptor's frame.
func (a *Arena) Bytes(d Desc) []byte {
	return a.mem[d.Addr : d.Addr+uint64(d.Len)]
}

// AllocN fills dst with newly allocated packet addresses, as Alloc does
// for each, and returns how many it allocated: len(dst) unless the arena
// ran out.
func (a *Arena) AllocN(dst []uint64) int {
	n := min(len(dst), len(a.free))
	rest := len(a.free) - n
	taken := a.free[rest:] // the top n entries; the stack's top is its end
	h := uint64(a.headroom)
	for i, base := range taken {
		dst[n-1-i] = base + h
	}
	a.free = a.free[:rest]
	return n
}

// FreeN returns the frames holding addrs to the free stack, as Free does
// for each. The last address goes on first, so a later AllocN hands them
// out in the same order.
func (a *Arena) FreeN(addrs []uint64) {
	mask := ^uint64(a.frameSize - 1)
	top := len(a.free)
	if top+len(addrs) > cap(a.free) { // only after double frees; Free would grow the stack too
		for i := len(addrs) - 1; i >= 0; i-- {
			a.free = append(a.free, addrs[i]&mask)
		}
		return
	}
	a.free = a.free[:top+len(addrs)]
	dst := a.free[top:]
	for i, addr := range addrs {
		dst[len(dst)-1-i] = addr & mask
	}
}

// AllocDescs takes frames off the free stack as AllocN does, one for
// each of dst (or as many as are free), and sets the descriptors' Addr to
// their packet addresses (frame base + headroom), leaving Len and Options
// as they are; it returns how many it allocated. It hands the frames out
// from the deepest of them up, so that a run of descriptors FreeDescs
// gave back comes out again in the order it went in. A port that writes
// packets into fresh frames and hands over their descriptors (a
// generator) allocates straight into them.
func (a *Arena) AllocDescs(dst []Desc) int {
	n := min(len(dst), len(a.free))
	rest := len(a.free) - n
	taken := a.free[rest:] // the top n entries; the stack's top is its end
	h := uint64(a.headroom)
	dst = dst[:len(taken)]
	for i, base := range taken {
		dst[i].Addr = base + h
	}
	a.free = a.free[:rest]
	return n
}

// FreeDescs returns the frames descs name to the free stack, as Free does
// for each in turn: the engine gives frames back as descriptors, and a
// port that frees them all to the arena frees them in one go.
func (a *Arena) FreeDescs(descs []Desc) {
	top := len(a.free)
	if top+len(descs) > cap(a.free) { // only after double frees; Free would grow the stack too
		for _, d := range descs {
			a.Free(d.Addr)
		}
		return
	}
	mask := ^uint64(a.frameSize - 1)
	a.free = a.free[:top+len(descs)]
	dst := a.free[top:]
	dst = dst[:len(descs)]
	for i := range descs {
		dst[i] = descs[i].Addr & mask
	}
}
