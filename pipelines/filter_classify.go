package pipelines

import (
	"encoding/binary"
	"math/bits"

	"github.com/warpflow/warpflow/rings"
)

// The compiled filter classifier.
//
// Every packet is reduced to a key of nDims integers (filterKey), chosen so
// that each match field of a rule is a set of intervals on one or two of
// those integers:
//
//	dL3           family<<9 | IP protocol (256 when not IP): proto tokens,
//	              and the address family implied by src/dst
//	dSrcHi/dSrcLo the source address: IPv4 as addr<<32 in Hi (Lo = 0),
//	              IPv6 as its two 64-bit halves; a prefix is one box
//	dDstHi/dDstLo the same for the destination
//	dSport/dDport the port, or 65536 when the packet has no ports
//	dVLAN         the outer VLAN id, or 4096 when untagged
//	dClass        rings.Class
//	dTCP          the TCP flags byte, or 256 when not TCP
//	dFrag         1 for a fragment, else 0
//	dCT           rings.Meta.CT: the conntrack state and direction bit
//	              (0, untracked, when no conntrack stage ran)
//
// A rule is then (almost always) exactly a box product of interval sets.
// The only exception is an address list mixing families, or holding several
// IPv6 prefixes longer than /64: its per-dimension projection is a superset,
// and an exact per-family check (filterExact) runs after the box test.
//
// Rules are split into groups by which of src, dst, src_port, dst_port and
// vlan they constrain narrowly (the EffiCuts observation: mixing narrow and
// wildcard rules in one cutting tree replicates the wildcards into every
// leaf; groups too small for a tree of their own share one, and a shared
// set no gate could serve is split again by field, splitGateless). Each
// group is a HyperSplit-style binary decision tree: an inner node
// compares one key dimension against a threshold; a leaf lists at most a
// handful of rules in priority order, each fully checked. Building prunes,
// in each node's region, every rule after the first one that covers the
// whole region, since first match wins. Single-family rules are also
// grouped by family. Each tree has up to 3 gates (filter_gate.go): bitmaps
// over dimensions every rule of the group constrains, a necessary condition
// tested before the walk; the pre-gates, the first gates merged by
// dimension, are tested before any tree. A lookup whose pre-gates pass
// walks each group's tree whose gates pass
// (branch-free: children are adjacent) and keeps the lowest matching rule
// index, skipping groups whose first rule is already behind the best match. Everything is flat slices built once per
// Build and shared read-only by every worker instance.

const (
	dL3 = iota
	dSrcHi
	dSrcLo
	dDstHi
	dDstLo
	dSport
	dDport
	dVLAN
	dClass
	dTCP
	dFrag
	dCT
	nDims
)

// Address families as they appear in dL3.
const (
	famNone = iota
	famV4
	famV6
	famARP
)

const (
	noProto   = 256   // dL3 protocol part of a non-IP packet
	noPort    = 65536 // dSport/dDport of a packet without ports
	noVLAN    = 4096  // dVLAN of an untagged packet
	noTCP     = 256   // dTCP of a non-TCP packet
	maxUint64 = ^uint64(0)
)

// dimMax is each dimension's largest value.
var dimMax = [nDims]uint64{
	dL3: famARP<<9 | 511, dSrcHi: maxUint64, dSrcLo: maxUint64, dDstHi: maxUint64, dDstLo: maxUint64,
	dSport: noPort, dDport: noPort, dVLAN: noVLAN, dClass: 255, dTCP: noTCP, dFrag: 1, dCT: 15,
}

// filterFamily says which L3 family a packet is, the flags taken in this
// order of precedence.
func filterFamily(f rings.Flags) uint64 {
	switch {
	case f&rings.FlagIPv4 != 0:
		return famV4
	case f&rings.FlagIPv6 != 0:
		return famV6
	case f&rings.FlagARP != 0:
		return famARP
	}
	return famNone
}

