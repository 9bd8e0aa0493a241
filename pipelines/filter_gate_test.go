package pipelines

import (
	"math/rand/v2"
	"testing"

	"github.com/warpflow/warpflow/rings"
)

// TestFilterGatesDifferential checks rule sets in which every rule
// constrains the same fields, so that trees get gates (at the pools' edges
// too: /0 and /1 prefixes, ports 0 and 65535, mixed families), against the
// linear oracle.
func TestFilterGatesDifferential(t *testing.T) {
	rnd := rand.New(rand.NewPCG(9, 9))
	sets := 150
	if testing.Short() {
		sets = 40
	}
	gated, pregated := 0, 0
	for range sets {
		force := 1 + rnd.IntN(63) // bits: src, dst, src_port, dst_port, vlan, proto
		rules := make([]filterRule, 40+rnd.IntN(160))
		for i := range rules {
			r := genRule(rnd)
			if force&1 != 0 && r.src == nil {
				r.src = genPrefixes(rnd)
			}
			if force&2 != 0 && r.dst == nil {
				r.dst = genPrefixes(rnd)
			}
			if force&4 != 0 && r.srcPort == nil {
				r.srcPort = genRanges(rnd, genPorts)
			}
			if force&8 != 0 && r.dstPort == nil {
				r.dstPort = genRanges(rnd, genPorts)
			}
			if force&16 != 0 && !r.hasVLAN {
				r.hasVLAN, r.vlan = true, genRanges(rnd, genVLANs)
			}
			if force&32 != 0 && r.proto == nil {
				r.proto = []uint16{genProtos[rnd.IntN(len(genProtos))]}
			}
			rules[i] = r
		}
		metas := make([]rings.Meta, 128)
		for i := range metas {
			metas[i] = genMeta(rnd)
		}
		c := buildClassifier(rules)
		for _, tr := range c.trees {
			if tr.gN > 0 {
				gated++
			}
		}
		if len(c.pre) > 0 {
			pregated++
		}
		checkAgainstOracle(t, rules, metas)
	}
	if gated < sets/2 {
		t.Fatalf("only %d gated trees over %d rule sets: the test no longer exercises gates", gated, sets)
	}
	if pregated < sets/4 {
		t.Fatalf("only %d of %d rule sets have pre-gates: the test no longer exercises them", pregated, sets)
	}
}

// TestFilterGatesSkipMisses pins the point of gates: traffic that matches
// no rule walks no tree and checks no rule, however many rules there are,
// and is turned away by the pre-gates before it visits any tree's gates.
// (Small sets share one tree whose rules may have no field in common, so
// it has no gate; its walk is short anyway.)
func TestFilterGatesSkipMisses(t *testing.T) {
	for _, n := range []int{1000, 10000} {
		rnd := rand.New(rand.NewPCG(uint64(n), 3))
		for _, set := range []struct {
			name  string
			rules []filterRule
			metas []rings.Meta
		}{
			{"bench", benchShapedRules(n), missMetas(1024)},
			{"realistic", realisticRules(rnd, n), randomMissMetas(rnd, 1024)},
		} {
			c := buildClassifier(set.rules)
			if len(c.pre) == 0 || len(c.pre) > maxPreGates {
				t.Fatalf("%s/%d: %d pre-gates, want 1..%d", set.name, n, len(c.pre), maxPreGates)
			}
			for i := range set.metas {
				m := &set.metas[i]
				var k [nDims]uint64
				filterKey(m, &k)
				if c.prePass(&k) {
					t.Fatalf("%s/%d: missing packet %d passes the pre-gates", set.name, n, i)
				}
				if got, want := int(c.lookup(m)), oracleMatch(set.rules, m); got != want || got != n {
					t.Fatalf("%s/%d: packet %d: lookup %d, oracle %d, want no match (%d)", set.name, n, i, got, want, n)
				}
				if v, ch := lookupWork(c, m); v != 0 || ch != 0 {
					t.Fatalf("%s/%d: missing packet %d walked %d nodes and checked %d rules, want 0 and 0", set.name, n, i, v, ch)
				}
			}
		}
	}
}

func TestFilterSetBits(t *testing.T) {
	for _, tc := range []struct{ a, b uint64 }{{0, 0}, {0, 63}, {63, 64}, {5, 200}, {64, 127}, {1, 190}} {
		bm := make([]uint64, 4)
		setBits(bm, tc.a, tc.b)
		for x := uint64(0); x < 256; x++ {
			got := bm[x>>6]&(1<<(x&63)) != 0
			if want := x >= tc.a && x <= tc.b; got != want {
				t.Fatalf("setBits(%d, %d): bit %d is %v", tc.a, tc.b, x, got)
			}
		}
	}
}
