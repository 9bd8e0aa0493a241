package pipelines

import (
	"errors"
	"fmt"

	"github.com/warpflow/warpflow/rings"
)

// The flat serialisation of the compiled filter classifier: one []uint64
// of fixed-width fields that a GPU kernel (gpu/kernel.cu) and the CPU
// (FilterBlob.Lookup) walk the same way, so a GPU backend's answers can be
// compared like with like. It is the same classifier filter_classify.go
// runs, pre-gates, gated HyperSplit trees and leaf checks, not a linear
// scan, only laid out with word offsets instead of slices.
//
// Layout (every offset is a word index into Words, every count a number
// of records):
//
//	header  [blobHeaderWords]: magic, rules, trees, then the offset of
//	        each section below and the number of pre-gates
//	trees   4 words each: nodeBase | minRule<<32, gOff | gN<<32, 0, 0
//	nodes   2 words each: thr; dim | count<<8 | a<<32, where a is a
//	        global node index (inner: children a, a+1; a tree's nodes
//	        start at nodeBase) or a leaf-rule index (leaf: count rules)
//	leaves  2 words each: rule | off<<32 (a check index); n | exact<<32
//	        (exact = 0xffffffff for none)
//	checks  3 words each: lo; hi; setOff | setN<<32 (24 bits) | dim<<56
//	pool    2 words per interval: lo; hi
//	exact   5 words each: src | dst<<1; then src4, dst4, src6, dst6, each
//	        off | n<<32, off a word index into xpool (2 words per IPv4
//	        interval, 4 per 128-bit interval: loHi loLo hiHi hiLo)
//	gates   3 words each: base; nbits | off<<32 (a word index into bits);
//	        shift | dim<<8
//	pre     the pre-gates, same format
//	bits    the gate bitmaps
//	xpool   the exact checks' intervals
//
// The key is FilterKeyDims integers (FilterKeyOf); Lookup returns the
// first matching rule's index, or Rules for the default.

// FilterKeyDims is the number of integers in a filter key.
const FilterKeyDims = nDims

// FilterKey is the classifier's packet key (filter_classify.go).
type FilterKey = [nDims]uint64

// FilterKeyOf computes packet m's key, as the filter stage does.
func FilterKeyOf(m *rings.Meta, k *FilterKey) { filterKey(m, k) }

// Blob header fields.
const (
	bhMagic = iota
	bhRules
	bhTrees
	bhTreesOff
	bhNodesOff
	bhLeavesOff
	bhChecksOff
	bhPoolOff
	bhExactOff
	bhGatesOff
	bhPreOff
	bhPreN
	bhBitsOff
	bhXpoolOff
	bhWords
	blobHeaderWords = 16
)

// FilterBlobMagic is the blob's first word: "WFBLOB" and a format version.
const FilterBlobMagic = 0x57464246_4c4f0001

// FilterBlob is a serialised classifier.
type FilterBlob struct {
	Words []uint64
	Rules int // number of rules; Lookup's default is Rules
}

// ErrNoFilter is returned by GraphFilter for a graph that does not start
// with a parse stage followed by a filter stage.
var ErrNoFilter = errors.New("pipeline has no parse stage followed by a filter")

