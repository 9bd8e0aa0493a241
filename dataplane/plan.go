package dataplane

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/workers"
)

// plan is the unit of swap: everything the engine derives from one
// compiled pipeline (the graph, one runner per worker, the resolved output
// ports, the sample sinks, where its ports and reasons sit in the counter
// layout) and, when it needs a worker pool of its own, that pool. It is
// built whole by NewEngine or Swap and published through Engine.planPtr;
// the I/O loop loads that pointer once per batch (when it takes a fresh
// slot) and stamps the slot with it, the slot's worker runs the stamped
// plan's runner, and the completion acts on the verdicts against the same
// plan. Apart from the I/O loop's scratch lists (txList, passList, the
// samplers' lists and counts) and the two atomics below, nothing in a plan
// changes after it is published.
type plan struct {
	gen     uint64
	graph   *pipelines.Graph
	runners []*pipelines.Runner
	workers int
	// tableBytes is the stage tables this plan's runners allocate when
	// they first run (CheckTableMemory), less those a swap hands over.
	tableBytes uint64
	runnerN    int // runners: workers, or 1 inline, plus an executor's
	batch      int

	out     []Port // by graph port index
	outComp []int  // graph port index -> Engine.comps index, -1: borrows
	txList  [][]rings.Desc
	samples []sampler
	// samplePub is samples' counts as published by the I/O loop
	// (publishSamples), for Engine.Stats on other goroutines.
	samplePub []samplePub
	// portIdx and reasonIdx map the graph's port and reason numbers
	// (Meta.Target) to counter indices in lay.
	portIdx   []int
	reasonIdx []int
	lay       *layout

	// pool is the executor this plan runs on when it cannot share the one
	// running (another worker count or batch size, a custom executor, or
	// inline to workers and back); nil when it shares the running one.
	// inline is its batch when it runs inline.
	pool   *pool
	inline *rings.Batch

	// repools: the plan runs on an executor of its own (pool, or inline
	// when nil), which Swap prepared.
	repools bool

	// atTakeUp is SwapOptions.AtTakeUp, run by the I/O loop when it takes
	// the plan up (takeUp); takeUpErr is its result, written before
	// takenUpAt (unix ns) is stored, so a reader that saw takenUpAt sees
	// it.
	atTakeUp  func() error
	takeUpErr error
	takenUpAt atomic.Int64

	// Stateful stages (steer.go): clock says the I/O loop stamps every
	// received batch with the time for ports that do not (the stages'
	// timeouts); steer, with more than one worker, is how flows are
	// steered to workers (the pool is then pinned, see runSteered).
	clock bool
	steer *pipelines.Steering

	// activeAt is when (unix ns) the first batch stamped with this plan
	// completed; retired is set once no batch stamped with it remains and
	// a newer plan took over: its runners are quiescent from then on.
	activeAt atomic.Int64
	retired  atomic.Bool
}

// takeUp runs at the batch boundary at which the I/O loop (or, before
// the run, adoptBeforeRun) makes p the plan new batches go to, before the
// first of them is received: p's AtTakeUp, then the time. Once per plan;
// never per packet.
func (e *Engine) takeUp(p *plan) {
	if p.atTakeUp != nil {
		p.takeUpErr = p.atTakeUp()
	}
	p.takenUpAt.Store(time.Now().UnixNano())
}

// samplePub is one sampler's published kept count: a single-writer
// atomic.
type samplePub struct{ kept atomic.Uint64 }

// pool is one executor generation and, for the engine's own CPU pool, the
// stamps its workers read.
type pool struct {
	exec workers.Executor
	// stamps maps each slot's batch to its stamp, for the engine's own
	// CPU pool (nil for an executor from Options.NewExecutor, which runs
	// one plan for its whole life). Built before the pool's workers start
	// and never changed after; the cells are written by the I/O loop
	// while it holds the slot (before Submit) and read by the worker that
	// claims it, the slot's status word ordering the two.
	stamps map[*rings.Batch]*stamp
	// lazyMeta: the executor settles deferred metadata, so the I/O loop
	// receives into its batches with the metadata deferred.
	lazyMeta bool
	// verdicts, when set, is the executor as a VerdictExecutor: its
	// batches' verdicts are its compact words, not their Meta.
	verdicts workers.VerdictExecutor
	// pinned: a pinned CPU pool (slot s runs on worker s % workers) for
	// plans that steer flows; the I/O loop runs runSteered on it.
	pinned  bool
	workers int
	batch   int
	// fifo is the stamp of every batch in flight, in submission order
	// (completions come back in that order). Capacity: the slot count.
	fifo []*plan
	head int // next to pop
	n    int
}

