package xdp

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/warpflow/warpflow/rings"

	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/internal/testwait"
)

// The ring logic is tested here against a fake kernel: plain memory laid
// out as the kernel lays out a ring, whose other side the test drives by
// storing the shared index itself.

type fakeRing struct {
	idx   []uint32 // [0] producer, [1] consumer, [2] flags
	slots []byte
}

func newFake(size uint32, entry uintptr, producerSide bool) (*fakeRing, *ring) {
	f := &fakeRing{idx: make([]uint32, 16), slots: make([]byte, uintptr(size)*entry)}
	// Start near the u32 wrap so the tests cross it.
	start := ^uint32(0) - size/2
	f.idx[0], f.idx[1] = start, start
	r := &ring{producer: &f.idx[0], consumer: &f.idx[1], flags: &f.idx[2], mask: size - 1, size: size}
	r.cachedProd, r.cachedCons = start, start
	if producerSide {
		r.cachedCons += size
	}
	return f, r
}

func TestDescLayoutMatchesKernel(t *testing.T) {
	var d rings.Desc
	var k unix.XDPDesc
	if unsafe.Sizeof(d) != unsafe.Sizeof(k) || unsafe.Sizeof(d) != 16 {
		t.Fatalf("sizeof rings.Desc %d, unix.XDPDesc %d: want both 16", unsafe.Sizeof(d), unsafe.Sizeof(k))
	}
	if unsafe.Offsetof(d.Addr) != unsafe.Offsetof(k.Addr) ||
		unsafe.Offsetof(d.Len) != unsafe.Offsetof(k.Len) ||
		unsafe.Offsetof(d.Options) != unsafe.Offsetof(k.Options) {
		t.Fatalf("offsets rings.Desc (%d,%d,%d) != unix.XDPDesc (%d,%d,%d)",
			unsafe.Offsetof(d.Addr), unsafe.Offsetof(d.Len), unsafe.Offsetof(d.Options),
			unsafe.Offsetof(k.Addr), unsafe.Offsetof(k.Len), unsafe.Offsetof(k.Options))
	}
	if unsafe.Alignof(d) != unsafe.Alignof(k) {
		t.Fatalf("align rings.Desc %d, unix.XDPDesc %d", unsafe.Alignof(d), unsafe.Alignof(k))
	}
}

func TestFillRingProducer(t *testing.T) {
	const size = 8
	f, r := newFake(size, 8, true)
	fill := newAddrRing(r, unsafe.Pointer(&f.slots[0]))
	start := f.idx[0]

	// Reserve more than fits: partial.
	idx, got := fill.Reserve(size + 3)
	if got != size || idx != start {
		t.Fatalf("Reserve(%d) on empty ring of %d = (%d, %d), want (%d, %d)", size+3, size, idx, got, start, size)
	}
	for i := 0; i < got; i++ {
		fill.Set(idx+uint32(i), uint64(i)*4096)
	}
	if f.idx[0] != start {
		t.Fatal("producer index moved before Submit")
	}
	fill.Submit(got)
	if f.idx[0] != start+size {
		t.Fatalf("producer after Submit = %d, want %d", f.idx[0], start+size)
	}
	if _, got := fill.Reserve(1); got != 0 {
		t.Fatalf("Reserve on full ring got %d", got)
	}
	// The kernel consumes 5: slot contents are what we wrote, in order,
	// across the u32 wrap of the index.
	slots := unsafe.Slice((*uint64)(unsafe.Pointer(&f.slots[0])), size)
	for i := uint32(0); i < 5; i++ {
		if v := slots[(start+i)&(size-1)]; v != uint64(i)*4096 {
			t.Fatalf("slot %d = %d, want %d", i, v, i*4096)
		}
	}
	atomic.StoreUint32(&f.idx[1], start+5)
	if n := fill.ProduceAddrs([]uint64{1, 2, 3, 4, 5, 6, 7}); n != 5 {
		t.Fatalf("ProduceAddrs after 5 consumed put %d, want 5", n)
	}
	if f.idx[0] != start+size+5 {
		t.Fatalf("producer = %d, want %d", f.idx[0], start+size+5)
	}
	if fill.Producer() != f.idx[0] || fill.Consumer() != f.idx[1] {
		t.Fatal("Producer/Consumer do not read the shared indices")
	}
	// FillFrom puts frame bases.
	atomic.StoreUint32(&f.idx[1], start+size+5)
	descs := []rings.Desc{{Addr: 3*4096 + 256, Len: 60}, {Addr: 7*4096 + 300, Len: 60}}
	if n := fill.FillFrom(descs, 4095); n != 2 {
		t.Fatalf("FillFrom put %d, want 2", n)
	}
	p := f.idx[0]
	if slots[(p-2)&(size-1)] != 3*4096 || slots[(p-1)&(size-1)] != 7*4096 {
		t.Fatalf("FillFrom wrote %d, %d; want frame bases %d, %d", slots[(p-2)&(size-1)], slots[(p-1)&(size-1)], 3*4096, 7*4096)
	}
}

