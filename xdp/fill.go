package xdp

import (
	"sync/atomic"
	"unsafe"

	"github.com/warpflow/warpflow/rings"
)

// AddrRing is a ring of u64 frame addresses: the fill ring (we produce
// empty frames for the kernel to receive into) or the completion ring (the
// kernel produces the addresses of frames it finished transmitting). Use
// only the producer methods (Reserve, Set, Submit, ProduceAddrs, FillFrom)
// on a fill ring and only the consumer methods (Peek, Get, Release,
// ConsumeAddrs) on a completion ring, from one goroutine per ring.
type AddrRing struct {
	ring
	slots []uint64 // in the mapping; valid while the socket is open
}

func newAddrRing(r *ring, base unsafe.Pointer) *AddrRing {
	return &AddrRing{ring: *r, slots: unsafe.Slice((*uint64)(base), r.size)}
}

// Size returns the number of slots.
func (r *AddrRing) Size() int { return int(r.size) }

// NeedWakeup reports whether the kernel asked to be woken (the
// XDP_RING_NEED_WAKEUP flag, set by the kernel only). On the fill ring it
// means the driver ran out of fill entries and sleeps until a wakeup
// (Socket.WakeRX).
func (r *AddrRing) NeedWakeup() bool { return r.needWakeup() }

// Producer returns the shared producer index (atomic load): for live
// accounting from any goroutine.
func (r *AddrRing) Producer() uint32 { return atomic.LoadUint32(r.producer) }

// Consumer returns the shared consumer index (atomic load).
func (r *AddrRing) Consumer() uint32 { return atomic.LoadUint32(r.consumer) }

// Reserve claims up to n slots for writing and returns the first slot's
// index and how many it got (0 when the ring is full). Write each with
// Set(idx+i, addr), then Submit(got). The kernel's consumer index is loaded
// only when the cached free count is short of n.
func (r *AddrRing) Reserve(n int) (idx uint32, got int) { return r.reserve(n) }

// Set writes slot idx (any index from Reserve, wrapped by the ring).
func (r *AddrRing) Set(idx uint32, addr uint64) { r.slots[idx&r.mask] = addr }

// Submit publishes the next n reserved slots to the kernel with one atomic
// store. From then on the frames they name are the kernel's. Submit all
// that Reserve returned, once each: slots reserved and not submitted are
// published by the next Submit, whatever they hold.
func (r *AddrRing) Submit(n int) { r.submit(n) }

// ProduceAddrs puts as many of addrs as fit and submits them; it returns
// how many it put. The caller keeps owning addrs[n:].
func (r *AddrRing) ProduceAddrs(addrs []uint64) int {
	idx, n := r.reserve(len(addrs))
	for i := 0; i < n; i++ {
		r.slots[(idx+uint32(i))&r.mask] = addrs[i]
	}
	r.submit(n)
	return n
}

// FillFrom puts the frame bases of descs (Addr &^ frameMask, where
// frameMask is FrameSize-1) on the ring and submits them; it returns how
// many it put, from the front of descs. It is how frames that came back
// (dropped packets, completions turned into descriptors) go straight back
// to the kernel without passing through an allocator.
func (r *AddrRing) FillFrom(descs []rings.Desc, frameMask uint64) int {
	idx, n := r.reserve(len(descs))
	for i := 0; i < n; i++ {
		r.slots[(idx+uint32(i))&r.mask] = descs[i].Addr &^ frameMask
	}
	r.submit(n)
	return n
}
