package gpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/warpflow/warpflow/pipelines"
)

// Options configures a Kernel.
type Options struct {
	// Emulate plays the kernel on the host: kernel.cu's own per-packet
	// code, built for the host (host/main.cc) and run as the program
	// Emulator names, behind a pipe. Everything else is the same.
	Emulate bool
	// Emulator is the host build's path, for Emulate (BuildHostKernel
	// makes one).
	Emulator string
	// Device is the CUDA device ordinal.
	Device int
	// Blocks is the persistent kernel's block count (128 threads each);
	// 0 means 4 per multiprocessor, or fewer if fewer fit (1 when
	// emulating). More than fit on the device at once is an error: a
	// persistent kernel's blocks must all be resident.
	Blocks int
	// Rings is how many slot rings (I/O loops) the kernel serves, 1..32;
	// 0 means 16.
	Rings int
	// Slots is each ring's size; 0 means 64.
	Slots int
	// SlotCap is the most packets per slot, 1..rings.MaxBatch; 0 means
	// 1024.
	SlotCap int
	// PollNs is how long an idle block sleeps between polls of the ring
	// table once it found nothing 64 times in a row (0: spin; each poll is
	// one PCIe read).
	PollNs uint32
}

// DefaultOptions returns 16 rings of 64 slots of up to 1024 packets, idle
// blocks sleeping 1 us between polls.
func DefaultOptions() Options {
	return Options{Rings: 16, Slots: 64, SlotCap: 1024, PollNs: 1000}
}

// Kernel owns one persistent kernel (or its emulation): the slot rings it
// serves, the ring table, the programs loaded and the frame memory
// registered with it. Rings are attached and detached by executors while
// it runs; Load, Counters and Close may run on any goroutine.
type Kernel struct {
	be     backend
	o      Options
	lay    slotLayout
	table  []byte
	slots  []byte
	stop   *atomic.Uint32
	active *atomic.Uint32
	args   kernelArgs

	startOnce sync.Once
	started   atomic.Bool
	startErr  error

	mu    sync.Mutex
	rings []*ring
	inUse []bool
	regs  map[uintptr]*registration
	progs map[*Program]bool
	// spare is program memory free for the next Load; retired, memory
	// given back by Unload while the kernel runs, each with the retire
	// epoch it waits for (see Load). A running kernel's device memory is
	// never freed (cuMemFree waits for the device to be idle, and a
	// persistent kernel never is), only reused, and freed at Close.
	spare   []devMem
	retired []retiredMem
	epoch   uint32 // the last retire epoch published (rtRetire)
	mem     MemoryStats
	closed  bool
	stopped bool
	stopErr error
	freed   bool
	kstats  KernelStats

	// The counter snapshots (Counters while the kernel runs): one at a
	// time, into shadow, host memory the poller copies into.
	snapMu  sync.Mutex
	snapSeq uint64
	shadow  []uint64
	shadowD uint64
}

// KernelStats are the kernel's own counts, read when it stopped.
type KernelStats struct {
	Claims    uint64 // slots taken
	Lost      uint64 // claims another block won first
	Refreshes uint64 // mirror refreshes from host memory
	Naps      uint64 // idle naps, in thousands of polls
}

// devMem is one device allocation: a program and its counters.
type devMem struct {
	handle uint64
	words  int // capacity, in words
}

// retiredMem is program memory given back while the kernel ran, reusable
// once the kernel acknowledged epoch.
type retiredMem struct {
	devMem
	epoch uint32
}

// MemoryStats is the device memory the kernel's programs hold. Regions
// are never freed while the kernel runs, only reused, so Allocations and
// Bytes never fall before Close; with reuse they stop growing: a daemon
// that swaps pipelines of about one size holds about three regions (the
// running program, the next one and the one before, retiring).
type MemoryStats struct {
	Allocations int    // program regions allocated
	Bytes       uint64 // their size
	Live        int    // regions holding a loaded program
	Spare       int    // regions free for the next Load
	Retiring    int    // regions given back, waiting for the kernel's acknowledgement
	Reused      uint64 // loads placed in a region given back before
	// Unacknowledged counts the loads that found a retiring region large
	// enough, waited retireWait for the kernel's acknowledgement in vain
	// and allocated instead (a kernel without the acknowledgement, or a
	// block stuck in a slot).
	Unacknowledged uint64
}

