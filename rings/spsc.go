package rings

import (
	"fmt"
	"sync/atomic"
)

// padLine is the padding that keeps independently written fields on
// different cache lines. It is two 64-byte lines because Intel's adjacent
// line prefetcher pulls lines in pairs, which would bring back the false
// sharing one line of padding removes.
const padLine = 128

// MaxRingCap is the largest capacity of an SPSC or MPMC ring. Indices are
// free-running uint32 (SPSC) or uint64 (MPMC) counters; keeping the
// capacity at or below 2^30 leaves their difference arithmetic unambiguous.
const MaxRingCap = 1 << 30

// SPSC is a bounded single-producer, single-consumer ring of descriptors,
// shaped like an AF_XDP ring (libxdp xsk.h): the producer reserves slots,
// writes descriptors into them and submits; the consumer peeks, reads and
// releases. Exactly one goroutine may call the producer methods (Reserve,
// Submit, CancelReserve, Enqueue) and exactly one the consumer methods
// (Peek, Release, CancelPeek, Dequeue) at a time; the two may run
// concurrently. Nothing blocks: a full or empty ring returns fewer slots than
// asked (possibly none) and the caller decides how to back off.
//
// Each side keeps cached copies of the indices: it loads the other side's
// shared index (one atomic load) only when its cache says the ring looks
// full (producer) or empty (consumer) for the request, and publishes its own
// progress with one atomic store per Submit or Release. Slot indices are
// free-running uint32 counters; At and Slots mask them.
type SPSC struct {
	_ [padLine]byte

	// prod is the producer index: how many descriptors have ever been
	// submitted. Written only by the producer (Submit), with an atomic
	// store; read by the consumer (Peek) with an atomic load. The store
	// publishes the descriptors in slots [old prod, new prod): they were
	// written before it, so a consumer that loads a value past a slot may
	// read that slot.
	prod atomic.Uint32
	_    [padLine - 4]byte

	// cons is the consumer index: how many descriptors have ever been
	// released. Written only by the consumer (Release), with an atomic
	// store; read by the producer (Reserve) with an atomic load. The store
	// publishes that slots [old cons, new cons) are finished with: the
	// consumer read them before it, so the producer may overwrite them.
	cons atomic.Uint32
	_    [padLine - 4]byte

	// Producer-private state: touched only by the producer goroutine.
	p side
	_ [padLine - sideSize]byte

	// Consumer-private state: touched only by the consumer goroutine.
	c side
	_ [padLine - sideSize]byte

	// Read-only after NewSPSC: shared by both sides without contention.
	mask  uint32
	descs []Desc
}

// side is one end's private view of the ring.
type side struct {
	next  uint32 // first slot not yet reserved (producer) or peeked (consumer): libxdp's cached_prod / cached_cons
	pub   uint32 // our own shared index as last stored: submitted (producer) or released (consumer)
	limit uint32 // first slot we may not take: cached cons+size (producer) or cached prod (consumer)
}

const sideSize = 12

// NewSPSC returns an empty ring of the given capacity, a power of two in
// [2, MaxRingCap].
func NewSPSC(capacity int) (*SPSC, error) {
	if err := checkRingCap(capacity); err != nil {
		return nil, err
	}
	r := &SPSC{mask: uint32(capacity - 1), descs: make([]Desc, capacity)}
	r.p.limit = uint32(capacity) // cons = 0, so every slot is free
	return r, nil
}

func checkRingCap(capacity int) error {
	if capacity < 2 || capacity > MaxRingCap || capacity&(capacity-1) != 0 {
		return fmt.Errorf("ring capacity %d: must be a power of two in [2, %d]", capacity, MaxRingCap)
	}
	return nil
}

// Cap returns the ring's capacity in descriptors.
func (r *SPSC) Cap() int { return len(r.descs) }

// Len returns how many descriptors are submitted and not yet released. It
// loads both shared indices, so it is a snapshot, exact only when neither
// side is running; for statistics and tests, not for flow control.
func (r *SPSC) Len() int {
	cons := r.cons.Load()
	return int(r.prod.Load() - cons)
}

// Reserve reserves up to n free slots for the producer and returns the
// index of the first and how many it got (0 when the ring is full). The
// slots are idx, idx+1, ... idx+got-1 (indices wrap; use At or Slots).
// They belong to the producer until Submit hands them to the consumer.
// Reservations accumulate: several Reserve calls may precede one Submit.
// Producer only.
func (r *SPSC) Reserve(n int) (idx uint32, got int) {
	if n <= 0 {
		return r.p.next, 0
	}
	free := r.p.limit - r.p.next
	if uint(n) > uint(free) {
		r.p.limit = r.cons.Load() + r.mask + 1
		free = r.p.limit - r.p.next
	}
	if uint(n) > uint(free) {
		n = int(free)
	}
	idx = r.p.next
	r.p.next += uint32(n)
	return idx, n
}

