package gpu

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/warpflow/warpflow/pipelines"
)

// Options configures a Classifier.
type Options struct {
	// Emulate plays the kernel in Go instead of on a GPU (CI, machines
	// without CUDA). Everything else is the same.
	Emulate bool
	// Device is the CUDA device ordinal.
	Device int
	// Blocks is the persistent kernel's block count (128 threads each);
	// 0 means 4 per multiprocessor, or fewer if fewer fit (2 when
	// emulating). More than fit on the device at once is an error: a
	// persistent kernel's blocks must all be resident.
	Blocks int
	// Slots is the slot ring's size, a multiple of Blocks; 0 means
	// 2*Blocks.
	Slots int
	// SlotCap is the most packets per slot, 1..65536.
	SlotCap int
	// ArenaBytes is the size of the pinned frame memory, a multiple of
	// FrameSize, allocated with cuMemHostAlloc. Ignored when Arena is set.
	ArenaBytes int
	// Arena, when set, is existing frame memory (a rings.Arena's Mem, a
	// UMEM) to register with cuMemHostRegister instead; the caller keeps
	// it alive until Close.
	Arena []byte
	// FrameSize is the frame arena's frame size (a power of two): the
	// kernel never reads past a packet's frame.
	FrameSize int
	// PollNs is how long an idle block sleeps between polls of its next
	// slot (0: spin; each poll is one PCIe read).
	PollNs uint32
}

// DefaultOptions returns 1024-packet slots over 16 MiB of 4 KiB frames.
func DefaultOptions() Options {
	return Options{SlotCap: 1024, ArenaBytes: 16 << 20, FrameSize: 4096}
}

// Classifier owns a persistent classify kernel (or its emulation), the
// pinned frame memory it reads, the slot ring it serves and the uploaded
// programs. The producer (Acquire, Submit) and consumer (Completed,
// Release) are one goroutine each; Load, Counters and Close may run on
// any goroutine.
type Classifier struct {
	be    backend
	o     Options
	arena []byte
	slots []byte
	stop  *atomic.Uint32
	ring  *ring

	args     kernelArgs
	started  atomic.Bool // the kernel was launched (by the producer)
	startErr error       // why the launch failed; written before started is seen by Err's caller

	mu      sync.Mutex
	progs   []*Program
	closed  atomic.Bool // no more Acquire
	stopped bool        // kernel stopped; guarded by mu
	freed   bool        // memory freed; guarded by mu
	stopErr error
}

// Program is a filter blob uploaded to the kernel's memory, with its own
// per-rule counters there. Programs stay allocated until Close, so a slot
// submitted with an older program can still finish after a swap.
type Program struct {
	Blob     *pipelines.FilterBlob
	blob     uint64
	counters uint64
}