// registration is one piece of frame memory registered with the device,
// shared by the rings that use it.
type registration struct {
	mem  []byte
	dptr uint64
	refs int
}

// Open validates o, allocates the pinned memory and loads the kernel; the
// first Submit launches it. Without a usable GPU it returns an
// ErrUnavailable error; with o.Emulate it needs none.
func Open(o Options) (*Kernel, error) {
	if o.Rings == 0 {
		o.Rings = 16
	}
	if o.Slots == 0 {
		o.Slots = 64
	}
	if o.SlotCap == 0 {
		o.SlotCap = 1024
	}
	if o.Rings < 1 || o.Rings > maxRings {
		return nil, fmt.Errorf("rings %d: must be in [1, %d]", o.Rings, maxRings)
	}
	if o.Slots < 2 || o.Slots > 1<<16 {
		return nil, fmt.Errorf("slots %d: must be in [2, 65536]", o.Slots)
	}
	if o.SlotCap < 1 || o.SlotCap > 1024 {
		return nil, fmt.Errorf("slot capacity %d: must be in [1, 1024]", o.SlotCap)
	}
	if o.Blocks < 0 {
		return nil, fmt.Errorf("blocks %d: must not be negative", o.Blocks)
	}
	var be backend
	if o.Emulate {
		em, err := newEmulator(o.Emulator)
		if err != nil {
			return nil, err
		}
		be = em
	} else {
		v, err := openDevice(o.Device)
		if err != nil {
			return nil, err
		}
		be = v
	}
	// The kernel runs Blocks blocks that process slots and one more that
	// polls the ring table; all of them must be resident at once.
	resident := be.residentBlocks() * be.multiprocessors()
	if o.Blocks == 0 {
		o.Blocks = max(min(4, be.residentBlocks())*be.multiprocessors()-1, 1)
	}
	if o.Blocks+1 > resident {
		be.close()
		return nil, fmt.Errorf("blocks %d: at most %d fit on %s at once with the poller, and a persistent kernel needs all of them resident", o.Blocks, resident-1, be.describe())
	}
	k := &Kernel{be: be, o: o, lay: newSlotLayout(o.SlotCap), regs: map[uintptr]*registration{}, progs: map[*Program]bool{}}
	if err := k.setup(); err != nil {
		be.close()
		return nil, err
	}
	return k, nil
}

func (k *Kernel) setup() error {
	o := k.o
	ringBytes := k.lay.stride * o.Slots
	slots, slotsDev, err := k.be.hostAlloc(ringBytes * o.Rings)
	if err != nil {
		return fmt.Errorf("pinned slots: %w", err)
	}
	table, tableDev, err := k.be.hostAlloc(rtBytes)
	if err != nil {
		return fmt.Errorf("pinned ring table: %w", err)
	}
	stopMem, stopDev, err := k.be.hostAlloc(64)
	if err != nil {
		return fmt.Errorf("pinned stop word: %w", err)
	}
	claims, err := k.be.deviceZero(dvSize(o.Blocks + 1))
	if err != nil {
		return fmt.Errorf("ring claims: %w", err)
	}
	shadow, shadowD, err := k.be.hostAlloc(8 * snapWords)
	if err != nil {
		return fmt.Errorf("pinned counter snapshots: %w", err)
	}
	k.shadow, k.shadowD = unsafe.Slice((*uint64)(unsafe.Pointer(&shadow[0])), snapWords), shadowD
	k.slots, k.table = slots, table
	k.stop = (*atomic.Uint32)(unsafe.Pointer(&stopMem[0]))
	k.active = (*atomic.Uint32)(unsafe.Pointer(&table[rtActive]))
	for i := range o.Rings {
		db := (*atomic.Uint32)(unsafe.Pointer(&table[rtDoorbells+4*i]))
		k.rings = append(k.rings, newRing(i, slots[i*ringBytes:(i+1)*ringBytes], o.Slots, k.lay, db))
	}
	k.inUse = make([]bool, o.Rings)
	k.args = kernelArgs{
		Slots: slotsDev, RingBytes: uint64(ringBytes), Table: tableDev, Claims: claims, Stop: stopDev,
		Nslots: uint32(o.Slots), Stride: uint32(k.lay.stride), Cap: uint32(o.SlotCap),
		DescsOff: uint32(k.lay.descs), VerdOff: uint32(k.lay.verdicts), ForcedOff: uint32(k.lay.forced),
		SampOff: uint32(k.lay.samples), PollNs: o.PollNs, RingsN: uint32(o.Rings),
	}
	return nil
}

