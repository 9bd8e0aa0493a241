package gpu

import (
	"sync/atomic"
	"unsafe"

	"github.com/warpflow/warpflow/rings"
)

// Slot states, the low two bits of the status word (workers/ uses the same
// lap<<2 | state scheme). The GPU writes only done; busy is never stored,
// to save a PCIe write per batch.
const (
	stFree  uint32 = 0
	stReady uint32 = 1
	stDone  uint32 = 3
	stMask  uint32 = 3
)

// Fallback is the result of a packet the kernel did not classify (outside
// its parser's common case): the host classifies it on the CPU path.
const Fallback = ^uint32(0)

// slotHead is struct SlotHead in kernel.cu: the first 48 bytes of a slot,
// three 16-byte chunks the kernel polls with one load each.
type slotHead struct {
	word  atomic.Uint64 // status (low 32 bits) | count<<32; stored last
	seq   uint64
	blob  uint64 // blob handle (device pointer; its counters follow it)
	seq2  uint64 // tags the blob chunk
	addr0 uint64 // copy of descriptor 0, saving the kernel a round trip
	len0  uint64 // its length | uint32(seq)<<32 (the tag)
}

const slotHeadSize = 48

// slotStride is the bytes of one slot of capacity n: the head, n
// descriptors, n results, rounded up to 128 bytes so no two slots share a
// cache line or a PCIe read.
func slotStride(n int) int {
	s := slotHeadSize + 16*n + 4*n
	return (s + 127) &^ 127
}

// Slot is one flat record in pinned memory: the GPU reads its head and
// descriptors in one pass and writes its results. Descs and Results are
// views of that memory: valid between Acquire and Submit (producer) and
// between Completed and Release (consumer).
type Slot struct {
	head    *slotHead
	Descs   []rings.Desc // capacity Cap; the producer fills Descs[:n]
	Results []uint32     // rule index per packet, or Fallback
	seq     uint64
	count   int
}

// Seq returns the slot's sequence number.
func (s *Slot) Seq() uint64 { return s.seq }

// Count returns the number of packets submitted in the slot.
func (s *Slot) Count() int { return s.count }

// ring is the host side of the slot protocol. One producer goroutine calls
// acquire/submit, one consumer goroutine (possibly the same) calls
// completed/release; each keeps its own sequence number, and the status
// word is the only shared state:
//
//	state  written by        store publishes
//	free   consumer release  host no longer reads the slot's results
//	ready  producer submit   descriptors, count, blob and counter handles
//	done   GPU (st.release)  the results of every packet
//
// Host stores and loads are sync/atomic (sequentially consistent; on x86
// the ready store is a locked instruction ordered after the descriptor
// stores). The kernel's side is documented in kernel.cu.
type ring struct {
	mem    []byte
	slots  []Slot
	n      uint64
	stride int
	cap    int

	pseq      uint64 // producer's
	acquired  bool
	submitted atomic.Uint64 // pseq as published by submit, for the consumer
	cseq      uint64        // consumer's
	holding   bool
	released  atomic.Uint64 // cseq as published by release
}

func newRing(mem []byte, n, capacity int) *ring {
	r := &ring{mem: mem, slots: make([]Slot, n), n: uint64(n), stride: slotStride(capacity), cap: capacity}
	for i := range r.slots {
		base := unsafe.Pointer(&mem[i*r.stride])
		r.slots[i] = Slot{
			head:    (*slotHead)(base),
			Descs:   unsafe.Slice((*rings.Desc)(unsafe.Add(base, slotHeadSize)), capacity),
			Results: unsafe.Slice((*uint32)(unsafe.Add(base, slotHeadSize+16*capacity)), capacity),
		}
	}
	return r
}

func (r *ring) lap(seq uint64) uint32 { return uint32(seq / r.n) }

func (s *Slot) status() uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(s.head)).Load() // low half (little endian)
}

// acquire returns the next slot if it is free.
func (r *ring) acquire() (*Slot, bool) {
	s := &r.slots[r.pseq%r.n]
	if !r.acquired && s.status()&stMask != stFree {
		return nil, false
	}
	r.acquired = true
	s.seq = r.pseq
	return s, true
}

// submit publishes the acquired slot with count packets, classified with
// the given blob.
func (r *ring) submit(count int, blob uint64) {
	if !r.acquired {
		panic("gpu: submit without acquire")
	}
	s := &r.slots[r.pseq%r.n]
	s.count = count
	h := s.head
	h.seq, h.blob, h.seq2 = r.pseq, blob, r.pseq
	if count > 0 {
		h.addr0, h.len0 = s.Descs[0].Addr, uint64(s.Descs[0].Len)|uint64(uint32(r.pseq))<<32
	}
	h.word.Store(uint64(count)<<32 | uint64(r.lap(r.pseq)<<2|stReady))
	r.acquired = false
	r.pseq++
	r.submitted.Store(r.pseq)
}

// completed returns the oldest submitted slot once the GPU is done with it.
func (r *ring) completed() (*Slot, bool) {
	if r.cseq == r.submitted.Load() {
		return nil, false
	}
	s := &r.slots[r.cseq%r.n]
	if !r.holding && s.status() != r.lap(r.cseq)<<2|stDone {
		return nil, false
	}
	r.holding = true
	return s, true
}

// release frees the slot from completed.
func (r *ring) release() {
	if !r.holding {
		panic("gpu: release without completed")
	}
	s := &r.slots[r.cseq%r.n]
	s.head.word.Store(uint64(r.lap(r.cseq) << 2))
	r.holding = false
	r.cseq++
	r.released.Store(r.cseq)
}

// inFlight returns the slots submitted and not yet released.
func (r *ring) inFlight() int { return int(r.submitted.Load() - r.released.Load()) }

// allDone reports whether the kernel has finished every submitted slot.
func (r *ring) allDone() bool {
	for seq := r.released.Load(); seq < r.submitted.Load(); seq++ {
		if r.slots[seq%r.n].status() != r.lap(seq)<<2|stDone {
			return false
		}
	}
	return true
}