// Open validates o, allocates the pinned memory and loads the kernel; the
// first Submit launches it, once. Without a usable GPU it returns an ErrUnavailable
// error; with o.Emulate it needs none.
func Open(o Options) (*Classifier, error) {
	if o.SlotCap < 1 || o.SlotCap > 1<<16 {
		return nil, fmt.Errorf("slot capacity %d: must be in [1, 65536]", o.SlotCap)
	}
	if o.FrameSize < 64 || o.FrameSize&(o.FrameSize-1) != 0 {
		return nil, fmt.Errorf("frame size %d: must be a power of two of at least 64", o.FrameSize)
	}
	if o.Arena != nil {
		o.ArenaBytes = len(o.Arena)
	}
	if o.ArenaBytes <= 0 || o.ArenaBytes%o.FrameSize != 0 {
		return nil, fmt.Errorf("arena size %d: must be a positive multiple of the frame size %d", o.ArenaBytes, o.FrameSize)
	}
	if o.Arena != nil && uintptr(unsafe.Pointer(unsafe.SliceData(o.Arena)))&15 != 0 {
		return nil, errors.New("arena: must start on a 16-byte boundary (the kernel loads frames 16 bytes at a time)")
	}
	if o.Blocks < 0 || o.Slots < 0 {
		return nil, fmt.Errorf("blocks %d, slots %d: must not be negative", o.Blocks, o.Slots)
	}
	var be backend
	if o.Emulate {
		be = newEmulator()
	} else {
		v, err := openDevice(o.Device)
		if err != nil {
			return nil, err
		}
		be = v
	}
	resident := be.residentBlocks() * be.multiprocessors()
	if o.Blocks == 0 {
		o.Blocks = min(4, be.residentBlocks()) * be.multiprocessors()
		if o.Emulate {
			o.Blocks = 2
		}
	}
	if o.Blocks > resident {
		be.close()
		return nil, fmt.Errorf("blocks %d: at most %d fit on %s at once, and a persistent kernel needs all of them resident", o.Blocks, resident, be.describe())
	}
	if o.Slots == 0 {
		o.Slots = 2 * o.Blocks
	}
	if o.Slots%o.Blocks != 0 {
		be.close()
		return nil, fmt.Errorf("slots %d: must be a multiple of blocks %d", o.Slots, o.Blocks)
	}
	c := &Classifier{be: be, o: o}
	if err := c.setup(); err != nil {
		be.close()
		return nil, err
	}
	return c, nil
}

func (c *Classifier) setup() error {
	o := c.o
	arena, arenaDev, err := o.Arena, uint64(0), error(nil)
	if arena != nil {
		arenaDev, err = c.be.hostRegister(arena)
	} else {
		arena, arenaDev, err = c.be.hostAlloc(o.ArenaBytes)
	}
	if err != nil {
		return fmt.Errorf("pinned frame memory: %w", err)
	}
	stride := slotStride(o.SlotCap)
	slots, slotsDev, err := c.be.hostAlloc(stride * o.Slots)
	if err != nil {
		return fmt.Errorf("pinned slots: %w", err)
	}
	stopMem, stopDev, err := c.be.hostAlloc(64)
	if err != nil {
		return fmt.Errorf("pinned stop word: %w", err)
	}
	c.arena, c.slots = arena, slots
	c.stop = (*atomic.Uint32)(unsafe.Pointer(&stopMem[0]))
	c.ring = newRing(slots, o.Slots, o.SlotCap)
	a := kernelArgs{
		slots: slotsDev, arena: arenaDev, arenaLen: uint64(len(arena)), stop: stopDev,
		frameMask: uint64(o.FrameSize - 1), nslots: uint32(o.Slots), stride: uint32(stride),
		cap: uint32(o.SlotCap), pollNs: o.PollNs,
	}
	c.args = a
	return nil
}

// start launches the kernel once, at the first Submit, after the Loads
// that come before it, so that a kernel that never gets work costs
// nothing and the first programs are in place before it polls.
func (c *Classifier) start() {
	defer c.started.Store(true)
	if err := c.be.start(c.args, c.o.Blocks); err != nil {
		c.startErr = fmt.Errorf("launch kernel: %w", err)
	}
}

// Describe names what plays the kernel, e.g. "NVIDIA H200 (sm_90, 132
// SMs, CUDA driver 13.0)".
func (c *Classifier) Describe() string {
	return fmt.Sprintf("%s, %d blocks x %d threads, %d slots of %d", c.be.describe(), c.o.Blocks, kernelThreads, c.o.Slots, c.o.SlotCap)
}

// Options returns the options in effect (zero values resolved).
func (c *Classifier) Options() Options { return c.o }

// Arena returns the pinned, device-mapped frame memory: descriptors'
// addresses are offsets into it. Valid until Close.
func (c *Classifier) Arena() []byte { return c.arena }

