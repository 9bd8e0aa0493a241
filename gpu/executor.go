package gpu

import (
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/workers"
)

// What NewExecutor does with a pipeline the device cannot run whole
// (pipelines.CompileDevice's error names the stage).
const (
	// UnsupportedRefuse fails the executor's start with the stage named.
	UnsupportedRefuse = "refuse"
	// UnsupportedCPU runs the pipeline on CPU workers and says so in one
	// line (ExecutorOptions.Notice).
	UnsupportedCPU = "cpu"
)

// ExecutorOptions configures the CUDA executor.
type ExecutorOptions struct {
	// Kernel configures the process's kernel for the device, when the
	// first executor opens it; later executors share it, one ring each.
	Kernel Options
	// Unsupported is UnsupportedRefuse ("" means it) or UnsupportedCPU.
	Unsupported string
	// Notice receives the one line UnsupportedCPU says; nil logs it.
	Notice func(string)
}

// NewExecutor returns a factory for dataplane.Options.NewExecutor that runs
// the whole pipeline in the persistent kernel: every stage of every packet
// in the device's common case, with the frames read and rewritten where
// the input port put them (the engine's arena, or a UMEM, registered with
// the device) and one verdict word per packet back. Packets outside the
// common case go, in order, to CPU workers running the pipeline's own
// runners; the completion hands the engine all verdicts in receive order
// (workers.VerdictExecutor). Each executor is one ring of the process's
// shared kernel: several engines (I/O loops) feed one kernel.
//
// The engine gives the executor max(Workers, 1)+1 runners: the first
// takes the device's counters (added from the device's memory at a
// refresh and at Close, on the consumer's goroutine), the others run the
// fallback workers.
func NewExecutor(o ExecutorOptions) func(dataplane.ExecutorConfig) (workers.Executor, error) {
	return func(cfg dataplane.ExecutorConfig) (workers.Executor, error) {
		if cfg.Graph == nil {
			return nil, errors.New("cuda backend: executor config lacks the graph")
		}
		dp, err := pipelines.CompileDevice(cfg.Graph)
		if err != nil {
			if errors.Is(err, pipelines.ErrNotOnDevice) && o.Unsupported == UnsupportedCPU {
				msg := fmt.Sprintf("cuda backend: pipeline %q runs on the CPU: %v", cfg.Graph.Name(), err)
				if o.Notice != nil {
					o.Notice(msg)
				} else {
					log.Print(msg)
				}
				return dataplane.NewCPUExecutor(cfg)
			}
			return nil, fmt.Errorf("cuda backend: pipeline %q: %w", cfg.Graph.Name(), err)
		}
		if o.Unsupported != "" && o.Unsupported != UnsupportedRefuse && o.Unsupported != UnsupportedCPU {
			return nil, fmt.Errorf("cuda backend: unsupported %q: want %s or %s", o.Unsupported, UnsupportedRefuse, UnsupportedCPU)
		}
		return newExecutor(o, cfg, dp)
	}
}

// Executor is the CUDA backend's workers.VerdictExecutor.
type Executor struct {
	k    *Kernel
	at   *attachment
	prog *Program
	dp   *pipelines.DeviceProgram
	dev  *pipelines.Runner // the device's counters are added to it
	cpu  *workers.Pool     // the fallback workers
	r    *ring

	batches []*rings.Batch // per slot index, Descs a view of the slot's
	st      []slotState
	dseq    uint64 // the next done slot whose fallbacks to hand out
	acq     bool   // a slot acquired, not submitted
	holding bool
	hseq    uint64 // the slot Completed returned
	verd    workers.Verdicts
	lists   [][]uint16 // merged candidate lists, per sampler

	// Counters: last is what was added to dev; buf the read in progress.
	last, buf   []uint64
	reading     atomic.Bool // a read of buf is in progress
	pending     atomic.Bool // a read finished and is not added yet
	readErr     atomic.Pointer[error]
	sinceRead   int
	readAt      time.Time
	countersErr error

	packets, fallbacks atomic.Uint64
	device             atomic.Uint64 // packets - fallbacks, added once per batch (counters.go)
	// submits and inFlightSum: the slots submitted and, summed at each
	// submit, how many were in flight (producer goroutine's).
	submits, inFlightSum atomic.Uint64
	closed, freed        bool
}

// slotState is what the executor knows of one slot besides the ring.
type slotState struct {
	looked    bool     // the kernel's out fields were read
	out       slotOut  // and they are
	idx       []uint16 // the packets handed back, in order
	sent      bool     // their CPU batch is submitted
	forcedSet bool     // the forced bitmap holds bits from a submit
}