// start launches the kernel once, at the first Submit.
func (k *Kernel) start() {
	k.startOnce.Do(func() {
		if err := k.be.start(k.args, k.o.Blocks+1); err != nil {
			k.startErr = fmt.Errorf("launch kernel: %w", err)
		}
		k.started.Store(true)
	})
}

// Describe names what plays the kernel, e.g. "NVIDIA H200 (sm_90, 132
// SMs, CUDA driver 13.0), 528 blocks x 128 threads, 16 rings of 64 slots
// of 1024".
func (k *Kernel) Describe() string {
	return fmt.Sprintf("%s, %d blocks x %d threads and a poller, %d rings of %d slots of %d", k.be.describe(), k.o.Blocks, kernelThreads, k.o.Rings, k.o.Slots, k.o.SlotCap)
}

// Options returns the options in effect (zero values resolved).
func (k *Kernel) Options() Options { return k.o }

// Program is a device program uploaded to the kernel's memory, with its
// own counters there.
type Program struct {
	DP     *pipelines.DeviceProgram
	handle uint64
	mem    devMem
}

// Load uploads dp; slots submitted with the returned program run it.
//
// It takes the smallest free region of program memory that is large
// enough, else allocates one. While the kernel runs, a region given back
// by Unload is free only once the kernel has acknowledged its retire
// epoch: Unload publishes a new epoch (rtRetire) after the program's
// last slot completed; each block, between two slots, sees it in the
// poller's mirror, issues a fence (its multiprocessor's L1 holds no line
// of the old words after it: they were read through the read-only path)
// and stores the epoch in its acknowledgement word; the poller publishes
// the epoch every block has reached (rtQuiesced). A region still waiting
// is waited for up to retireWait (idle blocks acknowledge within
// microseconds, busy ones within a slot), then Load allocates instead and
// counts it (MemoryStats.Unacknowledged). The words of a region reused
// while the kernel runs are written by the kernel's poller, like a new
// upload's (no driver call touches device memory while it runs).
func (k *Kernel) Load(dp *pipelines.DeviceProgram) (*Program, error) {
	k.mu.Lock()
	closed := k.closed
	k.mu.Unlock()
	if closed {
		return nil, net.ErrClosed
	}
	if dp == nil || len(dp.Words) < pipelines.DeviceHeaderWords || dp.Words[0] != pipelines.DeviceProgramMagic {
		return nil, errors.New("load: not a device program")
	}
	need := len(dp.Words) + 2*dp.Counters
	k.mu.Lock()
	running := k.started.Load() && !k.stopped
	reuse := k.takeSpareLocked(need, running)
	if reuse < 0 && running && k.acknowledges() && k.retiringFitsLocked(need) {
		deadline := time.Now().Add(retireWait)
		for reuse < 0 && k.retiringFitsLocked(need) && time.Now().Before(deadline) {
			k.mu.Unlock()
			time.Sleep(20 * time.Microsecond)
			k.mu.Lock()
			running = k.started.Load() && !k.stopped
			reuse = k.takeSpareLocked(need, running)
		}
		if reuse < 0 {
			k.mem.Unacknowledged++
		}
	}
	mem := devMem{words: need}
	fresh := reuse < 0
	var err error
	switch {
	case !fresh:
		mem = k.spare[reuse]
		k.spare = append(k.spare[:reuse], k.spare[reuse+1:]...)
		k.mem.Reused++
		if running && !k.o.Emulate {
			k.mu.Unlock()
			err = k.fillRunning(mem.handle, dp)
			k.mu.Lock()
		} else {
			err = k.be.rewrite(mem.handle, dp.Words, 2*dp.Counters)
		}
	case running && !k.o.Emulate:
		// New memory, filled by the kernel itself (see snapToDevice).
		k.mu.Unlock()
		mem.handle, err = k.uploadRunning(dp)
		k.mu.Lock()
	default:
		mem.handle, err = k.be.upload(dp.Words, 2*dp.Counters)
	}
	defer k.mu.Unlock()
	if fresh && mem.handle != 0 {
		k.mem.Allocations++
		k.mem.Bytes += 8 * uint64(mem.words)
	}
	if err != nil {
		if mem.handle != 0 {
			k.spare = append(k.spare, mem) // the memory is the kernel's still; the next Load rewrites it
		}
		return nil, fmt.Errorf("load: %w", err)
	}
	p := &Program{DP: dp, handle: mem.handle, mem: mem}
	k.progs[p] = true
	return p, nil
}

