package pipelines

import (
	"slices"
	"sort"
)

// The classifier's build, third step: each group's key space cut into a
// decision tree whose leaves list the rules that can match there.

const (
	leafSize     = 3  // stop splitting at this many rules
	maxTreeDepth = 48 // and at this depth
)

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
