package pipelines

import (
	"math/rand/v2"
	"testing"

	"github.com/warpflow/warpflow/rings"
)

// lookupWork mirrors filterClassifier.lookup, counting the tree nodes it
// visits and the rules it checks.
func lookupWork(c *filterClassifier, m *rings.Meta) (visits, checks int) {
	var k [nDims]uint64
	filterKey(m, &k)
	best := c.n
	for ti := range c.trees {
		t := &c.trees[ti]
		if t.minRule >= best {
			break
		}
		if !c.gatesPass(t, &k) {
			continue
		}
		nd := &t.nodes[0]
		for nd.dim != leafDim {
			visits++
			if k[nd.dim] < nd.thr {
				nd = &t.nodes[nd.a]
			} else {
				nd = &t.nodes[nd.b]
			}
		}
		for i := nd.a; i < nd.b; i++ {
			lr := &c.leaves[i]
			if lr.rule >= best {
				break
			}
			checks++
			if c.match(lr, &k) {
				best = lr.rule
				break
			}
		}
	}
	return visits, checks
}

// TestFilterClassifierShape guards against the classifier degenerating
// into a scan: on the benchmark's realistic rule sets, a lookup must touch
// a handful of nodes and rules (gates skip most trees; it was about 45
// nodes and 11 rules before them), and memory must stay linear.
func TestFilterClassifierShape(t *testing.T) {
	for _, tc := range []struct {
		n                    int
		maxVisits, maxChecks float64
		maxEntriesPerRule    float64
	}{
		{10, 4, 6, 2},
		{1000, 15, 6, 2},
		{10000, 20, 6, 2},
	} {
		rnd := rand.New(rand.NewPCG(uint64(tc.n), 1))
		rules := realisticRules(rnd, tc.n)
		metas := realisticMetas(rnd, rules, 2000)
		c := buildClassifier(rules)
		nodes := 0
		for _, tr := range c.trees {
			nodes += len(tr.nodes)
		}
		v, ch := 0, 0
		for i := range metas {
			a, b := lookupWork(c, &metas[i])
			v += a
			ch += b
		}
		visits, checks := float64(v)/float64(len(metas)), float64(ch)/float64(len(metas))
		perRule := float64(len(c.leaves)) / float64(tc.n)
		t.Logf("rules=%d trees=%d nodes=%d leaf entries=%d (%.2f per rule) checks=%d; per lookup: %.1f nodes, %.1f rules",
			tc.n, len(c.trees), nodes, len(c.leaves), perRule, len(c.checks), visits, checks)
		if visits > tc.maxVisits || checks > tc.maxChecks || perRule > tc.maxEntriesPerRule {
			t.Errorf("rules=%d: %.1f visits, %.1f checks per lookup, %.2f leaf entries per rule; want at most %v, %v, %v",
				tc.n, visits, checks, perRule, tc.maxVisits, tc.maxChecks, tc.maxEntriesPerRule)
		}
	}
}
