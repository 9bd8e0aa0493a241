package gpu

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// emulator plays the persistent kernel on the host, so that the host side
// of the protocol (rings, doorbells, claims, slots, fallbacks, counters,
// stop) and kernel.cu's own per-packet code both run in CI, where there is
// no GPU. The per-packet code is kernel.cu built for the host (host/main.cc,
// the program at Options.Emulator), which this side talks to over a pipe:
// for each slot it sends the packets' descriptors and the frame bytes
// around each one (a superset of the window the kernel loads; the host
// build picks the window with the kernel's own wf_window), and writes back
// what comes back: verdict words, moved descriptors, rewritten bytes. The
// slot's summary and candidate lists are made here, from those. Its one
// "block" is a goroutine that takes slots from the ring table as the
// kernel's blocks do. "Device addresses" are host addresses; program
// handles are the host build's program numbers.
type emulator struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	bw   *bufio.Writer
	br   *bufio.Reader
	mu   sync.Mutex // the pipe: one request at a time
	keep [][]uint64 // allocations, kept alive
	// regions maps "device addresses" (host addresses) back to the
	// memory: allocations and registered frame memory.
	rmu     sync.Mutex
	regions []emuRegion
	next    uint32 // program numbers
	err     atomic.Pointer[error]
	wb      [8]byte // scratch for the pipe's numbers: no allocation per slot
	rb      [8]byte

	wg      sync.WaitGroup
	started bool
	quit    atomic.Bool
	// holdAcks (tests) keeps the block from acknowledging retire epochs,
	// as a block stuck in a slot (or a kernel without them) would.
	holdAcks atomic.Bool
}

func newEmulator(path string) (*emulator, error) {
	if path == "" {
		return nil, errors.New("emulation: no host build of kernel.cu (Options.Emulator; BuildHostKernel makes one)")
	}
	cmd := exec.Command(path)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("emulation: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("emulation: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("emulation: start %s: %w", path, err)
	}
	return &emulator{cmd: cmd, in: in, bw: bufio.NewWriterSize(in, 1<<16), br: bufio.NewReaderSize(out, 1<<16)}, nil
}

func (e *emulator) describe() string { return "emulation (kernel.cu's code built for the host)" }

func (e *emulator) multiprocessors() int { return 1 }
func (e *emulator) residentBlocks() int  { return 2 } // a goroutine plays all blocks

// emuRegion is memory the emulated kernel may reach, at its "device
// address".
type emuRegion struct {
	addr uint64
	mem  []byte
}

func (e *emulator) addRegion(mem []byte) uint64 {
	d := uint64(uintptr(unsafe.Pointer(&mem[0])))
	e.rmu.Lock()
	e.regions = append(e.regions, emuRegion{d, mem})
	e.rmu.Unlock()
	return d
}

// region returns the n bytes at device address d, or nil when no region
// holds them all.
func (e *emulator) region(d uint64, n int) []byte {
	e.rmu.Lock()
	defer e.rmu.Unlock()
	for _, r := range e.regions {
		if d >= r.addr && d+uint64(n) <= r.addr+uint64(len(r.mem)) {
			off := d - r.addr
			return r.mem[off : off+uint64(n) : off+uint64(n)]
		}
	}
	return nil
}

func (e *emulator) alloc(n int) ([]byte, uint64) {
	raw := make([]uint64, (n+15)/8)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&raw[0])), n)
	e.keep = append(e.keep, raw)
	return mem, e.addRegion(mem)
}

func (e *emulator) hostAlloc(n int) ([]byte, uint64, error) {
	mem, d := e.alloc(n)
	return mem, d, nil
}

func (e *emulator) hostRegister(mem []byte) (uint64, error) { return e.addRegion(mem), nil }

func (e *emulator) readMem(d uint64, dst []byte) error {
	m := e.region(d, len(dst))
	if m == nil {
		return errors.New("emulation: read of unknown memory")
	}
	copy(dst, m)
	return nil
}

func (e *emulator) deviceAllocRaw(n int) (uint64, error) { return e.deviceZero(n) }

func (e *emulator) deviceZero(n int) (uint64, error) {
	_, d := e.alloc(n)
	return d, nil
}

// The pipe's messages (host/main.cc).
const (
	emuLoad     = 1
	emuSlot     = 2
	emuCounters = 3
)

func (e *emulator) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.wb[:4], v)
	e.bw.Write(e.wb[:4])
}

func (e *emulator) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.wb[:], v)
	e.bw.Write(e.wb[:])
}

// r32 and r64 read a number of the reply; a short read leaves zeros, and
// the next reply's status read reports the broken pipe.
func (e *emulator) r32() uint32 {
	e.rb = [8]byte{}
	io.ReadFull(e.br, e.rb[:4])
	return binary.LittleEndian.Uint32(e.rb[:4])
}