type stamp struct{ plan *plan }

func (p *pool) push(pl *plan) {
	if p.n == len(p.fifo) {
		// More in flight than slots: only an executor that breaks its
		// contract does this; grow rather than lose a stamp.
		grown := make([]*plan, 2*len(p.fifo)+1)
		for i := range p.n {
			grown[i] = p.fifo[(p.head+i)%len(p.fifo)]
		}
		p.fifo, p.head = grown, 0
	}
	p.fifo[(p.head+p.n)%len(p.fifo)] = pl
	p.n++
}

func (p *pool) pop() *plan {
	if p.n == 0 {
		return nil
	}
	pl := p.fifo[p.head]
	p.fifo[p.head] = nil
	p.head = (p.head + 1) % len(p.fifo)
	p.n--
	return pl
}

// planKernel is worker i's kernel in the engine's own pool: it runs the
// runner of whichever plan stamped the batch.
type planKernel struct {
	i      int
	stamps map[*rings.Batch]*stamp
}

func (k planKernel) Process(b *rings.Batch) {
	k.stamps[b].plan.runners[k.i].Process(b)
}

// layout is the counter layout: every tx port and drop reason any plan of
// this engine has had, in order of first appearance, so that a counter
// keeps its index (and its count) across swaps. The first plan's reasons
// come first, then the engine's own (tx_full ...), then reasons later
// plans added. A layout never changes; a plan that adds names gets a new,
// longer one, with its own published atomics.
type layout struct {
	ports   []string
	reasons []string
	// engineBase is the index of the first engine reason (tx_full).
	engineBase int
	// Published counters, by index, for Stats (see published).
	txPackets, txBytes     []atomic.Uint64
	dropPackets, dropBytes []atomic.Uint64
}

func newLayout(ports, reasons []string, engineBase int) *layout {
	return &layout{
		ports: ports, reasons: reasons, engineBase: engineBase,
		txPackets: make([]atomic.Uint64, len(ports)), txBytes: make([]atomic.Uint64, len(ports)),
		dropPackets: make([]atomic.Uint64, len(reasons)), dropBytes: make([]atomic.Uint64, len(reasons)),
	}
}

// extend returns l itself when it already names every port and reason of
// g, else a longer layout with g's new names appended.
func (l *layout) extend(g *pipelines.Graph) *layout {
	ports, reasons := l.ports, l.reasons
	grown := false
	for _, p := range g.Ports() {
		if !slices.Contains(ports, p) {
			ports, grown = append(slices.Clip(ports), p), true
		}
	}
	for _, r := range g.Reasons() {
		if !slices.Contains(reasons, r) {
			reasons, grown = append(slices.Clip(reasons), r), true
		}
	}
	if !grown {
		return l
	}
	return newLayout(ports, reasons, l.engineBase)
}

// ErrSwap is wrapped by every error Swap returns for a plan it refused;
// the running plan and its counters are untouched.
var ErrSwap = errors.New("pipeline swap refused")

