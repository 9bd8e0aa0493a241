package yamlbound

// This file is the reader's frame: the input, lines and columns, the loop
// over lines, documents, and how it records a refusal or a problem. What
// it tracks of the YAML is in lex.go (the spans of text that are not
// structure: scalars, comments, tags) and structure.go (the collections,
// their slots and what is counted). doc.go says why that is enough.

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// cont is the kind of span a line break left open: the next line either
// goes on with it or (a plain scalar only) ends it.
type cont uint8

const (
	contNone   cont = iota
	contPlain       // a plain scalar, which may go on over the next line
	contSingle      // a single-quoted scalar, which does
	contDouble      // a double-quoted one
)

// reader is one pass over one input. Positions are byte offsets; a column
// is the byte offset from the start of the line, which for everything that
// decides structure is the count of characters too: what precedes a block
// indicator or a key on its line is spaces and other indicators.
type reader struct {
	src []byte
	lim Limits
	bom int // bytes of byte order mark taken off the front (for ErrorEnd)

	p         int // the next byte to read
	line      int // 0-based line of p
	lineStart int // offset of that line's first byte

	err                   *Error // the refusal; reading stops at it
	bad                   bool   // a problem (a syntax error yaml.v3 reports too) was noticed
	badLine, badCol, badP int

	docs                  int
	inDoc                 bool
	docEndLine            int // the line of the last "..." (content after it on that line is an error)
	secondLine, secondCol int // where the second document starts (0-based line, 1-based column)

	nodes int
	depth int // the deepest collection nesting seen

	cont cont

	rootOpen   bool // the document's root slot is still empty
	rootTagged bool // a tag is in it, counted as the root node
	slot       slot
	levels     []level     // open block collections, innermost last
	flows      []flowLevel // open flow collections, innermost last

	levelBuf [16]level // the stacks' first levels, so that most inputs need no more
	flowBuf  [16]flowLevel
}

func (r *reader) run() {
	for r.err == nil && r.p < len(r.src) {
		r.lineBegin()
	}
	if r.err == nil {
		switch r.cont {
		case contSingle, contDouble:
			r.problem(r.p, "a quoted scalar is not closed")
		}
		r.endDoc()
	}
}

// newline records that r.p is at the first byte of a new line.
func (r *reader) newline() {
	r.line++
	r.lineStart = r.p
}