func (e *emulator) r64() uint64 {
	e.rb = [8]byte{}
	io.ReadFull(e.br, e.rb[:])
	return binary.LittleEndian.Uint64(e.rb[:])
}

// reply flushes the request and reads the reply's status.
func (e *emulator) reply() error {
	if err := e.bw.Flush(); err != nil {
		return fmt.Errorf("emulation: %w", err)
	}
	if _, err := io.ReadFull(e.br, e.rb[:4]); err != nil {
		return fmt.Errorf("emulation: the host kernel went away: %w", err)
	}
	if binary.LittleEndian.Uint32(e.rb[:4]) != 0 {
		msg := make([]byte, e.r32())
		io.ReadFull(e.br, msg)
		return fmt.Errorf("emulation: host kernel: %s", msg)
	}
	return nil
}

func (e *emulator) upload(words []uint64, _ int) (uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.next++
	id := e.next
	e.u32(emuLoad)
	e.u32(id)
	e.u32(uint32(len(words)))
	binary.Write(e.bw, binary.LittleEndian, words)
	return uint64(id), e.reply()
}

func (e *emulator) rewrite(h uint64, words []uint64, _ int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.u32(emuLoad)
	e.u32(uint32(h))
	e.u32(uint32(len(words)))
	binary.Write(e.bw, binary.LittleEndian, words)
	return e.reply()
}

func (e *emulator) readCounters(h uint64, _ int, dst []uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.u32(emuCounters)
	e.u32(uint32(h))
	if err := e.reply(); err != nil {
		return err
	}
	n := int(e.r32())
	if 2*n != len(dst) {
		return fmt.Errorf("emulation: %d counter pairs, want %d", n, len(dst)/2)
	}
	return binary.Read(e.br, binary.LittleEndian, dst)
}

func (e *emulator) start(a kernelArgs, blocks int) error {
	e.started = true
	e.wg.Add(1)
	go e.block(a)
	return nil
}