func newExecutor(o ExecutorOptions, cfg dataplane.ExecutorConfig, dp *pipelines.DeviceProgram) (*Executor, error) {
	if len(cfg.Runners) < 2 || cfg.Arena == nil || cfg.NewBatch == nil {
		return nil, fmt.Errorf("cuda backend: executor config lacks runners (%d, want the device's and at least one CPU worker's), arena or batches", len(cfg.Runners))
	}
	k, err := acquireKernel(o.Kernel)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			releaseKernel(k)
		}
	}()
	if cfg.BatchSize > k.o.SlotCap {
		return nil, fmt.Errorf("cuda backend: batch size %d: the kernel's slots take at most %d", cfg.BatchSize, k.o.SlotCap)
	}
	at, err := k.attach(cfg.Arena.Mem(), cfg.Arena.FrameSize())
	if err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	prog, err := k.Load(dp)
	if err != nil {
		at.detach()
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	e := &Executor{k: k, at: at, prog: prog, dp: dp, dev: cfg.Runners[0], r: at.r,
		last: make([]uint64, 2*dp.Counters), buf: make([]uint64, 2*dp.Counters), readAt: time.Now()}
	n := int(e.r.n)
	e.batches = make([]*rings.Batch, n)
	e.st = make([]slotState, n)
	for i := range n {
		b := cfg.NewBatch()
		b.Descs = e.r.descs(uint64(i))[:0:cfg.BatchSize]
		e.batches[i] = b
		e.st[i].idx = make([]uint16, 0, cfg.BatchSize)
	}
	e.lists = make([][]uint16, dp.Samplers)
	for k := range e.lists {
		e.lists[k] = make([]uint16, 0, cfg.BatchSize)
	}
	e.verd.Samples = make([][]uint16, dp.Samplers)
	// The fallback workers: the pipeline's own runners on CPU workers, as
	// many as the pipeline asks for (at least one).
	nw := min(max(cfg.Workers, 1), len(cfg.Runners)-1)
	kernels := make([]workers.Kernel, nw)
	for i := range kernels {
		kernels[i] = cfg.Runners[1+i]
	}
	wo := workers.DefaultOptions()
	wo.Workers = nw
	wo.Slots = 1
	for wo.Slots < max(n, nw) {
		wo.Slots *= 2
	}
	wo.NewBatch = cfg.NewBatch
	wo.Idle = cfg.Idle
	if e.cpu, err = workers.NewPool(wo, kernels); err != nil {
		k.Unload(prog)
		at.detach()
		return nil, fmt.Errorf("cuda backend: fallback workers: %w", err)
	}
	e.dseq = e.r.cseq
	ok = true
	return e, nil
}

// Kernel returns the kernel the executor runs on.
func (e *Executor) Kernel() *Kernel { return e.k }

// ExecutorStats is what an executor counted so far.
type ExecutorStats struct {
	Packets   uint64 // completed through it
	Fallbacks uint64 // of which the kernel handed back to the CPU path
	InFlight  int    // slots submitted and not released
	// Submits counts the slots submitted; InFlightSum adds up, at each
	// submit, the slots in flight then (InFlightSum/Submits: how deep the
	// I/O loop keeps the ring).
	Submits, InFlightSum uint64
}

// Stats returns the executor's counts; safe from any goroutine.
func (e *Executor) Stats() ExecutorStats {
	return ExecutorStats{Packets: e.packets.Load(), Fallbacks: e.fallbacks.Load(), InFlight: e.r.inFlight(),
		Submits: e.submits.Load(), InFlightSum: e.inFlightSum.Load()}
}

// SettlesMeta implements workers.MetaSettler: the engine defers the
// packets' metadata, which the device never needs written, and the
// executor settles it for the packets it hands to the CPU.
func (e *Executor) SettlesMeta() bool { return true }

func (e *Executor) Acquire() (*rings.Batch, bool) {
	if e.closed {
		return nil, false
	}
	seq, ok := e.r.acquire()
	if !ok {
		return nil, false
	}
	b := e.batches[seq%e.r.n]
	if !e.acq {
		b.Clear()
		e.acq = true
	}
	return b, true
}

