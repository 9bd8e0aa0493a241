// Package yamlbound bounds YAML input before anything interprets it.
//
// yaml.v3 builds a whole node tree before a caller can look at it, and a
// tree with aliases is a graph: anything that walks it following aliases
// (a decode into Go values, a printer, a strict-field check) expands it,
// so a few hundred bytes of nested aliases cost gigabytes. A tree of
// millions of tiny nodes costs a hundred-odd bytes per node before the
// first check runs. Check runs first, over the raw bytes, with no
// allocation per token, and refuses:
//
//   - input over Limits.MaxBytes;
//   - the first anchor (&a) or alias (*a), at its token, before anything
//     is expanded or decoded: configs have no use for them;
//   - nesting deeper than Limits.MaxDepth collections;
//   - more than Limits.MaxNodes nodes.
//
// # How it reads
//
// Check is not a YAML parser: it builds nothing and keeps no values. It
// is a reader of YAML's layout, written from the YAML 1.2 specification
// and from what yaml.v3 (go.yaml.in/yaml/v3) does with its corners, seen
// from the outside. It goes line by line and keeps track of:
//
//   - the spans of text in which "&", "*", "#", quotes and brackets are
//     only text: single-quoted scalars (two quotes are one) and double-quoted
//     ones (a backslash escapes), both of which may go on over lines;
//     comments ("#" where a token starts, or after a blank), to the end
//     of the line; block scalars ("|" or ">"), whose lines are those
//     indented at least as much as their content (from the header's
//     indentation indicator, or from the first non-empty line) and the
//     empty ones; plain scalars, which end at ": ", at " #", in a flow
//     collection at ",[]{}", and at a line break unless the next line
//     is indented more than the innermost block collection (or is in a
//     flow collection);
//   - flow collections, by their brackets, and in each the entry it is
//     in: whether its key, ":" and value have been read;
//   - block collections, by their columns: a "- " opens a sequence, a
//     ": " after a key on the same line (or a "? ") a mapping at the
//     key's column, unless one is open at that column; a line less
//     indented closes what is indented more; a "- " at a mapping's own
//     column after its key is a sequence as its value, and a block
//     scalar at a collection's own column fills its empty slot;
//   - document markers ("---", "..." at a line's start), which end all
//     of the above; directives ("%" at a line's start), skipped; tags
//     ("!..." to the next blank), which are part of the node they tag;
//   - line breaks as yaml.v3 has them: LF, CR LF, CR, and NEL, LS and PS.
//
// An anchor or an alias is an "&" or "*" where a token starts, that is
// outside those spans: where Check sees one, it refuses it. Inside a plain
// scalar yaml.v3 reads "&" and "*" as text ("a: x &y" is the scalar
// "x &y"); Check does too when the character before is a letter, a digit
// or other ASCII punctuation that cannot end a token, and otherwise (an
// "&" or "*" that begins a word: after a blank, a break, an indicator, a
// quote or a non-ASCII character) refuses it with LimitAmbiguous and a
// message that says to quote the value. No token of yaml.v3's can end
// right before an "&" that Check takes for text (a plain scalar does not
// end there, a tag must be followed by a blank, quotes and indicators are
// not taken for text), so where a plain scalar ends cannot hide an
// anchor from Check. What the anchor check does rest on is where quoted scalars, block scalars and comments begin and end.
// They begin only where a token starts, which on a line is plain to see
// and across a line break turns on the indentation Check tracks (does a
// plain scalar go on over the break; how far is a block scalar's content
// indented). The fuzz targets hold that reading to yaml.v3's, and so do
// the tests over random documents of every style and over every input of
// up to four pieces of YAML.
//
// What it counts: one node per document, per scalar, per collection; one
// per slot left empty (an entry, a key or a value with nothing in it is a
// null scalar to yaml.v3); a flow sequence's "a: b" entry is a one-pair
// mapping, one level deeper; a tag counts as the node it tags. That is
// yaml.v3's tree, but for one node more per tag where a node has two
// (yaml.v3 keeps one). Depth and the document count are the tree's. The
// fuzz targets hold Check to all of it against yaml.v3:
// FuzzCheckBoundsYAMLv3 over bytes, FuzzCheckFragments over inputs made
// of YAML's pieces.
//
// # What it refuses that yaml.v3 accepts
//
// Only these, by design: an "&" or "*" word in an unquoted value, an "&"
// or "*" in a tag, and a "?" entry with no key in a flow sequence
// (LimitAmbiguous: in "[?]]" yaml.v3's scanner takes the first "]" for
// the end of the sequence and its parser for the end of the entry, so it
// reads what follows one way to find tokens and another to build the
// tree); a byte order mark anywhere but at the start, and UTF-16
// (LimitEncoding). No config in this repository has any of them.
//
// # Syntax errors
//
// Where Check notices a syntax error (an unclosed quote or bracket, a
// mapping key on two lines, a node where its collection has no room for
// one, ...), it records the first one in Stats and reads on: what it
// counts is still a bound on anything yaml.v3 builds, and yaml.v3 decides
// what is an error. The position is for callers to point at when
// yaml.v3's own message lacks one. Check notices no error that yaml.v3
// does not report: the fuzz targets hold it to that too, as a check that
// its reading of the structure is yaml.v3's. It does not notice every
// error yaml.v3 reports.
//
// What it costs: memory independent of the input (a few KB: the reader
// and its stacks, no deeper than MaxDepth); time linear in the bytes
// read, and the bytes read stop at the first refusal.
//
// Callers still keep their own tree-level checks (no alias is ever
// followed): Check is the bound, not the only line.
package yamlbound
