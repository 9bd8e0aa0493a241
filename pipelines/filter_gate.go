package pipelines

import (
	"maps"
	"math/bits"
	"slices"
)

// Tree gates: a cheap necessary condition checked before walking a group's
// tree, so that traffic missing a whole group (the common case for an ACL:
// most packets match no rule) costs a few loads per group instead of a
// walk of a dozen unpredictable branches.
//
// A rule can only match a key whose value in dimension d lies in the rule's
// interval set on d. For a dimension that every rule of a group constrains,
// the union of those sets is a necessary condition for the group. A gate
// stores that union as a bitmap of at most 65536 buckets: the values the
// union spans share a common high prefix (base); the 16 bits just below it
// index the bitmap, so the resolution adapts to the group (rules within
// 198.18.0.0/15 get /31 buckets, a port union gets one bucket per port).
// Keys outside the span, or in an empty bucket, skip the tree. A bucket is
// marked when any interval touches it, so the test has false positives
// (then the tree decides, exactly) but no false negatives.
//
// Each tree keeps its sparsest maxGates gates; a gate only earns its place
// if it can reject something. Memory is at most 8 KiB per gate.

const (
	maxGates = 3
	// maxGateFill is the largest share of a dimension's values a gate may
	// let through; a looser one rejects too little to pay for its load.
	// gateable and tightestGateDim (filter_group.go) predict buildGates
	// with it.
	maxGateFill = 0.5
)

// cGate is one tree gate: key[dim]-base, shifted right by shift, must be a
// set bit below nbits of bits[off:].
type cGate struct {
	base  uint64
	nbits uint32
	off   uint32 // in filterClassifier.gateBits
	shift uint8
	dim   uint8
}

// gatesPass reports whether key k passes every gate of tree t.
func (c *filterClassifier) gatesPass(t *cTree, k *[nDims]uint64) bool {
	for i := t.gOff; i < t.gOff+uint32(t.gN); i++ {
		g := &c.gates[i]
		// Keys outside the span (below base, the subtraction wraps) test
		// bit nbits, which is always clear: one predictable branch.
		x := min((k[g.dim]-g.base)>>g.shift, uint64(g.nbits))
		if c.gateBits[uint64(g.off)+x>>6]&(1<<(x&63)) == 0 {
			return false
		}
	}
	return true
}

// gateDims are the dimensions gates may test. dSrcLo/dDstLo are left out:
// only long IPv6 prefixes constrain them, and their high half's gate
// already separates those.
var gateDims = [...]int{dL3, dSrcHi, dDstHi, dSport, dDport, dVLAN, dClass, dTCP, dFrag, dCT}

// buildGates computes the gates of the tree over rules rs and appends them
// to c, returning their offset and count.
func buildGates(c *filterClassifier, proj []projRule, rs []int32) (off uint32, n uint8) {
	type cand struct {
		g    cGate
		bm   []uint64
		fill float64 // fraction of the dimension's values the gate lets through, roughly
	}
	var cands []cand
	for _, d := range gateDims {
		g, bm, fill, ok := makeGate(proj, rs, d)
		if !ok || fill > maxGateFill {
			continue // rejects too little to pay for its load
		}
		cands = append(cands, cand{g: g, bm: bm, fill: fill})
	}
	slices.SortStableFunc(cands, func(a, b cand) int {
		switch ta, tb := gateTier(a.g.dim), gateTier(b.g.dim); {
		case ta != tb:
			return ta - tb
		case a.fill < b.fill:
			return -1
		case a.fill > b.fill:
			return 1
		}
		return 0
	})
	off = uint32(len(c.gates))
	for _, cd := range cands[:min(len(cands), maxGates)] {
		cd.g.off = uint32(len(c.gateBits))
		c.gateBits = append(c.gateBits, cd.bm...)
		c.gates = append(c.gates, cd.g)
		n++
	}
	return off, n
}

