package dataplane

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/pipelines"
)

// control is the control side of the engine: swaps and the stage counters
// folded from retired plans. Everything here is guarded by mu and touched
// only by control-plane calls (Swap, Stats, Report) and at the start and
// end of a run, never by the I/O loop's turns.
type control struct {
	mu      sync.Mutex
	started bool // RunContext was called
	running bool // and has not returned
	stopped bool
	gen     uint64
	latest  *plan // the newest published plan
	prev    *plan // the one it replaced, until its counters are folded
	// pool and batch are what the latest plan runs on (its own pool, or
	// the one it shares), to decide whether the next plan needs another.
	pool  *pool
	batch int
	// carried are the stage counters of retired plans that the latest
	// plan kept (same stage name and kind), by stage name.
	carried map[string]pipelines.NodeStats
	// carriedCounters are the stage-specific counters (Reporter, and the
	// sample stages' kept counts) of retired plans, in their stage's
	// layout, for the stages the latest plan has with the same name, kind
	// and configuration (Graph.StageConfig: a changed rule list renumbers
	// the rules).
	carriedCounters map[string][]counters.Value
	// done is stopped for readers without mu (WaitTakenUp).
	done atomic.Bool
}

func (c *control) init(e *Engine, p *plan, pl *pool) {
	c.gen, c.latest, c.pool, c.batch = 1, p, pl, p.batch
	c.carried = map[string]pipelines.NodeStats{}
	c.carriedCounters = map[string][]counters.Value{}
}

func (c *control) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return fmt.Errorf("engine: RunContext called twice")
	}
	c.started, c.running = true, true
	return nil
}

// stop runs when RunContext ends: nothing is in flight any more, so every
// plan but the current one is retired, and a plan published but never
// taken up has its pool closed.
func (c *control) stop(e *Engine) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running, c.stopped = false, true
	c.done.Store(true)
	publishSamples(e.cur)
	if e.old != nil {
		publishSamples(e.old)
		e.old.retired.Store(true)
		e.old = nil
	}
	if p := e.planPtr.Load(); p != e.cur {
		if p.pool != nil && p.pool != e.pool {
			p.pool.exec.Close()
		}
		p.retired.Store(true)
	}
}

// SwapResult says what a swap did.
type SwapResult struct {
	// Generation numbers the plans: the engine's first is 1.
	Generation uint64 `json:"generation"`
	Pipeline   string `json:"pipeline"`
	// PoolChange is set when the new plan needs another executor (another
	// worker count or batch size, inline to workers or back, or a custom
	// executor): the I/O loop stops taking slots, lets the old executor
	// finish what it holds, closes it and goes on with the new one, which
	// Swap has already started. Nothing is lost or processed twice; a live
	// port's ring holds what arrives meanwhile. Otherwise the plans share
	// the running executor and the switch is one pointer per batch.
	PoolChange bool `json:"pool_change"`
	// Kept are the stages whose counters carry on (same name and kind in
	// both pipelines); Reset those with a name the old pipeline had with
	// another kind (they start from zero); Added are new names, Removed
	// stages the new pipeline lacks (their counters leave the stats).
	Kept    []string `json:"kept"`
	Reset   []string `json:"reset"`
	Added   []string `json:"added"`
	Removed []string `json:"removed"`
	// CountersReset are the kept stages whose stage-specific counters
	// (a filter's rule hits, a count's keys, a sampler's counts) start
	// from zero because the stage is configured differently.
	CountersReset []string `json:"counters_reset,omitempty"`
	// StateKept are the stateful stages (conntrack, nat) whose tables the
	// new plan takes over: same name and kind (steer.go, carryState);
	// StateReset those of either plan whose state does not carry on
	// (removed, renamed, another kind, or a stage whose state is not
	// carried: reassembly).
	StateKept  []string `json:"state_kept,omitempty"`
	StateReset []string `json:"state_reset,omitempty"`

	plan *plan
}

