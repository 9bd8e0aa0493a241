package pipelines

import (
	"maps"
	"slices"
)

// The classifier's build, second step: the projected rules
// (filter_project.go) grouped so that rules alike share a decision tree
// and each tree can get a gate; then each group's tree is built
// (filter_tree.go).

// smallGroup: groups smaller than this share one tree.
const smallGroup = 32

// groupKey says which of the wildcard-prone fields rule p constrains
// narrowly; rules with the same key share a tree.
func groupKey(p *projRule) int {
	key := 0
	narrow := []struct {
		d     int
		limit uint64
	}{{dSrcHi, 1 << 56}, {dDstHi, 1 << 56}, {dSport, 1024}, {dDport, 1024}, {dVLAN, 256}}
	for i, n := range narrow {
		if s := p.dims[n.d]; s != nil && measure(s) < n.limit {
			key |= 1 << i
		}
	}
	// Single-family rules also group by family: a tree then holds IPv4 or
	// IPv6 rules, and its dL3 and address gates reject the other family.
	if l3 := p.dims[dL3]; len(l3) > 0 {
		if f := l3[0].lo >> 9; f == l3[len(l3)-1].hi>>9 {
			key |= int(f) << len(narrow)
		}
	}
	return key
}

// buildClassifier compiles rules into a classifier.
func buildClassifier(rules []filterRule) *filterClassifier {
	c := &filterClassifier{n: int32(len(rules))}
	proj := make([]projRule, len(rules))
	checks := make([][]cCheck, len(rules))
	exact := make([]int32, len(rules))
	groups := map[int][]int32{}
	for i := range rules {
		p := projectRule(&rules[i])
		proj[i] = p
		for _, d := range checkOrder {
			s := p.dims[d]
			if len(s) == 0 {
				continue
			}
			ch := cCheck{lo: s[0].lo, hi: s[len(s)-1].hi, dim: uint8(d), setN: 1}
			if len(s) > 1 {
				ch.setOff, ch.setN = uint32(len(c.pool)), uint32(len(s))
				c.pool = append(c.pool, s...)
			}
			checks[i] = append(checks[i], ch)
		}
		exact[i] = -1
		if p.ex != nil {
			exact[i] = int32(len(c.exact))
			c.exact = append(c.exact, *p.ex)
		}
		if !p.never {
			k := groupKey(&p)
			groups[k] = append(groups[k], int32(i))
		}
	}
	var sets [][]int32
	var small []int32
	for _, k := range slices.Sorted(maps.Keys(groups)) {
		g := groups[k]
		if len(g) < smallGroup {
			small = append(small, g...)
			continue
		}
		sets = append(sets, g)
	}
	if len(small) > 0 {
		slices.Sort(small)
		sets = append(sets, small)
	}
	sets = splitGateless(proj, sets)
	b := &treeBuilder{proj: proj, c: c, ruleChecks: checks, ruleExact: exact}
	gOffs, gNs := make([]uint32, len(sets)), make([]uint8, len(sets))
	for i, g := range sets {
		b.used, b.budget = 0, treeBudget(len(g))
		gOffs[i], gNs[i] = buildGates(c, proj, g)
		c.trees = append(c.trees, cTree{nodes: b.build(g), minRule: g[0], gOff: gOffs[i], gN: gNs[i]})
	}
	buildPreGates(c, proj, sets, gOffs, gNs)
	slices.SortFunc(c.trees, func(a, b cTree) int { return int(a.minRule - b.minRule) })
	return c
}

// splitGateless splits every rule set that no gate could serve (no
// dimension constrained by all its rules, tightly enough: typically the
// set of small groups, e.g. "class: malformed" next to "proto: tcp,
// dst_port: 23") into subsets by the dimension each rule constrains most
// tightly, so that each subset's tree can get a gate and the classifier
// pre-gates. Without that, every packet would walk the set's tree and check
// its rules. A subset whose rules together let through more than
// maxGateFill of their dimension still gets no gate (one split, not a
// recursive one); results stay exact, only that speed-up is lost.
// Splitting never changes a result: lookup takes the lowest matching rule
// over all trees. Rules with no usable dimension stay together in one
// gateless set.
func splitGateless(proj []projRule, sets [][]int32) [][]int32 {
	var out [][]int32
	for _, rs := range sets {
		if len(rs) < 2 || gateable(proj, rs) {
			out = append(out, rs)
			continue
		}
		byDim := map[int][]int32{}
		var rest []int32
		for _, r := range rs {
			if d, ok := tightestGateDim(&proj[r]); ok {
				byDim[d] = append(byDim[d], r)
			} else {
				rest = append(rest, r)
			}
		}
		for _, d := range slices.Sorted(maps.Keys(byDim)) {
			out = append(out, byDim[d]) // in rule order: rs is sorted
		}
		if len(rest) > 0 {
			out = append(out, rest)
		}
	}
	return out
}

// gateable reports whether some dimension can gate rule set rs.
func gateable(proj []projRule, rs []int32) bool {
	for _, d := range gateDims {
		if _, _, fill, ok := makeGate(proj, rs, d); ok && fill <= maxGateFill {
			return true
		}
	}
	return false
}

// tightestGateDim picks the gate dimension rule p constrains, preferring
// the gate tiers buildGates prefers and, within a tier, the smallest share
// of the dimension's values; ok is false when p constrains none tightly
// enough to reject anything much.
func tightestGateDim(p *projRule) (dim int, ok bool) {
	best, bestShare := -1, 0.0
	for _, d := range gateDims {
		s := p.dims[d]
		if len(s) == 0 {
			continue
		}
		share := float64(measure(s)) / (float64(dimMax[d]) + 1)
		if share > maxGateFill {
			continue
		}
		if best < 0 || gateTier(uint8(d)) < gateTier(uint8(best)) ||
			gateTier(uint8(d)) == gateTier(uint8(best)) && share < bestShare {
			best, bestShare = d, share
		}
	}
	return best, best >= 0
}