// makeGate builds the gate of dimension d over rules rs and the share of
// the dimension's values it lets through, roughly; ok is false when some
// rule of rs leaves d unconstrained (or no value can pass).
func makeGate(proj []projRule, rs []int32, d int) (g cGate, bm []uint64, fill float64, ok bool) {
	lo, hi := maxUint64, uint64(0)
	for _, r := range rs {
		s := proj[r].dims[d]
		if s == nil {
			return g, nil, 0, false
		}
		if len(s) > 0 {
			lo, hi = min(lo, s[0].lo), max(hi, s[len(s)-1].hi)
		}
	}
	if lo > hi {
		return g, nil, 0, false
	}
	// The bits below the common prefix of lo and hi vary; index with the
	// top 16 of them.
	vary := 64 - bits.LeadingZeros64(lo^hi)
	shift := max(vary-16, 0)
	base := uint64(0)
	if vary < 64 {
		base = lo &^ (uint64(1)<<vary - 1)
	}
	nbits := (hi-base)>>shift + 1
	bm = make([]uint64, nbits/64+1) // bit nbits stays clear
	for _, r := range rs {
		for _, iv := range proj[r].dims[d] {
			setBits(bm, (iv.lo-base)>>shift, (iv.hi-base)>>shift)
		}
	}
	set := 0
	for _, w := range bm {
		set += bits.OnesCount64(w)
	}
	// The share of the dimension's values (in buckets) that pass: the
	// set buckets over all the buckets the whole dimension would span.
	span := float64(dimMax[d]>>shift) + 1
	g = cGate{base: base, nbits: uint32(nbits), shift: uint8(shift), dim: uint8(d)}
	return g, bm, float64(set) / span, true
}

// gateTier ranks gate dimensions: addresses, ports and VLANs first, as
// traffic varies most there; protocol, class, flags and fragment gates
// mostly pass ordinary traffic however sparse they look.
func gateTier(d uint8) int {
	switch d {
	case dSrcHi, dDstHi, dSport, dDport, dVLAN:
		return 0
	}
	return 1
}

// setBits sets bits a..b (inclusive) of bm.
func setBits(bm []uint64, a, b uint64) {
	for w := a >> 6; w <= b>>6; w++ {
		m := maxUint64
		if w == a>>6 {
			m &= maxUint64 << (a & 63)
		}
		if w == b>>6 {
			m &= maxUint64 >> (63 - b&63)
		}
		bm[w] |= m
	}
}

// Pre-gates: a necessary condition for the whole rule set, tested before
// any tree. A rule can match only if its tree's first gate passes, so the
// packet can match some rule only if, for some tree, that gate passes. The
// first gates are merged by dimension (one bitmap over the union of the
// trees' rules on that dimension), so traffic that no rule can match, the
// common case for an ACL, goes to the default after one load per merged
// dimension instead of visiting every tree's gates. A rule set with a
// gateless tree, or whose first gates span more than maxPreGates
// dimensions, gets none.

const maxPreGates = 4

// buildPreGates computes the pre-gates over the rule sets sets, whose
// trees' gates start at gOffs (gNs of them), and appends them to c.
func buildPreGates(c *filterClassifier, proj []projRule, sets [][]int32, gOffs []uint32, gNs []uint8) {
	byDim := map[int][]int32{}
	for i, rs := range sets {
		if gNs[i] == 0 {
			return
		}
		d := int(c.gates[gOffs[i]].dim)
		byDim[d] = append(byDim[d], rs...)
	}
	if len(byDim) > maxPreGates {
		return
	}
	var pre []cGate
	for _, d := range slices.Sorted(maps.Keys(byDim)) {
		g, bm, fill, ok := makeGate(proj, byDim[d], d)
		if !ok || fill > maxGateFill {
			return // each tree's first gate passed both tests; a union may not
		}
		g.off = uint32(len(c.gateBits))
		c.gateBits = append(c.gateBits, bm...)
		pre = append(pre, g)
	}
	c.pre = pre
	c.preCTOnly = len(pre) == 1 && pre[0].dim == dCT
	c.preNeed = 0
	for _, g := range pre {
		c.preNeed |= 1 << g.dim
		if g.dim == dCT {
			for v := range c.preCT {
				x := min((uint64(v)-g.base)>>(g.shift&63), uint64(g.nbits))
				c.preCT[v] = uint8(c.gateBits[uint64(g.off)+x>>6] >> (x & 63) & 1)
			}
		}
	}
}

// prePass reports whether key k passes some pre-gate, or there are none.
func (c *filterClassifier) prePass(k *[nDims]uint64) bool {
	if len(c.pre) == 0 {
		return true
	}
	// No early exit: the common case is a miss on every gate.
	hit := uint64(0)
	for i := range c.pre {
		g := &c.pre[i]
		x := min((k[g.dim]-g.base)>>(g.shift&63), uint64(g.nbits)) // shift < 64: no oversized-shift fixup
		hit |= c.gateBits[uint64(g.off)+x>>6] >> (x & 63)
	}
	return hit&1 != 0
}
