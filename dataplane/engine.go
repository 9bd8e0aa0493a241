package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/workers"
)

// Options configures an Engine.
type Options struct {
	// Workers overrides the pipeline's settings.workers when >= 0. Zero runs
	// the pipeline inline in the I/O loop (one goroutine, no handoff): the
	// fastest mode on a single core.
	Workers int
	// BatchSize overrides the pipeline's settings.batch_size when > 0.
	BatchSize int
	// Timing measures nanoseconds per stage (one clock read per stage per
	// batch, never per packet).
	Timing bool
	// Idle is the workers' idle policy.
	Idle workers.IdlePolicy
	// TrackFrames is the accounting (debug) mode: a rings.Tracker with one
	// owner per place records every frame handed to the pipeline, to the
	// outputs and back, fails the run on a frame found in two places
	// (naming the frame and both), and at the end audits the arena (every
	// frame recorded free is on the free stack exactly once). Ports that
	// implement FrameTracker record their own places; an input that keeps
	// recycled frames elsewhere than the arena's free stack (a fill ring)
	// must, or the audit reports its frames lost. It costs a few ns per
	// packet; use it in tests and when debugging a port.
	TrackFrames bool
	// NewExecutor, when set, makes the executor that runs the pipeline on
	// the engine's batches (a GPU backend, say); the engine then always
	// hands batches through it, whatever Workers says. Nil runs Workers
	// CPU workers (NewCPUExecutor), or inline when Workers is zero.
	NewExecutor func(ExecutorConfig) (workers.Executor, error)
	// DrainTimeout bounds the wait at the end of a run for frames that
	// Completer outputs still hold (AF_XDP TX awaiting completion). Frames
	// not back by then are counted as lost and Run returns ErrFramesLost.
	// Zero means one second.
	DrainTimeout time.Duration
}

// defaultDrainTimeout is DrainTimeout's zero value: far longer than any
// completion takes on a working link, short enough for a daemon's stop.
const defaultDrainTimeout = time.Second

// ExecutorConfig is what an executor factory gets to build an executor for
// one engine.
type ExecutorConfig struct {
	// Graph is the compiled pipeline the engine runs.
	Graph *pipelines.Graph
	// Runners are the pipeline's per-worker runners, max(Workers, 1) of
	// them and one more (the engine makes one more for every executor
	// factory); runner i belongs to worker i. The engine's Report sums
	// their counters, so an executor that does a runner's work elsewhere
	// (on a GPU) must still account it there (Runner.AddDeviceCounts, on
	// the runner no worker uses) or run the runner.
	Runners []*pipelines.Runner
	// Arena holds every frame the batches' descriptors name.
	Arena *rings.Arena
	// BatchSize is the capacity of every batch the executor hands out:
	// NewBatch makes such batches over Arena.
	BatchSize int
	NewBatch  func() *rings.Batch
	// Workers is the worker count asked for (the pipeline's setting or
	// Options.Workers); Slots, a power of two, is the depth the engine
	// suggests so that the handoff rarely sets the pace.
	Workers int
	Slots   int
	// Idle is the workers' idle policy.
	Idle workers.IdlePolicy
}

// NewCPUExecutor is the default executor factory: a workers.Pool of
// c.Workers persistent goroutines (at least one), each running its own
// runner.
func NewCPUExecutor(c ExecutorConfig) (workers.Executor, error) {
	n := max(c.Workers, 1)
	if len(c.Runners) < n {
		return nil, fmt.Errorf("cpu executor: %d runners for %d workers", len(c.Runners), n)
	}
	kernels := make([]workers.Kernel, n)
	for i := range kernels {
		kernels[i] = c.Runners[i]
	}
	wo := workers.DefaultOptions()
	wo.Workers = n
	wo.Slots = c.Slots
	wo.NewBatch = c.NewBatch
	wo.Idle = c.Idle
	return workers.NewPool(wo, kernels)
}

// DefaultOptions returns options that take workers and batch size from the
// pipeline and measure per-stage time.
func DefaultOptions() Options {
	return Options{Workers: -1, Timing: true, Idle: workers.DefaultIdlePolicy(), DrainTimeout: defaultDrainTimeout}
}