// portedProto reports whether IP protocol p carries 16-bit ports that the
// parse stage writes to SrcPort/DstPort (TCP, UDP, SCTP, DCCP, UDP-Lite);
// ICMP's type/code and echo id are not ports to a filter.
func portedProto(p uint8) bool {
	switch p {
	case 6, 17, 132, 33, 136:
		return true
	}
	return false
}

// filterKey reduces m to the classifier's key.
func filterKey(m *rings.Meta, k *[nDims]uint64) {
	fam := filterFamily(m.Flags)
	ip := fam == famV4 || fam == famV6
	proto := uint64(noProto)
	if ip {
		proto = uint64(m.IPProto)
	}
	k[dL3] = fam<<9 | proto
	switch fam {
	case famV4:
		k[dSrcHi] = uint64(binary.BigEndian.Uint32(m.SrcIP[:4])) << 32
		k[dDstHi] = uint64(binary.BigEndian.Uint32(m.DstIP[:4])) << 32
		k[dSrcLo], k[dDstLo] = 0, 0
	case famV6:
		k[dSrcHi] = binary.BigEndian.Uint64(m.SrcIP[:8])
		k[dSrcLo] = binary.BigEndian.Uint64(m.SrcIP[8:])
		k[dDstHi] = binary.BigEndian.Uint64(m.DstIP[:8])
		k[dDstLo] = binary.BigEndian.Uint64(m.DstIP[8:])
	default:
		k[dSrcHi], k[dSrcLo], k[dDstHi], k[dDstLo] = 0, 0, 0, 0
	}
	l4 := ip && m.Flags&rings.FlagL4 != 0
	k[dSport], k[dDport] = noPort, noPort
	if l4 && portedProto(m.IPProto) {
		k[dSport], k[dDport] = uint64(m.SrcPort), uint64(m.DstPort)
	}
	k[dVLAN] = noVLAN
	if m.NumVLANs > 0 {
		k[dVLAN] = uint64(m.VLANs[0] & 0xfff)
	}
	k[dClass] = uint64(m.Class)
	k[dTCP] = noTCP
	if l4 && m.IPProto == 6 {
		k[dTCP] = uint64(m.TCPFlags)
	}
	k[dFrag] = 0
	if m.Flags&rings.FlagFragment != 0 {
		k[dFrag] = 1
	}
	k[dCT] = uint64(m.CT & (rings.CTStateMask | rings.CTReply))
}

// ival is an inclusive interval of one key dimension.
type ival struct{ lo, hi uint64 }

// ival128 is an inclusive interval of 128-bit addresses.
type ival128 struct{ loHi, loLo, hiHi, hiLo uint64 }

// cCheck is one dimension test of a compiled rule: key[dim] must lie in
// [lo, hi] and, when the set has gaps (setN > 1), in one of the intervals
// pool[setOff:setOff+setN].
type cCheck struct {
	lo, hi uint64
	setOff uint32
	setN   uint32
	dim    uint8
}

// leafRule is one rule in a leaf: its index and where its checks are. Each
// leaf's rules and their checks are laid out contiguously (copied per leaf)
// so a leaf scan reads one run of memory.
type leafRule struct {
	rule  int32
	off   uint32 // checks[off:off+n]
	n     uint8
	exact int32 // index in filterClassifier.exact, or -1
}

// filterExact is the per-family address check of a rule whose address list
// mixes families or holds several long IPv6 prefixes.
type filterExact struct {
	src4, dst4 []ival // on the dSrcHi/dDstHi encoding
	src6, dst6 []ival128
	src, dst   bool // which field needs it
}

// cNode is a decision tree node. Inner nodes send key[dim] < thr to a and
// the rest to b; a leaf (dim == leafDim) lists rules leaves[a:b].
type cNode struct {
	thr  uint64
	a, b int32
	dim  uint8
}

const leafDim = 255

// cTree is one rule group's tree.
type cTree struct {
	nodes   []cNode
	minRule int32  // lowest rule index in the group
	gOff    uint32 // gates[gOff:gOff+gN] (filter_gate.go)
	gN      uint8
}

