package yamlbound

// The collections: block ones by their column, flow ones by their
// brackets, each with the slot it has open (an entry, a key, a value) and
// whether that slot is still empty, which is all it takes to count the
// nodes yaml.v3 builds (an empty slot is a null scalar) and how deep they
// nest.

// level is an open block collection.
type level struct {
	col   int  // its column: a sequence's "-", a mapping's keys
	depth int  // its nesting, 1 at the top
	seq   bool // a sequence, else a mapping
	phase uint8
	empty bool // the open slot holds nothing yet
	// tagged: a tag is in the open slot, counted as the node it tags
	// (whatever fills the slot next is that node: not counted again).
	tagged bool
}

// A mapping's phase: what its open slot is.
const (
	phKey      uint8 = iota // between entries: no slot open
	phExplicit              // after "? ": the key
	phValue                 // after ": ": the value
	phSeq                   // the value is a sequence at the mapping's own column ("k:\n- a"); empty is its entry
	phSeqKey                // likewise the explicit key ("?\n- a")
)

// inSeq reports whether t is a mapping with a sequence at its own column open.
func (t *level) inSeq() bool { return t.phase == phSeq || t.phase == phSeqKey }

// slot is what the current line has put in the innermost open slot since
// the line began or since the last block indicator on it.
type slot struct {
	start      int  // column of its first token (a tag or a node); -1 when none
	line       int  // the line that token is on
	hasNode    bool // a node, not only a tag, is in it
	keyOfTop   bool // it is a key of the innermost mapping, at that mapping's column
	atLevel    bool // the line's first token is next, at the innermost collection's column
	afterValue bool // a ": " (or "---") came before on this line: no implicit key can follow
	tagged     bool // a tag is in it, counted as the node it tags
	keyMax     int  // the deepest nesting noted in it (a flow collection that a ": " may make a key)
}

func (s *slot) reset(line int) { *s = slot{start: -1, line: line} }

// flowLevel is an open flow collection.
type flowLevel struct {
	depth    int
	mapping  bool
	pair     bool // a sequence's entry that is a one-pair mapping ("[a: b]", "[? a]")
	key      bool // the entry's first node is read (its key, in a pair or a mapping)
	colon    bool // its ":" is read
	value    bool // a node after the ":" is read
	explicit bool // it began with "?"
	props    bool // a tag came before the key (counted as it)
	vprops   bool // a tag came after the ":" (counted as the value)
	keyLine  int  // the line the entry's first token is on
	entryMax int  // the deepest nesting in the entry so far
	maxAll   int  // the deepest nesting in the collection so far
}

func (r *reader) top() *level {
	if n := len(r.levels); n > 0 {
		return &r.levels[n-1]
	}
	return nil
}

// indent is the column a plain scalar's next line must pass to go on, and
// a block scalar's content is measured from: the innermost block
// collection's, -1 at the top.
func (r *reader) indent() int {
	if t := r.top(); t != nil {
		return t.col
	}
	return -1
}

// childDepth is how deep a collection starting now nests.
func (r *reader) childDepth() int {
	if n := len(r.flows); n > 0 {
		f := &r.flows[n-1]
		if f.pair {
			return f.depth + 2
		}
		return f.depth + 1
	}
	if t := r.top(); t != nil {
		if t.inSeq() {
			return t.depth + 2
		}
		return t.depth + 1
	}
	return 1
}

// push opens a block collection, at p, counting it unless count is false
// (a tag before it counted it).
func (r *reader) push(l level, p int, count bool) {
	l.depth = r.childDepth()
	if count {
		r.addNode(p)
	}
	r.noteDepth(l.depth, p)
	if r.err == nil { // (the stack grows to MaxDepth, no further)
		r.levels = append(r.levels, l)
	}
}

// fill puts a node into the innermost block slot (the root's, when no
// collection is open), and reports whether it is to be counted: not when
// a tag in the slot was.
func (r *reader) fill(p int) bool {
	empty, tagged := r.innermost()
	if !*empty {
		r.problem(p, "a node where there is no room for one")
		return true
	}
	count := !*tagged
	*empty, *tagged = false, false
	return count
}

