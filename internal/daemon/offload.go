package daemon

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/xdp"
)

// The split pipeline (config `offload: auto|none`): the first rules of the
// pipeline's first filter that the XDP program can run (pipelines.
// PlanOffload) are loaded into every receiving interface's program, which
// then drops or passes the frames they decide before any socket sees them.
// The workers still run the whole pipeline on what the kernel steers on.
//
// The option is the daemon's, not the pipeline's: the split is a property
// of a live AF_XDP port (replay has no kernel half), the same pipeline file
// must run both ways, and turning the split off to debug must not mean
// editing the pipeline under test.
//
// Accounting: a frame the kernel decides is received, and dropped or
// passed, in the queue's counts (the program's per-queue Dropped and
// Passed), so received = transmitted + dropped + passed holds with the
// kernel's decisions included. Kernel drops by reason are known per rule,
// not per queue: they join the totals' drops by reason (under the rule's
// reason, beside the workers' drops of the same reason), and each queue's
// program counters say how many the kernel decided there. Stats also
// lists the rule set in force per interface with each rule's hits
// (KernelRules: `warpctl stats`, `top` and the xdp_rule metrics), and
// `pipeline show` marks what runs in the kernel (split).
//
// A balance stage never moves: Linux refuses an XDP redirect into another
// queue's socket (pipelines.BalanceKernelReason).

// offloadState is the daemon's kernel half: the plan in force and, per
// interface, the generations of the rule sets its program holds.
type offloadState struct {
	mu   sync.Mutex
	mode pipelines.OffloadMode
	plan *pipelines.OffloadPlan // nil: not planned (offload none or no pipeline yet)
	ifs  map[string]*ifaceRules
	// retired holds the kernel's drops by reason (and "pass" passes) of
	// rule sets no longer held by a program, so totals survive swaps.
	retired map[string]uint64
	// taken says that the programs hold no rules although plan has some:
	// a capture's tap must see the frames they decide, so the workers run
	// them while it is on (takeKernel).
	taken bool
}

// ifaceRules are the two rule sets one program holds: the active one and
// the one before it (xdp.Program.RuleCounters reads both).
type ifaceRules struct {
	gen, prevGen   uint64
	plan, prevPlan *pipelines.OffloadPlan
}

// planOffload parses mode and returns the split of g under it: planned
// from the compiled graph (pipelines.Graph.Offload), once per graph and
// mode, so the YAML is never read again for the kernel half.
func planOffload(mode string, g *pipelines.Graph) (pipelines.OffloadMode, *pipelines.OffloadPlan, error) {
	m, err := pipelines.ParseOffloadMode(mode)
	if err != nil {
		return 0, nil, err
	}
	return m, g.Offload(m), nil
}

// kernelRulesOf is plan's rule set for the programs: nil (an empty set)
// when the plan moves nothing.
func kernelRulesOf(plan *pipelines.OffloadPlan) *xdp.OffloadRules {
	if plan == nil || plan.Moved == 0 {
		return nil
	}
	r := xdp.OffloadRules(plan.Kernel)
	return &r
}

// loadKernelRules loads plan's kernel rules into prog (an empty set when
// the plan moves nothing) and logs the split.
//
// The set it replaces stays readable as the program's previous one; the
// set before that, whose slot the load overwrites, is folded into the
// retired totals first. Folding only then, a whole swap after that set
// stopped being active, keeps the count exact: a frame that entered the
// program before a swap's flip can still count a hit in the old set just
// after LoadRules returns, but not a swap later.
func (d *Daemon) loadKernelRules(iface string, prog *xdp.Program, plan *pipelines.OffloadPlan) error {
	o := &d.off
	o.mu.Lock()
	defer o.mu.Unlock()
	gen, err := d.loadRulesLocked(iface, prog, plan)
	if err != nil {
		return err
	}
	o.plan = plan
	d.logSplit(iface, gen, plan)
	return nil
}

