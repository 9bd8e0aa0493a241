package rings

import "sync/atomic"

// MPMC is a bounded multi-producer, multi-consumer ring of descriptors
// without locks, after Dmitry Vyukov's bounded MPMC queue: every slot
// carries a sequence number that says whose turn it is, so producers and
// consumers synchronise per slot and never wait for one another's
// publication order.
//
// Enqueue and Dequeue move a whole batch with one compare-and-swap: a caller
// scans forward from the shared position over the slots that are ready for
// it (free for a producer, filled for a consumer), claims the run by
// advancing the position past it, then fills or drains the slots and flips
// each one's sequence number. Any goroutine may call either method.
//
// Ordering is FIFO by claimed position: descriptors from one producer come
// out in the order it enqueued them, and one consumer sees any one
// producer's descriptors in that order. A producer or consumer stalled
// between its claim and its sequence store holds back only the slots it
// claimed: others keep going around it until the ring wraps to them.
//
// Cost: one compare-and-swap per batch, but one atomic store per descriptor
// on each side, and each slot's cache line moves between producer and
// consumer. A consumer that polls a nearly empty ring on another core
// chases the producer slot by slot and pays that move for every
// descriptor. For a one-to-one link use SPSC, which moves one index line per
// batch.
type MPMC struct {
	_ [padLine]byte

	// enq is the next position a producer may claim. Advanced only by
	// producers, with compare-and-swap; a successful swap from p to p+n
	// claims positions [p, p+n) for that producer alone. It publishes
	// nothing: slot contents are published by the slots' seq.
	enq atomic.Uint64
	_   [padLine - 8]byte

	// deq is the next position a consumer may claim: advanced only by
	// consumers, with compare-and-swap, like enq.
	deq atomic.Uint64
	_   [padLine - 8]byte

	// Read-only after NewMPMC.
	mask  uint64
	slots []mpmcSlot
}

// mpmcSlot is one descriptor and its turn. For position p (slot p&mask):
// seq == p means free for the producer that claims p; seq == p+1 means
// filled, for the consumer that claims p; seq == p+cap means drained, free
// for position p+cap on the next lap.
type mpmcSlot struct {
	// seq is written by the producer that claimed the slot's position
	// (store p+1, publishing d) and then by the consumer that claimed it
	// (store p+cap, publishing that d was read and may be overwritten).
	// Both sides load it before claiming.
	seq atomic.Uint64
	_   uint64 // pads the slot to 32 bytes: two per cache line, never straddling one
	d   Desc
}

// NewMPMC returns an empty ring of the given capacity, a power of two in
// [2, MaxRingCap].
func NewMPMC(capacity int) (*MPMC, error) {
	if err := checkRingCap(capacity); err != nil {
		return nil, err
	}
	r := &MPMC{mask: uint64(capacity - 1), slots: make([]mpmcSlot, capacity)}
	for i := range r.slots {
		r.slots[i].seq.Store(uint64(i))
	}
	return r, nil
}

// Cap returns the ring's capacity in descriptors.
func (r *MPMC) Cap() int { return len(r.slots) }

// Len returns how many positions are claimed by producers and not yet by
// consumers: a snapshot for statistics and tests, not for flow control.
func (r *MPMC) Len() int {
	deq := r.deq.Load()
	enq := r.enq.Load()
	if n := int64(enq - deq); n > 0 {
		return int(n)
	}
	return 0
}

// Enqueue copies up to len(ds) descriptors, in order, from ds into the ring
// and returns how many it took: all of them unless the ring filled up (a
// consumer still draining the next slot counts as full). It never blocks.
func (r *MPMC) Enqueue(ds []Desc) int {
	if len(ds) == 0 {
		return 0
	}
	for {
		pos := r.enq.Load()
		n := 0
		for n < len(ds) {
			if r.slots[(pos+uint64(n))&r.mask].seq.Load() != pos+uint64(n) {
				break
			}
			n++
		}
		if n == 0 {
			// The first slot is not free for pos: either it still holds a
			// descriptor from the previous lap (full) or another producer
			// claimed pos after our load (retry with the new position).
			if seq := r.slots[pos&r.mask].seq.Load(); int64(seq-pos) < 0 {
				return 0
			}
			continue
		}
		if !r.enq.CompareAndSwap(pos, pos+uint64(n)) {
			continue
		}
		// Positions [pos, pos+n) are ours; their slots were seen free and
		// no consumer can claim them until we store their seq.
		for i := range n {
			p := pos + uint64(i)
			s := &r.slots[p&r.mask]
			s.d = ds[i]
			s.seq.Store(p + 1)
		}
		return n
	}
}

// Dequeue moves up to len(ds) descriptors out of the ring into ds, oldest
// first, and returns how many: fewer than asked when the ring ran empty (a
// producer still filling the next slot counts as empty). It never blocks.
func (r *MPMC) Dequeue(ds []Desc) int {
	if len(ds) == 0 {
		return 0
	}
	for {
		pos := r.deq.Load()
		n := 0
		for n < len(ds) {
			if r.slots[(pos+uint64(n))&r.mask].seq.Load() != pos+uint64(n)+1 {
				break
			}
			n++
		}
		if n == 0 {
			// Either the first slot is not filled yet (empty) or another
			// consumer claimed pos after our load.
			if seq := r.slots[pos&r.mask].seq.Load(); int64(seq-(pos+1)) < 0 {
				return 0
			}
			continue
		}
		if !r.deq.CompareAndSwap(pos, pos+uint64(n)) {
			continue
		}
		lap := r.mask + 1
		for i := range n {
			p := pos + uint64(i)
			s := &r.slots[p&r.mask]
			ds[i] = s.d
			s.seq.Store(p + lap)
		}
		return n
	}
}