// tagSlot puts a tag into the innermost block slot: it is counted as the
// node it tags, there.
func (r *reader) tagSlot() {
	if empty, tagged := r.innermost(); *empty {
		*tagged = true
	}
}

// innermost is the innermost block slot's state.
func (r *reader) innermost() (empty, tagged *bool) {
	if t := r.top(); t != nil {
		return &t.empty, &t.tagged
	}
	return &r.rootOpen, &r.rootTagged
}

// open makes t's open slot a new, empty one.
func (t *level) open(phase uint8) { t.phase, t.empty, t.tagged = phase, true, false }

// closeEntry ends a mapping's entry, counting what it left empty.
func (r *reader) closeEntry(t *level, p int) {
	switch t.phase {
	case phExplicit:
		if t.empty && !t.tagged {
			r.addNode(p) // "?" with nothing after it: a null key
		}
		r.addNode(p) // no ":" came: a null value
	case phValue, phSeq:
		if t.empty && !t.tagged {
			r.addNode(p)
		}
	case phSeqKey:
		if t.empty && !t.tagged {
			r.addNode(p)
		}
		r.addNode(p) // no ":" came: a null value
	}
	t.phase, t.empty, t.tagged = phKey, false, false
}

// unroll closes the block collections indented more than col.
func (r *reader) unroll(col int) {
	for len(r.levels) > 0 && r.err == nil {
		t := &r.levels[len(r.levels)-1]
		if t.col <= col {
			return
		}
		if t.seq {
			if t.empty && !t.tagged {
				r.addNode(r.p)
			}
		} else {
			r.closeEntry(t, r.p)
		}
		r.levels = r.levels[:len(r.levels)-1]
	}
}

// blockLine starts a line (outside flow collections) whose first token is
// at col: the collections indented more end.
func (r *reader) blockLine(col int) {
	r.endBlockLine()
	r.unroll(col)
	r.slot.reset(r.line)
	if t := r.top(); t != nil && t.col == col {
		r.slot.atLevel = true
	}
}

// endBlockLine checks the line that ends: a key at its mapping's column
// must have had its ":".
func (r *reader) endBlockLine() {
	if r.slot.keyOfTop && r.slot.start >= 0 {
		r.problem(r.p, "a mapping key with no ':'")
	}
	r.slot.keyOfTop = false
}

// blockEntry reads "- " at col.
func (r *reader) blockEntry(col int) {
	p := r.p
	if r.slot.atLevel {
		r.slot.atLevel = false
		t := r.top()
		switch {
		case t.seq || t.inSeq():
			if t.empty && !t.tagged {
				r.addNode(p)
			}
			t.open(t.phase)
		case (t.phase == phValue || t.phase == phExplicit) && t.empty:
			// "k:\n- a": the value is a sequence at k's column ("?\n- a",
			// the key)
			if !t.tagged {
				r.addNode(p)
			}
			if t.phase == phValue {
				t.open(phSeq)
			} else {
				t.open(phSeqKey)
			}
			r.noteDepth(t.depth+1, p)
		default:
			r.problem(p, "a sequence entry at a mapping's column")
			r.closeEntry(t, p)
			t.open(phSeq)
			r.addNode(p)
		}
		r.slot.reset(r.line)
		return
	}
	r.openBlock(level{col: col, seq: true, empty: true}, p)
}

// openBlock opens a block collection at p with "- " or "? ", in the slot
// the line is at.
func (r *reader) openBlock(l level, p int) {
	if r.slot.afterValue || r.slot.hasNode {
		r.problem(p, "a block collection where none can start")
	}
	r.push(l, p, r.fill(p))
	r.slot.reset(r.line)
}

// blockKey reads "? " at col.
func (r *reader) blockKey(col int) {
	p := r.p
	if r.slot.atLevel {
		r.slot.atLevel = false
		if t := r.top(); !t.seq {
			r.closeEntry(t, p)
			t.open(phExplicit)
			r.slot.reset(r.line)
			return
		}
		r.problem(p, "'?' at a sequence's column")
	}
	r.openBlock(level{col: col, phase: phExplicit, empty: true}, p)
}