// buildPlan makes a plan for g with outputs outs over e's layout (lay, or
// a new first layout when lay is nil). It checks everything a plan needs
// up front: worker and batch limits, an output for every port, sampler
// settings and sinks, and that every Completer output is one the engine
// registered at its start. It does not start a pool.
func (e *Engine) buildPlan(g *pipelines.Graph, outs Outputs, old *plan) (*plan, error) {
	o := e.opts
	p := &plan{graph: g}
	var lay *layout
	if old != nil {
		lay = old.lay
	}
	set := g.Settings()
	p.workers, p.batch = set.Workers, set.BatchSize
	if o.Workers >= 0 {
		p.workers = o.Workers
	}
	if o.BatchSize > 0 {
		p.batch = o.BatchSize
	}
	if p.batch > rings.MaxBatch {
		return nil, fmt.Errorf("batch size %d: must be at most %d", p.batch, rings.MaxBatch)
	}
	if p.batch <= 0 {
		return nil, fmt.Errorf("batch size %d: must be at least 1", p.batch)
	}
	if p.workers > pipelines.MaxWorkers {
		return nil, fmt.Errorf("workers %d: must be at most %d", p.workers, pipelines.MaxWorkers)
	}
	for _, name := range g.Ports() {
		port, ok := outs.Ports[name]
		if !ok || port == nil {
			return nil, fmt.Errorf("pipeline %q transmits on port %q, which has no output", g.Name(), name)
		}
		p.out = append(p.out, port)
		p.txList = append(p.txList, make([]rings.Desc, 0, p.batch))
	}
	for _, s := range g.Samplers() {
		if s.Mode != "every" && s.Mode != "first" {
			return nil, fmt.Errorf("sample stage %q: unknown mode %q", s.Stage, s.Mode)
		}
		if s.N == 0 {
			return nil, fmt.Errorf("sample stage %q: N must be at least 1", s.Stage)
		}
		sink := outs.Samples[s.File]
		if _, ok := sink.(Completer); ok {
			return nil, fmt.Errorf("sample %s to %s: sink %s keeps frames after Transmit (a Completer), which a sample sink may not", s.Stage, s.File, sink.Name())
		}
		p.samples = append(p.samples, sampler{info: s, every: s.Mode == "every", sink: sink, list: make([]rings.Desc, 0, p.batch)})
	}
	p.samplePub = make([]samplePub, len(p.samples))
	if lay == nil {
		reasons := append(g.Reasons(), engineReasonNames[:]...)
		lay = newLayout(g.Ports(), reasons, len(g.Reasons()))
	} else {
		lay = lay.extend(g)
	}
	p.lay = lay
	for _, name := range g.Ports() {
		p.portIdx = append(p.portIdx, slices.Index(lay.ports, name))
	}
	for _, r := range g.Reasons() {
		p.reasonIdx = append(p.reasonIdx, slices.Index(lay.reasons, r))
	}
	if outs.Tap != nil && outs.Tap.Graph() != g {
		return nil, fmt.Errorf("the tap was made for pipeline %q, not %q", outs.Tap.Graph().Name(), g.Name())
	}
	if err := e.planState(p); err != nil {
		return nil, err
	}
	// One runner per worker, and one more for an executor from
	// Options.NewExecutor: one that runs the pipeline elsewhere (a GPU)
	// adds that work's counters to a runner no worker uses.
	nr := max(p.workers, 1)
	if o.NewExecutor != nil {
		nr++
	}
	// The stage tables the runners will allocate when they first run
	// (those a swap hands over whole excepted), checked before any is.
	// carryState hands each runner its old one's state when the runner
	// counts and the steering match (sameCarry): only then is a table
	// kept whole.
	var prev *pipelines.Graph
	if sameCarry(old, nr, p.steer) {
		prev = old.graph
	}
	p.tableBytes, p.runnerN = g.NewTableBytes(prev)*uint64(nr), nr
	if err := CheckTableMemory(g.Name(), p.tableBytes, nr); err != nil {
		return nil, err
	}
	for i := range nr {
		r := g.NewRunner(pipelines.RunnerOptions{Timing: o.Timing, Worker: i, Workers: max(p.workers, 1)})
		if outs.Tap != nil {
			r.SetTap(outs.Tap) // before the plan is published: no batch without it
		}
		p.runners = append(p.runners, r)
	}
	return p, nil
}

