package pipelines

import (
	"fmt"

	"github.com/warpflow/warpflow/rings"
)

// Stateful stages (conntrack, nat, reassemble) keep state across batches
// in their per-worker instances. Four things make that work:
//
//   - Steering. The engine sends both directions of a flow to one worker
//     (Graph.Steering), so each worker's instance sees all of a flow's
//     packets and needs no lock.
//   - Commit. A stage that creates state for a packet whose fate is not
//     known yet (a new flow a later filter may drop) implements
//     Committer: the runner calls Commit after the whole batch has its
//     verdicts, and the stage undoes what dropped packets created.
//   - Handover. A swap gives each new instance the instance of the same
//     stage name and kind from the plan before (StateCarrier); the new
//     instance takes the state over on its first Process, on the worker,
//     by when the old plan's batches on that worker are done.
//   - Service. The control plane reads and changes the state (list,
//     flush) through a request the worker serves between batches
//     (Servicer); an idle engine runs empty batches for it
//     (Runner.ServicePending).
//   - Ticks. A stage that keeps time on the packets' clock (conntrack's
//     timeouts, reassemble's) would stand still on a worker that gets no
//     packets; on a live port the engine tells such a worker the time
//     (Ticker), so its flows and datagrams expire while the link is
//     idle, as Linux's conntrack garbage collector and fragment timers
//     expire them; so is a stage that gets no packet on a busy worker
//     (a filter in front of it drops them all). A replay's clock is its
//     capture's: it has no ticks, and stays deterministic.

// Committer is implemented by stage instances that confirm per-packet
// state once the batch's verdicts are known. The runner calls Commit at
// the end of Process, on the worker, with every packet's verdict set.
type Committer interface {
	Commit(b *rings.Batch)
}

// StateCarrier is implemented by stateful stage instances. TakeState,
// called on the control goroutine before the new plan is published, hands
// the instance the old plan's instances of the same stage name and kind
// (olds: the same worker's when the worker count is unchanged and no
// table is re-steered, else every worker's, and then only with a pool
// change: the old workers are stopped before the new ones start) and,
// when the steering changed, own: the flows this instance's worker is
// now steered (asked of a flow's tuple in each direction: a flow is kept
// only where both directions are steered). The instance takes the state
// over at its first Process, when the old instances no longer run on
// that worker (the engine's per-worker order guarantees it); until then
// it must not touch them. carried says
// whether the old instances' stage counters carry on (same
// configuration), which decides how the new instance counts the state it
// takes over. It reports whether it will take state (false: the kinds'
// state is not compatible, the tables start empty).
type StateCarrier interface {
	TakeState(olds []Stage, own func(src, dst *[16]byte, sport, dport uint16, proto uint8, v6 bool) bool, carried bool) bool
}

// Linker is implemented by stage instances that work with another stage
// of the same runner (nat reads conntrack's entries). NewRunner calls Link
// once every instance exists; find returns the runner's instance of a
// stage by name (nil when there is none).
type Linker interface {
	Link(find func(name string) Stage)
}

// Servicer is implemented by stage instances the control plane sends
// requests to (a flow table listed or flushed). Serve runs on the
// worker between batches; Pending is safe from any goroutine.
type Servicer interface {
	Pending() bool
	Serve()
}

// Ticker is implemented by stage instances that keep time on the packets'
// clock. Tick tells the instance the time now: the engine's whole clock
// (Unix ms, whose low 32 bits are a live packet's Meta.Time), between
// batches on the worker, no packet in flight on it. The engine ticks only
// when its input port leaves the time to the engine (a live port, not a
// replay, whose packets carry the capture's times), at most every
// IdleTickMS on an idle worker, and on a worker that a steered round gave
// no packet; and the runner ticks, at most every IdleTickMS, a stage that
// got no packet for that long on a worker that gets them (a filter in
// front of it drops them all: Runner.tickStarved). The instance moves its
// clock on (never back) and expires what is due, bounded per call. It allocates nothing, except once after
// a swap where it takes over state as a first Process would.
type Ticker interface {
	Tick(now uint64)
}

// IdleTickMS is how often (ms) the engine ticks an idle worker's Tickers.
const IdleTickMS = 100

// Ticks reports whether the runner has stages that keep time.
func (r *Runner) Ticks() bool { return r.tickers != nil }

// Tick passes the time to the runner's Tickers (see Ticker). Only the
// runner's goroutine may call it, between batches; Process calls it for
// an empty batch with an Epoch.
func (r *Runner) Tick(now uint64) {
	for _, t := range r.tickers {
		t.Tick(now)
	}
}

// WorkerAware is implemented by stage instances that need to know which
// of how many workers runs them (nat's port allocation, which must keep
// a flow's replies steered to its worker). NewRunner calls SetWorker with
// RunnerOptions.Worker and Workers.
type WorkerAware interface {
	SetWorker(worker, workers int)
}

// stateful is implemented by stateful stage templates.
type stateful interface {
	stateful() bool
}