func TestCompletionRingConsumer(t *testing.T) {
	const size = 8
	f, r := newFake(size, 8, false)
	comp := newAddrRing(r, unsafe.Pointer(&f.slots[0]))
	start := f.idx[0]
	if _, got := comp.Peek(4); got != 0 {
		t.Fatalf("Peek on empty ring got %d", got)
	}
	slots := unsafe.Slice((*uint64)(unsafe.Pointer(&f.slots[0])), size)
	for i := uint32(0); i < 6; i++ {
		slots[(start+i)&(size-1)] = uint64(100 + i)
	}
	atomic.StoreUint32(&f.idx[0], start+6) // kernel publishes 6
	idx, got := comp.Peek(4)
	if got != 4 || idx != start {
		t.Fatalf("Peek(4) = (%d, %d), want (%d, 4)", idx, got, start)
	}
	for i := 0; i < got; i++ {
		if v := comp.Get(idx + uint32(i)); v != uint64(100+i) {
			t.Fatalf("Get(%d) = %d, want %d", i, v, 100+i)
		}
	}
	if f.idx[1] != start {
		t.Fatal("consumer index moved before Release")
	}
	comp.Release(got)
	if f.idx[1] != start+4 {
		t.Fatalf("consumer after Release = %d, want %d", f.idx[1], start+4)
	}
	dst := make([]uint64, 8)
	if n := comp.ConsumeAddrs(dst); n != 2 || dst[0] != 104 || dst[1] != 105 {
		t.Fatalf("ConsumeAddrs = %d %v, want 2 [104 105]", n, dst[:n])
	}
	if f.idx[1] != start+6 {
		t.Fatalf("consumer = %d, want %d", f.idx[1], start+6)
	}
}

func TestDescRings(t *testing.T) {
	const size = 4
	ft, rt := newFake(size, 16, true)
	tx := newDescRing(rt, unsafe.Pointer(&ft.slots[0]))
	src := []rings.Desc{{Addr: 0, Len: 60}, {Addr: 4096, Len: 61}, {Addr: 8192, Len: 62}, {Addr: 12288, Len: 63}, {Addr: 16384, Len: 64}}
	if n := tx.Produce(src); n != size {
		t.Fatalf("Produce put %d, want %d", n, size)
	}
	kslots := unsafe.Slice((*unix.XDPDesc)(unsafe.Pointer(&ft.slots[0])), size)
	start := ft.idx[1]
	for i := uint32(0); i < size; i++ {
		k := kslots[(start+i)&(size-1)]
		if k.Addr != src[i].Addr || k.Len != src[i].Len {
			t.Fatalf("kernel sees slot %d as %+v, want %+v", i, k, src[i])
		}
	}

	fr, rr := newFake(size, 16, false)
	rx := newDescRing(rr, unsafe.Pointer(&fr.slots[0]))
	rslots := unsafe.Slice((*unix.XDPDesc)(unsafe.Pointer(&fr.slots[0])), size)
	rs := fr.idx[0]
	for i := uint32(0); i < 3; i++ {
		rslots[(rs+i)&(size-1)] = unix.XDPDesc{Addr: uint64(i)*4096 + 256, Len: 60 + i}
	}
	atomic.StoreUint32(&fr.idx[0], rs+3)
	dst := make([]rings.Desc, 8)
	if n := rx.Consume(dst); n != 3 || dst[2].Addr != 2*4096+256 || dst[2].Len != 62 {
		t.Fatalf("Consume = %d %+v", n, dst[:n])
	}
	if fr.idx[1] != rs+3 {
		t.Fatalf("rx consumer = %d, want %d", fr.idx[1], rs+3)
	}
	atomic.StoreUint32(&fr.idx[2], unix.XDP_RING_NEED_WAKEUP)
	if !rx.NeedWakeup() || tx.NeedWakeup() {
		t.Fatal("NeedWakeup does not read the ring's own flags word")
	}
}