// acknowledges reports whether the running kernel acknowledges retire
// epochs (its poller said so at start; the emulation always does).
func (k *Kernel) acknowledges() bool {
	return k.o.Emulate || k.debugWords()[1] == acksMark
}

// retireWait bounds how long Load waits for the kernel to acknowledge a
// retiring region before it allocates instead.
const retireWait = 50 * time.Millisecond

// takeSpareLocked moves the regions the kernel has acknowledged to the
// spare list (running) and returns the index of the smallest spare region
// of at least need words, or -1.
func (k *Kernel) takeSpareLocked(need int, running bool) int {
	if len(k.retired) > 0 {
		q := uint32(k.word(rtQuiesced).Load())
		if !running {
			q = k.epoch // a stopped kernel reads nothing
		}
		kept := k.retired[:0]
		for _, r := range k.retired {
			if int32(q-r.epoch) >= 0 {
				k.spare = append(k.spare, r.devMem)
			} else {
				kept = append(kept, r)
			}
		}
		k.retired = kept
	}
	best := -1
	for i, m := range k.spare {
		if m.words >= need && (best < 0 || m.words < k.spare[best].words) {
			best = i
		}
	}
	return best
}

func (k *Kernel) retiringFitsLocked(need int) bool {
	for _, r := range k.retired {
		if r.words >= need {
			return true
		}
	}
	return false
}

// word is the ring table's 64-bit word at off.
func (k *Kernel) word(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&k.table[off]))
}

// Memory reports the device memory the programs hold.
func (k *Kernel) Memory() MemoryStats {
	k.mu.Lock()
	defer k.mu.Unlock()
	m := k.mem
	m.Live, m.Spare, m.Retiring = len(k.progs), len(k.spare), len(k.retired)
	return m
}

// uploadRunning places dp in new device memory while the kernel runs: the
// words go through the snapshot buffer, the kernel's poller copies them
// and zeroes the counters.
func (k *Kernel) uploadRunning(dp *pipelines.DeviceProgram) (uint64, error) {
	h, err := k.be.deviceAllocRaw(8 * (len(dp.Words) + 2*dp.Counters))
	if err != nil {
		return 0, err
	}
	return h, k.fillRunning(h, dp)
}

// fillRunning has the kernel's poller write dp's words at device address
// h and zero its counters after them.
func (k *Kernel) fillRunning(h uint64, dp *pipelines.DeviceProgram) error {
	k.snapMu.Lock()
	defer k.snapMu.Unlock()
	for off := 0; off < len(dp.Words); off += snapWords {
		n := copy(k.shadow, dp.Words[off:])
		if err := k.kernelOpLocked(snapToDevice, k.shadowD, h+8*uint64(off), n); err != nil {
			return err
		}
	}
	return k.kernelOpLocked(snapZero, 0, h+8*uint64(len(dp.Words)), 2*dp.Counters)
}

// Unload gives p's memory back for a later Load; no slot in flight may
// still name it (every slot submitted with p completed). While the kernel
// runs the memory retires: Unload publishes a new retire epoch and the
// memory is reused once the kernel has acknowledged it (see Load).
func (k *Kernel) Unload(p *Program) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.progs[p] {
		return
	}
	delete(k.progs, p)
	if !k.started.Load() || k.stopped {
		k.spare = append(k.spare, p.mem)
		return
	}
	k.epoch++
	k.word(rtRetire).Store(uint64(k.epoch))
	k.retired = append(k.retired, retiredMem{p.mem, k.epoch})
}

