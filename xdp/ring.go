package xdp

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring is the part common to the four AF_XDP rings: the mapping, pointers
// to the kernel-shared producer, consumer and flags words inside it, and
// this side's cached copies.
//
// Each shared index has exactly one writer. On the fill and TX rings we
// produce: we write producer (its store publishes the slots we filled,
// so the kernel may read them) and the kernel writes consumer (its store
// hands consumed slots back to us). On the RX and completion rings the
// kernel produces and writes producer (publishing descriptors it filled
// in) and we write consumer (handing the slots back for reuse). flags is
// written by the kernel only (XDP_RING_NEED_WAKEUP). Every access to
// these words goes through sync/atomic: Go's atomics are sequentially
// consistent, which covers the acquire/release pairs the kernel's
// smp_load_acquire/smp_store_release side expects (af_xdp.rst, xsk_queue.h).
//
// The cached indices are private to the one goroutine that drives this
// side of the ring: cachedProd/cachedCons hold the last value seen (or,
// for our own index, reserved but not yet published), so a batch costs
// one atomic load only when the cached view says the ring is full or
// empty, and one atomic store per Submit or Release.
type ring struct {
	producer *uint32
	consumer *uint32
	flags    *uint32
	mask     uint32
	size     uint32

	// Producer side: cachedProd is the next slot to reserve (reserved but
	// unsubmitted slots lie between *producer and cachedProd); cachedCons
	// is the last consumer index seen plus size, so cachedCons-cachedProd
	// is the free space.
	// Consumer side: cachedCons is the next slot to peek (peeked but
	// unreleased slots lie between *consumer and cachedCons); cachedProd
	// is the last producer index seen.
	cachedProd uint32
	cachedCons uint32

	mem  []byte // the mapping, unmapped by unmap
	refs int    // sockets using this mapping (shared fill/completion rings); guarded by the UMEM's mutex
}

// mapRing maps one ring of fd at page offset pgoff.
func mapRing(fd int, off unix.XDPRingOffset, pgoff int64, entries uint32, entrySize uintptr, producerSide bool) (*ring, error) {
	length := int(off.Desc) + int(entries)*int(entrySize)
	mem, err := unix.Mmap(fd, pgoff, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mmap ring at offset %#x: %w", pgoff, err)
	}
	base := unsafe.Pointer(unsafe.SliceData(mem))
	r := &ring{
		producer: (*uint32)(unsafe.Add(base, off.Producer)),
		consumer: (*uint32)(unsafe.Add(base, off.Consumer)),
		flags:    (*uint32)(unsafe.Add(base, off.Flags)),
		mask:     entries - 1,
		size:     entries,
		mem:      mem,
		refs:     1,
	}
	r.cachedProd = atomic.LoadUint32(r.producer)
	r.cachedCons = atomic.LoadUint32(r.consumer)
	if producerSide {
		r.cachedCons += entries
	}
	return r, nil
}

// descBase is the address of slot 0 in the mapping.
func (r *ring) descBase(off unix.XDPRingOffset) unsafe.Pointer {
	return unsafe.Add(unsafe.Pointer(unsafe.SliceData(r.mem)), off.Desc)
}

func (r *ring) unmap() error {
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem = nil
	return err
}

// prodFree returns the free slots a producer can reserve, loading the
// kernel's consumer index only when the cached view has fewer than n.
func (r *ring) prodFree(n uint32) uint32 {
	free := r.cachedCons - r.cachedProd
	if free >= n {
		return free
	}
	r.cachedCons = atomic.LoadUint32(r.consumer) + r.size
	return r.cachedCons - r.cachedProd
}

// reserve claims up to n slots for writing.
func (r *ring) reserve(n int) (idx uint32, got int) {
	if n <= 0 {
		return r.cachedProd, 0
	}
	free := r.prodFree(uint32(n))
	if uint32(n) > free {
		n = int(free)
	}
	idx = r.cachedProd
	r.cachedProd += uint32(n)
	return idx, n
}

// submit publishes n reserved slots: the store of producer is what lets
// the kernel read them, so the slots must be written before it.
func (r *ring) submit(n int) {
	if n <= 0 {
		return
	}
	atomic.StoreUint32(r.producer, atomic.LoadUint32(r.producer)+uint32(n))
}

// consAvail returns how many filled slots a consumer can peek, loading
// the kernel's producer index only when the cached view is empty.
func (r *ring) consAvail(n uint32) uint32 {
	avail := r.cachedProd - r.cachedCons
	if avail == 0 {
		r.cachedProd = atomic.LoadUint32(r.producer)
		avail = r.cachedProd - r.cachedCons
	}
	if avail > n {
		avail = n
	}
	return avail
}

// peek claims up to n filled slots for reading.
func (r *ring) peek(n int) (idx uint32, got int) {
	if n <= 0 {
		return r.cachedCons, 0
	}
	avail := r.consAvail(uint32(n))
	idx = r.cachedCons
	r.cachedCons += avail
	return idx, int(avail)
}

// release hands n peeked slots back: the store of consumer lets the kernel
// overwrite them, so they must be read before it.
func (r *ring) release(n int) {
	if n <= 0 {
		return
	}
	atomic.StoreUint32(r.consumer, atomic.LoadUint32(r.consumer)+uint32(n))
}

func (r *ring) needWakeup() bool {
	return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0
}