// breakAt returns the length of the line break at p, 0 when there is none.
// yaml.v3 breaks lines at LF, CR LF, CR, and (as YAML 1.1 did) at NEL, LS
// and PS: anything on the far side of one of those is on a new line for
// it, so it is for Check too.
func (r *reader) breakAt(p int) int {
	s := r.src
	if p >= len(s) {
		return 0
	}
	switch s[p] {
	case '\n':
		return 1
	case '\r':
		if p+1 < len(s) && s[p+1] == '\n' {
			return 2
		}
		return 1
	case 0xC2: // NEL, U+0085
		if p+1 < len(s) && s[p+1] == 0x85 {
			return 2
		}
	case 0xE2: // LS and PS, U+2028 and U+2029
		if p+2 < len(s) && s[p+1] == 0x80 && (s[p+2] == 0xA8 || s[p+2] == 0xA9) {
			return 3
		}
	}
	return 0
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// sepAt reports whether p is at the end of the input, a blank or a line
// break: what must follow an indicator such as "- " or ": ".
func (r *reader) sepAt(p int) bool {
	return p >= len(r.src) || isBlank(r.src[p]) || r.breakAt(p) > 0
}

// docMarkerAt returns '-' or '.' when a document marker ("---" or "...",
// then a blank, a break or the end) is at p, which is a line's start.
func (r *reader) docMarkerAt(p int) byte {
	s := r.src
	if p+3 > len(s) || !r.sepAt(p+3) {
		return 0
	}
	if s[p] == '-' && s[p+1] == '-' && s[p+2] == '-' {
		return '-'
	}
	if s[p] == '.' && s[p+1] == '.' && s[p+2] == '.' {
		return '.'
	}
	return 0
}

// lineBegin reads one line from its start: what a span left open by the
// line before makes of it, a document marker, a directive, or the block
// structure at its indentation; then the tokens on it.
func (r *reader) lineBegin() {
	s := r.src
	switch r.cont {
	case contSingle, contDouble:
		if r.docMarkerAt(r.p) == 0 {
			q := byte('\'')
			if r.cont == contDouble {
				q = '"'
			}
			if r.quoted(q, r.p) {
				return
			}
			r.tokens()
			return
		}
		r.problem(r.p, "a document marker inside a quoted scalar")
		r.cont = contNone
	}
	if m := r.docMarkerAt(r.p); m != 0 {
		r.cont = contNone
		r.docMarker(m)
		return
	}
	j := r.p
	for j < len(s) && isBlank(s[j]) {
		j++
	}
	if j >= len(s) || r.breakAt(j) > 0 { // an empty line: a plain scalar goes on over it
		r.p = j
		if j < len(s) {
			r.p += r.breakAt(j)
			r.newline()
		}
		return
	}
	col := j - r.lineStart
	if s[j] == '#' { // a comment line ends a plain scalar
		r.cont = contNone
		r.p = j
		r.comment()
		return
	}
	if r.cont == contPlain {
		r.cont = contNone
		// A plain scalar goes on over this line when it is in a flow
		// collection, or indented more than the innermost block
		// collection (yaml.v3 reads "a: b\n  c" as "b c").
		if len(r.flows) > 0 || col > r.indent() {
			r.p = j
			if r.plain() {
				return
			}
			r.tokens()
			return
		}
	}
	if col == 0 && s[j] == '%' {
		r.directive()
		return
	}
	if len(r.flows) == 0 {
		r.blockLine(col)
	}
	r.p = j
	r.tokens()
}

// tokens reads the tokens on the rest of the line from r.p, and the line
// break after them.
func (r *reader) tokens() {
	s := r.src
	for r.err == nil {
		for r.p < len(s) && isBlank(s[r.p]) {
			r.p++
		}
		if r.p >= len(s) {
			return
		}
		if n := r.breakAt(r.p); n > 0 {
			r.p += n
			r.newline()
			return
		}
		if s[r.p] == '#' {
			r.comment()
			return
		}
		if r.line == r.docEndLine {
			r.problem(r.p, "content after a document end marker")
		}
		if !r.inDoc {
			r.beginDoc(r.p)
		}
		if r.token() {
			return
		}
	}
}

// docMarker handles "---" or "..." at r.p, a line's start.
func (r *reader) docMarker(m byte) {
	r.endDoc()
	if m == '-' {
		r.beginDoc(r.p)
		r.slot.reset(r.line)
		r.slot.afterValue = true // "--- a: b" is an error: no key on this line
	} else {
		r.docEndLine = r.line
	}
	r.p += 3
	r.tokens()
}

func (r *reader) beginDoc(p int) {
	r.docs++
	if r.docs == 2 {
		r.secondLine, r.secondCol = r.line, r.charCol(p)
	}
	r.inDoc = true
	r.rootOpen, r.rootTagged = true, false
	r.slot.reset(r.line)
	r.addNode(p) // the document node
}

// endDoc closes what is open at the end of a document.
func (r *reader) endDoc() {
	if !r.inDoc {
		return
	}
	if len(r.flows) > 0 {
		r.problem(r.p, "a flow collection is not closed")
		r.flows = r.flows[:0]
	}
	r.endBlockLine()
	r.unroll(-1)
	if r.rootOpen && !r.rootTagged { // an empty document holds one null scalar
		r.addNode(r.p)
	}
	r.rootOpen = false
	r.inDoc = false
}

// directive skips a directive line ("%YAML 1.2", "%TAG ! tag:x,2000:"):
// yaml.v3 reads it as one directive token, with no node in it.
func (r *reader) directive() {
	if r.inDoc || len(r.flows) > 0 {
		r.problem(r.p, "a directive inside a document")
	}
	r.skipLine()
}

// seek moves r.p on to p, counting the lines on the way.
func (r *reader) seek(p int) {
	for r.p < p {
		if n := r.breakAt(r.p); n > 0 {
			r.p += n
			r.newline()
		} else {
			r.p++
		}
	}
}

// skipLine moves past the rest of the line and its break.
func (r *reader) skipLine() {
	s := r.src
	for r.p < len(s) {
		if n := r.breakAt(r.p); n > 0 {
			r.p += n
			r.newline()
			return
		}
		r.p++
	}
}

// charCol is p's 1-based column in characters; p is on the current line
// (every position reported is).
func (r *reader) charCol(p int) int {
	p = max(p, r.lineStart)
	return utf8.RuneCount(r.src[r.lineStart:p]) + 1
}

// refuse stops reading with an error at p.
func (r *reader) refuse(p int, limit, msg string) {
	if r.err != nil {
		return
	}
	r.err = &Error{Line: r.line + 1, Col: r.charCol(p), Limit: limit, Msg: msg}
}

// problem records the first syntax error noticed, at p. Reading goes on:
// the counts stay upper bounds over the whole input whatever Check
// thought of it, and yaml.v3, not Check, decides what is an error.
func (r *reader) problem(p int, what string) {
	if r.bad {
		return
	}
	r.bad = true
	r.badLine, r.badCol, r.badP = r.line+1, r.charCol(p), min(p+1, len(r.src))
	if debugProblems != nil {
		debugProblems(r.badLine, r.badCol, what)
	}
}

// debugProblems, set by a test, hears what each first problem was.
var debugProblems func(line, col int, what string)

// addNode counts a node at p.
func (r *reader) addNode(p int) {
	r.nodes++
	if r.nodes > r.lim.MaxNodes {
		r.refuse(p, LimitNodes, nodesMsg(r.lim.MaxNodes))
	}
}

// noteDepth records a collection nested d deep, at p.
func (r *reader) noteDepth(d, p int) {
	if d > r.depth {
		r.depth = d
		if d > r.lim.MaxDepth {
			r.refuse(p, LimitDepth, depthMsg(r.lim.MaxDepth))
		}
	}
	r.slot.keyMax = max(r.slot.keyMax, d)
}

// echo is the token at p for a message: up to the next blank, break or
// flow indicator, at most maxEcho bytes.
func (r *reader) echo(p int) string {
	s := r.src
	e := p + 1
	for e < len(s) && e-p <= maxEcho && !r.sepAt(e) && !bytes.ContainsRune([]byte(",[]{}"), rune(s[e])) {
		e++
	}
	return Quote(string(s[p:e]), maxEcho)
}

const maxEcho = 33

func (r *reader) refuseAnchor(p int) {
	what := "anchor"
	if r.src[p] == '*' {
		what = "alias"
	}
	r.refuse(p, LimitAnchor, fmt.Sprintf("yaml %s %s: anchors and aliases are not supported", what, r.echo(p)))
}