// filterClassifier finds the first rule a packet matches. It is immutable
// after buildClassifier and safe for concurrent use.
type filterClassifier struct {
	leaves []leafRule
	checks []cCheck
	pool   []ival
	exact  []filterExact
	trees  []cTree
	gates  []cGate
	// pre are the pre-gates (filter_gate.go), tested before any tree.
	pre []cGate
	// preNeed has bit d set when a pre-gate tests dimension d: the part
	// of the key preKey computes.
	preNeed uint16
	// gateBits holds every gate's and pre-gate's bitmap.
	gateBits []uint64
	// preCT is the pre-gate on dCT, if there is one, as a table: 1 for
	// each ct key (Meta.CT's state and direction bits) that passes it.
	preCT [rings.CTStateMask | rings.CTReply + 1]uint8
	// preCTOnly says that the pre-gate on dCT is the only one.
	preCTOnly bool
	n         int32 // number of rules: lookup's "no match"
}

// lookup returns the index of the first rule m matches, or c.n.
func (c *filterClassifier) lookup(m *rings.Meta) int32 {
	if !c.prePassMeta(m) {
		return c.n
	}
	return c.lookupTrees(m)
}

// lookupTrees is lookup without the pre-gates: the caller has checked that
// m passes them.
func (c *filterClassifier) lookupTrees(m *rings.Meta) int32 {
	var k [nDims]uint64
	filterKey(m, &k)
	best := c.n
	for ti := range c.trees {
		t := &c.trees[ti]
		if t.minRule >= best {
			break // trees are sorted by minRule
		}
		if !c.gatesPass(t, &k) {
			continue
		}
		nodes := t.nodes
		nd := &nodes[0]
		for nd.dim != leafDim {
			// A conditional move, not a branch: the direction is as good
			// as random, and a mispredict costs more than the wait.
			// Children are adjacent (b == a+1, see treeBuilder.build).
			_, lt := bits.Sub64(k[nd.dim], nd.thr, 0) // 1 when key < thr
			nd = &nodes[nd.a+1-int32(lt)]
		}
		for i := nd.a; i < nd.b; i++ {
			lr := &c.leaves[i]
			if lr.rule >= best {
				break
			}
			if c.match(lr, &k) {
				best = lr.rule
				break
			}
		}
	}
	return best
}

// match reports whether key k satisfies leaf rule r.
func (c *filterClassifier) match(r *leafRule, k *[nDims]uint64) bool {
	for _, ch := range c.checks[r.off : r.off+uint32(r.n)] {
		v := k[ch.dim]
		if v < ch.lo || v > ch.hi {
			return false
		}
		if ch.setN > 1 && !inIvals(c.pool[ch.setOff:ch.setOff+ch.setN], v) {
			return false
		}
	}
	return r.exact < 0 || c.exact[r.exact].match(k)
}

func (e *filterExact) match(k *[nDims]uint64) bool {
	switch k[dL3] >> 9 {
	case famV4:
		return (!e.src || inIvals(e.src4, k[dSrcHi])) && (!e.dst || inIvals(e.dst4, k[dDstHi]))
	case famV6:
		return (!e.src || inIvals128(e.src6, k[dSrcHi], k[dSrcLo])) &&
			(!e.dst || inIvals128(e.dst6, k[dDstHi], k[dDstLo]))
	}
	return !e.src && !e.dst
}

// inIvals reports whether v lies in the sorted, disjoint intervals s.
func inIvals(s []ival, v uint64) bool {
	lo, hi := 0, len(s)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if s[mid].hi < v {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo < len(s) && s[lo].lo <= v
}

// inIvals128 reports whether address (h, l) lies in one of s (any order).
func inIvals128(s []ival128, h, l uint64) bool {
	for _, iv := range s {
		if (h > iv.loHi || h == iv.loHi && l >= iv.loLo) && (h < iv.hiHi || h == iv.hiHi && l <= iv.hiLo) {
			return true
		}
	}
	return false
}