// TestRingCachedIndices checks that a producer with room in its cached
// view does not read the kernel's index: a consumer index that moved
// backwards (impossible from a real kernel) is not seen until the cache
// runs short.
func TestRingCachedIndices(t *testing.T) {
	f, r := newFake(8, 8, true)
	fill := newAddrRing(r, unsafe.Pointer(&f.slots[0]))
	if _, got := fill.Reserve(2); got != 2 {
		t.Fatal("reserve 2")
	}
	fill.Submit(2)
	atomic.StoreUint32(&f.idx[1], f.idx[1]-100) // poison
	if _, got := fill.Reserve(6); got != 6 {
		t.Fatalf("Reserve(6) with 6 free in cache got %d: it reloaded the consumer index", got)
	}
	fill.Submit(6)
}

func TestRingsDoNotAllocate(t *testing.T) {
	ff, rf := newFake(64, 8, true)
	fill := newAddrRing(rf, unsafe.Pointer(&ff.slots[0]))
	ft, rt := newFake(64, 16, true)
	tx := newDescRing(rt, unsafe.Pointer(&ft.slots[0]))
	fr, rr := newFake(64, 16, false)
	rx := newDescRing(rr, unsafe.Pointer(&fr.slots[0]))
	descs := make([]rings.Desc, 32)
	addrs := make([]uint64, 32)
	n := allocs.Count(100, func() {
		// Keep every ring's other side moving so each call does real work.
		atomic.StoreUint32(&ff.idx[1], atomic.LoadUint32(&ff.idx[0]))
		atomic.StoreUint32(&ft.idx[1], atomic.LoadUint32(&ft.idx[0]))
		atomic.StoreUint32(&fr.idx[0], atomic.LoadUint32(&fr.idx[0])+32)
		if fill.FillFrom(descs, 4095) != 32 || fill.ProduceAddrs(addrs[:0]) != 0 {
			t.Fatal("fill")
		}
		if rx.Consume(descs) != 32 || tx.Produce(descs) != 32 {
			t.Fatal("rx/tx")
		}
	})
	if n != 0 {
		t.Fatalf("ring batch ops allocated %d times in 100 runs, want 0", n)
	}
}

// TestWakeupOnlyWhenFlagged: with need-wakeup, KickTX and WakeRX make
// their syscall only when the kernel set the ring's flag. The socket has
// no fd (-1), so a syscall made shows as EBADF.
func TestWakeupOnlyWhenFlagged(t *testing.T) {
	ft, rt := newFake(8, 16, true)
	ff, rf := newFake(8, 8, true)
	s := &Socket{fd: -1, wakeup: true, tx: newDescRing(rt, unsafe.Pointer(&ft.slots[0])), fill: newAddrRing(rf, unsafe.Pointer(&ff.slots[0]))}
	if err := s.KickTX(); err != nil {
		t.Errorf("KickTX with the flag clear made a syscall: %v", err)
	}
	if err := s.WakeRX(); err != nil {
		t.Errorf("WakeRX with the flag clear made a syscall: %v", err)
	}
	if n := allocs.Count(100, func() { s.KickTX(); s.WakeRX() }); n != 0 {
		t.Errorf("KickTX+WakeRX allocated %d times in 100 runs, want 0", n)
	}
	atomic.StoreUint32(&ft.idx[2], unix.XDP_RING_NEED_WAKEUP)
	atomic.StoreUint32(&ff.idx[2], unix.XDP_RING_NEED_WAKEUP)
	if err := s.KickTX(); err != unix.EBADF {
		t.Errorf("KickTX with the flag set = %v, want the syscall's EBADF", err)
	}
	if err := s.WakeRX(); err != unix.EBADF {
		t.Errorf("WakeRX with the flag set = %v, want the syscall's EBADF", err)
	}
	s.wakeup = false
	atomic.StoreUint32(&ft.idx[2], 0)
	if err := s.KickTX(); err != unix.EBADF {
		t.Errorf("KickTX without need-wakeup = %v, want a syscall (EBADF)", err)
	}
	if err := s.WakeRX(); err != nil {
		t.Errorf("WakeRX without need-wakeup = %v, want no syscall", err)
	}
}