// Counters reads p's counters as the kernel has counted them so far into
// dst (2*p.DP.Counters words). While the kernel runs, its poller copies
// them into host memory on request (no driver call: a copy from device
// memory through the driver would have to get past a kernel that never
// ends); otherwise they are copied from device memory.
func (k *Kernel) Counters(p *Program, dst []uint64) error {
	if len(dst) != 2*p.DP.Counters {
		return fmt.Errorf("counters: %d words for %d pairs", len(dst), p.DP.Counters)
	}
	k.mu.Lock()
	stopped := k.stopped
	k.mu.Unlock()
	if k.o.Emulate || !k.started.Load() || stopped {
		if err := k.be.readCounters(p.handle, len(p.DP.Words), dst); err != nil {
			return fmt.Errorf("read counters: %w", err)
		}
		return nil
	}
	return k.snapshot(p, dst)
}

// snapWait bounds how long a counter snapshot may take.
const snapWait = 2 * time.Second

func (k *Kernel) snapshot(p *Program, dst []uint64) error {
	k.snapMu.Lock()
	defer k.snapMu.Unlock()
	src := p.handle + 8*uint64(len(p.DP.Words))
	for off := 0; off < len(dst); off += snapWords {
		n := min(snapWords, len(dst)-off)
		if err := k.kernelOpLocked(snapToHost, src+8*uint64(off), k.shadowD, n); err != nil {
			return fmt.Errorf("read counters: %w", err)
		}
		copy(dst[off:off+n], k.shadow[:n])
	}
	return nil
}

// kernelOpLocked asks the kernel's poller to do one snap* op of n words
// and waits for it (snapMu held).
func (k *Kernel) kernelOpLocked(op, src, dst uint64, n int) error {
	at := k.word
	at(rtSnapOp).Store(op)
	at(rtSnapSrc).Store(src)
	at(rtSnapDst).Store(dst)
	at(rtSnapWords).Store(uint64(n))
	k.snapSeq++
	at(rtSnapReq).Store(k.snapSeq)
	deadline := time.Now().Add(snapWait)
	for i := 0; at(rtSnapDone).Load() != k.snapSeq; i++ {
		if i&1023 == 1023 {
			if err := k.Err(); err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the kernel did not answer a request in %v", snapWait)
			}
			time.Sleep(10 * time.Microsecond)
		}
	}
	return nil
}

// attach takes a free ring for frame memory arena (frames of frameSize
// bytes), registering the memory with the device unless a ring already
// did.
func (k *Kernel) attach(arena []byte, frameSize int) (*attachment, error) {
	if frameSize < 64 || frameSize&(frameSize-1) != 0 {
		return nil, fmt.Errorf("frame size %d: must be a power of two of at least 64", frameSize)
	}
	if len(arena) == 0 || len(arena)%frameSize != 0 {
		return nil, fmt.Errorf("frame memory of %d bytes: must be a positive multiple of the frame size %d", len(arena), frameSize)
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(arena)))
	if base&15 != 0 {
		return nil, errors.New("frame memory: must start on a 16-byte boundary (the kernel loads frames 16 bytes at a time)")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, net.ErrClosed
	}
	idx := -1
	for i, used := range k.inUse {
		if !used {
			idx = i
			break
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("all %d rings of the kernel are attached: raise Options.Rings", len(k.rings))
	}
	reg := k.regs[base]
	if reg == nil || len(reg.mem) != len(arena) {
		if reg != nil {
			return nil, errors.New("frame memory overlaps memory another ring registered with another length")
		}
		for _, o := range k.regs {
			ob := uintptr(unsafe.Pointer(unsafe.SliceData(o.mem)))
			if base < ob+uintptr(len(o.mem)) && ob < base+uintptr(len(arena)) {
				return nil, errors.New("frame memory overlaps memory another ring registered")
			}
		}
		dptr, err := k.be.hostRegister(arena)
		if err != nil {
			return nil, fmt.Errorf("register frame memory: %w", err)
		}
		reg = &registration{mem: arena, dptr: dptr}
		k.regs[base] = reg
	}
	reg.refs++
	k.inUse[idx] = true
	k.setActiveLocked()
	return &attachment{k: k, r: k.rings[idx], reg: reg, base: base, mask: uint64(frameSize - 1)}, nil
}

