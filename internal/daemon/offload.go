package daemon

import (
	"fmt"
	"os"
	"sort"
	"sync"

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
// program counters say how many the kernel decided there.

// offloadState is the daemon's kernel half: the plan in force and, per
// interface, the generation of the rule set its program runs.
type offloadState struct {
	mu   sync.Mutex
	mode pipelines.OffloadMode
	plan *pipelines.OffloadPlan // nil: not planned (offload none or no pipeline yet)
	gens map[string]uint64      // interface -> generation loaded
	// retired holds the kernel's drops by reason (and "pass" passes) of
	// rule sets no longer in force, so totals survive a swap.
	retired map[string]uint64
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
// the plan moves nothing), folding the counts of the set it replaces into
// the retired totals, and logs the split.
func (d *Daemon) loadKernelRules(iface string, prog *xdp.Program, plan *pipelines.OffloadPlan) error {
	o := &d.off
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.gens == nil {
		o.gens, o.retired = map[string]uint64{}, map[string]uint64{}
	}
	var rules *xdp.OffloadRules
	if plan != nil && plan.Moved > 0 {
		r := xdp.OffloadRules(plan.Kernel)
		rules = &r
	}
	prevGen, prevPlan := o.gens[iface], o.plan
	gen, err := prog.LoadRules(rules)
	if err != nil {
		return fmt.Errorf("load the pipeline's kernel rules into the XDP program on %s: %w", iface, err)
	}
	if prevGen != 0 && prevPlan != nil {
		if hits, err := prog.RuleCounters(prevGen); err == nil {
			addRuleHits(o.retired, prevPlan, hits)
		}
	}
	o.gens[iface] = gen
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

// addKernelReasons adds the kernel's drops by reason (of the rule sets in
// force on every interface and those retired) to t.Drops.
func (d *Daemon) addKernelReasons(t *Counts) {
	o := &d.off
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.plan == nil && len(o.retired) == 0 {
		return
	}
	m := map[string]uint64{}
	for k, v := range o.retired {
		m[k] += v
	}
	names := make([]string, 0, len(o.gens))
	for n := range o.gens {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		prog := d.progs[n]
		if prog == nil || o.plan == nil {
			continue
		}
		if hits, err := prog.RuleCounters(o.gens[n]); err == nil {
			addRuleHits(m, o.plan, hits)
		}
	}
	for k, v := range m {
		if k != "pass" {
			t.Drops[k] += v
		}
	}
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