// blockValue reads ": " at col.
func (r *reader) blockValue(col int) {
	p := r.p
	s := &r.slot
	implicit := s.start >= 0
	switch t := r.top(); {
	case implicit: // what came before it in this slot is the key
		if s.line != r.line {
			r.problem(p, "a mapping key on more than one line")
		}
		if s.afterValue {
			r.problem(p, "a mapping value where none is allowed")
		}
		switch {
		case s.keyOfTop:
			t.open(phValue)
		case t == nil || s.start > t.col:
			key := s.keyMax
			if !s.hasNode {
				r.fill(p) // the key is a tag alone, which counted as it: the mapping fills the slot
			}
			r.push(level{col: s.start, phase: phValue, empty: true}, p, true)
			if key > 0 { // a flow collection as the key: one deeper, inside the mapping
				r.noteDepth(key+1, p)
			}
		default:
			r.problem(p, "a mapping key at the wrong indentation")
		}
	case s.atLevel && !t.seq && (t.phase == phExplicit || t.phase == phSeqKey): // the explicit key's value
		if t.empty && !t.tagged {
			r.addNode(p)
		}
		t.open(phValue)
	default: // ": " with no key
		r.problem(p, "a mapping value with no key")
		if s.atLevel && !t.seq {
			r.closeEntry(t, p)
			t.open(phValue)
		} else {
			r.push(level{col: col, phase: phValue, empty: true}, p, r.fill(p))
		}
		r.addNode(p)
	}
	s.reset(r.line)
	// After an implicit key's ": " nothing on the line opens a block
	// collection ("a: b: c", "a: - b"); after an explicit key's it can
	// ("? a\n: - b", "? a\n: b: c").
	s.afterValue = implicit
}

// What node reads the start of.
type nodeKind uint8

const (
	kScalar nodeKind = iota // a plain or quoted scalar, or a flow collection
	kBlock                  // a literal or folded scalar
	kTag
)

// node reads the start of a node or of a tag at col, at r.p.
func (r *reader) node(col int, k nodeKind) {
	p := r.p
	tag := k == kTag
	if len(r.flows) > 0 {
		r.flowNode(p, tag)
		return
	}
	s := &r.slot
	if s.atLevel {
		s.atLevel = false
		switch t := r.top(); {
		case k == kBlock && t.empty:
			// Not a key (it cannot be one): yaml.v3 takes a block scalar
			// at the collection's own column for the empty slot's node
			// ("k:\n|\n x" is k: "x").
		case t.seq:
			r.problem(p, "a node at a sequence's column that is not an entry")
		default:
			r.closeEntry(t, p)
			s.keyOfTop = true
		}
	}
	if s.start < 0 {
		s.start, s.line = col, r.line
	}
	count := true
	switch {
	case tag:
		if s.tagged || s.hasNode {
			r.problem(p, "a tag where none can go")
		}
		s.tagged = true
		if !s.keyOfTop {
			r.tagSlot()
		}
	case s.hasNode:
		r.problem(p, "two nodes in one place")
	case s.keyOfTop:
		count = !s.tagged
	default:
		count = r.fill(p)
	}
	s.hasNode = s.hasNode || !tag
	if count {
		r.addNode(p)
	}
}

// openFlow reads "[" or "{" at col.
func (r *reader) openFlow(mapping bool, col int) {
	p := r.p
	r.node(col, kScalar)
	d := r.childDepth()
	r.noteDepth(d, p)
	if r.err != nil {
		return
	}
	if n := len(r.flows); n > 0 {
		f := &r.flows[n-1]
		f.entryMax = max(f.entryMax, d)
	}
	r.flows = append(r.flows, flowLevel{depth: d, mapping: mapping, entryMax: d, maxAll: d})
}

// closeFlow reads "]" or "}" at p.
func (r *reader) closeFlow(mapping bool, p int) {
	n := len(r.flows)
	if n == 0 {
		r.problem(p, "a closing bracket with nothing open")
		return
	}
	f := &r.flows[n-1]
	if f.mapping != mapping {
		r.problem(p, "a closing bracket of the other kind")
	}
	if r.keylessPair(f, p) {
		return
	}
	r.endFlowEntry(f, p, false)
	all := f.maxAll
	r.flows = r.flows[:n-1]
	if n > 1 {
		g := &r.flows[n-2]
		g.entryMax = max(g.entryMax, all)
	}
}