// Outputs names where each of the graph's tx ports, its pass verdicts and its
// samplers go.
type Outputs struct {
	// Ports maps a tx port name (pipelines.Graph.Ports) to its port. Every
	// port the graph names must be present.
	Ports map[string]Port
	// Pass receives packets with the pass verdict; nil counts them only.
	// It is the engine's for its whole life: a swap keeps it.
	Pass Port
	// Samples maps a sampler's file name to its sink; a missing entry counts
	// samples without writing them.
	Samples map[string]Port
	// Spare lists ports a later Swap may transmit on that this graph does
	// not: a Completer among them is registered now, so that its frames
	// are accounted from the start (Swap refuses a Completer it was not
	// given here).
	Spare []Port
	// Tap, when set, is set on the plan's runners before the plan is
	// published, so that a capture goes on across a swap without a batch
	// missed (pipelines.Tap.Follow makes it); it must be a tap on
	// the graph swapped to. The old plan's runners keep their tap until
	// they retire.
	Tap *pipelines.Tap
}

// Engine runs one compiled pipeline at a time over one input port: an I/O
// loop that receives batches, hands them to an executor (by default a pool of
// persistent CPU workers; Options.NewExecutor plugs in another backend) or
// runs the pipeline inline, and acts on the verdicts in receive order. Swap
// replaces the pipeline while it runs (see plan).
//
// The I/O loop is the only goroutine that touches ports and the arena's free
// stack; workers touch only the batches they hold. That single-owner rule is
// what lets the whole path run without locks.
type Engine struct {
	arena *rings.Arena
	in    Port
	pass  Port
	opts  Options

	// The plans. planPtr is the newest published plan (NewEngine's, or
	// Swap's); cur is the one the I/O loop stamps new batches with, old
	// the one before it while batches stamped with it are still in
	// flight (its grace period). cur and old are the I/O loop's.
	planPtr   atomic.Pointer[plan]
	cur, old  *plan
	curActive bool // a batch stamped with cur has completed
	// liveClock says the input port leaves the packets' time to the
	// engine (its receives keep the engine's stamp: a live port), so the
	// engine may tell idle workers the time (ticks, see tickDue); a port
	// that stamps its own (a replay) never gets them. tickedAt is the
	// engine's clock at the last tick. The I/O loop's.
	liveClock bool
	tickedAt  uint64
	pool      *pool // the running executor generation; nil: inline
	inline    *rings.Batch
	restamp   int     // slots whose stamp cell may still name an older plan
	lay       *layout // the I/O loop's counter layout (cur's)
	layPtr    atomic.Pointer[layout]
	poolPtr   atomic.Pointer[pool] // pool, for Stats
	ctl       control
	waiter    Waiter // the input, when it can wait for packets (nil: ioBackoff)

	passList []rings.Desc

	// Completer outputs, each once (a port can be a tx port and the pass
	// port). A plan's outComp maps its port index to its entry (-1: the
	// port only borrows frames), passComp likewise for the pass port. When
	// any output is a Completer (holds), complete builds recycle, the
	// frames to give back now, instead of recycling the whole batch.
	comps    []completer
	passComp int
	holds    bool
	recycle  []rings.Desc
	compBuf  []rings.Desc

	// Frame accounting: inEngine is how many frames the engine holds
	// (received, not yet handed on); pub is what the I/O loop publishes
	// for Frames and Stats. reporters are the ports that report their
	// own places (the input and Completers), each once.
	inEngine  int
	pub       published
	dirty     bool   // counts changed since the last publish
	pubAt     uint64 // counts.received at the last publish
	reporters []FrameReporter
	inReports bool
	counts    counts
	elapsed   time.Duration
	tracker   *rings.Tracker // nil unless Options.TrackFrames
	inFlight  rings.Owner    // the engine's place
	inHome    rings.Owner    // where recycled frames go: the input's home, or free
	inTracks  bool           // the input is a FrameTracker
	busy      []rings.Owner  // places a frame received from the input cannot be in
	trackErr  error
	// outErr is the first error an output (tx, pass or sample sink)
	// returned; the run goes on so that every packet is still accounted
	// for, and Run returns it at the end.
	outErr error
}