// Swap replaces the running pipeline with g, transmitting on outs (outs.Pass
// must be nil or the engine's pass port, which does not change). It checks
// the new plan completely first; an error (wrapping ErrSwap) leaves the
// running plan and every counter untouched. On success the plan is
// published: the I/O loop takes it up at its next batch boundary, every
// batch is processed wholly by the old plan or wholly by the new one, and
// the first completed batch of the new plan ends the old one's grace
// period. Swap waits for a previous swap's grace period to end first (at
// most timeout), so at most two plans are ever live. Verdict counters
// (received, per port, per reason) always carry on, by name; stage
// counters carry on where stage name and kind match (SwapResult says
// which did not). Swap is safe from any goroutine, before or during Run;
// after Run it fails.
//
// Swap is PrepareSwap and Publish at once.
func (e *Engine) Swap(g *pipelines.Graph, outs Outputs, timeout time.Duration) (SwapResult, error) {
	ps, err := e.PrepareSwap(g, outs, SwapOptions{Timeout: timeout})
	if err != nil {
		return SwapResult{}, err
	}
	return ps.Publish()
}

// SwapOptions are a swap's settings beyond the graph and its outputs.
type SwapOptions struct {
	// Timeout bounds the wait for a previous swap's grace period.
	Timeout time.Duration
	// AtTakeUp, when set, is called by the I/O loop at the batch boundary
	// at which it takes the new plan up: after the last batch of the old
	// plan was received and before the first of the new one is, so that
	// every frame received before it ran goes to the old plan and every
	// frame received after it to the new one. It is the place to flip
	// state outside the engine that must change with the plan (a daemon
	// flips its XDP program's kernel rule set there: see
	// internal/daemon's swap). It runs once, on the I/O loop's goroutine
	// (or on Publish's, when the engine is not running yet), so it must
	// be short and must not block: the loop receives nothing while it
	// runs. Its error is WaitTakenUp's; the plan is taken up either way.
	AtTakeUp func() error
}

// PreparedSwap is a swap that PrepareSwap built and checked and that is
// not published yet: Publish publishes it, Abort drops it. Nothing the
// data path sees has changed while a swap is prepared; a caller that must
// change something else together with the plan (a daemon's kernel rules,
// another queue's plan) prepares everything first, so that the only steps
// left are ones that cannot fail for want of a resource.
type PreparedSwap struct {
	e    *Engine
	g    *pipelines.Graph
	p    *plan
	old  *plan // the latest plan when prepared: Publish refuses if it changed
	pool *pool // started for p (a pool change); closed by Abort
	done bool  // published or aborted
}

// PrepareSwap does everything Swap does short of publishing: it waits for
// a previous swap's grace period (at most o.Timeout), builds and checks
// the plan for g and outs, and starts the new executor when the plan
// needs one. An error (wrapping ErrSwap) leaves the engine as it was. The
// result must be published or aborted; until then no other swap of this
// engine may publish (Publish refuses a prepared swap whose engine was
// swapped meanwhile).
func (e *Engine) PrepareSwap(g *pipelines.Graph, outs Outputs, o SwapOptions) (*PreparedSwap, error) {
	c := &e.ctl
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil, fmt.Errorf("%w: the engine has stopped", ErrSwap)
	}
	if outs.Pass != nil && (e.pass == nil || !samePort(outs.Pass, e.pass)) {
		return nil, fmt.Errorf("%w: the pass port cannot change in a swap", ErrSwap)
	}
	if err := e.waitGraceLocked(o.Timeout); err != nil {
		return nil, err
	}
	old := c.latest
	p, err := e.buildPlan(g, outs, old)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSwap, err)
	}
	if err := e.resolveOutputs(p, false); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSwap, err)
	}
	p.atTakeUp = o.AtTakeUp
	ps := &PreparedSwap{e: e, g: g, p: p, old: old}
	if e.needsPool(p, c.pool, c.batch) || resteers(old, p) {
		pl, err := e.newPool(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrSwap, err)
		}
		p.pool, ps.pool, p.repools = pl, pl, true // pl is nil when p runs inline
	}
	return ps, nil
}