// serialise lays c out as a blob.
func (c *filterClassifier) serialise() *FilterBlob {
	w := make([]uint64, blobHeaderWords)
	w[bhMagic] = FilterBlobMagic
	w[bhRules] = uint64(c.n)
	w[bhTrees] = uint64(len(c.trees))

	w[bhTreesOff] = uint64(len(w))
	base := uint64(0)
	for _, t := range c.trees {
		w = append(w, base|uint64(uint32(t.minRule))<<32, uint64(t.gOff)|uint64(t.gN)<<32, 0, 0)
		base += uint64(len(t.nodes))
	}
	w[bhNodesOff] = uint64(len(w))
	base = 0
	for _, t := range c.trees {
		for _, nd := range t.nodes {
			if nd.dim == leafDim {
				w = append(w, 0, uint64(leafDim)|uint64(nd.b-nd.a)<<8|uint64(uint32(nd.a))<<32)
			} else {
				w = append(w, nd.thr, uint64(nd.dim)|uint64(base+uint64(nd.a))<<32)
			}
		}
		base += uint64(len(t.nodes))
	}
	w[bhLeavesOff] = uint64(len(w))
	for _, lr := range c.leaves {
		w = append(w, uint64(uint32(lr.rule))|uint64(lr.off)<<32, uint64(lr.n)|uint64(uint32(lr.exact))<<32)
	}
	w[bhChecksOff] = uint64(len(w))
	for _, ch := range c.checks {
		w = append(w, ch.lo, ch.hi, uint64(ch.setOff)|uint64(ch.setN&0xffffff)<<32|uint64(ch.dim)<<56)
	}
	w[bhPoolOff] = uint64(len(w))
	for _, iv := range c.pool {
		w = append(w, iv.lo, iv.hi)
	}
	// The exact checks' intervals go to xpool, laid out after bits; collect
	// them first.
	var xp []uint64
	ref := func(n int, words []uint64) uint64 {
		off := uint64(len(xp))
		xp = append(xp, words...)
		return off | uint64(n)<<32
	}
	flat := func(s []ival) []uint64 {
		out := make([]uint64, 0, 2*len(s))
		for _, iv := range s {
			out = append(out, iv.lo, iv.hi)
		}
		return out
	}
	flat128 := func(s []ival128) []uint64 {
		out := make([]uint64, 0, 4*len(s))
		for _, iv := range s {
			out = append(out, iv.loHi, iv.loLo, iv.hiHi, iv.hiLo)
		}
		return out
	}
	w[bhExactOff] = uint64(len(w))
	for _, e := range c.exact {
		var f uint64
		if e.src {
			f |= 1
		}
		if e.dst {
			f |= 2
		}
		w = append(w, f, ref(len(e.src4), flat(e.src4)), ref(len(e.dst4), flat(e.dst4)),
			ref(len(e.src6), flat128(e.src6)), ref(len(e.dst6), flat128(e.dst6)))
	}
	gate := func(g cGate) []uint64 {
		return []uint64{g.base, uint64(g.nbits) | uint64(g.off)<<32, uint64(g.shift) | uint64(g.dim)<<8}
	}
	w[bhGatesOff] = uint64(len(w))
	for _, g := range c.gates {
		w = append(w, gate(g)...)
	}
	w[bhPreOff] = uint64(len(w))
	w[bhPreN] = uint64(len(c.pre))
	for _, g := range c.pre {
		w = append(w, gate(g)...)
	}
	w[bhBitsOff] = uint64(len(w))
	w = append(w, c.gateBits...)
	w[bhXpoolOff] = uint64(len(w))
	w = append(w, xp...)
	w[bhWords] = uint64(len(w))
	return &FilterBlob{Words: w, Rules: int(c.n)}
}

// Lookup returns the index of the first rule key k matches, or b.Rules.
// It walks the blob exactly as gpu/kernel.cu's lookup does.
func (b *FilterBlob) Lookup(k *FilterKey) int32 {
	w := b.Words
	n := int32(w[bhRules])
	if !blobGatesPass(w, w[bhPreOff], w[bhPreN], k, true) {
		return n
	}
	best := n
	trees := w[bhTreesOff]
	nodes := w[bhNodesOff]
	for ti := uint64(0); ti < w[bhTrees]; ti++ {
		t := trees + 4*ti
		nodeBase, minRule := w[t]&0xffffffff, int32(w[t]>>32)
		if minRule >= best {
			break
		}
		if !blobGatesPass(w, w[bhGatesOff]+3*(w[t+1]&0xffffffff), w[t+1]>>32, k, false) {
			continue
		}
		nd := nodes + 2*nodeBase
		for {
			x := w[nd+1]
			dim := x & 0xff
			if dim == leafDim {
				break
			}
			a := x >> 32
			if k[dim] >= w[nd] {
				a++
			}
			nd = nodes + 2*a
		}
		x := w[nd+1]
		first, cnt := x>>32, (x>>8)&0xffffff
		for i := first; i < first+cnt; i++ {
			lr := w[bhLeavesOff] + 2*i
			rule := int32(uint32(w[lr]))
			if rule >= best {
				break
			}
			if blobMatch(w, lr, k) {
				best = rule
				break
			}
		}
	}
	return best
}