func (e *Engine) noteOutErr(err error) {
	if e.outErr == nil {
		e.outErr = err
	}
}

func (e *Engine) noteTxError(p *plan, port int, err error) {
	e.noteOutErr(fmt.Errorf("transmit on %s: %w", p.out[port].Name(), err))
}

func (e *Engine) notePassError(err error) {
	e.noteOutErr(fmt.Errorf("pass to %s: %w", e.pass.Name(), err))
}

func (e *Engine) noteSampleError(s *sampler, err error) {
	e.noteOutErr(fmt.Errorf("sample %s to %s: %w", s.info.Stage, s.info.File, err))
}

type sampler struct {
	info      pipelines.SamplerInfo
	every     bool // Mode "every" (1 in N), else "first" (the first N)
	sink      Port
	candidate uint64
	kept      uint64 // candidates picked, for the sink
	list      []rings.Desc
}

// counts are the engine's own verdict counters, written only by the I/O
// loop, indexed by the counter layout (Engine.lay).
type counts struct {
	received, receivedBytes uint64
	txPackets, txBytes      []uint64 // by layout port
	dropPackets, dropBytes  []uint64 // by layout reason
	passPackets, passBytes  uint64
	batches                 uint64
	execFull                uint64 // turns with every executor slot in flight
}

// Engine-level drop reasons, placed in the counter layout after the first
// graph's own.
const (
	reasonTxFull    = "tx_full"
	reasonTxError   = "tx_error"
	reasonNoVerdict = "internal_no_verdict"
	reasonPassFull  = "pass_full"
	reasonPassError = "pass_error"
)

// Offsets of the engine's drop reasons from layout.engineBase.
const (
	engineTxFull = iota
	engineTxError
	engineNoVerdict
	enginePassFull
	enginePassError
	engineReasons // how many
)

// NewEngine builds an engine for graph g reading from in, whose frames live
// in arena a. It validates that every port the graph names has an output.
func NewEngine(g *pipelines.Graph, a *rings.Arena, in Port, outs Outputs, o Options) (*Engine, error) {
	e := &Engine{arena: a, in: in, pass: outs.Pass, opts: o}
	if o.DrainTimeout < 0 {
		return nil, fmt.Errorf("drain timeout %v: must not be negative", o.DrainTimeout)
	}
	if e.opts.DrainTimeout == 0 {
		e.opts.DrainTimeout = defaultDrainTimeout
	}
	p, err := e.buildPlan(g, outs, nil)
	if err != nil {
		return nil, err
	}
	if o.TrackFrames {
		e.tracker = rings.NewTracker(a)
		e.inFlight = e.tracker.Owner("in-flight")
		e.inHome = rings.OwnerFree
		if ft, ok := in.(FrameTracker); ok {
			e.inHome, e.inTracks = ft.TrackFrames(e.tracker), true
		}
	}
	if err := e.resolveOutputs(p, true); err != nil {
		return nil, err
	}
	e.passComp = e.addCompleter(e.pass)
	for _, sp := range outs.Spare {
		e.addCompleter(sp)
	}
	// Scratch for any batch size a later plan may have.
	e.passList = make([]rings.Desc, 0, rings.MaxBatch)
	if e.holds = len(e.comps) > 0; e.holds {
		e.recycle = make([]rings.Desc, 0, rings.MaxBatch)
		e.compBuf = make([]rings.Desc, 0, rings.MaxBatch)
	}
	e.inReports = e.addReporter(in)
	e.waiter, _ = in.(Waiter)
	for k := range e.comps {
		c := &e.comps[k]
		c.reports = e.addReporter(c.port)
		if e.tracker != nil && !c.tracks {
			e.busy = append(e.busy, c.owner)
		}
	}
	e.adoptLayout(p.lay)
	e.initPublished()

	pl, err := e.newPool(p)
	if err != nil {
		return nil, err
	}
	p.gen = 1
	e.cur, e.curActive, e.pool, e.inline = p, false, pl, p.inline
	e.planPtr.Store(p)
	e.poolPtr.Store(pl)
	e.ctl.init(e, p, pl)
	return e, nil
}

