package pipelines

import (
	"encoding/binary"
	"maps"
	"math/bits"
	"net/netip"
	"slices"
	"sort"

	"github.com/warpflow/warpflow/rings"
)

// Build-time half of the classifier: projecting rules onto key dimensions
// and cutting the key space into decision trees. See filter_classify.go.

const (
	leafSize     = 3  // stop splitting at this many rules
	maxTreeDepth = 48 // and at this depth
	smallGroup   = 32 // groups smaller than this share one tree
)

// projRule is a rule projected onto the key dimensions: nil means the
// dimension is unconstrained. exact says the box product is the rule.
type projRule struct {
	dims  [nDims][]ival
	exact bool
	never bool // some dimension's set is empty: the rule matches nothing
	ex    *filterExact
}

// projectRule turns a parsed rule into interval sets per dimension.
func projectRule(r *filterRule) projRule {
	var p projRule
	p.exact = true
	famRange := func(f uint64) ival { return ival{f << 9, f<<9 | 511} }
	if r.proto != nil {
		var l3 []ival
		for _, t := range r.proto {
			switch t {
			case protoIPv4:
				l3 = append(l3, famRange(famV4))
			case protoIPv6:
				l3 = append(l3, famRange(famV6))
			case protoARP:
				l3 = append(l3, famRange(famARP))
			default:
				l3 = append(l3, ival{famV4<<9 | uint64(t), famV4<<9 | uint64(t)},
					ival{famV6<<9 | uint64(t), famV6<<9 | uint64(t)})
			}
		}
		p.dims[dL3] = normIvals(l3)
	}
	addr := func(ps []netip.Prefix, hiDim, loDim int, ex4 *[]ival, ex6 *[]ival128) bool {
		if ps == nil {
			return true
		}
		var hi, lo, fams []ival
		loFull, v4, v6, long6 := false, false, 0, false
		for _, pf := range ps {
			a := pf.Addr()
			if a.Is4() {
				v4 = true
				fams = append(fams, famRange(famV4))
				b := a.As4()
				x := uint64(binary.BigEndian.Uint32(b[:]))
				m := uint64(1)<<(32-pf.Bits()) - 1
				iv := ival{(x &^ m) << 32, (x | m) << 32}
				hi = append(hi, iv)
				*ex4 = append(*ex4, iv)
				loFull = true
				continue
			}
			v6++
			fams = append(fams, famRange(famV6))
			b := a.As16()
			h, l := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
			var iv ival128
			if n := pf.Bits(); n <= 64 {
				m := maxUint64 >> n
				if n == 0 {
					m = maxUint64
				}
				hi = append(hi, ival{h &^ m, h | m})
				loFull = true
				iv = ival128{h &^ m, 0, h | m, maxUint64}
			} else {
				long6 = true
				m := maxUint64 >> (n - 64)
				if n == 128 {
					m = 0
				}
				hi = append(hi, ival{h, h})
				lo = append(lo, ival{l &^ m, l | m})
				iv = ival128{h, l &^ m, h, l | m}
			}
			*ex6 = append(*ex6, iv)
		}
		p.dims[hiDim] = normIvals(hi)
		if !loFull {
			p.dims[loDim] = normIvals(lo)
		}
		p.dims[dL3] = intersectIvals(p.dims[dL3], normIvals(fams))
		return !(v4 && v6 > 0) && !(v6 > 1 && long6)
	}
	var ex filterExact
	ex.src = !addr(r.src, dSrcHi, dSrcLo, &ex.src4, &ex.src6)
	ex.dst = !addr(r.dst, dDstHi, dDstLo, &ex.dst4, &ex.dst6)
	if ex.src || ex.dst {
		p.exact = false
		ex.src4, ex.dst4 = normIvals(ex.src4), normIvals(ex.dst4)
		if !ex.src {
			ex.src4, ex.src6 = nil, nil
		}
		if !ex.dst {
			ex.dst4, ex.dst6 = nil, nil
		}
		p.ex = &ex
	}
	ports := func(rs []portRange) []ival {
		if rs == nil {
			return nil
		}
		out := make([]ival, len(rs))
		for i, pr := range rs {
			out[i] = ival{uint64(pr.lo), uint64(pr.hi)}
		}
		return normIvals(out)
	}
	p.dims[dSport] = ports(r.srcPort)
	p.dims[dDport] = ports(r.dstPort)
	if r.hasVLAN {
		v := ports(r.vlan)
		if r.vlanNone {
			v = normIvals(append(v, ival{noVLAN, noVLAN}))
		}
		p.dims[dVLAN] = v
	}
	if r.hasClass {
		var cl []ival
		for c := range uint64(256) {
			if r.class[c/64]&(1<<(c%64)) != 0 {
				cl = append(cl, ival{c, c})
			}
		}
		p.dims[dClass] = normIvals(cl)
	}
	if r.hasTCP {
		var tf []ival
		for f := range uint64(256) {
			if uint8(f)&r.tcpSet == r.tcpSet && uint8(f)&r.tcpClear == 0 {
				tf = append(tf, ival{f, f})
			}
		}
		p.dims[dTCP] = normIvals(tf)
	}
	if r.hasFrag {
		f := uint64(0)
		if r.frag {
			f = 1
		}
		p.dims[dFrag] = []ival{{f, f}}
	}
	if r.hasCT() {
		var cv []ival
		for v := range uint64(16) {
			if uint8(v)&^(rings.CTStateMask|rings.CTReply) == 0 && r.ctMatch(uint8(v)) {
				cv = append(cv, ival{v, v})
			}
		}
		p.dims[dCT] = normIvals(cv)
	}
	for d := range p.dims {
		if p.dims[d] != nil && len(p.dims[d]) == 0 {
			p.never = true
		}
	}
	return p
}