// blobGatesPass tests the n gates at word off: all must pass (tree gates)
// or, for pre-gates (any), one must, and no pre-gates pass everything.
func blobGatesPass(w []uint64, off, n uint64, k *FilterKey, any bool) bool {
	if any && n == 0 {
		return true
	}
	bits := w[bhBitsOff]
	for i := uint64(0); i < n; i++ {
		g := off + 3*i
		base, nb, boff := w[g], w[g+1]&0xffffffff, w[g+1]>>32
		shift, dim := w[g+2]&0xff, (w[g+2]>>8)&0xff
		x := min((k[dim]-base)>>(shift&63), nb)
		hit := w[bits+boff+x>>6]>>(x&63)&1 != 0
		if any && hit {
			return true
		}
		if !any && !hit {
			return false
		}
	}
	return !any
}

func blobMatch(w []uint64, lr uint64, k *FilterKey) bool {
	off, n := w[lr]>>32, w[lr+1]&0xff
	checks, pool := w[bhChecksOff], w[bhPoolOff]
	for j := off; j < off+n; j++ {
		ch := checks + 3*j
		x := w[ch+2]
		v := k[x>>56]
		if v < w[ch] || v > w[ch+1] {
			return false
		}
		if setN := (x >> 32) & 0xffffff; setN > 1 && !blobInIvals(w, pool+2*(x&0xffffffff), setN, v) {
			return false
		}
	}
	ex := w[lr+1] >> 32
	if ex == 0xffffffff {
		return true
	}
	e := w[bhExactOff] + 5*ex
	src, dst := w[e]&1 != 0, w[e]&2 != 0
	xp := w[bhXpoolOff]
	in := func(ref uint64, v uint64) bool { return blobInIvals(w, xp+ref&0xffffffff, ref>>32, v) }
	in128 := func(ref uint64, h, l uint64) bool {
		for i := uint64(0); i < ref>>32; i++ {
			p := xp + ref&0xffffffff + 4*i
			if (h > w[p] || h == w[p] && l >= w[p+1]) && (h < w[p+2] || h == w[p+2] && l <= w[p+3]) {
				return true
			}
		}
		return false
	}
	switch k[dL3] >> 9 {
	case famV4:
		return (!src || in(w[e+1], k[dSrcHi])) && (!dst || in(w[e+2], k[dDstHi]))
	case famV6:
		return (!src || in128(w[e+3], k[dSrcHi], k[dSrcLo])) && (!dst || in128(w[e+4], k[dDstHi], k[dDstLo]))
	}
	return !src && !dst
}

