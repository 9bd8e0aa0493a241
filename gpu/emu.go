package gpu

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/warpflow/warpflow/pipelines"
)

// emulator plays the persistent kernel's role in Go, so that the host side
// of the protocol (slots, laps, handles, fallbacks, uploads, stop) runs in
// CI, where there is no GPU. Its "blocks" are goroutines that walk the
// same sequence numbers as kernel.cu's blocks, read the same slot records
// with atomic loads, parse with parseCommon (kernel.cu's parse in Go),
// look up with FilterBlob.Lookup (the walk kernel.cu's lookup does) and
// publish done with an atomic store. "Device addresses" are the host
// addresses of the memory, and blob and counter handles are indices.
type emulator struct {
	mu       sync.Mutex
	mem      map[uint64][]byte
	blobs    []*pipelines.FilterBlob
	counters [][]uint64
	wg       sync.WaitGroup
	started  bool
}

func newEmulator() *emulator { return &emulator{mem: map[uint64][]byte{}} }

func (e *emulator) describe() string { return "emulation (the kernel played in Go)" }

func (e *emulator) multiprocessors() int { return 1 }

// residentBlocks: goroutines are never held back.
func (e *emulator) residentBlocks() int { return 1 << 20 }

func (e *emulator) hostAlloc(n int) ([]byte, uint64, error) {
	// 16-byte aligned like the driver's allocations, for the 64-bit atomics.
	raw := make([]uint64, (n+7)/8)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&raw[0])), n)
	d := uint64(uintptr(unsafe.Pointer(&raw[0])))
	e.mu.Lock()
	e.mem[d] = mem
	e.mu.Unlock()
	return mem, d, nil
}

func (e *emulator) hostRegister(mem []byte) (uint64, error) {
	d := uint64(uintptr(unsafe.Pointer(&mem[0])))
	e.mu.Lock()
	e.mem[d] = mem
	e.mu.Unlock()
	return d, nil
}

func (e *emulator) upload(b *pipelines.FilterBlob) (blob, counters uint64, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.blobs = append(e.blobs, b)
	e.counters = append(e.counters, make([]uint64, 2*(b.Rules+1)))
	h := uint64(len(e.blobs)) // 0 is no handle
	return h, h, nil
}

func (e *emulator) readCounters(h uint64, dst []uint64) error {
	e.mu.Lock()
	c := e.counters[h-1]
	e.mu.Unlock()
	for i := range dst {
		dst[i] = atomic.LoadUint64(&c[i])
	}
	return nil
}

func (e *emulator) start(a kernelArgs, blocks int) error {
	e.mu.Lock()
	slots, arena, stopMem := e.mem[a.slots], e.mem[a.arena], e.mem[a.stop]
	e.mu.Unlock()
	if slots == nil || arena == nil || stopMem == nil {
		return errors.New("emulator: kernel arguments name unknown memory")
	}
	stop := (*atomic.Uint32)(unsafe.Pointer(&stopMem[0]))
	e.started = true
	for b := range blocks {
		e.wg.Add(1)
		go e.block(a, uint64(b), uint64(blocks), slots, arena, stop)
	}
	return nil
}

// block is one kernel block: slots b, b+blocks, ... in sequence order.
func (e *emulator) block(a kernelArgs, b, blocks uint64, slots, arena []byte, stop *atomic.Uint32) {
	defer e.wg.Done()
	var k pipelines.FilterKey
	for seq := b; ; seq += blocks {
		base := unsafe.Pointer(&slots[(seq%uint64(a.nslots))*uint64(a.stride)])
		h := (*slotHead)(base)
		want := uint32(seq/uint64(a.nslots))<<2 | stReady
		var w uint64
		for spins := 0; ; spins++ {
			w = h.word.Load()
			if uint32(w) == want {
				break
			}
			if stop.Load() != 0 {
				return
			}
			if spins > 64 {
				runtime.Gosched()
			}
		}
		count := min(uint32(w>>32), a.cap)
		if h.seq2 != seq {
			panic("emulator: blob chunk not tagged with the slot's sequence number")
		}
		e.mu.Lock()
		blob, cnt := e.blobs[h.blob-1], e.counters[h.blob-1]
		e.mu.Unlock()
		rules := uint64(blob.Rules)
		descs := unsafe.Slice((*[2]uint64)(unsafe.Add(base, slotHeadSize)), a.cap)
		res := unsafe.Slice((*uint32)(unsafe.Add(base, slotHeadSize+16*int(a.cap))), a.cap)
		for i := range count {
			addr, ln := descs[i][0], uint32(descs[i][1])
			if i == 0 && uint32(h.len0>>32) == uint32(seq) {
				addr, ln = h.addr0, uint32(h.len0) // the head's copy, as the kernel reads it
			}
			r := Fallback
			if ln > 0 && addr < a.arenaLen && uint64(ln) <= a.arenaLen-addr {
				have := haveBytes(addr, a.frameMask, a.arenaLen)
				if parseCommon(arena[addr:min(addr+uint64(have), a.arenaLen)], int(ln), have, &k) {
					r = uint32(blob.Lookup(&k))
				}
			}
			res[i] = r
			if r != Fallback && uint64(r) <= rules {
				atomic.AddUint64(&cnt[r], 1)
				atomic.AddUint64(&cnt[rules+1+uint64(r)], uint64(ln))
			}
		}
		(*atomic.Uint32)(base).Store(uint32(seq/uint64(a.nslots))<<2 | stDone)
	}
}

func (e *emulator) state() (bool, error) { return false, nil }

func (e *emulator) wait() error {
	if e.started {
		e.wg.Wait()
		e.started = false
	}
	return nil
}

func (e *emulator) close() {}