func (e *Executor) Submit() {
	if !e.acq {
		panic("gpu: Submit without Acquire")
	}
	seq := e.r.pseq
	i := seq % e.r.n
	b := e.batches[i]
	st := &e.st[i]
	descs := e.r.descs(seq)
	if n := b.Len(); n > 0 && unsafe.SliceData(b.Descs) != unsafe.SliceData(descs) {
		// A port replaced the batch's descriptor slice: the slot's own
		// memory is what the kernel reads.
		copy(descs, b.Descs)
		b.Descs = descs[:n:cap(b.Descs)]
	}
	flags := uint32(0)
	if st.forcedSet {
		clear(e.r.forced(seq))
		st.forcedSet = false
	}
	if e.dev.Tapped() {
		flags |= sfAllForced // a capture sees every packet: the CPU path takes them
	} else if k := b.DeferredFrom(); k > 0 {
		// Packets whose metadata the port wrote: a cut capture's flag
		// sends them to the CPU's decoder.
		fm := e.r.forced(seq)
		for j := range k {
			if b.Meta[j].Flags&rings.FlagCut != 0 {
				fm[j>>3] |= 1 << (j & 7)
				st.forcedSet = true
			}
		}
		if st.forcedSet {
			flags |= sfForced
		}
	}
	e.acq = false
	e.at.submit(b.Len(), e.prog, flags)
	e.submits.Add(1)
	e.inFlightSum.Add(uint64(e.r.inFlight()))
}

// dispatch hands the fallbacks of done slots, in order, to the CPU
// workers while they have room.
func (e *Executor) dispatch() {
	if e.dseq < e.r.cseq {
		e.dseq = e.r.cseq
	}
	for e.dseq < e.r.submitted.Load() && e.r.done(e.dseq) {
		seq := e.dseq
		st := &e.st[seq%e.r.n]
		if !st.looked {
			st.out = e.r.out(seq)
			st.looked = true
		}
		if st.out.fallbacks == 0 {
			e.dseq++
			continue
		}
		cb, ok := e.cpu.Acquire()
		if !ok {
			return
		}
		b := e.batches[seq%e.r.n]
		verd := e.r.verdicts(seq)
		st.idx = st.idx[:0]
		for i := range b.Len() {
			if verd[i] != fallbackWord {
				continue
			}
			j := len(cb.Descs)
			cb.Descs = append(cb.Descs, b.Descs[i])
			cb.Meta = cb.Meta[:j+1]
			b.MetaOf(i, &cb.Meta[j])
			st.idx = append(st.idx, uint16(i))
		}
		e.cpu.Submit()
		st.sent = true
		e.dseq++
	}
}

func (e *Executor) Completed() (*rings.Batch, bool) {
	if e.holding {
		return e.batches[e.hseq%e.r.n], true
	}
	e.dispatch()
	seq, ok := e.r.completed()
	if !ok {
		e.refresh(true)
		return nil, false
	}
	i := seq % e.r.n
	st := &e.st[i]
	if !st.looked {
		st.out = e.r.out(seq)
		st.looked = true
	}
	b := e.batches[i]
	verd := e.r.verdicts(seq)
	n := b.Len()
	for k := range e.verd.Samples {
		e.verd.Samples[k] = e.r.samples(seq, k)[:st.out.sampleN[k]]
	}
	fb := 0
	if st.out.fallbacks > 0 {
		if !st.sent {
			return nil, false // dispatch waits for a CPU slot
		}
		cb, ok := e.cpu.Completed()
		if !ok {
			return nil, false
		}
		e.merge(b, verd, st, cb)
		e.cpu.Release()
		e.fallbacks.Add(uint64(len(st.idx)))
		fb = len(st.idx)
	}
	e.verd.Words = verd[:n]
	b.Outcome = rings.Outcome{}
	if st.out.uniform {
		v, t := workers.UnpackVerdict(st.out.word)
		b.Outcome = rings.Outcome{Valid: true, Verdict: v, Target: t, Bytes: st.out.bytes}
	}
	e.packets.Add(uint64(n))
	e.device.Add(uint64(n - fb))
	e.holding, e.hseq = true, seq
	e.sinceRead++
	e.refresh(false)
	return b, true
}

// merge writes the CPU workers' results for the packets of b the kernel
// handed back: descriptors, verdict words, and their sample marks into
// the candidate lists, in packet order.
func (e *Executor) merge(b *rings.Batch, verd []uint32, st *slotState, cb *rings.Batch) {
	marks := uint32(0)
	for j, i := range st.idx {
		m := &cb.Meta[j]
		b.Descs[i] = cb.Descs[j]
		verd[i] = workers.PackVerdict(m.Verdict, m.Target)
		marks |= m.SampleMask
	}
	for k := range e.verd.Samples {
		if marks>>k&1 == 0 {
			continue
		}
		dev := e.verd.Samples[k]
		out := e.lists[k][:0]
		d := 0
		for j, i := range st.idx {
			if cb.Meta[j].SampleMask>>k&1 == 0 {
				continue
			}
			for d < len(dev) && dev[d] < i {
				out = append(out, dev[d])
				d++
			}
			out = append(out, i)
		}
		out = append(out, dev[d:]...)
		e.lists[k] = out
		e.verd.Samples[k] = out
	}
}

