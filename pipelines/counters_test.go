package pipelines

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/counters"
)

// countedPipeline has a stage of every built-in kind that counts, each
// configured so that every family it may declare is laid out: a filter
// past the rules that have a series of their own, a count stage by every
// key, a rewrite, a sample, conntrack, nat and reassemble.
func countedPipeline(t *testing.T) *Graph {
	t.Helper()
	var b strings.Builder
	b.WriteString("name: counted\nstages:\n  - {name: parse, type: parse}\n  - {name: defrag, type: reassemble}\n  - {name: ct, type: conntrack}\n")
	b.WriteString("  - name: acl\n    type: filter\n    default: flows\n    rules:\n")
	for i := range filterRuleSeries + 10 {
		fmt.Fprintf(&b, "      - {proto: tcp, dst_port: %d, action: \"drop:acl\"}\n", i+1)
	}
	b.WriteString("  - {name: flows, type: count, by: [protocol, vlan, class]}\n" +
		"  - {name: nat, type: nat, conntrack: ct, snat: [{to: 192.0.2.1}]}\n" +
		"  - {name: mac, type: rewrite, swap_macs: true}\n" +
		"  - {name: smp, type: sample, every: 3, file: s.pcap}\n" +
		"  - {name: out, type: tx, port: o}\n")
	g, err := Load("counted.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestStageCounterDeclarations: every built-in kind's declarations pass
// counters.Decl.Check; every compiled stage lays out only families its
// kind declares (the declarations are what the dashboard and the docs
// list), in a layout that passes counters.Layout.Check, and its every
// instance reports them (Reporter, and LiveReporter where it publishes);
// every kind that declares counters was compiled here.
func TestStageCounterDeclarations(t *testing.T) {
	kinds := builtinKinds()
	for _, k := range DeclaredCounters() {
		for _, d := range k.Counters {
			if err := d.Check(); err != nil {
				t.Errorf("kind %s: %v", k.Kind, err)
			}
		}
	}
	g := countedPipeline(t)
	r := g.NewRunner(RunnerOptions{})
	seen := map[string]bool{}
	for i, si := range g.Stages() {
		if si.Counters == nil {
			if len(kinds[si.Kind].Counters) > 0 {
				t.Errorf("stage %s (%s): its kind declares counters, the stage lays none out", si.Name, si.Kind)
			}
			continue
		}
		seen[si.Kind] = true
		if err := si.Counters.Check(); err != nil {
			t.Errorf("stage %s: %v", si.Name, err)
		}
		for _, f := range si.Counters.Families() {
			if !slices.Contains(kinds[si.Kind].Counters, f.Decl) {
				t.Errorf("stage %s (%s) lays out %q, which its kind does not declare", si.Name, si.Kind, f.Name)
			}
		}
		vals := make([]counters.Value, si.Counters.Len())
		if !r.Counters(i, vals) {
			t.Errorf("stage %s: its instance does not report its counters", si.Name)
		}
		if _, live := r.nodes[i].stage.(LiveReporter); !live && si.Kind != sampleKind.Name {
			t.Errorf("stage %s (%s) keeps counters it does not publish live", si.Name, si.Kind)
		}
	}
	for _, k := range DeclaredCounters() {
		if !seen[k.Kind] {
			t.Errorf("kind %s declares counters and countedPipeline has none of it", k.Kind)
		}
	}
	// The filter's rules from the 256th share one metric series; the
	// count stage's VLANs have none.
	for _, si := range g.Stages() {
		for _, f := range countersOf(si) {
			switch {
			case si.Kind == "filter" && (f.Fold != 1+filterRuleSeries || f.Keys[0] != "default" || f.Folded(filterRuleSeries) || !f.Folded(1+filterRuleSeries)):
				t.Errorf("filter rule family: fold %d, keys %v...", f.Fold, f.Keys[:3])
			case si.Kind == "count" && f.Name == "vlan" && !f.StatsOnly:
				t.Error("the count stage's VLAN keys make metric series")
			case si.Kind == "count" && f.Name == "proto" && (f.Keys[f.Fold-1] != "none" || f.Keys[0] != "icmp"):
				t.Errorf("proto keys: %v..., fold at %d", f.Keys[:f.Fold], f.Fold)
			}
		}
	}
}

func countersOf(si StageInfo) []counters.Family {
	if si.Counters == nil {
		return nil
	}
	return si.Counters.Families()
}
