package daemon

import (
	"fmt"
	"os"
	"sort"
	"sync"

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
}

// ifaceRules are the two rule sets one program holds: the active one and
// the one before it (xdp.Program.RuleCounters reads both).
type ifaceRules struct {
	gen, prevGen   uint64
	plan, prevPlan *pipelines.OffloadPlan
}

// planOffload parses mode and plans the split of the pipeline config
// (path, src) that the daemon runs.
func planOffload(mode, path string, src []byte) (pipelines.OffloadMode, *pipelines.OffloadPlan, error) {
	m, err := pipelines.ParseOffloadMode(mode)
	if err != nil {
		return 0, nil, err
	}
	if src == nil {
		if src, err = os.ReadFile(path); err != nil {
			return 0, nil, fmt.Errorf("read pipeline config: %w", err)
		}
	}
	_, plan, err := pipelines.LoadOffload(path, src, m)
	if err != nil {
		return 0, nil, err
	}
	return m, plan, nil
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
	if o.ifs == nil {
		o.ifs, o.retired = map[string]*ifaceRules{}, map[string]uint64{}
	}
	ir := o.ifs[iface]
	if ir == nil {
		ir = &ifaceRules{}
		o.ifs[iface] = ir
	}
	var rules *xdp.OffloadRules
	if plan != nil && plan.Moved > 0 {
		r := xdp.OffloadRules(plan.Kernel)
		rules = &r
	}
	var overwritten []xdp.RuleCount
	if ir.prevGen != 0 && ir.prevPlan != nil {
		overwritten, _ = prog.RuleCounters(ir.prevGen)
	}
	gen, err := prog.LoadRules(rules)
	if err != nil {
		return fmt.Errorf("load the pipeline's kernel rules into the XDP program on %s: %w", iface, err)
	}
	if overwritten != nil {
		addRuleHits(o.retired, ir.prevPlan, overwritten)
	}
	ir.prevGen, ir.prevPlan = ir.gen, ir.plan
	ir.gen, ir.plan = gen, plan
	o.plan = plan
	if plan == nil {
		return nil
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
	return nil
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
// received and dropped or passed.
func addKernelVerdicts(qs *QueueStats, c xdp.QueueCounters) {
	qs.XDPDropped, qs.XDPPassed = c.Dropped, c.Passed
	qs.Received += c.Dropped + c.Passed
	qs.Dropped += c.Dropped
	qs.Passed += c.Passed
	qs.Balanced = qs.Received == qs.Transmitted+qs.Dropped+qs.Passed
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
		if ir.gen == 0 || ir.plan == nil {
			continue
		}
		hits, err := prog.RuleCounters(ir.gen)
		if err != nil {
			continue
		}
		addRuleHits(m, ir.plan, hits)
		for i := range min(len(hits), ir.plan.Moved) {
			r := ir.plan.Rules[i]
			rules = append(rules, control.KernelRuleStats{Interface: n, Pipeline: ir.plan.Pipeline, Generation: ir.gen,
				Filter: ir.plan.Filter, Rule: i, Line: r.Pos.Line, Action: r.Action, Packets: hits[i].Packets, Bytes: hits[i].Bytes})
		}
	}
	for k, v := range m {
		if k != "pass" {
			t.Drops[k] += v
		}
	}
	return rules
}

// swapKernelRules replans the split for pipeline (file, src), just made
// the running one, and loads it into every program. A pipeline whose plan
// fails gets an empty kernel set (everything to the workers, which run
// the whole pipeline: always correct) and an error in the log. Each frame
// sees the old pipeline's kernel rules or the new one's, never a mix; the
// workers, running the new pipeline, decide the rest.
func (d *Daemon) swapKernelRules(file, src string) {
	_, plan, err := planOffload(d.off.mode.String(), file, []byte(src))
	if err != nil {
		d.log.Error("plan the pipeline split; the kernel decides nothing until the next swap", "pipeline", file, "err", err)
		plan = nil
	}
	names := make([]string, 0, len(d.progs))
	for n := range d.progs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := d.loadKernelRules(n, d.progs[n], plan); err != nil {
			d.log.Error("swap the kernel rules", "interface", n, "err", err)
		}
	}
}

// split describes s's partition for `pipeline show`: for the running
// pipeline the plan in force with its kernel rules' hits (summed over the
// interfaces), for a stored one the plan a swap to it would load. Called
// with ctlMu held (Swap, which changes the plan in force, holds it too).
func (d *Daemon) split(s *stored) *control.Split {
	if s.name != d.running {
		_, plan, err := planOffload(d.off.mode.String(), s.file, []byte(s.source))
		if err != nil {
			return &control.Split{Mode: d.off.mode.String(), Why: "plan the split: " + err.Error()}
		}
		return control.SplitOf(plan)
	}
	o := &d.off
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.plan == nil {
		return &control.Split{Mode: o.mode.String(), InForce: true, Why: "no split in force: planning it failed (see the daemon's log); the workers run the whole pipeline"}
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