// stateCarrying is implemented by templates whose instances take the
// state of the stage they replace in a swap (conntrack; reassemble's
// datagrams, milliseconds long, start empty).
type stateCarrying interface {
	carriesState() bool
}

// CarriesStateFrom reports whether a swap from old to g hands a stage's
// state over: a stage of the same name and kind in both, of a kind whose
// state a swap carries.
func (g *Graph) CarriesStateFrom(old *Graph) bool {
	for i := range g.nodes {
		n := &g.nodes[i]
		if sc, ok := n.tmpl.(stateCarrying); !ok || n.terminal || !sc.carriesState() {
			continue
		}
		for j := range old.nodes {
			if o := &old.nodes[j]; o.name == n.name && o.kind == n.kind && !o.terminal {
				return true
			}
		}
	}
	return false
}

// StatefulStages returns the names of the graph's stateful stages, in node
// order: the ones whose state a swap hands over and the engine steers
// flows for.
func (g *Graph) StatefulStages() []string {
	var out []string
	for i := range g.nodes {
		if st, ok := g.nodes[i].tmpl.(stateful); ok && !g.nodes[i].terminal && st.stateful() {
			out = append(out, g.nodes[i].name)
		}
	}
	return out
}

// CarryState hands every stateful stage of r the instances of the stage of
// the same name and kind in olds (runners of the plan before: the same
// worker's, or all of them when the worker count changed, with own set),
// returning the names of the stages that will take state over. carried
// says, by stage name, whether the stage's counters carry on. Control
// plane, before r runs.
func (r *Runner) CarryState(olds []*Runner, own func(src, dst *[16]byte, sport, dport uint16, proto uint8, v6 bool) bool, carried func(name string) bool) []string {
	var took []string
	for i := range r.nodes {
		sc, ok := r.nodes[i].stage.(StateCarrier)
		if !ok {
			continue
		}
		name, kind := r.g.nodes[i].name, r.g.nodes[i].kind
		var prev []Stage
		for _, o := range olds {
			for j := range o.nodes {
				if o.g.nodes[j].name == name && o.g.nodes[j].kind == kind && o.nodes[j].stage != nil {
					prev = append(prev, o.nodes[j].stage)
				}
			}
		}
		if len(prev) == 0 {
			continue
		}
		if sc.TakeState(prev, own, carried(name)) {
			took = append(took, name)
		}
	}
	return took
}

// ServicePending reports whether a stage of the runner has a control
// request waiting. Safe from any goroutine.
func (r *Runner) ServicePending() bool {
	for _, s := range r.servicers {
		if s.Pending() {
			return true
		}
	}
	return false
}

// Service serves the stages' waiting control requests. Only the runner's
// goroutine may call it, between batches (Process calls it itself).
func (r *Runner) Service() {
	for _, s := range r.servicers {
		if s.Pending() {
			s.Serve()
		}
	}
}

// Stage returns the runner's instance of stage name, or nil. Control
// plane: to post requests to a Servicer.
func (r *Runner) Stage(name string) Stage {
	for i := range r.nodes {
		if r.g.nodes[i].name == name {
			return r.nodes[i].stage
		}
	}
	return nil
}

// stageRef is an option of one stage that names another (nat's
// conntrack): the compiler checks that the stage exists and is of kind.
type stageRef struct {
	name, kind string
	option     string // the option that names it, for the error
	unique     bool   // no other stage may name it this way
}

// stageReferrer is implemented by templates whose options name stages.
type stageReferrer interface {
	stageRefs() []stageRef
}

// checkStageRefs reports every stage option that names a stage the
// pipeline lacks, or one of another kind.
func (c *compiler) checkStageRefs() {
	claimed := map[string]string{} // stage named by a ref that must be unique -> the stage naming it
	for i := range c.stages {
		sr, ok := c.stages[i].tmpl.(stageReferrer)
		if !ok {
			continue
		}
		st := &c.spec.Stages[i]
		for _, ref := range sr.stageRefs() {
			j, found := -1, false
			for k := range c.spec.Stages {
				if c.spec.Stages[k].Name == ref.name {
					j, found = k, true
					break
				}
			}
			pos := st.Pos
			if n := mappingValue(st.Node, ref.option); n != nil {
				pos = Pos{File: c.spec.File, Line: n.Line, Col: n.Column}
			}
			switch {
			case !found:
				c.errs.Add(pos, st.Name, fmt.Sprintf("%s: no stage %q in the pipeline (want a %s stage)", ref.option, ref.name, ref.kind))
			case c.spec.Stages[j].Type != ref.kind:
				c.errs.Add(pos, st.Name, fmt.Sprintf("%s: stage %q is a %s stage, not %s", ref.option, ref.name, c.spec.Stages[j].Type, ref.kind))
			case ref.unique && claimed[ref.name] != "":
				c.errs.Add(pos, st.Name, fmt.Sprintf("%s: stage %q already keeps the sessions of %q (one %s stage per %s stage)", ref.option, ref.name, claimed[ref.name], st.Type, ref.kind))
			case ref.unique:
				claimed[ref.name] = st.Name
			}
		}
	}
}