// flowComma reads "," at p.
func (r *reader) flowComma(p int) {
	if f := r.flowTop(); !r.keylessPair(f, p) {
		r.endFlowEntry(f, p, true)
	}
}

// keylessPair refuses a flow sequence's "?" entry with no key, at the
// token after the "?" (p), and reports whether it did. yaml.v3 reads
// those in ways of its own: "[?]]" is [{null: null}] to its parser, but
// its scanner has left the flow context at the first "]" (so what follows
// is read one way to find tokens and another to build the tree), and
// "[?::]" is a pair too.
func (r *reader) keylessPair(f *flowLevel, p int) bool {
	if f.mapping || !f.explicit || f.key || f.props || f.colon {
		return false
	}
	r.refuse(p, LimitAmbiguous, `a "?" with no key in a flow sequence: yaml.v3 reads it two ways; write the key`)
	return true
}

// flowTop is the innermost flow collection.
func (r *reader) flowTop() *flowLevel { return &r.flows[len(r.flows)-1] }

// endFlowEntry ends an entry, counting what it left empty.
func (r *reader) endFlowEntry(f *flowLevel, p int, comma bool) {
	switch {
	case !f.key && !f.colon && !f.explicit && !f.props:
		if comma {
			r.problem(p, "an empty entry in a flow collection")
		}
	case f.mapping || f.pair:
		if !f.key && !f.props {
			r.addNode(p) // a null key
		}
		if !f.value && !f.vprops {
			r.addNode(p) // a null value
		}
	}
	f.maxAll = max(f.maxAll, f.entryMax)
	f.pair, f.key, f.colon, f.value, f.explicit, f.props, f.vprops = false, false, false, false, false, false, false
	f.entryMax = f.depth
}

// pairUp makes a flow sequence's entry a one-pair mapping, one deeper.
func (r *reader) pairUp(f *flowLevel, p int) {
	f.pair = true
	r.addNode(p)
	f.entryMax++
	r.noteDepth(f.entryMax, p)
}

// flowKey reads "?" at p.
func (r *reader) flowKey(p int) {
	f := r.flowTop()
	if r.keylessPair(f, p) {
		return
	}
	if f.key || f.colon || f.explicit || f.props {
		r.problem(p, "'?' inside a flow entry")
	}
	if !f.key && !f.props {
		f.keyLine = r.line
	}
	f.explicit = true
	if !f.mapping && !f.pair {
		r.pairUp(f, p)
	}
}

// flowValue reads ":" at p.
func (r *reader) flowValue(p int) {
	f := r.flowTop()
	if r.keylessPair(f, p) {
		return
	}
	switch {
	case f.colon:
		r.problem(p, "a second ':' in a flow entry")
	case !f.key && !f.props && !f.explicit:
		r.problem(p, "a ':' with no key before it")
	case !f.explicit && f.keyLine != r.line:
		r.problem(p, "a flow mapping key on more than one line")
	}
	f.colon = true
	if !f.mapping && !f.pair {
		r.pairUp(f, p)
	}
}

// flowNode reads the start of a node or a tag in a flow collection.
func (r *reader) flowNode(p int, tag bool) {
	f := r.flowTop()
	if !f.colon && !f.key && !f.props && !f.explicit {
		f.keyLine = r.line
	}
	count := true
	switch {
	case tag && !f.colon:
		if f.props || f.key {
			r.problem(p, "a tag where none can go")
		}
		f.props = true
	case tag:
		if f.vprops || f.value {
			r.problem(p, "a tag where none can go")
		}
		f.vprops = true
	case !f.colon:
		if f.key {
			r.problem(p, "two nodes in one flow entry")
		}
		f.key, count = true, !f.props
	default:
		if f.value {
			r.problem(p, "two nodes in one flow entry")
		}
		f.value, count = true, !f.vprops
	}
	if count {
		r.addNode(p)
	}
}
