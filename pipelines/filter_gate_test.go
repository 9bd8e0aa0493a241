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
// (Small mixed sets: TestFilterSmallMixedSetsArePreGated.)
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

// TestFilterSmallMixedSetsArePreGated: a few rules on unrelated fields (the
// default pipeline's ACL: a class rule, a protocol rule, port rules,
// address rules) would share one gateless tree and so give the
// classifier no pre-gates, making every packet walk that tree. They are
// split by field instead: ordinary traffic that matches none is turned
// away by the pre-gates, and what does match still finds its rule.
func TestFilterSmallMixedSetsArePreGated(t *testing.T) {
	for _, src := range []string{
		`rules: [{class: malformed, action: "drop:m"}, {proto: tcp, dst_port: 23, action: "drop:t"}]`,
		`rules:
  - {class: malformed, action: "drop:malformed"}
  - {proto: arp, action: kernel}
  - {proto: tcp, dst_port: 23, action: "drop:telnet"}
  - {proto: udp, dst_port: 1900, action: "drop:ssdp"}
  - {src: 192.0.2.0/24, action: "drop:bogon"}
  - {src: 2001:db8:bad::/48, action: "drop:bogon"}`,
	} {
		rules := parseRulesForTest(t, src)
		c := buildClassifier(rules)
		if len(c.pre) == 0 {
			t.Fatalf("%d rules: no pre-gates (%d trees)", len(rules), len(c.trees))
		}
		miss := []rings.Meta{
			metaV4(17, "10.0.0.1", "10.0.0.2", 4000, 5000),
			metaV4(6, "10.1.0.1", "10.0.0.2", 4000, 443),
			metaV6(17, "fd00::1", "fd00::2", 4000, 53),
		}
		for i := range miss {
			m := &miss[i]
			if got := c.lookup(m); int(got) != len(rules) {
				t.Fatalf("%d rules: ordinary packet %d matched rule %d", len(rules), i, got)
			}
			if v, ch := lookupWork(c, m); v != 0 || ch != 0 {
				t.Fatalf("%d rules: ordinary packet %d walked %d nodes and checked %d rules, want 0 and 0", len(rules), i, v, ch)
			}
		}
		hit := []rings.Meta{
			with(metaV4(17, "10.0.0.1", "10.0.0.2", 4000, 5000), func(m *rings.Meta) { m.Class = rings.ClassTruncated }),
			metaV4(6, "10.0.0.1", "10.0.0.2", 4000, 23),
		}
		for i := range hit {
			if got, want := int(c.lookup(&hit[i])), oracleMatch(rules, &hit[i]); got != want || got == len(rules) {
				t.Fatalf("%d rules: packet %d: lookup %d, oracle %d, want a match", len(rules), i, got, want)
			}
		}
		rnd := rand.New(rand.NewPCG(7, uint64(len(rules))))
		metas := make([]rings.Meta, 2000)
		for i := range metas {
			metas[i] = genMeta(rnd)
		}
		checkAgainstOracle(t, rules, metas)
	}
}