// Progress is called by Run about five times a second with the packets
// received so far; it may be nil.
type Progress func(received uint64)

// Run is RunContext without a way to stop early: it runs until the input
// is exhausted (io.EOF), as a replay does.
func (e *Engine) Run(progress Progress) error {
	return e.RunContext(context.Background(), progress)
}

// RunContext drives the engine until the input is exhausted (io.EOF) or
// ctx is done, whichever comes first: a live port never returns io.EOF, so
// a daemon runs until it cancels ctx. Either way the engine then stops
// receiving, finishes every in-flight batch (its verdicts are acted on and
// counted), waits up to Options.DrainTimeout for the frames that Completer
// outputs hold, counts those still out as lost (and returns ErrFramesLost),
// and stops the executor. A stop through ctx is clean: RunContext returns
// nil, not ctx's error. An input error other than io.EOF stops the run the
// same way and is returned, as is the first output error. RunContext is
// called once per engine.
func (e *Engine) RunContext(ctx context.Context, progress Progress) (err error) {
	if err := e.ctl.start(); err != nil {
		return err
	}
	start := time.Now()
	defer func() {
		if e.pool != nil {
			if cerr := e.pool.exec.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("stop workers: %w", cerr)
			}
		}
		e.ctl.stop(e)
		e.elapsed = time.Since(start)
		if err == nil {
			err = e.outErr
		}
		if err == nil && e.tracker != nil {
			err = e.trackErr
			if err == nil {
				if _, cerr := e.tracker.Check(nil); cerr != nil {
					err = fmt.Errorf("frame accounting after the run: %w", cerr)
				}
			}
		}
	}()
	done := ctx.Done()
	for {
		switch {
		case e.pool == nil:
			err = e.runInline(done, progress)
		case e.pool.pinned:
			err = e.runSteered(done, progress)
		default:
			err = e.runExec(done, progress)
		}
		if err != errRepool {
			break
		}
		if err = e.repool(); err != nil {
			break
		}
	}
	e.publish() // the loop's last turn may have returned before publishing
	derr := e.drainOutputs()
	e.publish()
	if err == nil && e.trackErr == nil {
		// A tracker error names the frame and its places: it comes first.
		err = derr
	}
	return err
}

// errStopped is the I/O loop's own marker for a stop through the context;
// errRepool says that the newest plan needs another executor and nothing
// is in flight on this one.
var (
	errStopped = errors.New("stopped")
	errRepool  = errors.New("repool")
)

