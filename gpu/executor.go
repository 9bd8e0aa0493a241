package gpu

import (
	"errors"
	"fmt"
	"time"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/workers"
)

// ExecutorOptions configures the CUDA executor.
type ExecutorOptions struct {
	Emulate bool   // play the kernel in Go (no GPU needed)
	Device  int    // CUDA device ordinal
	PollNs  uint32 // Options.PollNs
}

// NewExecutor returns a factory for dataplane.Options.NewExecutor that runs
// the pipeline's filter classification in the persistent kernel. The
// engine's frame arena is registered with the device (cuMemHostRegister),
// so the kernel reads frames where the input port put them, with no copy.
//
// Per batch: Submit copies the descriptors into the slot's pinned record;
// the kernel parses and classifies every packet in its common case; once
// the slot is done, Completed runs the pipeline's CPU runner on the batch
// with the kernel's rule per packet given to the filter stage
// (pipelines.SetFilterHints), which looks up only the packets the kernel
// handed back. So verdicts and every counter are the CPU path's by
// construction; what moves to the GPU is the classifier, which is the cost
// that grows with the rule count. The runner's other stages (parse
// included, for the metadata later stages and the engine read) still run
// on the host.
//
// The pipeline must start with parse followed by filter
// (pipelines.ErrNoFilter otherwise). The executor does not learn of a hot
// swap through the seam; Classifier.Load uploads a new blob to a running
// kernel.
func NewExecutor(o ExecutorOptions) func(dataplane.ExecutorConfig) (workers.Executor, error) {
	return func(cfg dataplane.ExecutorConfig) (workers.Executor, error) {
		return newExecutor(o, cfg)
	}
}

// Executor is the CUDA backend's workers.Executor.
type Executor struct {
	c         *Classifier
	prog      *Program
	fp        *pipelines.FilterProgram
	runner    *pipelines.Runner
	batches   []*rings.Batch
	processed []bool
	cur       *Slot // acquired, not yet submitted
	closed    bool
	freed     bool
	// handedBack counts packets the kernel left to the CPU path; total
	// counts all. Consumer goroutine only.
	handedBack, total uint64
}

// Stats returns how many packets went through the executor and how many
// of them the kernel handed back to the CPU path. Call it from the
// consumer goroutine or after the run.
func (e *Executor) Stats() (packets, handedBack uint64) { return e.total, e.handedBack }

func newExecutor(o ExecutorOptions, cfg dataplane.ExecutorConfig) (*Executor, error) {
	fp, err := pipelines.GraphFilter(cfg.Graph)
	if err != nil {
		return nil, fmt.Errorf("cuda backend: pipeline %q: %w", cfg.Graph.Name(), err)
	}
	if len(cfg.Runners) == 0 || cfg.Arena == nil || cfg.NewBatch == nil {
		return nil, errors.New("cuda backend: executor config lacks runners, arena or batches")
	}
	slots := max(cfg.Slots, 2)
	co := Options{
		Emulate: o.Emulate, Device: o.Device, PollNs: o.PollNs,
		Blocks: slots / 2, Slots: slots, SlotCap: cfg.BatchSize,
		Arena: cfg.Arena.Mem(), FrameSize: cfg.Arena.FrameSize(),
	}
	if o.Emulate {
		co.Blocks = 2
	}
	c, err := Open(co)
	if err != nil {
		return nil, err
	}
	prog, err := c.Load(fp.Blob)
	if err != nil {
		c.Close()
		return nil, err
	}
	e := &Executor{c: c, prog: prog, fp: fp, runner: cfg.Runners[0],
		batches: make([]*rings.Batch, slots), processed: make([]bool, slots)}
	for i := range e.batches {
		e.batches[i] = cfg.NewBatch()
	}
	return e, nil
}

// Classifier returns the executor's classifier (for its counters).
func (e *Executor) Classifier() *Classifier { return e.c }

// Program returns the program the executor submits with.
func (e *Executor) Program() *Program { return e.prog }

func (e *Executor) Acquire() (*rings.Batch, bool) {
	if e.closed {
		return nil, false
	}
	s, ok := e.c.Acquire()
	if !ok {
		return nil, false
	}
	b := e.batches[s.seq%uint64(len(e.batches))]
	if e.cur == nil {
		b.Clear()
	}
	e.cur = s
	return b, true
}

func (e *Executor) Submit() {
	s := e.cur
	if s == nil {
		panic("gpu: Submit without Acquire")
	}
	b := e.batches[s.seq%uint64(len(e.batches))]
	n := copy(s.Descs, b.Descs)
	e.cur = nil
	e.c.Submit(n, e.prog)
}

func (e *Executor) Completed() (*rings.Batch, bool) {
	s, ok := e.c.Completed()
	if !ok {
		return nil, false
	}
	i := s.seq % uint64(len(e.batches))
	b := e.batches[i]
	if !e.processed[i] {
		e.processed[i] = true
		if err := pipelines.SetFilterHints(e.runner, e.fp.FilterNode, s.Results[:s.count]); err != nil {
			panic(err) // GraphFilter named this node a filter
		}
		e.runner.Process(b)
		pipelines.SetFilterHints(e.runner, e.fp.FilterNode, nil)
		for _, r := range s.Results[:s.count] {
			if r == Fallback {
				e.handedBack++
			}
		}
		e.total += uint64(s.count)
	}
	return b, true
}

func (e *Executor) Release() {
	s, ok := e.c.Completed()
	if !ok {
		panic("gpu: Release without Completed")
	}
	e.processed[s.seq%uint64(len(e.batches))] = false
	e.c.Release()
	if e.closed && e.c.InFlight() == 0 {
		e.free()
	}
}

func (e *Executor) InFlight() int { return e.c.InFlight() }

// closeWait bounds how long Close waits for the kernel to finish the
// slots already submitted.
const closeWait = 5 * time.Second

// Close waits for every submitted slot to be done (so the consumer can
// still drain them), then stops the kernel; memory is freed once every
// slot is released. A kernel that does not finish in time is reported.
func (e *Executor) Close() error {
	if e.closed {
		return nil
	}
	e.closed = true
	var err error
	deadline := time.Now().Add(closeWait)
	for !e.c.ring.allDone() {
		if kerr := e.c.Err(); kerr != nil {
			err = kerr
			break
		}
		if time.Now().After(deadline) {
			err = fmt.Errorf("cuda backend: %d batches not done after %v", e.c.InFlight(), closeWait)
			break
		}
		time.Sleep(50 * time.Microsecond)
	}
	if serr := e.c.Stop(); err == nil {
		err = serr
	}
	if e.c.InFlight() == 0 {
		e.free()
	}
	return err
}

func (e *Executor) free() {
	if !e.freed {
		e.freed = true
		e.c.Close()
	}
}

var _ workers.Executor = (*Executor)(nil)