// resolveOutputs fills p.outComp against the engine's registered
// Completers. At NewEngine (register true) new Completers are registered;
// for a swap (register false) a Completer the engine does not know is
// refused: its frames would have no account.
func (e *Engine) resolveOutputs(p *plan, register bool) error {
	p.outComp = p.outComp[:0]
	for i, port := range p.out {
		k := e.findCompleter(port)
		if k < 0 && register {
			k = e.addCompleter(port)
		} else if k < 0 {
			if _, ok := port.(Completer); ok {
				return fmt.Errorf("port %q (%s) keeps frames after Transmit and was not among the engine's outputs when it started: list it in Outputs.Spare", p.graph.Ports()[i], port.Name())
			}
		}
		p.outComp = append(p.outComp, k)
	}
	return nil
}

// findCompleter returns the index in e.comps of port, or -1.
func (e *Engine) findCompleter(port Port) int {
	c, ok := port.(Completer)
	if !ok {
		return -1
	}
	for i := range e.comps {
		if samePort(e.comps[i].port, c) {
			return i
		}
	}
	return -1
}

// needsPool reports whether p cannot run on the executor generation cur
// (nil: inline): another worker count or batch size, a custom executor
// (which runs one plan for its life), or inline to workers and back.
func (e *Engine) needsPool(p *plan, cur *pool, curBatch int) bool {
	if cur == nil {
		return p.workers != 0 || e.opts.NewExecutor != nil || p.batch != curBatch
	}
	return cur.stamps == nil || p.workers != cur.workers || p.batch != cur.batch || cur.pinned != (p.steer != nil)
}

// newPool starts the executor for p: the engine's own CPU pool of
// planKernels, or Options.NewExecutor's executor over p's runners. It
// returns nil, nil when p runs inline.
func (e *Engine) newPool(p *plan) (*pool, error) {
	if p.workers == 0 && e.opts.NewExecutor == nil {
		p.inline = rings.NewBatch(p.batch, e.arena)
		return nil, nil
	}
	batch, a := p.batch, e.arena
	cfg := ExecutorConfig{
		Graph: p.graph, Runners: p.runners, Arena: a, BatchSize: batch,
		NewBatch: func() *rings.Batch { return rings.NewBatch(batch, a) },
		Workers:  p.workers,
		// Deep enough that the I/O loop rarely waits on a worker: with only
		// a few slots per worker the handoff, not the pipeline, sets the pace.
		Slots: 64,
		Idle:  e.opts.Idle,
	}
	for cfg.Slots < 8*p.workers {
		cfg.Slots *= 2
	}
	pl := &pool{workers: p.workers, batch: p.batch, fifo: make([]*plan, cfg.Slots)}
	if e.opts.NewExecutor != nil {
		ex, err := e.opts.NewExecutor(cfg)
		if err != nil {
			return nil, fmt.Errorf("start workers: %w", err)
		}
		if ex == nil {
			return nil, errors.New("start workers: executor factory returned nil")
		}
		pl.exec = ex
		pl.lazyMeta = settlesMeta(ex)
		pl.verdicts, _ = ex.(workers.VerdictExecutor)
		return pl, nil
	}
	// The engine's own pool: each slot's batch gets a stamp cell, made
	// here, before any worker starts.
	pl.stamps = make(map[*rings.Batch]*stamp, cfg.Slots)
	cfg.NewBatch = func() *rings.Batch {
		b := rings.NewBatch(batch, a)
		pl.stamps[b] = &stamp{plan: p}
		return b
	}
	n := max(p.workers, 1)
	kernels := make([]workers.Kernel, n)
	for i := range kernels {
		kernels[i] = planKernel{i: i, stamps: pl.stamps}
	}
	wo := workers.DefaultOptions()
	wo.Workers = n
	wo.Slots = cfg.Slots
	wo.NewBatch = cfg.NewBatch
	wo.Idle = cfg.Idle
	wo.Pinned = p.steer != nil
	ex, err := workers.NewPool(wo, kernels)
	if err != nil {
		return nil, fmt.Errorf("start workers: %w", err)
	}
	pl.exec, pl.lazyMeta, pl.pinned = ex, true, wo.Pinned
	return pl, nil
}

// settlesMeta reports whether ex settles deferred batch metadata itself.
func settlesMeta(ex workers.Executor) bool {
	ms, ok := ex.(workers.MetaSettler)
	return ok && ms.SettlesMeta()
}