// normIvals sorts s and merges overlapping or adjacent intervals. It returns
// a non-nil slice (empty when s is empty), so "constrained to nothing"
// differs from "unconstrained".
func normIvals(s []ival) []ival {
	if len(s) == 0 {
		return []ival{}
	}
	slices.SortFunc(s, func(a, b ival) int {
		switch {
		case a.lo < b.lo:
			return -1
		case a.lo > b.lo:
			return 1
		}
		return 0
	})
	out := s[:1]
	for _, iv := range s[1:] {
		last := &out[len(out)-1]
		if last.hi == maxUint64 || iv.lo <= last.hi+1 {
			last.hi = max(last.hi, iv.hi)
			continue
		}
		out = append(out, iv)
	}
	return out
}

// intersectIvals intersects two normalised sets (nil = everything).
func intersectIvals(a, b []ival) []ival {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	out := []ival{}
	for i, j := 0, 0; i < len(a) && j < len(b); {
		lo, hi := max(a[i].lo, b[j].lo), min(a[i].hi, b[j].hi)
		if lo <= hi {
			out = append(out, ival{lo, hi})
		}
		if a[i].hi < b[j].hi {
			i++
		} else {
			j++
		}
	}
	return out
}

// measure is the number of values in s less its number of intervals (so 0
// for a single value), saturating: a size to compare, not a count.
func measure(s []ival) uint64 {
	var m uint64
	for _, iv := range s {
		s, c := bits.Add64(m, iv.hi-iv.lo, 0)
		if c != 0 {
			return maxUint64
		}
		m = s
	}
	return m
}

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

// checkOrder is the order a rule's dimension checks run in: the most
// selective first, so a mismatch is found early.
var checkOrder = [...]int{dSrcHi, dDstHi, dDport, dSport, dSrcLo, dDstLo, dL3, dVLAN, dTCP, dClass, dFrag, dCT}

// Every dimension is checked: a new one left out of checkOrder would never
// be tested (the length must be nDims).
var _ = [1]struct{}{}[len(checkOrder)-nDims]

// treeBudget bounds the leaf entries and nodes a tree of n rules may use: rule
// sets whose rules overlap in every dimension would otherwise replicate
// without end. Past it, the remaining nodes become leaves (bigger scans,
// still exact).
func treeBudget(n int) int { return 64*n + 1024 }

// treeBuilder cuts each group's key space into a decision tree.
type treeBuilder struct {
	proj       []projRule
	c          *filterClassifier // receives leaves and checks
	ruleChecks [][]cCheck
	ruleExact  []int32
	used       int // leaf entries and nodes made so far, against budget
	budget     int
}

// pending is a node whose rules and region are known but not yet cut.
type pending struct {
	idx   int32
	rules []int32
	reg   [nDims]ival
	depth int
}

// build makes the tree for rules rs (sorted by index), breadth first so
// that a budget running out leaves a tree of even depth rather than one
// deep branch.
func (b *treeBuilder) build(rs []int32) []cNode {
	nodes := []cNode{{}}
	q := []pending{{idx: 0, rules: rs}}
	for d := range q[0].reg {
		q[0].reg[d] = ival{0, dimMax[d]}
	}
	for len(q) > 0 {
		p := q[0]
		q = q[1:]
		live := make([]int32, 0, len(p.rules))
		for _, r := range p.rules {
			if !b.intersects(r, &p.reg) {
				continue
			}
			live = append(live, r)
			if b.covers(r, &p.reg) {
				break // nothing after r can win anywhere in the region
			}
		}
		if len(live) > leafSize && p.depth < maxTreeDepth && b.used < b.budget {
			if d, t, ok := b.split(live, &p.reg); ok {
				l, r := pending{idx: int32(len(nodes)), rules: live, reg: p.reg, depth: p.depth + 1}, pending{idx: int32(len(nodes) + 1), rules: live, reg: p.reg, depth: p.depth + 1}
				l.reg[d].hi, r.reg[d].lo = t-1, t
				// Adjacent children: lookup computes b as a+1.
				nodes[p.idx] = cNode{dim: uint8(d), thr: t, a: l.idx, b: r.idx}
				nodes = append(nodes, cNode{}, cNode{})
				q = append(q, l, r)
				b.used += 2
				continue
			}
		}
		c := b.c
		nodes[p.idx] = cNode{dim: leafDim, a: int32(len(c.leaves)), b: int32(len(c.leaves) + len(live))}
		for _, r := range live {
			c.leaves = append(c.leaves, leafRule{rule: r, off: uint32(len(c.checks)), n: uint8(len(b.ruleChecks[r])), exact: b.ruleExact[r]})
			c.checks = append(c.checks, b.ruleChecks[r]...)
			b.used += 1 + len(b.ruleChecks[r])
		}
	}
	return nodes
}