// blobInIvals is inIvals over n sorted intervals at word off.
func blobInIvals(w []uint64, off, n, v uint64) bool {
	lo, hi := uint64(0), n
	for lo < hi {
		mid := (lo + hi) >> 1
		if w[off+2*mid+1] < v {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo < n && w[off+2*lo] <= v
}

// FilterProgram is what a classifying backend needs of a pipeline: the
// blob of its first filter stage (the one right after the entry parse
// stage) and, per rule and for the default (index Rules), the verdict and
// target the rule's edge leads to when that edge ends the graph there.
type FilterProgram struct {
	Blob *FilterBlob
	// Terminal[r] is true when rule r's edge leads straight to a terminal
	// (tx, drop, pass): the packet's Meta.Verdict and Meta.Target are then
	// Verdict[r] and Target[r], and no stage runs after the filter.
	Terminal []bool
	Verdict  []rings.Verdict
	Target   []uint16
	// Edge[r] is rule r's edge number out of the filter stage.
	Edge []Edge
	// ParseTunnels is the parse stage's tunnels option.
	ParseTunnels bool
	// FilterNode is the filter's node index (Graph.Stages order).
	FilterNode int
}

// GraphFilter returns g's filter program, or ErrNoFilter.
func GraphFilter(g *Graph) (*FilterProgram, error) {
	if len(g.topo) == 0 {
		return nil, ErrNoFilter
	}
	entry := &g.nodes[g.topo[0]]
	pt, ok := entry.tmpl.(*parseTemplate)
	if entry.terminal || !ok || len(entry.edges) != 1 {
		return nil, ErrNoFilter
	}
	fi := entry.edges[0]
	fn := &g.nodes[fi]
	ft, ok := fn.tmpl.(*filterTemplate)
	if fn.terminal || !ok {
		return nil, ErrNoFilter
	}
	if ft.usesCT {
		// The device computes the key without connection tracking (its
		// kernel has no ct dimension): such a filter stays on the CPU.
		return nil, fmt.Errorf("filter %q matches ct state, which only the CPU's conntrack stage sets: %w", fn.name, ErrNoFilter)
	}
	n := len(ft.ruleEdge)
	p := &FilterProgram{
		Blob:         ft.cls.serialise(),
		Terminal:     make([]bool, n),
		Verdict:      make([]rings.Verdict, n),
		Target:       make([]uint16, n),
		Edge:         append([]Edge(nil), ft.ruleEdge...),
		ParseTunnels: pt.tunnels,
		FilterNode:   int(fi),
	}
	for r, e := range ft.ruleEdge {
		if int(e) >= len(fn.edges) {
			return nil, fmt.Errorf("filter rule %d: edge %d out of range", r, e)
		}
		to := &g.nodes[fn.edges[e]]
		if to.terminal {
			p.Terminal[r], p.Verdict[r], p.Target[r] = true, to.verdict, to.target
		}
	}
	return p, nil
}

// AllTerminal reports whether every rule and the default end the graph
// at a terminal, so a backend that classifies can write final verdicts.
func (p *FilterProgram) AllTerminal() bool {
	for _, t := range p.Terminal {
		if !t {
			return false
		}
	}
	return true
}

// FilterKeyOfPacket parses packet p as the parse stage does (tunnels as
// its option says) and computes its key: the CPU path of a backend that
// classifies on another processor, for the packets that processor hands
// back. It neither allocates nor keeps p.
func FilterKeyOfPacket(p []byte, tunnels bool, k *FilterKey) {
	var m rings.Meta
	if !decodeFast(p, &m, tunnels) {
		resetParsed(&m)
		m.Class = decodeEthernet(p, &m, tunnels)
	}
	filterKey(&m, k)
}

// SetFilterHints gives runner r's filter stage node (FilterProgram's
// FilterNode) each batch packet's rule as a classifying backend found it:
// while set, the stage takes packet i's rule from hints[i] when it is at
// most the rule count (the default), and runs its own lookup for any
// other value (a GPU's "not classified"). Everything else the stage does,
// its counters and edges, is unchanged, so the runner's results and
// counters are those of the CPU path. nil removes the hints. The hints
// must cover every packet index of the batches r processes while set.
func SetFilterHints(r *Runner, node int, hints []uint32) error {
	if node < 0 || node >= len(r.nodes) {
		return fmt.Errorf("filter hints: node %d out of range", node)
	}
	fs, ok := r.nodes[node].stage.(*filterStage)
	if !ok {
		return fmt.Errorf("filter hints: node %d is not a filter", node)
	}
	fs.hints = hints
	return nil
}

// processHinted is Process with the rules taken from s.hints.
func (s *filterStage) processHinted(b *rings.Batch, idx []uint16, next []Edge) {
	t := s.t
	c := t.cls
	next = next[:len(idx)]
	n := uint32(c.n)
	for k, i := range idx {
		r := s.hints[i]
		if r > n {
			r = uint32(c.lookup(&b.Meta[i]))
		}
		next[k] = t.ruleEdge[r]
		s.pkts[r]++
		s.bytes[r] += uint64(b.Descs[i].Len)
		s.live.mark(int(r))
	}
}