// Load uploads blob b for slots submitted with the returned program; a
// running kernel picks it up from the next such slot, without relaunch
// (TestSwapCUDA).
func (c *Classifier) Load(b *pipelines.FilterBlob) (*Program, error) {
	if c.closed.Load() {
		return nil, net.ErrClosed
	}
	if b == nil || len(b.Words) == 0 || b.Words[0] != pipelines.FilterBlobMagic {
		return nil, errors.New("load: not a filter blob")
	}
	blob, cnt, err := c.be.upload(b)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	p := &Program{Blob: b, blob: blob, counters: cnt}
	c.mu.Lock()
	c.progs = append(c.progs, p)
	c.mu.Unlock()
	return p, nil
}

// Acquire returns the next slot if it is free (never blocks). Fill
// Descs[:n] and Submit(n, p). Producer goroutine only.
func (c *Classifier) Acquire() (*Slot, bool) {
	if c.closed.Load() {
		return nil, false
	}
	return c.ring.acquire()
}

// Submit hands the acquired slot's first n descriptors to the kernel, to
// be classified with program p.
func (c *Classifier) Submit(n int, p *Program) {
	if n < 0 || n > c.o.SlotCap {
		panic("gpu: submit count out of range")
	}
	if !c.started.Load() {
		c.start()
	}
	c.ring.submit(n, p.blob)
}

// Completed returns the oldest submitted slot once its results are
// written (never blocks): Results[i] is packet i's rule index (the rule
// count for the default) or Fallback. Consumer goroutine only.
func (c *Classifier) Completed() (*Slot, bool) { return c.ring.completed() }

// Release returns the slot from Completed to the ring.
func (c *Classifier) Release() { c.ring.release() }

// InFlight returns the slots submitted and not yet released.
func (c *Classifier) InFlight() int { return c.ring.inFlight() }

// Err reports a kernel that stopped by itself (a fault): then no slot
// will complete again.
func (c *Classifier) Err() error {
	if !c.started.Load() {
		return nil
	}
	if c.startErr != nil {
		return c.startErr
	}
	done, err := c.be.state()
	if err != nil {
		return err
	}
	if done && !c.closed.Load() {
		return errors.New("persistent kernel exited")
	}
	return nil
}

// debugWords returns stop page words 1-3: word 1 is 0xc0de0003 once block
// 0 runs; word 2 is block 0's progress (phase | seq<<8) in a WF_TRACE
// build of the kernel.
func (c *Classifier) debugWords() [3]uint32 {
	p := (*[4]atomic.Uint32)(unsafe.Pointer(c.stop))
	return [3]uint32{p[1].Load(), p[2].Load(), p[3].Load()}
}

// Counters reads program p's per-rule counters as the kernel has counted
// them so far (packets it classified, not those it handed back):
// pkts[r], bytes[r] for rule r, index p.Blob.Rules for the default.
func (c *Classifier) Counters(p *Program) (pkts, bytes []uint64, err error) {
	n := p.Blob.Rules + 1
	buf := make([]uint64, 2*n)
	if err := c.be.readCounters(p.counters, buf); err != nil {
		return nil, nil, fmt.Errorf("read counters: %w", err)
	}
	return buf[:n], buf[n:], nil
}

// Stop stops the kernel (it exits at its next poll) and waits for it;
// slots still ready are left unprocessed. The memory stays mapped, so
// completed slots stay readable until Close. Stop is idempotent.
func (c *Classifier) Stop() error {
	c.closed.Store(true)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return c.stopErr
	}
	c.stopped = true
	c.stop.Store(1)
	c.stopErr = c.be.wait()
	if c.started.Load() {
		tracef("stop: %v; kernel words %#x", c.stopErr, c.debugWords())
	}
	return c.stopErr
}

// Close stops the kernel and frees every allocation (and unregisters an
// Options.Arena). Slots still in flight are abandoned; nothing the
// classifier returned may be used afterwards. Close is idempotent.
func (c *Classifier) Close() error {
	err := c.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.freed {
		c.freed = true
		c.be.close()
	}
	return err
}
