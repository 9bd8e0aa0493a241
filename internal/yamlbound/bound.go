package yamlbound

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Limits bound what Check accepts. Each must be positive.
type Limits struct {
	// MaxBytes is the input's size limit.
	MaxBytes int
	// MaxDepth is how deep collections (mappings, sequences) may nest.
	MaxDepth int
	// MaxNodes is how many nodes the document may have, counted as
	// yaml.v3 builds them: the document node, every scalar (an empty
	// value too), sequence and mapping.
	MaxNodes int
}

// Stats is what Check read.
type Stats struct {
	Nodes     int // nodes yaml.v3 builds, as Limits.MaxNodes counts them, in every document
	Depth     int // the deepest nesting of collections
	Documents int
	// SecondDocLine and SecondDocCol (1-based) are where a second
	// document starts; 0 when there is none.
	SecondDocLine, SecondDocCol int
	// Complete is false when Check stopped where yaml.v3 reports a
	// syntax error: the counts are those of the input before it.
	Complete bool
	// ErrorLine and ErrorCol (1-based) are where that syntax error is,
	// and ErrorEnd the byte offset Check had read to (the error lies
	// before it); 0 when Complete or refused.
	ErrorLine, ErrorCol, ErrorEnd int
}

// Error is a refused input: where, which limit (LimitBytes, LimitDepth,
// LimitNodes, LimitAnchor, LimitEncoding) and a message that echoes at
// most a short prefix of the input.
type Error struct {
	Line, Col int // 1-based; 0 when the refusal is about the whole input
	Limit     string
	Msg       string
}

// The values of Error.Limit.
const (
	LimitBytes    = "bytes"
	LimitDepth    = "depth"
	LimitNodes    = "nodes"
	LimitAnchor   = "anchor"
	LimitEncoding = "encoding"
)

func (e *Error) Error() string {
	if e.Line == 0 {
		return e.Msg
	}
	return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Col, e.Msg)
}

func depthMsg(max int) string {
	return fmt.Sprintf("nesting deeper than %d levels (the limit for a config)", max)
}

func nodesMsg(max int) string {
	return fmt.Sprintf("more than %d YAML nodes (the limit for a config)", max)
}

// Check reads data as yaml.v3 would, and refuses it (an *Error) at the
// first anchor or alias, past lim.MaxDepth or lim.MaxNodes, or when it is
// larger than lim.MaxBytes (before reading any of it). UTF-16 input (a
// UTF-16 byte order mark) is refused: yaml.v3 would convert it, and
// configs are UTF-8. It returns nil for input that yaml.v3 will reject
// with a syntax error before any limit is passed: yaml.v3's message says
// more. Check allocates a few small stacks per call, nothing per token.
func Check(data []byte, lim Limits) (Stats, error) {
	if len(data) > lim.MaxBytes {
		return Stats{}, &Error{Limit: LimitBytes, Msg: fmt.Sprintf("%d bytes: over the limit of %d bytes for a config", len(data), lim.MaxBytes)}
	}
	if len(data) >= 2 && (data[0] == 0xFF && data[1] == 0xFE || data[0] == 0xFE && data[1] == 0xFF) {
		return Stats{}, &Error{Line: 1, Col: 1, Limit: LimitEncoding, Msg: "UTF-16 input is not supported: write the config in UTF-8"}
	}
	bom := 0
	if len(data) >= 3 && data[0] == 0xEF && data[1] == 0xBB && data[2] == 0xBF {
		data, bom = data[3:], 3 // yaml.v3's reader takes the BOM before the scanner starts
	}
	s := &scanner{buf: data, lim: lim}
	s.tokens = make([]token, 0, 64)
	s.indents = make([]int, 0, 16)
	s.simpleKeys = make([]simpleKey, 0, 16)
	p := &parser{s: s, states: make([]state, 0, 32)}
	p.run()
	st := Stats{Nodes: p.nodes, Depth: p.maxDepth, Documents: p.docs, Complete: p.state == sEnd}
	if p.docs > 1 {
		st.SecondDocLine, st.SecondDocCol = p.secondDoc.line+1, p.secondDoc.col+1
	}
	if s.err != nil {
		return st, s.err
	}
	if s.failed {
		st.Complete = false
		st.ErrorLine, st.ErrorCol, st.ErrorEnd = s.failMark.line+1, s.failMark.col+1, s.failPos+bom
	}
	return st, nil
}

// Quote quotes s for a message, keeping at most max bytes of it (cut at a
// character boundary, "..." after the closing quote marks the cut), so
// errors and logs echo a short prefix of what a client sent, never all of
// it.
func Quote(s string, max int) string {
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}
