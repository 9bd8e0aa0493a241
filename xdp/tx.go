package xdp

import (
	"sync/atomic"
	"unsafe"

	"github.com/warpflow/warpflow/rings"
)

// DescRing is a ring of descriptors (struct xdp_desc, which rings.Desc
// mirrors byte for byte): the RX ring (the kernel produces received
// packets) or the TX ring (we produce packets to send). Use only the
// producer methods (Reserve, Set, Submit, Produce) on a TX ring and only
// the consumer methods (Peek, Get, Release, Consume) on an RX ring, from
// one goroutine per ring.
type DescRing struct {
	ring
	slots []rings.Desc // in the mapping; valid while the socket is open
}

func newDescRing(r *ring, base unsafe.Pointer) *DescRing {
	return &DescRing{ring: *r, slots: unsafe.Slice((*rings.Desc)(base), r.size)}
}

// Size returns the number of slots.
func (r *DescRing) Size() int { return int(r.size) }

// NeedWakeup reports whether the kernel set XDP_RING_NEED_WAKEUP. On the
// TX ring it means nothing is sent until a kick (Socket.KickTX).
func (r *DescRing) NeedWakeup() bool { return r.needWakeup() }

// Producer returns the shared producer index (atomic load).
func (r *DescRing) Producer() uint32 { return atomic.LoadUint32(r.producer) }

// Consumer returns the shared consumer index (atomic load).
func (r *DescRing) Consumer() uint32 { return atomic.LoadUint32(r.consumer) }

// Reserve claims up to n TX slots; see AddrRing.Reserve.
func (r *DescRing) Reserve(n int) (idx uint32, got int) { return r.reserve(n) }

// Set writes TX slot idx.
func (r *DescRing) Set(idx uint32, d rings.Desc) { r.slots[idx&r.mask] = d }

// Submit publishes the next n reserved slots. From then on the frames they
// name are the kernel's until their addresses come back on the completion
// ring; writing to them meanwhile corrupts what goes on the wire.
func (r *DescRing) Submit(n int) { r.submit(n) }

// Produce copies as many descriptors of src as fit onto the ring (16 bytes
// each; never packet bytes) and submits them. It returns how many it put,
// from the front of src; the caller keeps owning the frames of src[n:].
func (r *DescRing) Produce(src []rings.Desc) int {
	idx, n := r.reserve(len(src))
	for i := 0; i < n; i++ {
		r.slots[(idx+uint32(i))&r.mask] = src[i]
	}
	r.submit(n)
	return n
}