// Submit hands the oldest n reserved slots to the consumer with one atomic
// store. The producer must have written their descriptors; it may not touch
// them afterwards. n is clamped to the number reserved and not yet
// submitted. Producer only.
func (r *SPSC) Submit(n int) {
	if n <= 0 {
		return
	}
	if pending := r.p.next - r.p.pub; uint(n) > uint(pending) {
		n = int(pending)
	}
	r.p.pub += uint32(n)
	r.prod.Store(r.p.pub)
}

// CancelReserve gives back the newest n reserved, unsubmitted slots
// (xsk_ring_prod__cancel). Producer only.
func (r *SPSC) CancelReserve(n int) {
	if pending := r.p.next - r.p.pub; n > 0 {
		if uint(n) > uint(pending) {
			n = int(pending)
		}
		r.p.next -= uint32(n)
	}
}

// Peek returns the index of the first of up to n submitted descriptors and
// how many there are (0 when the ring is empty). The slots stay valid, and
// belong to the consumer, until Release gives them back; a second Peek
// continues after the first. Consumer only.
func (r *SPSC) Peek(n int) (idx uint32, got int) {
	if n <= 0 {
		return r.c.next, 0
	}
	avail := r.c.limit - r.c.next
	if uint(n) > uint(avail) {
		r.c.limit = r.prod.Load()
		avail = r.c.limit - r.c.next
	}
	if uint(n) > uint(avail) {
		n = int(avail)
	}
	idx = r.c.next
	r.c.next += uint32(n)
	return idx, n
}

// Release gives the oldest n peeked slots back to the producer with one
// atomic store. The consumer must have finished reading them (copy out the
// descriptors it keeps: they are 16 bytes, the frames are not copied). n is
// clamped to the number peeked and not yet released. Consumer only.
func (r *SPSC) Release(n int) {
	if n <= 0 {
		return
	}
	if pending := r.c.next - r.c.pub; uint(n) > uint(pending) {
		n = int(pending)
	}
	r.c.pub += uint32(n)
	r.cons.Store(r.c.pub)
}

// CancelPeek un-peeks the newest n peeked, unreleased slots, so the next
// Peek returns them again (xsk_ring_cons__cancel). Consumer only.
func (r *SPSC) CancelPeek(n int) {
	if pending := r.c.next - r.c.pub; n > 0 {
		if uint(n) > uint(pending) {
			n = int(pending)
		}
		r.c.next -= uint32(n)
	}
}

// At returns the slot with index idx, as returned by Reserve or Peek. The
// pointer is valid while the caller holds the slot: until Submit (producer)
// or Release (consumer).
func (r *SPSC) At(idx uint32) *Desc { return &r.descs[idx&r.mask] }

// Slots returns the n slots starting at idx as at most two slices, because
// the run may wrap around the end of the ring: first holds the slots up to
// the end, second the rest (empty when there is no wrap). n must not exceed
// what Reserve or Peek returned for idx. The views have the same lifetime as
// At's pointers.
func (r *SPSC) Slots(idx uint32, n int) (first, second []Desc) {
	return slots(r.descs, int(idx&r.mask), n)
}

func slots(descs []Desc, i, n int) (first, second []Desc) {
	if end := i + n; end <= len(descs) {
		return descs[i:end:end], nil
	}
	return descs[i:], descs[:i+n-len(descs)]
}

// Enqueue copies as many descriptors from ds into the ring as fit, submits
// them, and returns how many. It is Reserve, copy, Submit. Producer only.
func (r *SPSC) Enqueue(ds []Desc) int {
	idx, n := r.Reserve(len(ds))
	if n == 0 {
		return 0
	}
	a, b := r.Slots(idx, n)
	copy(b, ds[copy(a, ds):n])
	r.Submit(n)
	return n
}

// Dequeue moves up to len(ds) descriptors out of the ring into ds, releases
// their slots, and returns how many. It is Peek, copy, Release. Consumer
// only.
func (r *SPSC) Dequeue(ds []Desc) int {
	idx, n := r.Peek(len(ds))
	if n == 0 {
		return 0
	}
	a, b := r.Slots(idx, n)
	copy(ds[copy(ds, a):n], b)
	r.Release(n)
	return n
}