func (k *Kernel) setActiveLocked() {
	n := 0
	for i, used := range k.inUse {
		if used {
			n = i + 1
		}
	}
	k.active.Store(uint32(n))
}

// attachment is one executor's use of a ring and of its frame memory.
type attachment struct {
	k    *Kernel
	r    *ring
	reg  *registration
	base uintptr
	mask uint64
}

// submit publishes the attachment's acquired slot.
func (a *attachment) submit(count int, p *Program, flags uint32) {
	a.k.start()
	a.r.submit(count, p.handle, a.reg.dptr, uint64(len(a.reg.mem)), a.mask, flags)
}

// detach gives the ring back (every slot released).
func (a *attachment) detach() error {
	k := a.k
	k.mu.Lock()
	defer k.mu.Unlock()
	if a.r == nil {
		return nil
	}
	k.inUse[a.r.idx] = false
	a.r = nil
	k.setActiveLocked()
	// The registration stays (and keeps the memory alive) until Close:
	// unregistering waits for the device, which a persistent kernel never
	// lets go; the next ring on the same memory takes it up again.
	a.reg.refs--
	return nil
}

// Err reports a kernel that stopped by itself (a fault): then no slot
// will complete again.
func (k *Kernel) Err() error {
	if !k.started.Load() {
		return nil
	}
	if k.startErr != nil {
		return k.startErr
	}
	done, err := k.be.state()
	if err != nil {
		return err
	}
	k.mu.Lock()
	stopped := k.stopped
	k.mu.Unlock()
	if done && !stopped {
		return errors.New("persistent kernel exited")
	}
	return nil
}

// debugWords returns stop page words 1-3: word 1 is 0xc0de0004 once block
// 0 runs.
func (k *Kernel) debugWords() [3]uint32 {
	p := (*[4]atomic.Uint32)(unsafe.Pointer(k.stop))
	return [3]uint32{p[1].Load(), p[2].Load(), p[3].Load()}
}

// Stop stops the kernel (it exits at its next idle poll) and waits for it.
// The memory stays mapped until Close. Stop is idempotent.
func (k *Kernel) Stop() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	if k.stopped {
		return k.stopErr
	}
	k.stopped = true
	k.stop.Store(1)
	if k.started.Load() {
		k.stopErr = k.be.wait()
		if k.stopErr == nil {
			var b [32]byte
			if err := k.be.readMem(k.args.Claims+dvStats, b[:]); err == nil {
				k.kstats = KernelStats{
					Claims: le64(b[0:]), Lost: le64(b[8:]), Refreshes: le64(b[16:]), Naps: le64(b[24:]),
				}
			}
		}
		tracef("stop: %v; kernel words %#x; %+v", k.stopErr, k.debugWords(), k.kstats)
	}
	return k.stopErr
}

func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// Stats returns the kernel's own counts, once it stopped (zero before).
func (k *Kernel) Stats() KernelStats {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.kstats
}

// Close stops the kernel and frees every allocation and registration.
// Rings still attached are abandoned. Close is idempotent.
func (k *Kernel) Close() error {
	err := k.Stop()
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.freed {
		k.freed = true
		k.be.close()
	}
	return err
}

// The kernels shared by executors, one per (emulation, device).
var (
	sharedMu sync.Mutex
	sharedKs = map[sharedKey]*sharedKernel{}
)

type sharedKey struct {
	emulate  bool
	emulator string
	device   int
}

type sharedKernel struct {
	k    *Kernel
	refs int
}

// acquireKernel returns the process's kernel for o's device, opening it
// with o the first time, and counts a reference to it.
func acquireKernel(o Options) (*Kernel, error) {
	key := sharedKey{o.Emulate, o.Emulator, o.Device}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if s := sharedKs[key]; s != nil {
		s.refs++
		return s.k, nil
	}
	k, err := Open(o)
	if err != nil {
		return nil, err
	}
	sharedKs[key] = &sharedKernel{k: k, refs: 1}
	return k, nil
}

// releaseKernel drops a reference from acquireKernel; the last one closes
// the kernel.
func releaseKernel(k *Kernel) error {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	for key, s := range sharedKs {
		if s.k == k {
			if s.refs--; s.refs == 0 {
				delete(sharedKs, key)
				return k.Close()
			}
			return nil
		}
	}
	return nil
}