// loadRulesLocked loads held's kernel rules into prog (nil: an empty
// set), in force at once, and moves iface's bookkeeping to the new
// generation (see loadKernelRules). o.mu is held.
func (d *Daemon) loadRulesLocked(iface string, prog *xdp.Program, held *pipelines.OffloadPlan) (uint64, error) {
	o := &d.off
	if o.ifs == nil {
		o.ifs, o.retired = map[string]*ifaceRules{}, map[string]uint64{}
	}
	ir := o.ifs[iface]
	if ir == nil {
		ir = &ifaceRules{}
		o.ifs[iface] = ir
	}
	var overwritten []xdp.RuleCount
	if ir.prevGen != 0 && ir.prevPlan != nil {
		overwritten, _ = prog.RuleCounters(ir.prevGen)
	}
	gen, err := prog.LoadRules(kernelRulesOf(held))
	if err != nil {
		return 0, fmt.Errorf("load the pipeline's kernel rules into the XDP program on %s: %w", iface, err)
	}
	if overwritten != nil {
		addRuleHits(o.retired, ir.prevPlan, overwritten)
	}
	ir.prevGen, ir.prevPlan = ir.gen, ir.plan
	ir.gen, ir.plan = gen, held
	return gen, nil
}

// logSplit logs the split plan in force on iface (generation gen).
func (d *Daemon) logSplit(iface string, gen uint64, plan *pipelines.OffloadPlan) {
	if plan == nil {
		return
	}
	attrs := []any{"interface", iface, "mode", plan.Mode.String(), "generation", gen, "kernel_rules", plan.Moved, "rules", len(plan.Rules)}
	if plan.Filter != "" {
		attrs = append(attrs, "filter", plan.Filter)
	}
	if plan.Why != "" {
		attrs = append(attrs, "why", plan.Why)
	}
	if plan.StopReason != "" {
		attrs = append(attrs, "stopped_by", fmt.Sprintf("rule[%d] (line %d): %s", plan.Moved, plan.Rules[plan.Moved].Pos.Line, plan.StopReason))
	}
	d.log.Info("pipeline split", attrs...)
}

// addRuleHits adds hits of plan's kernel rules to m: drops under their
// reason, passes under "pass".
func addRuleHits(m map[string]uint64, plan *pipelines.OffloadPlan, hits []xdp.RuleCount) {
	for i, h := range hits {
		if i >= plan.Moved || h.Packets == 0 {
			continue
		}
		k := "pass"
		if r := plan.Rules[i]; r.Label != "" {
			k = r.Label
		}
		m[k] += h.Packets
	}
}

// addKernelVerdicts counts the frames queue's program decided (c) as
// received, and as xdp_dropped or xdp_passed (control.Stats).
func addKernelVerdicts(qs *QueueStats, c xdp.QueueCounters) {
	qs.XDPDropped, qs.XDPPassed = c.Dropped, c.Passed
	qs.Received += c.Dropped + c.Passed
}