// BenchmarkRingBatch moves 64 descriptors through a fill, an RX and a TX
// ring against a fake kernel that keeps up: the per-batch cost of the ring
// protocol alone.
func BenchmarkRingBatch(b *testing.B) {
	ff, rf := newFake(2048, 8, true)
	fill := newAddrRing(rf, unsafe.Pointer(&ff.slots[0]))
	ft, rt := newFake(2048, 16, true)
	tx := newDescRing(rt, unsafe.Pointer(&ft.slots[0]))
	fr, rr := newFake(2048, 16, false)
	rx := newDescRing(rr, unsafe.Pointer(&fr.slots[0]))
	descs := make([]rings.Desc, 64)
	b.ReportAllocs()
	for b.Loop() {
		atomic.StoreUint32(&fr.idx[0], atomic.LoadUint32(&fr.idx[0])+64)
		n := rx.Consume(descs)
		tx.Produce(descs[:n/2])
		fill.FillFrom(descs[n/2:n], 4095)
		atomic.StoreUint32(&ff.idx[1], atomic.LoadUint32(&ff.idx[0]))
		atomic.StoreUint32(&ft.idx[1], atomic.LoadUint32(&ft.idx[0]))
	}
}

// TestRingStress runs our side of a ring against a fake kernel in another
// goroutine that follows the kernel's protocol (load the other index,
// touch slots, store its own index): every value arrives once and in
// order. Under -race this also checks that a slot written before the index
// store is read only after the index load (the publication protocol).
func TestRingStress(t *testing.T) {
	const total = 1 << 16
	const size = 64
	t.Run("fill", func(t *testing.T) {
		f, r := newFake(size, 8, true)
		fill := newAddrRing(r, unsafe.Pointer(&f.slots[0]))
		slots := unsafe.Slice((*uint64)(unsafe.Pointer(&f.slots[0])), size)
		var quit atomic.Bool // the test gave up: the fake kernel stops too
		defer quit.Store(true)
		errc := make(chan error, 1)
		go func() { // kernel consumer
			next := uint64(0)
			for next < total && !quit.Load() {
				prod := atomic.LoadUint32(&f.idx[0])
				cons := atomic.LoadUint32(&f.idx[1])
				for ; cons != prod; cons++ {
					if v := slots[cons&(size-1)]; v != next {
						errc <- fmt.Errorf("kernel read %d, want %d", v, next)
						return
					}
					next++
				}
				atomic.StoreUint32(&f.idx[1], cons)
			}
			errc <- nil
		}()
		buf := make([]uint64, 7)
		deadline := time.Now().Add(testwait.Deadline)
		for v, k := uint64(0), 0; v < total; k++ {
			// A ring whose consumer stopped would keep us spinning here.
			if k%256 == 0 && time.Now().After(deadline) {
				t.Fatalf("gave up after %v producing: %d of %d addresses taken by the fake kernel", testwait.Deadline, v, total)
			}
			n := 0
			for ; n < len(buf) && v+uint64(n) < total; n++ {
				buf[n] = v + uint64(n)
			}
			v += uint64(fill.ProduceAddrs(buf[:n]))
		}
		if err := testwait.Recv(t, errc, "the fake kernel to read every address", testwait.Deadline); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("rx", func(t *testing.T) {
		f, r := newFake(size, 16, false)
		rx := newDescRing(r, unsafe.Pointer(&f.slots[0]))
		slots := unsafe.Slice((*unix.XDPDesc)(unsafe.Pointer(&f.slots[0])), size)
		var quit atomic.Bool // the test gave up: the fake kernel stops too
		defer quit.Store(true)
		go func() { // kernel producer
			for v := uint64(0); v < total && !quit.Load(); {
				prod := atomic.LoadUint32(&f.idx[0])
				cons := atomic.LoadUint32(&f.idx[1])
				for ; prod-cons < size && v < total; prod++ {
					slots[prod&(size-1)] = unix.XDPDesc{Addr: v, Len: uint32(v)}
					v++
				}
				atomic.StoreUint32(&f.idx[0], prod)
			}
		}()
		buf := make([]rings.Desc, 5)
		deadline := time.Now().Add(testwait.Deadline)
		for next, k := uint64(0), 0; next < total; k++ {
			// A ring whose producer stopped would keep us spinning here.
			if k%256 == 0 && time.Now().After(deadline) {
				t.Fatalf("gave up after %v consuming: %d of %d descriptors from the fake kernel", testwait.Deadline, next, total)
			}
			n := rx.Consume(buf)
			for _, d := range buf[:n] {
				if d.Addr != next || d.Len != uint32(next) {
					t.Fatalf("consumed %+v, want addr %d", d, next)
				}
				next++
			}
		}
	})
}