// TableBytes is the stage tables the prepared plan's runners will
// allocate when they first run (those handed over whole excepted), and
// how many runners: what the plan checked against the memory available,
// for a caller that prepares several (the daemon, one engine a queue) to
// check their sum.
func (ps *PreparedSwap) TableBytes() (bytes uint64, runners int) {
	return ps.p.tableBytes, ps.p.runnerN
}

// Publish publishes the prepared plan: the I/O loop takes it up at its
// next batch boundary (running SwapOptions.AtTakeUp there). It fails
// (wrapping ErrSwap, the engine unchanged and the prepared swap aborted)
// when the engine stopped or was swapped since PrepareSwap; a second call
// fails too.
func (ps *PreparedSwap) Publish() (SwapResult, error) {
	e := ps.e
	c := &e.ctl
	c.mu.Lock()
	defer c.mu.Unlock()
	var res SwapResult
	if ps.done {
		return res, fmt.Errorf("%w: this prepared swap was published or aborted already", ErrSwap)
	}
	switch {
	case c.stopped:
		ps.abortLocked()
		return res, fmt.Errorf("%w: the engine has stopped", ErrSwap)
	case c.latest != ps.old:
		ps.abortLocked()
		return res, fmt.Errorf("%w: the engine was swapped (to %q) since this swap was prepared", ErrSwap, c.latest.graph.Name())
	}
	ps.done = true
	p, g, old := ps.p, ps.g, ps.old
	if p.repools {
		c.pool, res.PoolChange = p.pool, true
	}
	c.batch = p.batch
	c.gen++
	p.gen = c.gen
	res.Generation, res.Pipeline, res.plan = p.gen, g.Name(), p
	res.Kept, res.Reset, res.Added, res.Removed = compareStages(old.graph, g)
	for _, name := range res.Kept {
		if !sameConfig(old.graph, g, name) {
			res.CountersReset = append(res.CountersReset, name)
		}
	}
	res.StateKept, res.StateReset = carryState(old, p)
	c.prev, c.latest = old, p
	if !c.started {
		e.adoptBeforeRun(p)
		e.planPtr.Store(p)
		e.foldLocked()
		return res, nil
	}
	e.planPtr.Store(p)
	return res, nil
}

// Abort drops a prepared swap that was not published: the executor it
// started, if any, is closed. Calling it after Publish does nothing.
func (ps *PreparedSwap) Abort() {
	c := &ps.e.ctl
	c.mu.Lock()
	defer c.mu.Unlock()
	ps.abortLocked()
}

func (ps *PreparedSwap) abortLocked() {
	if ps.done {
		return
	}
	ps.done = true
	if ps.pool != nil {
		ps.pool.exec.Close()
	}
}

// waitGraceLocked waits until the plan before the latest is retired, then
// folds its stage counters. c.mu is held; the I/O loop never takes it.
func (e *Engine) waitGraceLocked(timeout time.Duration) error {
	c := &e.ctl
	if c.prev == nil {
		return nil
	}
	deadline := time.Now().Add(timeout)
	for c.running && !c.prev.retired.Load() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the previous swap (to %q) still has batches of the plan before it in flight after %v", ErrSwap, c.latest.graph.Name(), timeout)
		}
		time.Sleep(50 * time.Microsecond)
	}
	e.foldLocked()
	return nil
}

