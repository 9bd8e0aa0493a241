package dataplane

import (
	"errors"
	"fmt"
	"time"

	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// Flow steering for stateful pipelines (conntrack, nat, reassemble) on
// more than one worker.
//
// Stateful stages keep per-worker tables, so both directions of a flow
// must reach the same worker (pipelines.Steering says which). The pool is
// then pinned (slot s runs on worker s % n) and the I/O loop works in
// rounds: it receives a batch into a staging batch of its own, computes
// each packet's worker from its headers, copies the descriptors (never
// the packet bytes) into n consecutive slots, one per worker, and submits
// them. Completions come back in slot order, so a round's n sub-batches
// complete together; the I/O loop puts their descriptors and verdicts
// back into receive order in one merge batch and completes that, so the
// outputs, counters and samples are in receive order exactly as with one
// worker (TestSteeredMatchesOneWorker). Nothing allocates: the staging,
// merge and round buffers are made with the pool.
//
// Costs: one header read per packet in the I/O loop (the frame's first
// cache line, which the worker then finds warm), 16 bytes of descriptor
// and 24 of metadata copied per packet each way, and rounds of n slots,
// so each worker's batch holds its share of a received batch.

// clockMS is the engine's clock: Unix milliseconds, whose low 32 bits are
// Meta.Time (Batch.SetTime64). It runs on the monotonic clock from the
// wall time the process started at (monoClockMS), as Linux's conntrack
// runs on jiffies: a step of the wall clock (an NTP step, date -s, a VM
// resumed) would otherwise step every table's clock, forward expiring at
// once every flow whose timeout it spans, back freezing every expiry
// until the wall clock caught up again (conntrack ignores a step back of
// up to 12.4 days). It drifts from the wall clock by the steps taken
// since the process started; only the stateful stages read it, and only
// to compare with itself (captures and logs stamp their own time). A
// variable: a test lets 40 days pass.
var clockMS = monoClockMS(time.Now())

// monoClockMS is a clock of Unix milliseconds that reads start's wall
// time at start and moves on with its monotonic reading (time.Since
// subtracts monotonic readings when both times have one).
func monoClockMS(start time.Time) func() uint64 {
	base := start.UnixMilli()
	return func() uint64 { return uint64(base + time.Since(start).Milliseconds()) }
}

// planState sets a plan's clock and steering from its graph, and refuses
// what cannot run a stateful pipeline.
func (e *Engine) planState(p *plan) error {
	stateful := p.graph.StatefulStages()
	if len(stateful) == 0 {
		return nil
	}
	p.clock = true
	if e.opts.NewExecutor != nil {
		return fmt.Errorf("stage %q keeps per-flow state, which only the engine's own CPU workers can run (steered to one worker per flow): this executor cannot", stateful[0])
	}
	if p.workers > 1 {
		p.steer = p.graph.Steering()
	}
	return nil
}

// tickDue reports whether the current plan's idle workers are to be told
// the time (pipelines.Ticker), and the time: on a live port (liveClock),
// for a plan with stages that keep time, at most every
// pipelines.IdleTickMS. The idle path's: one clock read a call.
func (e *Engine) tickDue() (uint64, bool) {
	if !e.liveClock || !e.cur.clock || !e.cur.runners[0].Ticks() {
		return 0, false
	}
	now := clockMS()
	if now-e.tickedAt < pipelines.IdleTickMS && now >= e.tickedAt {
		return 0, false
	}
	e.tickedAt = now
	return now, true
}

// servicePending reports whether a runner of the current plan has a
// control request waiting.
func (e *Engine) servicePending() bool {
	for _, r := range e.cur.runners {
		if r.ServicePending() {
			return true
		}
	}
	return false
}

// steerRound is one received batch on its way through the workers.
type steerRound struct {
	n int // packets
	// epoch is the whole time the workers' batches carry (Batch.Epoch):
	// the receive's where the engine stamped it, a tick's for an empty
	// round, else 0. A worker given no packet of a round with one ticks
	// (pipelines.Ticker).
	epoch uint64
	off   [pipelines.MaxWorkers + 1]int // worker w's packets: pos[off[w]:off[w+1]]
	pos   []uint16                      // staged index of each, grouped by worker
}

// steerer is runSteered's state, made with the pool.
type steerer struct {
	n      int
	stage  *rings.Batch // what the input port receives into
	owner  []uint8
	rounds []steerRound // ring of rounds in flight
	head   int          // oldest round in flight
	count  int          // rounds in flight (distribution done or not)
	fill   int          // next worker to fill in the newest round; -1: none being filled
	merged *rings.Batch // the completing round, in receive order
	got    int          // sub-batches of the head round completed
	// uniform tracks whether every sub-batch of the head round had a
	// valid Outcome with one verdict and target.
	uniform bool
	outcome rings.Outcome
}

func (e *Engine) newSteerer(pl *pool, batch int) *steerer {
	st := &steerer{
		n:      pl.workers,
		stage:  rings.NewBatch(batch, e.arena),
		owner:  make([]uint8, batch),
		merged: rings.NewBatch(batch, e.arena),
		fill:   -1,
	}
	st.rounds = make([]steerRound, len(pl.fifo)/pl.workers+1)
	for i := range st.rounds {
		st.rounds[i].pos = make([]uint16, batch)
	}
	return st
}

// errSteer marks a pool that is not pinned.
var errSteer = errors.New("steered loop on a pool that is not pinned")

// runSteered is runExec for a pinned pool (see the comment above).
func (e *Engine) runSteered(done <-chan struct{}, progress Progress) error {
	pl := e.pool
	if !pl.pinned || pl.workers < 1 {
		return errSteer
	}
	ex := pl.exec
	st := e.newSteerer(pl, pl.batch)
	tick := newTicker(progress)
	var inErr error
	idle := 0
	repool := false
	for {
		worked := e.holds && e.pollCompletions()
		took, err := e.steerComplete(pl, st)
		if err != nil {
			return err
		}
		if took {
			worked = true
		}
		if inErr == nil && stopped(done) {
			inErr = errStopped
		}
		// Fill the round being distributed, one slot per worker.
		if st.fill >= 0 {
			if e.steerFill(pl, st) {
				worked = true
			} else {
				e.counts.execFull++
			}
		}
		if st.fill < 0 && inErr == nil && !repool && st.count < len(st.rounds) {
			// A round boundary: a new plan may be taken up here.
			if np := e.planPtr.Load(); np != e.cur {
				if np.pool != nil || np.inline != nil || pl.stamps == nil {
					repool = true
				} else {
					e.adopt(np)
				}
			}
			if !repool {
				n, err := e.steerReceive(st)
				if err != nil {
					inErr = err
				}
				if n > 0 {
					worked = true
				}
			}
		}
		if (inErr != nil || repool) && st.fill < 0 && st.count == 0 && ex.InFlight() == 0 {
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
			e.retire()
		}
		if st.fill < 0 && st.count < len(st.rounds) && inErr == nil && !repool {
			// An empty round takes a control request, or the time (an
			// idle link's flows expire), to every worker.
			if now, tick := e.tickDue(); tick || e.servicePending() {
				e.steerRound(st, 0, now)
				continue
			}
		}
		e.idleTurn()
		idle++
		e.idleWait(idle, ex.InFlight() > 0)
	}
}

// steerReceive receives into the staging batch and, when packets came,
// starts a round for them.
func (e *Engine) steerReceive(st *steerer) (int, error) {
	b := st.stage
	b.Clear()
	n, err := e.receive(b, e.cur.clock)
	got := b.Len()
	if got > 0 {
		steer := e.cur.steer
		for i := range got {
			st.owner[i] = uint8(steer.Worker(b.Packet(i), st.n))
		}
		e.steerRound(st, got, b.Epoch())
	}
	return n, err
}

// steerRound starts a round of the n staged packets: their order by
// worker (a counting sort, stable), then distribution. epoch is the
// whole time its batches carry (steerRound.epoch).
func (e *Engine) steerRound(st *steerer, n int, epoch uint64) {
	r := &st.rounds[(st.head+st.count)%len(st.rounds)]
	st.count++
	r.n, r.epoch = n, epoch
	clear(r.off[:st.n+1])
	for _, w := range st.owner[:n] {
		r.off[w+1]++
	}
	for w := 1; w <= st.n; w++ {
		r.off[w] += r.off[w-1]
	}
	var at [pipelines.MaxWorkers]int
	copy(at[:st.n], r.off[:st.n])
	for i, w := range st.owner[:n] {
		r.pos[at[w]] = uint16(i)
		at[w]++
	}
	st.fill = 0
}

// steerFill hands the newest round's packets to their workers' slots, as
// many slots as are free; it reports whether it submitted any.
func (e *Engine) steerFill(pl *pool, st *steerer) bool {
	r := &st.rounds[(st.head+st.count-1)%len(st.rounds)]
	src := st.stage
	any := false
	for st.fill < st.n {
		b, ok := pl.exec.Acquire()
		if !ok {
			return any
		}
		if e.restamp > 0 {
			e.stampSlot(pl, b)
		}
		for _, i := range r.pos[r.off[st.fill]:r.off[st.fill+1]] {
			m := &src.Meta[i]
			b.SetTime(m.Time)
			b.Append(src.Descs[i], m.Seq, m.InPort)
			if f := m.Flags & rings.FlagCut; f != 0 {
				b.Meta[b.Len()-1].Flags = f
			}
		}
		b.SetEpoch(r.epoch) // the receive's whole time, where the engine stamped it; a tick's
		e.submit(pl)
		st.fill++
		any = true
	}
	st.fill = -1
	return any
}

// steerComplete takes completed sub-batches of the oldest round back and,
// once a round is whole, completes it in receive order. It reports
// whether it took any.
func (e *Engine) steerComplete(pl *pool, st *steerer) (bool, error) {
	any := false
	for st.count > 0 {
		b, ok := pl.exec.Completed()
		if !ok {
			break
		}
		r := &st.rounds[st.head]
		if st.got == 0 {
			st.merged.SetLen(r.n)
			st.uniform, st.outcome = true, rings.Outcome{}
		}
		w := st.got
		pos := r.pos[r.off[w]:r.off[w+1]]
		if len(pos) != b.Len() {
			// The executor contract keeps a batch's packets; a runner
			// never changes their number. Stop rather than guess where
			// frames went.
			return any, fmt.Errorf("steered batch for worker %d: %d packets sent, %d came back", w, len(pos), b.Len())
		}
		md, mm := st.merged.Descs, st.merged.Meta
		for j, i := range pos {
			md[i] = b.Descs[j]
			src := &b.Meta[j]
			dst := &mm[i]
			dst.Verdict, dst.Target, dst.SampleMask = src.Verdict, src.Target, src.SampleMask
		}
		if len(pos) > 0 {
			o := b.Outcome
			switch {
			case !o.Valid:
				st.uniform = false
			case st.outcome.Verdict == rings.VerdictNone:
				st.outcome = o
			case o.Verdict != st.outcome.Verdict || o.Target != st.outcome.Target:
				st.uniform = false
			default:
				st.outcome.Bytes += o.Bytes
			}
		}
		p := pl.pop()
		if p == nil {
			p = e.cur
		}
		pl.exec.Release()
		st.got++
		any = true
		if st.got < st.n {
			continue
		}
		// The round is whole.
		if st.uniform && r.n > 0 && st.outcome.Valid {
			st.merged.Outcome = st.outcome
		}
		e.complete(p, st.merged)
		if p == e.cur && !e.curActive {
			e.activate()
		}
		st.got = 0
		st.head = (st.head + 1) % len(st.rounds)
		st.count--
	}
	return any, nil
}

// carryState hands the stateful stages of plan p the state of the same
// stages (name and kind) in old, before p is published. With the same
// number of runners, runner i takes runner i's: the same worker runs
// both (a pinned pool, one worker, or inline), old batches first, so the
// table passes without a lock. With another worker count (a pool change:
// the old executor is closed before the new one starts), every new
// runner takes the flows the new steering sends it, from all the old
// ones. It returns the stages that keep their state and those whose
// state is reset.
func carryState(old, p *plan) (kept, reset []string) {
	newS, oldS := p.graph.StatefulStages(), old.graph.StatefulStages()
	if len(newS) == 0 && len(oldS) == 0 {
		return nil, nil
	}
	carried := func(name string) bool { return sameStage(old.graph, p.graph, name) }
	took := map[string]bool{}
	n := len(p.runners)
	// Each runner takes its old one's state when the worker count and
	// the steering are the same; otherwise every flow goes to the worker
	// the new steering sends it to (a changed SNAT pool or DNAT address
	// steers some flows' replies elsewhere with the same count).
	same := sameCarry(old, len(p.runners), p.steer)
	if !same && !p.repools && len(old.runners) == n {
		// Another steering with as many workers, on the old executor:
		// no stage's table is carried (resteers would have made it a
		// pool change), and old runner i ran on new runner i's worker,
		// the only one whose old batches the per-worker order has done
		// when new runner i first runs. Each takes its own: what a
		// stage keeps of its old instance without a table (reassemble's
		// gauge accounts) must not be read from a worker still running
		// the old plan.
		same = true
	}
	for i, r := range p.runners {
		var names []string
		if same {
			names = r.CarryState(old.runners[i:i+1], nil, carried)
		} else {
			var own func(src, dst *[16]byte, sport, dport uint16, proto uint8, v6 bool) bool
			if n > 1 && p.steer != nil {
				steer, w := p.steer, i
				own = func(src, dst *[16]byte, sport, dport uint16, proto uint8, v6 bool) bool {
					ports := proto == 6 || proto == 17 || proto == 132 || proto == 33 || proto == 136 || proto == 1 || proto == 58
					return steer.TupleWorker(src, dst, sport, dport, ports, proto, v6, n) == w
				}
			}
			names = r.CarryState(old.runners, own, carried)
		}
		for _, name := range names {
			took[name] = true
		}
	}
	for _, name := range newS {
		if took[name] {
			kept = append(kept, name)
		} else {
			reset = append(reset, name)
		}
	}
	for _, name := range oldS {
		if !took[name] && !contains(newS, name) {
			reset = append(reset, name)
		}
	}
	return kept, reset
}

// sameCarry reports whether a plan of n runners steering by steer has
// each runner take the state of the old plan's runner of the same index:
// as many runners, and, with more than one, the same steering. The
// memory check before a plan's runners are made (plan.go) asks it too.
func sameCarry(old *plan, n int, steer *pipelines.Steering) bool {
	return old != nil && len(old.runners) == n && (n <= 1 || old.steer.Equal(steer))
}

// resteers reports whether p keeps the state of a stage of old (same
// name and kind, a kind whose state a swap carries) with as many workers
// but another steering: each of p's runners then takes its
// flows from every old runner's table (carryState), which it may read
// only when the old plan's batches are done on every worker, not just
// its own. The engine's per-worker order guarantees only the latter, so
// such a plan gets an executor of its own, started once the old one is
// closed (as for another worker count: needsPool).
func resteers(old, p *plan) bool {
	if old == nil || p.steer == nil || len(old.runners) != len(p.runners) || sameCarry(old, len(p.runners), p.steer) {
		return false
	}
	return p.graph.CarriesStateFrom(old.graph)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