// firstHit returns the index of the first interval of s that ends at or
// after v.
func firstHit(s []ival, v uint64) int {
	return sort.Search(len(s), func(i int) bool { return s[i].hi >= v })
}

func (b *treeBuilder) intersects(r int32, reg *[nDims]ival) bool {
	for d, s := range b.proj[r].dims {
		if s == nil {
			continue
		}
		i := firstHit(s, reg[d].lo)
		if i == len(s) || s[i].lo > reg[d].hi {
			return false
		}
	}
	return true
}

func (b *treeBuilder) covers(r int32, reg *[nDims]ival) bool {
	p := &b.proj[r]
	if !p.exact {
		return false
	}
	for d, s := range p.dims {
		if s == nil {
			continue
		}
		i := firstHit(s, reg[d].lo)
		if i == len(s) || s[i].lo > reg[d].lo || s[i].hi < reg[d].hi {
			return false
		}
	}
	return true
}

// split picks the dimension and threshold that best separate rs inside
// reg: the candidate thresholds are the rules' interval ends inside the
// region; the cost of a cut is the larger side's rule count (then the total,
// which counts replication). It reports false when no cut makes either side
// smaller.
func (b *treeBuilder) split(rs []int32, reg *[nDims]ival) (dim int, thr uint64, ok bool) {
	bestMax, bestSum := len(rs), 2*len(rs)
	starts := make([]uint64, len(rs))
	ends := make([]uint64, len(rs))
	var pts []uint64
	for d := 0; d < nDims; d++ {
		lo, hi := reg[d].lo, reg[d].hi
		if lo == hi {
			continue
		}
		pts = pts[:0]
		for i, r := range rs {
			s := b.proj[r].dims[d]
			starts[i], ends[i] = lo, hi
			if s == nil {
				continue
			}
			first := firstHit(s, lo)
			last := first
			for j := first; j < len(s) && s[j].lo <= hi; j++ {
				if s[j].lo > lo {
					pts = append(pts, s[j].lo)
				}
				if s[j].hi < hi {
					pts = append(pts, s[j].hi+1)
				}
				last = j
			}
			starts[i], ends[i] = max(s[first].lo, lo), min(s[last].hi, hi)
		}
		if len(pts) == 0 {
			continue
		}
		slices.Sort(pts)
		pts = slices.Compact(pts)
		slices.Sort(starts)
		slices.Sort(ends)
		// Try up to 33 quantiles of the candidate points.
		steps := min(len(pts), 33)
		for q := 0; q < steps; q++ {
			t := pts[q*len(pts)/steps+len(pts)/(2*steps)]
			nl, _ := slices.BinarySearch(starts, t) // rules starting before t
			ge, _ := slices.BinarySearch(ends, t)
			nr := len(rs) - ge // rules ending at or after t
			m := max(nl, nr)
			if m < bestMax || m == bestMax && nl+nr < bestSum {
				if min(nl, nr) == 0 {
					continue // a cut that moves nothing
				}
				bestMax, bestSum, dim, thr, ok = m, nl+nr, d, t, true
			}
		}
	}
	if ok {
		return dim, thr, true
	}
	// No cut separates the rules. Shrink the region to their bounding box
	// instead: the cut-off side is an empty leaf, and in the tighter region
	// the first rule may cover everything and prune the rest (duplicates and
	// shadowed rules end up this way).
	for d := 0; d < nDims; d++ {
		lo, hi := reg[d].lo, reg[d].hi
		minLo, maxHi := hi, lo
		for _, r := range rs {
			s := b.proj[r].dims[d]
			if s == nil {
				minLo, maxHi = lo, hi
				break
			}
			first := firstHit(s, lo)
			last := sort.Search(len(s), func(i int) bool { return s[i].lo > hi }) - 1
			minLo, maxHi = min(minLo, max(s[first].lo, lo)), max(maxHi, min(s[last].hi, hi))
		}
		if minLo > lo {
			return d, minLo, true
		}
		if maxHi < hi {
			return d, maxHi + 1, true
		}
	}
	return 0, 0, false
}