// addKernelReasons adds the kernel's drops by reason (of the rule sets the
// programs hold and those retired) to t.Drops, and returns the active
// sets' per-rule counters.
func (d *Daemon) addKernelReasons(t *Counts) []control.KernelRuleStats {
	o := &d.off
	o.mu.Lock()
	defer o.mu.Unlock()
	m := map[string]uint64{}
	for k, v := range o.retired {
		m[k] += v
	}
	var rules []control.KernelRuleStats
	for _, n := range d.progNames() {
		ir := o.ifs[n]
		if ir == nil {
			continue
		}
		prog := d.progs[n]
		if ir.prevGen != 0 && ir.prevPlan != nil {
			if hits, err := prog.RuleCounters(ir.prevGen); err == nil {
				addRuleHits(m, ir.prevPlan, hits)
			}
		}
		// The set in force: ir's, or, while a swap has it staged and
		// not yet flipped in (its counters are not held yet), the
		// previous one, which is still the active set.
		gen, plan := ir.gen, ir.plan
		if gen == 0 || plan == nil {
			continue
		}
		hits, err := prog.RuleCounters(gen)
		switch {
		case err == nil:
			addRuleHits(m, plan, hits)
		case ir.prevPlan != nil && prog.RuleGeneration() == ir.prevGen:
			// Staged, not in force yet: list the previous set, whose
			// hits are counted above.
			gen, plan = ir.prevGen, ir.prevPlan
			if hits, err = prog.RuleCounters(gen); err != nil {
				continue
			}
		default:
			continue
		}
		for i := range min(len(hits), plan.Moved) {
			r := plan.Rules[i]
			rules = append(rules, control.KernelRuleStats{Interface: n, Pipeline: plan.Pipeline, Generation: gen,
				Filter: plan.Filter, Rule: i, Line: r.Pos.Line, Action: r.Action, Packets: hits[i].Packets, Bytes: hits[i].Bytes})
		}
	}
	for _, r := range slices.Sorted(maps.Keys(m)) {
		if r != "pass" {
			t.Drops = addDrops(t.Drops, []control.DropCount{{Reason: r, XDPPackets: m[r]}})
		}
	}
	return rules
}

// kernelSwap is the kernel half of one swap: the new pipeline's kernel
// rules staged in the idle slot of every program, each flipped in by the
// first of its interface's queues to take the new plan up (flip), then
// recorded (commitKernel), or, the swap refused, given back
// (discardKernel). See Daemon.Swap for what a frame sees.
type kernelSwap struct {
	plan *pipelines.OffloadPlan
	// taken: the programs are given no rules, plan's stay with the
	// workers, for a capture that follows the swap (takeKernel).
	taken bool
	flips map[string]*kernelFlip // by interface
}

// kernelFlip is one program's staged set and what the staging changed in
// the daemon's bookkeeping (to undo it if the swap is refused).
type kernelFlip struct {
	iface  string
	prog   *xdp.Program
	staged *xdp.StagedRules
	// overwritten are the final counters of the set whose slot the
	// staging took (the previous generation), folded into the retired
	// totals at staging; was is the interface's bookkeeping before.
	overwritten []xdp.RuleCount
	was         ifaceRules
	// at is when the set was first flipped in (unix ns; 0: not yet).
	at atomic.Int64
}

// flip puts f's staged set in force. It is a queue's engine's AtTakeUp
// (dataplane.SwapOptions): the queue's I/O loop calls it at the batch
// boundary at which it takes the new plan up, so it does one map write
// and takes no lock; every queue of the interface calls it, the first
// one's call flips, the others find it done.
func (f *kernelFlip) flip() error {
	if err := f.staged.Activate(); err != nil {
		return err
	}
	f.at.CompareAndSwap(0, time.Now().UnixNano())
	return nil
}

// stageKernel writes plan's kernel rules into the idle slot of every
// program, nothing in force yet, and moves the bookkeeping to the new
// generation: the set that was in force becomes the previous one (still
// counted, and listed in the stats until the flip), and the counters of
// the set the staging overwrote join the retired totals, so a stats read
// counts every kernel decision once before the flip and after it. On
// error every program is as it was. With taken the programs are given an
// empty set instead, and plan's rules run on the workers (a capture that
// follows the swap must see the frames they decide: takeKernel).
func (d *Daemon) stageKernel(plan *pipelines.OffloadPlan, taken bool) (*kernelSwap, error) {
	k := &kernelSwap{plan: plan, taken: taken, flips: map[string]*kernelFlip{}}
	held := plan
	if taken {
		held = nil
	}
	rules := kernelRulesOf(held)
	o := &d.off
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ifs == nil {
		o.ifs, o.retired = map[string]*ifaceRules{}, map[string]uint64{}
	}
	for _, n := range d.progNames() {
		prog := d.progs[n]
		ir := o.ifs[n]
		if ir == nil {
			ir = &ifaceRules{}
			o.ifs[n] = ir
		}
		f := &kernelFlip{iface: n, prog: prog, was: *ir}
		if ir.prevGen != 0 && ir.prevPlan != nil {
			// Final: no frame reads that slot (it went out of force a
			// swap ago), and staging leaves its counters as they are.
			f.overwritten, _ = prog.RuleCounters(ir.prevGen)
		}
		st, err := prog.StageRules(rules)
		if err != nil {
			d.discardKernelLocked(k)
			return nil, fmt.Errorf("load the pipeline's kernel rules into the XDP program on %s: %w", n, err)
		}
		f.staged = st
		k.flips[n] = f
		if f.overwritten != nil {
			addRuleHits(o.retired, ir.prevPlan, f.overwritten)
		}
		ir.prevGen, ir.prevPlan = ir.gen, ir.plan
		ir.gen, ir.plan = st.Generation(), held
	}
	return k, nil
}