// stopped polls done without blocking: a nil channel (context.Background)
// is never done, and the check costs a load per loop turn.
func stopped(done <-chan struct{}) bool {
	if done == nil {
		return false
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// endOfInput turns the reason the loop stopped receiving into Run's error:
// none for the end of a capture or a stop.
func (e *Engine) endOfInput(err error) error {
	if errors.Is(err, io.EOF) || err == errStopped {
		return nil
	}
	return fmt.Errorf("receive on %s: %w", e.in.Name(), err)
}

// adopt makes p the plan new batches are stamped with. The plan before it
// keeps its grace period while batches stamped with it are in flight; with
// none (inline, or an idle pool) it is retired at once. I/O loop only; it
// allocates only when p's counter layout grew.
func (e *Engine) adopt(p *plan) {
	e.takeUp(p)
	if e.old != nil {
		e.retire() // Swap waits for a grace period to end; never two at once
	}
	e.old, e.cur, e.curActive = e.cur, p, false
	if p.lay != e.lay {
		e.adoptLayout(p.lay)
		e.publish()
	}
	if e.pool != nil {
		e.restamp = len(e.pool.stamps)
	}
	if e.pool == nil || e.pool.n == 0 {
		e.retire()
	}
}

// retire ends the old plan's grace period: no batch stamped with it is
// left, so its runners are quiescent and the control side may fold their
// counters into the totals.
func (e *Engine) retire() {
	if e.old != nil {
		publishSamples(e.old) // its final counts, before the fold reads them
		e.old.retired.Store(true)
		e.old = nil
	}
}

// activate notes the first completed batch of the current plan: the end
// of the old plan's grace period, and when the swap showed on the data
// path. Once per plan.
func (e *Engine) activate() {
	e.curActive = true
	e.cur.activeAt.Store(time.Now().UnixNano())
	e.retire()
}

// repool moves to the newest plan's own executor once the running one has
// nothing in flight: the old executor is closed (its workers exit) and
// the new one, started by Swap, takes over. Nothing is received in
// between, so nothing is lost; a live port's ring holds what arrives.
func (e *Engine) repool() error {
	p := e.planPtr.Load()
	if e.pool != nil {
		if err := e.pool.exec.Close(); err != nil {
			return fmt.Errorf("stop workers for a pool change: %w", err)
		}
	}
	e.takeUp(p)
	e.old, e.cur, e.curActive = e.cur, p, false
	e.pool, e.inline, e.restamp = p.pool, p.inline, 0
	e.poolPtr.Store(p.pool)
	if p.lay != e.lay {
		e.adoptLayout(p.lay)
	}
	e.retire()
	e.publish()
	return nil
}

func (e *Engine) runInline(done <-chan struct{}, progress Progress) error {
	b := e.inline
	p := e.cur
	r := p.runners[0]
	tick := newTicker(progress)
	idle := 0
	for {
		// Inline, nothing is in flight between turns: a stop just ends
		// the loop (Completers are drained after it).
		if stopped(done) {
			return nil
		}
		if np := e.planPtr.Load(); np != p {
			if np.pool != nil || np.inline != nil {
				return errRepool
			}
			e.adopt(np)
			p, r = np, np.runners[0]
		}
		worked := e.holds && e.pollCompletions() // a call only with a Completer
		b.Clear()
		n, err := e.receive(b, p.clock)
		if e.trackErr != nil {
			return e.trackErr
		}
		if n > 0 {
			r.Process(b)
			e.complete(p, b)
			if !e.curActive {
				e.activate()
			}
			tick.maybe(e.counts.received)
			worked = true
		}
		if err != nil {
			return e.endOfInput(err)
		}
		if worked {
			e.turnDone()
			idle = 0
			continue
		}
		// Nothing received and nothing completed: a live port has nothing
		// yet, or every frame is out with a Completer.
		if idle == 0 {
			r.Publish()
		}
		if now, ok := e.tickDue(); ok {
			r.Tick(now) // the flows of an idle link expire (pipelines.Ticker)
			r.Publish()
		}
		if r.ServicePending() {
			r.Service() // a control request (a flow table listed or flushed)
		}
		e.idleTurn()
		idle++
		e.idleWait(idle, false)
	}
}

func (e *Engine) runExec(done <-chan struct{}, progress Progress) error {
	var (
		cur   *rings.Batch // acquired, not yet submitted
		inErr error
		idle  int
		tick  = newTicker(progress)
		pl    = e.pool
		ex    = pl.exec
		// repool: the newest plan needs another executor; stop taking
		// slots and hand over once this one is empty.
		repool bool
	)
	for {
		worked := e.holds && e.pollCompletions() // a call only with a Completer
		for {
			b, ok := ex.Completed()
			if !ok {
				break
			}
			p := e.cur
			if pl.stamps != nil {
				p = pl.pop()
			}
			if pl.verdicts != nil {
				e.completeVerdicts(p, b, pl.verdicts.Verdicts())
			} else {
				e.complete(p, b)
			}
			ex.Release()
			if p == e.cur && !e.curActive {
				e.activate()
			}
			worked = true
		}
		if inErr == nil && stopped(done) {
			inErr = errStopped // stop receiving; what is in flight finishes
		}
		if inErr == nil && !repool {
			// A batch boundary: no slot held, or one held with nothing in
			// it yet (a live port idles that way), whose stamp may change.
			if cur == nil || cur.Len() == 0 {
				if np := e.planPtr.Load(); np != e.cur {
					if np.pool != nil || np.inline != nil || pl.stamps == nil {
						repool = true
					} else {
						e.adopt(np)
						if cur != nil {
							e.stampSlot(pl, cur)
						}
					}
				}
			}
			if cur == nil && !repool {
				if b, ok := ex.Acquire(); ok {
					cur = b
					if pl.lazyMeta {
						b.DeferMeta(true) // the worker writes the metadata
					}
					if e.restamp > 0 {
						e.stampSlot(pl, b)
					}
				} else {
					e.counts.execFull++
				}
			}
			if cur != nil && !repool {
				n, err := e.receive(cur, e.cur.clock)
				if err != nil {
					inErr = err
				}
				if cur.Len() > 0 && (n == 0 || cur.Len() == cur.Cap() || err != nil) {
					e.submit(pl)
					cur = nil
					worked = true
				} else if n > 0 {
					worked = true
				}
			}
		} else if cur != nil && cur.Len() > 0 {
			e.submit(pl)
			cur = nil
		}
		if (inErr != nil || repool) && (cur == nil || cur.Len() == 0) && ex.InFlight() == 0 {
			// Everything received is done (a slot acquired and never
			// filled holds nothing).
			if inErr != nil {
				return e.endOfInput(inErr)
			}
			return errRepool
		}
		tick.maybe(e.counts.received)
		if worked {
			e.turnDone()
			idle = 0
			continue
		}
		if e.old != nil && ex.InFlight() == 0 {
			e.retire() // the old plan's last batches are done, no new one yet
		}
		if cur != nil && cur.Len() == 0 && !repool && inErr == nil {
			// A control request waits on an idle worker, or its time is
			// due (an idle link's flows expire): an empty batch takes it
			// there. Its Epoch is the tick's or none (an empty batch with
			// one ticks the runner; a receive that got nothing left the
			// engine's stamp on it, a replay's too).
			if now, tick := e.tickDue(); tick || e.servicePending() {
				cur.SetEpoch(now)
				e.submit(pl)
				cur = nil
				continue
			}
		}
		e.idleTurn()
		idle++
		e.idleWait(idle, ex.InFlight() > 0)
	}
}

// stampSlot stamps the acquired batch b with the current plan.
func (e *Engine) stampSlot(pl *pool, b *rings.Batch) {
	if c := pl.stamps[b]; c.plan != e.cur {
		c.plan = e.cur
		if e.restamp > 0 {
			e.restamp--
		}
	}
}

// submit hands the acquired batch to the executor, recording its stamp.
func (e *Engine) submit(pl *pool) {
	if pl.stamps != nil {
		pl.push(e.cur)
	}
	pl.exec.Submit()
}

// ioBackoff is the I/O loop's idle policy, after idle rounds with nothing
// to do: spin (a completion or a frame is usually a few hundred ns away),
// then yield, then sleep briefly so an idle live port costs little CPU.
// Yielding at once costs more than it saves: each runtime.Gosched goes
// through the scheduler's global run queue and its lock.
func ioBackoff(idle int) {
	switch {
	case idle < 4096:
	case idle < 4096+256:
		runtime.Gosched()
	default:
		time.Sleep(20 * time.Microsecond)
	}
}

// trackReceived records, in TrackFrames mode, that the frames of b's
// descriptors from index from on entered the engine: from the input's home
// when the input tracks its places, else from wherever they were, unless
// that is the engine itself or a Completer (a frame in two places).
func (e *Engine) trackReceived(b *rings.Batch, from int) {
	if e.tracker == nil || e.trackErr != nil {
		return
	}
	for _, d := range b.Descs[from:] {
		var err error
		if e.inTracks {
			err = e.tracker.Move(d.Addr, e.inHome, e.inFlight)
		} else {
			_, err = e.tracker.Enter(d.Addr, e.inFlight, e.busy...)
		}
		if err != nil {
			e.trackErr = fmt.Errorf("port %s handed out a frame it did not hold: %w", e.in.Name(), err)
			return
		}
	}
}

// trackRecycled records, in TrackFrames mode, that frames go back to the
// input port (its home, or the free stack).
func (e *Engine) trackRecycled(descs []rings.Desc) {
	if e.tracker == nil || e.trackErr != nil {
		return
	}
	if err := e.tracker.MoveDescs(descs, e.inFlight, e.inHome); err != nil {
		e.trackErr = fmt.Errorf("frame coming back from the pipeline: %w", err)
	}
}