// Verdicts implements workers.VerdictExecutor.
func (e *Executor) Verdicts() workers.Verdicts { return e.verd }

func (e *Executor) Release() {
	if !e.holding {
		panic("gpu: Release without Completed")
	}
	st := &e.st[e.hseq%e.r.n]
	st.looked, st.sent = false, false
	st.idx = st.idx[:0]
	e.holding = false
	e.r.release()
	if e.closed && e.r.inFlight() == 0 {
		e.free()
	}
}

func (e *Executor) InFlight() int { return e.r.inFlight() }

// refreshEvery bounds how stale the device's counters in the runner may be
// while the executor is busy; refreshIdle how soon they are read once the
// ring is empty.
const (
	refreshEvery = 100 * time.Millisecond
	refreshIdle  = 10 * time.Millisecond
)

// refresh adds the device's counters to the device runner when a read
// finished, and starts a read when one is due and slots completed since
// the last: after refreshEvery under load (the clock read once per 64
// batches), or refreshIdle once the ring is empty. The read runs on
// another goroutine (a driver call); the consumer only adds what it read.
// Consumer goroutine only.
func (e *Executor) refresh(idle bool) {
	if e.closed || e.reading.Load() {
		return
	}
	if e.readDone() {
		e.dev.Publish()
	}
	if e.sinceRead == 0 {
		return
	}
	due := false
	switch {
	case idle && e.r.inFlight() == 0:
		due = time.Since(e.readAt) >= refreshIdle
	case !idle && e.sinceRead%64 == 0:
		due = time.Since(e.readAt) >= refreshEvery
	}
	if !due {
		return
	}
	e.sinceRead = 0
	e.readAt = time.Now()
	e.reading.Store(true)
	go func() {
		if err := e.k.Counters(e.prog, e.buf); err != nil {
			e.readErr.Store(&err)
		}
		e.pending.Store(true)
		e.reading.Store(false)
	}()
}

// readDone adds a finished read's delta to the device runner and reports
// whether there was one.
func (e *Executor) readDone() bool {
	if !e.pending.Swap(false) {
		return false
	}
	if p := e.readErr.Swap(nil); p != nil {
		if e.countersErr == nil {
			e.countersErr = *p
		}
		return false
	}
	for i := range e.buf {
		e.buf[i], e.last[i] = e.buf[i]-e.last[i], e.buf[i]
	}
	if err := e.dev.AddDeviceCounts(e.dp, e.buf); err != nil && e.countersErr == nil {
		e.countersErr = err
	}
	return true
}

// closeWait bounds how long Close waits for the kernel to finish the
// slots already submitted.
const closeWait = 5 * time.Second

// Close waits for the kernel to finish every submitted slot (the consumer
// can still drain them through Completed and Release, fallbacks
// included), adds the device's final counters to the device runner, and
// gives the ring back once every slot is released. A kernel that does not
// finish in time is reported.
func (e *Executor) Close() error {
	if e.closed {
		return nil
	}
	e.closed = true
	var err error
	deadline := time.Now().Add(closeWait)
	for !e.r.allDone() || e.reading.Load() {
		if kerr := e.k.Err(); kerr != nil {
			err = kerr
			break
		}
		if time.Now().After(deadline) {
			err = fmt.Errorf("cuda backend: %d batches not done after %v", e.r.inFlight(), closeWait)
			break
		}
		time.Sleep(50 * time.Microsecond)
	}
	if err == nil {
		e.readDone()
		if rerr := e.k.Counters(e.prog, e.buf); rerr != nil {
			err = rerr
		} else {
			e.pending.Store(true)
			e.readDone()
			e.dev.Publish()
		}
	}
	if err == nil {
		err = e.countersErr
	}
	if e.r.inFlight() == 0 {
		e.free()
	}
	return err
}

func (e *Executor) free() {
	if e.freed {
		return
	}
	e.freed = true
	e.cpu.Close()
	e.k.Unload(e.prog)
	e.at.detach()
	releaseKernel(e.k)
}

var _ workers.VerdictExecutor = (*Executor)(nil)
var _ workers.MetaSettler = (*Executor)(nil)
