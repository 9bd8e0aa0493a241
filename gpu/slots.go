package gpu

import (
	"sync/atomic"
	"unsafe"

	"github.com/warpflow/warpflow/rings"
)

// ring is the host side of one slot ring: one producer goroutine calls
// acquire/submit, one consumer goroutine (possibly the same) calls
// completed/release; each keeps its own sequence number. Shared with the
// kernel are the slots' status words and the ring's doorbell:
//
//	what          written by              store publishes
//	status free   consumer release        the host no longer reads the slot
//	status ready  producer submit         (informative: the doorbell publishes)
//	doorbell      producer submit         the slot's head and descriptors
//	status done   kernel (st.release.sys) the verdicts, the rewritten bytes, the counters
//
// Host stores and loads are sync/atomic (on x86 the doorbell store is a
// locked instruction, ordered after the slot's plain stores). The kernel's
// side is documented in kernel.cu. A ring outlives its executors: the
// kernel's claim counter follows the sequence numbers, so the next
// executor attached to it goes on from them.
type ring struct {
	idx      int
	mem      []byte
	lay      slotLayout
	n        uint64
	doorbell *atomic.Uint32

	// The producer's.
	pseq     uint64
	acquired bool
	// The consumer's.
	cseq    uint64
	holding bool
	// pseq as submit published it, cseq as release did: for InFlight
	// from any goroutine.
	submitted, released atomic.Uint64
}

func newRing(idx int, mem []byte, n int, lay slotLayout, doorbell *atomic.Uint32) *ring {
	return &ring{idx: idx, mem: mem, lay: lay, n: uint64(n), doorbell: doorbell}
}

func (r *ring) base(seq uint64) unsafe.Pointer {
	return unsafe.Pointer(&r.mem[int(seq%r.n)*r.lay.stride])
}

func (r *ring) lap(seq uint64) uint32 { return uint32(seq / r.n) }

func (r *ring) word(seq uint64) *atomic.Uint64 { return (*atomic.Uint64)(r.base(seq)) }

func (r *ring) status(seq uint64) uint32 {
	return (*atomic.Uint32)(r.base(seq)).Load() // the low half (little endian)
}

func (r *ring) u32(seq uint64, off int) *uint32 { return (*uint32)(unsafe.Add(r.base(seq), off)) }
func (r *ring) u64(seq uint64, off int) *uint64 { return (*uint64)(unsafe.Add(r.base(seq), off)) }

// descs returns slot seq's descriptor array (capacity cap): the batch the
// producer fills is a view of it, so nothing is copied at submit.
func (r *ring) descs(seq uint64) []rings.Desc {
	return unsafe.Slice((*rings.Desc)(unsafe.Add(r.base(seq), r.lay.descs)), r.lay.cap)
}

func (r *ring) verdicts(seq uint64) []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Add(r.base(seq), r.lay.verdicts)), r.lay.cap)
}

func (r *ring) forced(seq uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(r.base(seq), r.lay.forced)), (r.lay.cap+7)/8)
}

// samples returns sampler k's candidate list of slot seq (capacity cap).
func (r *ring) samples(seq uint64, k int) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.Add(r.base(seq), r.lay.samples+2*k*r.lay.cap)), r.lay.cap)
}

// slotOut is what the kernel wrote of a done slot beside the verdicts.
type slotOut struct {
	fallbacks uint32
	uniform   bool
	word      uint32
	bytes     uint64
	sampleN   [maxSamplers]uint16
}

func (r *ring) out(seq uint64) slotOut {
	o := slotOut{
		fallbacks: *r.u32(seq, soFallbacks),
		uniform:   *r.u32(seq, soUniform) != 0,
		word:      *r.u32(seq, soWord),
		bytes:     *r.u64(seq, soBytes),
	}
	o.sampleN = *(*[maxSamplers]uint16)(unsafe.Add(r.base(seq), soSampleN))
	return o
}

// acquire returns the next slot's sequence number if the slot is free.
func (r *ring) acquire() (uint64, bool) {
	if !r.acquired && r.status(r.pseq)&stMask != stFree {
		return 0, false
	}
	r.acquired = true
	return r.pseq, true
}

// submit publishes the acquired slot: count packets, to run program prog
// (a device address) over frame memory at arena (len arenaLen, frames of
// mask+1 bytes), with the slot flags.
func (r *ring) submit(count int, prog, arena, arenaLen, mask uint64, flags uint32) {
	if !r.acquired {
		panic("gpu: submit without acquire")
	}
	seq := r.pseq
	*r.u64(seq, shSeq) = seq
	*r.u64(seq, shProg) = prog
	*r.u64(seq, shProg+8) = seq
	*r.u64(seq, shArena) = arena
	*r.u64(seq, shArena+8) = seq
	*r.u64(seq, shArenaLen) = arenaLen
	*r.u64(seq, shArenaLen+8) = seq
	*r.u64(seq, shMaskFlags) = mask | uint64(flags)<<32
	*r.u64(seq, shMaskFlags+8) = seq
	r.word(seq).Store(uint64(count)<<32 | uint64(r.lap(seq)<<2|stReady))
	r.acquired = false
	r.pseq++
	r.doorbell.Store(uint32(r.pseq)) // the doorbell: the kernel may take it from here
	r.submitted.Store(r.pseq)
}

// done reports whether the kernel finished slot seq.
func (r *ring) done(seq uint64) bool { return r.status(seq) == r.lap(seq)<<2|stDone }

// completed returns the oldest submitted slot once the kernel is done with it.
func (r *ring) completed() (uint64, bool) {
	if r.cseq == r.submitted.Load() {
		return 0, false
	}
	if !r.holding && !r.done(r.cseq) {
		return 0, false
	}
	r.holding = true
	return r.cseq, true
}

// release frees the slot from completed.
func (r *ring) release() {
	if !r.holding {
		panic("gpu: release without completed")
	}
	r.word(r.cseq).Store(uint64(r.lap(r.cseq) << 2))
	r.holding = false
	r.cseq++
	r.released.Store(r.cseq)
}

// inFlight returns the slots submitted and not yet released.
func (r *ring) inFlight() int { return int(r.submitted.Load() - r.released.Load()) }

// allDone reports whether the kernel has finished every submitted slot.
func (r *ring) allDone() bool {
	for seq := r.released.Load(); seq < r.submitted.Load(); seq++ {
		if !r.done(seq) {
			return false
		}
	}
	return true
}
