package yamlbound

import (
	"bytes"
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
	// Nodes is an upper bound on the nodes yaml.v3 builds, as
	// Limits.MaxNodes counts them, in every document: exact but for one
	// more per tag on a node with two (see doc.go).
	Nodes int
	// Depth is the deepest nesting of collections, as yaml.v3's tree has it.
	Depth     int
	Documents int
	// SecondDocLine and SecondDocCol (1-based) are where a second
	// document starts; 0 when there is none.
	SecondDocLine, SecondDocCol int
	// Complete is false when Check noticed a syntax error, one that
	// yaml.v3 reports too (Check reads on past it: the counts are of the
	// whole input).
	Complete bool
	// ErrorLine and ErrorCol (1-based) are where that syntax error is,
	// and ErrorEnd the byte offset just past the point Check noticed it
	// at (yaml.v3 may find an error before it); 0 when Complete or refused.
	ErrorLine, ErrorCol, ErrorEnd int
}

// Error is a refused input: where, which limit (LimitBytes, LimitDepth,
// LimitNodes, LimitAnchor, LimitEncoding, LimitAmbiguous) and a message
// that echoes at most a short prefix of the input.
type Error struct {
	Line, Col int // 1-based; 0 when the refusal is about the whole input
	Limit     string
	Msg       string
}

// The values of Error.Limit.
const (
	LimitBytes     = "bytes"
	LimitDepth     = "depth"
	LimitNodes     = "nodes"
	LimitAnchor    = "anchor"
	LimitEncoding  = "encoding"
	LimitAmbiguous = "ambiguous" // what yaml.v3 reads but Check will not guess at (see doc.go)
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

// Check reads data and refuses it (an *Error) at the first anchor or
// alias, at an "&" or "*" word in an unquoted value (LimitAmbiguous: the
// message says to quote it), past lim.MaxDepth or lim.MaxNodes, or when it
// is larger than lim.MaxBytes (before reading any of it). UTF-16 input (a
// UTF-16 byte order mark), and a UTF-8 byte order mark anywhere but at the
// start, are refused too (LimitEncoding): configs are UTF-8, and yaml.v3
// may or may not skip a byte order mark further in. Check returns nil for input
// that is within the limits whether or not yaml.v3 will accept it: where
// it noticed a syntax error, Stats says where. It allocates a few small
// stacks per call, nothing per token.
func Check(data []byte, lim Limits) (Stats, error) {
	if len(data) > lim.MaxBytes {
		return Stats{}, &Error{Limit: LimitBytes, Msg: fmt.Sprintf("%d bytes: over the limit of %d bytes for a config", len(data), lim.MaxBytes)}
	}
	if len(data) >= 2 && (data[0] == 0xFF && data[1] == 0xFE || data[0] == 0xFE && data[1] == 0xFF) {
		return Stats{}, &Error{Line: 1, Col: 1, Limit: LimitEncoding, Msg: "UTF-16 input is not supported: write the config in UTF-8"}
	}
	bom := 0
	if bytes.HasPrefix(data, byteOrderMark) {
		data, bom = data[3:], 3 // yaml.v3 takes a leading one off before it reads
	}
	r := &reader{src: data, lim: lim, bom: bom, docEndLine: -1}
	r.levels = r.levelBuf[:0]
	r.flows = r.flowBuf[:0]
	r.slot.reset(0)
	r.run()
	if r.err == nil { // (a refusal stands, whatever comes after it)
		if i := bytes.Index(data, byteOrderMark); i >= 0 {
			r.p, r.line, r.lineStart = 0, 0, 0
			r.seek(i)
			r.refuse(i, LimitEncoding, "a byte order mark inside the input: remove it")
		}
	}
	st := Stats{Nodes: r.nodes, Depth: r.depth, Documents: r.docs, Complete: !r.bad && r.err == nil}
	if r.docs > 1 {
		st.SecondDocLine, st.SecondDocCol = r.secondLine+1, r.secondCol
	}
	if r.err != nil {
		return st, r.err
	}
	if r.bad {
		st.ErrorLine, st.ErrorCol, st.ErrorEnd = r.badLine, r.badCol, r.badP+bom
	}
	return st, nil
}

var byteOrderMark = []byte("\xEF\xBB\xBF")

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