// adoptBeforeRun takes p up on the caller's goroutine when the I/O loop
// has not started: nothing is in flight, c.mu is held (RunContext takes it
// before it starts the loop).
func (e *Engine) adoptBeforeRun(p *plan) {
	e.takeUp(p)
	old := e.cur
	if p.pool != nil || p.inline != nil {
		if e.pool != nil {
			e.pool.exec.Close()
		}
		e.pool, e.inline = p.pool, p.inline
		e.poolPtr.Store(p.pool)
	} else if e.pool != nil {
		for _, st := range e.pool.stamps {
			st.plan = p
		}
	}
	e.cur, e.curActive = p, false
	if p.lay != e.lay {
		e.adoptLayout(p.lay)
	}
	e.publish()
	old.retired.Store(true)
}

// foldLocked folds a retired prev's runner counters into carried, keeping
// the stages the latest plan has with the same name and kind (their own
// counters where it has them configured the same too).
func (e *Engine) foldLocked() {
	c := &e.ctl
	prev := c.prev
	if prev == nil || !prev.retired.Load() {
		return
	}
	var old []pipelines.NodeStats
	for _, r := range prev.runners {
		old = pipelines.SumStats(old, r.Stats(nil)) // quiescent: retired
	}
	next := map[string]pipelines.NodeStats{}
	newInfo := c.latest.graph.Stages()
	oldInfo := prev.graph.Stages()
	for _, s := range old {
		ni := stageIndex(newInfo, s.Name)
		if ni < 0 || newInfo[ni].Kind != s.Kind {
			continue
		}
		if carried, ok := c.carried[s.Name]; ok && carried.Kind == s.Kind {
			s = addNode(s, carried)
		}
		oi := stageIndex(oldInfo, s.Name)
		if oi < 0 || !slices.Equal(oldInfo[oi].Edges, newInfo[ni].Edges) {
			s.Edges, s.EdgeBytes = nil, nil // edges that mean something else: reset
		}
		next[s.Name] = s
	}
	// Stage-specific counters (a sample stage's kept count among them):
	// exact (the runners are quiescent), kept where the stage is
	// configured the same. stageValuesLocked adds those carried before.
	counters := map[string][]counters.Value{}
	for i, si := range oldInfo {
		if si.Counters != nil && sameStage(prev.graph, c.latest.graph, si.Name) {
			counters[si.Name] = e.stageValuesLocked(prev, nil, i, false)
		}
	}
	c.carried, c.carriedCounters, c.prev = next, counters, nil
}

// carriedApplyLocked reports whether the carried stage-specific counters
// of stage name count for graph g: they were kept for the plan before
// the latest until its grace period ends (the fold), for the latest
// after. c.mu is held.
func (e *Engine) carriedApplyLocked(g *pipelines.Graph, name string) bool {
	c := &e.ctl
	base := c.latest.graph
	if c.prev != nil {
		base = c.prev.graph
	}
	return sameStage(base, g, name)
}

// sameConfig reports whether stage name is configured the same in a and
// b (Graph.StageConfig).
func sameConfig(a, b *pipelines.Graph, name string) bool {
	return a.StageConfig(name) == b.StageConfig(name)
}

// sameStage reports whether b has stage name with a's kind and
// configuration: its stage-specific counters then mean the same.
func sameStage(a, b *pipelines.Graph, name string) bool {
	ai, bi := a.Stages(), b.Stages()
	i, j := stageIndex(ai, name), stageIndex(bi, name)
	return i >= 0 && j >= 0 && ai[i].Kind == bi[j].Kind && sameConfig(a, b, name)
}

func addNode(a, b pipelines.NodeStats) pipelines.NodeStats {
	out := pipelines.SumStats([]pipelines.NodeStats{{Name: a.Name, Kind: a.Kind, Edges: slices.Clone(a.Edges), EdgeBytes: slices.Clone(a.EdgeBytes),
		Calls: a.Calls, Packets: a.Packets, Bytes: a.Bytes, Nanos: a.Nanos}}, []pipelines.NodeStats{b})
	return out[0]
}

func stageIndex(info []pipelines.StageInfo, name string) int {
	for i := range info {
		if info[i].Name == name {
			return i
		}
	}
	return -1
}