// block takes submitted slots from every ring, as the kernel's blocks do.
func (e *emulator) block(a kernelArgs) {
	defer e.wg.Done()
	table := e.region(a.Table, rtBytes)
	stopMem := e.region(a.Stop, 4)
	claimMem := e.region(a.Claims, 8*maxRings)
	slots := e.region(a.Slots, int(a.RingBytes)*maxRingsOf(a))
	if table == nil || stopMem == nil || claimMem == nil || slots == nil {
		err := errors.New("emulation: kernel arguments name unknown memory")
		e.err.Store(&err)
		return
	}
	active := (*atomic.Uint32)(unsafe.Pointer(&table[rtActive]))
	stop := (*atomic.Uint32)(unsafe.Pointer(&stopMem[0]))
	claims := unsafe.Slice((*uint64)(unsafe.Pointer(&claimMem[0])), maxRings)
	retire := (*atomic.Uint64)(unsafe.Pointer(&table[rtRetire]))
	quiesced := (*atomic.Uint64)(unsafe.Pointer(&table[rtQuiesced]))
	for idle := 0; ; {
		// Between slots, as the kernel's blocks: the retire epoch seen is
		// acknowledged (one block, so the poller's minimum is its own).
		if !e.holdAcks.Load() {
			if r := uint32(retire.Load()); uint32(quiesced.Load()) != r {
				quiesced.Store(uint64(r))
			}
		}
		worked := false
		for r := range min(int(active.Load()), maxRings) {
			db := (*atomic.Uint32)(unsafe.Pointer(&table[rtDoorbells+4*r])).Load()
			for int32(db-uint32(claims[r])) > 0 {
				if err := e.slot(a, slots, r, claims[r]); err != nil {
					failed := err // only this one escapes: &err would put every call's on the heap
					e.err.Store(&failed)
					return
				}
				claims[r]++
				worked = true
			}
		}
		if worked {
			idle = 0
			continue
		}
		if stop.Load() != 0 || e.quit.Load() {
			return
		}
		idle++
		if idle < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// maxRingsOf is how many rings' slots the kernel arguments span.
func maxRingsOf(a kernelArgs) int { return int(a.RingsN) }

// slot processes ring r's slot seq through the host build.
func (e *emulator) slot(a kernelArgs, slots []byte, r int, seq uint64) error {
	sl := slots[uint64(r)*a.RingBytes+(seq%uint64(a.Nslots))*uint64(a.Stride):][:a.Stride]
	at := func(off uint32) unsafe.Pointer { return unsafe.Pointer(&sl[off]) }
	word := (*atomic.Uint64)(at(shWord)).Load()
	count := min(uint32(word>>32), a.Cap)
	prog := *(*uint64)(at(shProg))
	arenaAddr := *(*uint64)(at(shArena))
	arenaLen := *(*uint64)(at(shArenaLen))
	mf := *(*uint64)(at(shMaskFlags))
	mask, flags := mf&0xffffffff, uint32(mf>>32)
	arena := e.region(arenaAddr, int(arenaLen))
	if arena == nil {
		return fmt.Errorf("emulation: slot %d of ring %d names frame memory at %#x that was never registered", seq, r, arenaAddr)
	}
	descs := unsafe.Slice((*[2]uint64)(at(a.DescsOff)), a.Cap)
	verd := unsafe.Slice((*uint32)(at(a.VerdOff)), a.Cap)
	forced := unsafe.Slice((*byte)(at(a.ForcedOff)), (a.Cap+7)/8)

	e.mu.Lock()
	defer e.mu.Unlock()
	e.u32(emuSlot)
	e.u32(uint32(prog))
	e.u32(count)
	e.u64(mask)
	e.u64(arenaLen)
	e.u32(flags & sfAllForced)
	for i := range count {
		addr, ln := descs[i][0], uint32(descs[i][1])
		f := uint32(0)
		if flags&sfForced != 0 && forced[i>>3]>>(i&7)&1 != 0 {
			f = 1
		}
		e.u64(addr)
		e.u32(ln)
		e.u32(f)
		if ln == 0 || addr >= arenaLen || uint64(ln) > arenaLen-addr {
			e.u64(0)
			e.u32(0)
			continue
		}
		// A superset of the kernel's window (wf_window): from up to
		// WF_WIN_HEAD bytes before the packet's 16-byte boundary to
		// WF_WIN bytes past it, within the frame.
		fstart := addr &^ mask
		fend := min(fstart+mask+1, arenaLen)
		a16 := addr &^ 15
		rs := fstart
		if a16 >= fstart+winHead {
			rs = a16 - winHead
		}
		re := min(fend, a16+winBytes)
		e.u64(rs)
		e.u32(uint32(re - rs))
		e.bw.Write(arena[rs:re])
	}
	if err := e.reply(); err != nil {
		return err
	}
	var o slotOut
	o.word = ^uint32(0)
	maxw := uint32(0)
	cands := 0
	var lists [maxSamplers][]uint16
	for k := range lists {
		lists[k] = unsafe.Slice((*uint16)(at(a.SampOff+2*uint32(k)*a.Cap)), a.Cap)[:0]
	}
	for i := range count {
		w := e.r32()
		naddr := e.r64()
		nlen := e.r32()
		sample := e.r32()
		dstart := e.r64()
		dlen := e.r32()
		if dlen > 0 {
			if dstart+uint64(dlen) > arenaLen {
				return fmt.Errorf("emulation: packet %d: write-back past the frame memory", i)
			}
			if _, err := io.ReadFull(e.br, arena[dstart:dstart+uint64(dlen)]); err != nil {
				return fmt.Errorf("emulation: %w", err)
			}
		}
		verd[i] = w
		o.word, maxw = min(o.word, w), max(maxw, w)
		if w == fallbackWord {
			o.fallbacks++
			continue
		}
		if naddr != descs[i][0] || nlen != uint32(descs[i][1]) {
			descs[i][0] = naddr
			descs[i][1] = descs[i][1]&^0xffffffff | uint64(nlen)
		}
		o.bytes += uint64(nlen)
		if sample != 0 {
			cands++
			for k := range lists {
				if sample>>k&1 != 0 {
					lists[k] = append(lists[k], uint16(i))
				}
			}
		}
	}
	for k := range lists {
		o.sampleN[k] = uint16(len(lists[k]))
	}
	o.uniform = count > 0 && o.word == maxw && o.fallbacks == 0 && cands == 0
	*(*uint32)(at(soFallbacks)) = o.fallbacks
	u := uint32(0)
	if o.uniform {
		u = 1
	}
	*(*uint32)(at(soUniform)) = u
	*(*uint32)(at(soWord)) = o.word
	*(*uint64)(at(soBytes)) = o.bytes
	*(*[maxSamplers]uint16)(at(soSampleN)) = o.sampleN
	(*atomic.Uint32)(at(shWord)).Store(uint32(seq/uint64(a.Nslots))<<2 | stDone)
	return nil
}

func (e *emulator) state() (bool, error) {
	if p := e.err.Load(); p != nil {
		return true, *p
	}
	return false, nil
}

func (e *emulator) wait() error {
	if e.started {
		e.quit.Store(true)
		e.wg.Wait()
		e.started = false
	}
	if p := e.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (e *emulator) close() {
	e.quit.Store(true)
	e.wg.Wait()
	e.in.Close()
	e.cmd.Wait()
}
