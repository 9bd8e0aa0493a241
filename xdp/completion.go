package xdp

// Consumer side of an AddrRing: the completion ring, where the kernel
// returns the addresses of frames it has finished transmitting. A frame
// put on a TX ring is the kernel's until its address appears here; only
// then may it be reused or freed.

// Peek claims up to n filled slots for reading and returns the first
// slot's index and how many it got (0 when empty). Read each with
// Get(idx+i), then Release(got). The kernel's producer index is loaded
// only when the cached view is empty.
func (r *AddrRing) Peek(n int) (idx uint32, got int) { return r.peek(n) }

// Get reads slot idx (any index from Peek, wrapped by the ring). The value
// is valid until the matching Release.
func (r *AddrRing) Get(idx uint32) uint64 { return r.slots[idx&r.mask] }

// Release hands the next n peeked slots back to the kernel with one
// atomic store. Release all that Peek returned: the next Peek starts after
// them either way.
func (r *AddrRing) Release(n int) { r.release(n) }

// ConsumeAddrs copies up to len(dst) addresses off the ring, releases
// their slots and returns how many it took. The frames are the caller's.
func (r *AddrRing) ConsumeAddrs(dst []uint64) int {
	idx, n := r.peek(len(dst))
	for i := 0; i < n; i++ {
		dst[i] = r.slots[(idx+uint32(i))&r.mask]
	}
	r.release(n)
	return n
}