// compareStages sorts the new graph's stages into kept, reset and added,
// and lists the old stages it lacks.
func compareStages(old, g *pipelines.Graph) (kept, reset, added, removed []string) {
	oi, ni := old.Stages(), g.Stages()
	for _, s := range ni {
		switch j := stageIndex(oi, s.Name); {
		case j < 0:
			added = append(added, s.Name)
		case oi[j].Kind == s.Kind:
			kept = append(kept, s.Name)
		default:
			reset = append(reset, s.Name)
		}
	}
	for _, s := range oi {
		if stageIndex(ni, s.Name) < 0 {
			removed = append(removed, s.Name)
		}
	}
	return kept, reset, added, removed
}

// WaitActive waits until the plan a swap published is in use on the data
// path: its first batch completed (ActiveAt). It returns false when ctx
// ends first, as it does on an engine that receives nothing
// (WaitTakenUp needs no traffic).
func (e *Engine) WaitActive(ctx context.Context, r SwapResult) bool {
	p := r.plan
	if p == nil {
		return false
	}
	for {
		if p.activeAt.Load() != 0 {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// WaitTakenUp waits until the I/O loop took the plan the swap published
// up, at a batch boundary (SwapOptions.AtTakeUp ran then), and returns
// when, with AtTakeUp's error. Unlike WaitActive it needs no traffic: an
// idle I/O loop takes a plan up at its next turn. It fails when ctx ends
// first or the engine stopped without taking the plan up.
func (e *Engine) WaitTakenUp(ctx context.Context, r SwapResult) (time.Time, error) {
	p := r.plan
	if p == nil {
		return time.Time{}, fmt.Errorf("wait for a swap: no swap")
	}
	for {
		if ns := p.takenUpAt.Load(); ns != 0 {
			return time.Unix(0, ns), p.takeUpErr // written before takenUpAt
		}
		if e.ctl.done.Load() && p.takenUpAt.Load() == 0 {
			return time.Time{}, fmt.Errorf("wait for the swap to %q: the engine stopped before it took the plan up", p.graph.Name())
		}
		if err := ctx.Err(); err != nil {
			return time.Time{}, fmt.Errorf("wait for the swap to %q: not taken up: %w", p.graph.Name(), err)
		}
		time.Sleep(10 * time.Microsecond)
	}
}

// ActiveAt is when the first batch of the swap's plan completed (zero
// until then).
func (r SwapResult) ActiveAt() time.Time {
	if r.plan == nil {
		return time.Time{}
	}
	if ns := r.plan.activeAt.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Generation is the newest plan's generation and its pipeline's name.
func (e *Engine) Generation() (uint64, string) {
	p := e.planPtr.Load()
	return p.gen, p.graph.Name()
}

// Graph returns the newest published plan's graph.
func (e *Engine) Graph() *pipelines.Graph { return e.planPtr.Load().graph }

func prevEdges(p *plan, name string) []string {
	info := p.graph.Stages()
	if i := stageIndex(info, name); i >= 0 {
		return info[i].Edges
	}
	return nil
}

// SetTap sets t, made with g.NewTap, on every runner of the newest plan,
// whose graph must be g; nil clears the tap from every live plan. The
// runners take it up at their next batch.
func (e *Engine) SetTap(g *pipelines.Graph, t *pipelines.Tap) error {
	c := &e.ctl
	c.mu.Lock()
	defer c.mu.Unlock()
	if t == nil {
		for _, p := range []*plan{c.latest, c.prev} {
			if p != nil {
				for _, r := range p.runners {
					r.SetTap(nil)
				}
			}
		}
		return nil
	}
	if c.latest.graph != g {
		return fmt.Errorf("tap: the engine runs pipeline %q now", c.latest.graph.Name())
	}
	for _, r := range c.latest.runners {
		r.SetTap(t)
	}
	return nil
}
