package xdp

import "github.com/warpflow/warpflow/rings"

// Consumer side of a DescRing: the RX ring, where the kernel puts the
// packets it received into frames it took from the fill ring. A
// descriptor's frame is ours from Peek on; Release only returns the slot.

// Peek claims up to n received descriptors; see AddrRing.Peek.
func (r *DescRing) Peek(n int) (idx uint32, got int) { return r.peek(n) }

// Get reads RX slot idx. The slot is valid until the matching Release;
// the frame it names stays ours after that.
func (r *DescRing) Get(idx uint32) rings.Desc { return r.slots[idx&r.mask] }

// Release hands the next n peeked slots back to the kernel.
func (r *DescRing) Release(n int) { r.release(n) }

// Consume copies up to len(dst) descriptors off the ring (16 bytes each,
// never packet bytes), releases their slots and returns how many it took.
func (r *DescRing) Consume(dst []rings.Desc) int {
	idx, n := r.peek(len(dst))
	for i := 0; i < n; i++ {
		dst[i] = r.slots[(idx+uint32(i))&r.mask]
	}
	r.release(n)
	return n
}