// discardKernel gives back the slots stageKernel took, for a refused
// swap, and undoes its bookkeeping: the sets in force never changed.
func (d *Daemon) discardKernel(k *kernelSwap) {
	d.off.mu.Lock()
	defer d.off.mu.Unlock()
	d.discardKernelLocked(k)
}

func (d *Daemon) discardKernelLocked(k *kernelSwap) {
	o := &d.off
	for n, f := range k.flips {
		f.staged.Discard() // never published: no queue could flip it
		if f.overwritten != nil {
			subRuleHits(o.retired, f.was.prevPlan, f.overwritten)
		}
		*o.ifs[n] = f.was
	}
}

// flipRest flips in, from the control side, any staged set no queue's
// I/O loop flipped (an interface whose queues all stopped, or whose
// AtTakeUp failed), so the kernel half never lags the workers past the
// swap, and returns the errors of those it could not flip. k.flips is
// read, never written, once plans are published: I/O loops read it.
func (k *kernelSwap) flipRest() error {
	var errs []error
	for _, n := range slices.Sorted(maps.Keys(k.flips)) {
		if err := k.flips[n].flip(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// commitKernel records k's plan as the one in force and logs the split
// on every interface; an interface whose set could not be flipped in
// (flipRest) is put back as it was, so the bookkeeping says what the
// program runs.
func (d *Daemon) commitKernel(k *kernelSwap) {
	o := &d.off
	o.mu.Lock()
	o.plan, o.taken = k.plan, k.taken
	for _, n := range slices.Sorted(maps.Keys(k.flips)) {
		f := k.flips[n]
		if f.staged.Discard() {
			if f.overwritten != nil {
				subRuleHits(o.retired, f.was.prevPlan, f.overwritten)
			}
			*o.ifs[n] = f.was
			d.log.Error("the new kernel rules could not be flipped in: the old ones stay in force", "interface", n, "generation", f.was.gen)
			continue
		}
		if k.taken {
			d.log.Info("kernel rules on the workers while the capture runs", "interface", n, "generation", f.staged.Generation(), "filter", k.plan.Filter, "kernel_rules", k.plan.Moved)
			continue
		}
		d.logSplit(n, f.staged.Generation(), k.plan)
	}
	o.mu.Unlock()
}

// subRuleHits undoes addRuleHits.
func subRuleHits(m map[string]uint64, plan *pipelines.OffloadPlan, hits []xdp.RuleCount) {
	sub := map[string]uint64{}
	addRuleHits(sub, plan, hits)
	for k, v := range sub {
		m[k] -= v
	}
}

// split describes s's partition for `pipeline show`: for the running
// pipeline the plan in force with its kernel rules' hits (summed over the
// interfaces), for a stored one the plan a swap to it would load (made
// when it was loaded). Called with ctlMu held (Swap, which changes the
// plan in force, holds it too).
func (d *Daemon) split(s *stored) *control.Split {
	if s.name != d.running {
		return control.SplitOf(s.graph.Offload(d.off.mode))
	}
	o := &d.off
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.plan == nil {
		return &control.Split{Mode: o.mode.String(), InForce: true, Why: "no split in force: no XDP program holds this pipeline's kernel rules; the workers run the whole pipeline"}
	}
	if o.taken {
		return &control.Split{Mode: o.mode.String(), InForce: true, Filter: o.plan.Filter, Why: takenWhy(o.plan)}
	}
	sp := control.SplitOf(o.plan)
	sp.InForce = true
	for _, n := range d.progNames() {
		ir := o.ifs[n]
		if ir == nil || ir.plan != o.plan {
			continue
		}
		if sp.Generation == 0 {
			sp.Generation = ir.gen
		}
		hits, err := d.progs[n].RuleCounters(ir.gen)
		if err != nil {
			continue
		}
		for i := range min(len(hits), o.plan.Moved) {
			sp.Rules[i].Packets += hits[i].Packets
			sp.Rules[i].Bytes += hits[i].Bytes
		}
	}
	return sp
}

// progNames are the interfaces with a program, sorted.
func (d *Daemon) progNames() []string {
	names := make([]string, 0, len(d.progs))
	for n := range d.progs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Captures and the kernel half. A frame a kernel rule decides is dropped
// or passed by the XDP program before any socket sees it, so a tap on a
// stage it would have passed on the workers (the entry parse stage, the
// split filter, the filter's edge to that rule's terminal, the terminal:
// pipelines.Tap.SeesKernel) would record none of those frames: on the lab
// of the README, a capture of acl after the swap to a pipeline that drops
// the generator's port in the kernel recorded nothing. So while such a tap
// is on, the programs hold an empty rule set and the workers run the
// rules: they run the whole pipeline, the kernel's prefix included, so no
// frame's verdict changes, only where it is decided; the cost is that the
// frames those rules drop take a UMEM frame and a worker's time again for
// the capture's length. When the capture ends (its count, capture stop,
// a swap it does not follow, the daemon stopping) the rules go back. A
// swap while such a capture runs stages the new pipeline's rules, or an
// empty set when the capture follows it to a point that sees them
// (Daemon.Swap, stageKernel's taken).

// takenWhy says where the kernel rules of plan are while they are taken.
func takenWhy(plan *pipelines.OffloadPlan) string {
	return fmt.Sprintf("the %d kernel rules of filter %q run on the workers while the capture runs (its tap must see the frames they decide); they go back to the XDP program when it ends", plan.Moved, plan.Filter)
}

// kernelTaken reports whether the workers run the kernel rules for a
// capture.
func (d *Daemon) kernelTaken() bool {
	d.off.mu.Lock()
	defer d.off.mu.Unlock()
	return d.off.taken
}

// takeKernel takes the running pipeline's kernel rules out of every
// program (want) or puts them back (!want), in force at once: either way
// every frame gets the pipeline's verdict, so no batch boundary matters.
// It does nothing when the programs are already so, or when the plan
// moves nothing. On error every program is put back as it was (best
// effort) and the error says which interface failed. d.ctlMu is held.
func (d *Daemon) takeKernel(want bool) error {
	o := &d.off
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.taken == want || o.plan == nil || o.plan.Moved == 0 {
		return nil
	}
	held, undo := (*pipelines.OffloadPlan)(nil), o.plan
	if !want {
		held, undo = o.plan, nil
	}
	var done []string
	for _, n := range d.progNames() {
		gen, err := d.loadRulesLocked(n, d.progs[n], held)
		if err != nil {
			for _, m := range done {
				if _, uerr := d.loadRulesLocked(m, d.progs[m], undo); uerr != nil {
					err = errors.Join(err, uerr)
				}
			}
			return err
		}
		done = append(done, n)
		if want {
			d.log.Info("kernel rules on the workers while the capture runs", "interface", n, "generation", gen, "filter", o.plan.Filter, "kernel_rules", o.plan.Moved)
		} else {
			d.logSplit(n, gen, o.plan)
		}
	}
	o.taken = want
	return nil
}
