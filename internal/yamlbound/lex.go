package yamlbound

import "fmt"

// The spans of text that are not structure: plain, quoted and block
// scalars, comments and tags. Inside them "&", "*", "#", quotes and
// brackets mean nothing, so where each one ends is what the rest of the
// reader stands on.

// token reads the token at r.p, which is not a blank, a break or a
// comment, and reports whether it read through the end of the line.
func (r *reader) token() bool {
	s := r.src
	p := r.p
	c := s[p]
	col := p - r.lineStart
	flow := len(r.flows) > 0
	switch c {
	case '&', '*':
		r.refuseAnchor(p)
		return true
	case '-', '?', ':':
		// In a flow collection yaml.v3 takes "?" and ":" where a token
		// starts for indicators whatever follows them ("[?x]" is a
		// mapping of x, `{"a":b}` and `[[a]:b]` are pairs); elsewhere
		// these are indicators only before a blank or a break.
		if flow && c != '-' || r.sepAt(p+1) {
			r.indicator(c, col, flow)
			r.p = p + 1
			return false
		}
	case '[', '{':
		r.openFlow(c == '{', col)
		r.p = p + 1
		return false
	case ']', '}':
		r.closeFlow(c == '}', p)
		r.p = p + 1
		return false
	case ',':
		if flow {
			r.flowComma(p)
		} else {
			r.problem(p, "',' outside a flow collection")
		}
		r.p = p + 1
		return false
	case '!':
		return r.tag(col)
	case '|', '>':
		if !flow {
			r.node(col, kBlock)
			return r.blockScalar()
		}
		r.problem(p, "a block scalar inside a flow collection")
	case '\'', '"':
		r.node(col, kScalar)
		return r.quoted(c, p+1)
	case '%', '@', '`':
		r.problem(p, "a character that cannot start a token")
	}
	r.node(col, kScalar)
	return r.plain()
}

// indicator reads "- ", "? " or ": " (or "?", ":" in a flow collection).
func (r *reader) indicator(c byte, col int, flow bool) {
	switch {
	case c == '-' && flow:
		r.problem(r.p, "a block sequence entry inside a flow collection")
	case c == '-':
		r.blockEntry(col)
	case c == '?' && flow:
		r.flowKey(r.p)
	case c == '?':
		r.blockKey(col)
	case flow:
		r.flowValue(r.p)
	default:
		r.blockValue(col)
	}
}

// plain reads a plain scalar from r.p to where it stops on this line:
// before ": " (a colon and a blank or a break), before " #" (a comment),
// in a flow collection before ",[]{}", or at the break, which leaves it
// open for the next line (lineBegin decides whether it goes on).
//
// An "&" or "*" inside it is text to yaml.v3 ("a: x &y" is the scalar
// "x &y"). Check takes it for text only after a letter, a digit or
// another character that cannot end a token; one that begins a word (after
// a blank, a break, an indicator, a quote or any non-ASCII character) is
// refused with a message that says to quote the value. A reader that
// ended the scalar earlier than Check does would see an anchor there, so
// it is refused, not guessed at.
func (r *reader) plain() bool {
	s := r.src
	flow := len(r.flows) > 0
	p := r.p
	for p < len(s) {
		switch c := s[p]; c {
		case ':':
			if r.sepAt(p + 1) {
				r.p = p
				return false
			}
		case ' ', '\t':
			q := p + 1
			for q < len(s) && isBlank(s[q]) {
				q++
			}
			if q < len(s) && s[q] == '#' {
				r.p = q
				return false
			}
			p = q
			continue
		case ',', '[', ']', '{', '}':
			if flow {
				r.p = p
				return false
			}
		case '&', '*':
			if !r.sepAt(p+1) && !wordInside(s[p-1]) {
				r.refuseWord(p)
				return true
			}
		case '\n', '\r', 0xC2, 0xE2:
			if r.breakOut(p, contPlain) {
				return true
			}
		}
		p++
	}
	r.p = p
	return true
}

// wordInside reports whether an "&" or "*" after c is inside a word:
// c is ASCII, printable, and none of the characters that end a token or
// start one (blanks, indicators, quotes).
func wordInside(c byte) bool {
	if c <= ' ' || c >= 0x7F {
		return false
	}
	switch c {
	case ':', ',', '[', ']', '{', '}', '!', '\'', '"', '?', '-', '#', '|', '>', '%', '@', '`':
		return false
	}
	return true
}

func (r *reader) refuseWord(p int) {
	what := "an anchor"
	if r.src[p] == '*' {
		what = "an alias"
	}
	r.refuse(p, LimitAmbiguous, fmt.Sprintf("%s in an unquoted value reads as %s to some YAML readers: quote the value", r.echo(p), what))
}

// quoted reads a quoted scalar (q is its quote) from p, just past the
// opening quote or at the start of a line it goes on over, to its closing
// quote; it reports whether it read through the end of the line (the
// scalar goes on: lineBegin brings it back). In a single-quoted scalar
// two quotes are one; in a double-quoted one a backslash escapes the
// character after it.
func (r *reader) quoted(q byte, p int) bool {
	s := r.src
	open := contSingle
	if q == '"' {
		open = contDouble
	}
	for p < len(s) {
		c := s[p]
		switch {
		case c == q:
			if q == '\'' && p+1 < len(s) && s[p+1] == '\'' {
				p += 2
				continue
			}
			r.p = p + 1
			r.cont = contNone
			return false
		case c == '\\' && q == '"':
			if p+1 < len(s) && r.breakAt(p+1) == 0 {
				p += 2
				continue
			}
		case c == '\n' || c == '\r' || c == 0xC2 || c == 0xE2:
			if r.breakOut(p, open) {
				return true
			}
		}
		p++
	}
	r.p = p
	r.cont = open // the end of the input: run reports it
	return true
}

// breakOut moves past the line break at p, if there is one, leaving the
// span c open over it, and reports whether there was one.
func (r *reader) breakOut(p int, c cont) bool {
	n := r.breakAt(p)
	if n == 0 {
		return false
	}
	r.p = p + n
	r.newline()
	r.cont = c
	return true
}

// comment skips a comment, "#" to the end of the line.
func (r *reader) comment() { r.skipLine() }

// tag reads a tag ("!", "!!str", "!e!x", "!<tag:x,2000:y>") at r.p: it
// runs to a blank or a break, flow indicators and all, as in yaml.v3
// ("[!t]" leaves the "[" open). An "&" or "*" in it is refused: where a
// reader ends the tag, an anchor or alias could begin.
func (r *reader) tag(col int) bool {
	s := r.src
	r.node(col, kTag)
	p := r.p + 1
	for ; p < len(s) && !r.sepAt(p); p++ {
		if s[p] == '&' || s[p] == '*' {
			r.refuse(p, LimitAmbiguous, fmt.Sprintf("a tag with %q in it: not supported", s[p]))
			return true
		}
	}
	r.p = p
	return false
}

// blockScalar reads a literal or folded scalar ("|" or ">") at r.p: its
// header line, then every line that belongs to it, and stops at the start
// of the first line that does not.
//
// The content's indentation is the header's indentation indicator added to
// the innermost block collection's column (at least 1), or else that of
// its first non-empty line (and of any longer empty lines before it), at
// least one more than the collection's column. A line belongs when it has
// that many spaces, or when it has only spaces: whatever else is on it is
// text. The first line with fewer spaces and something else ends it, a
// document marker too.
func (r *reader) blockScalar() bool {
	s := r.src
	p := r.p + 1
	m, chomp := 0, false
	for ; p < len(s); p++ { // an indentation indicator and a chomping one, in either order
		if c := s[p]; c >= '1' && c <= '9' && m == 0 {
			m = int(c - '0')
		} else if (c == '+' || c == '-') && !chomp {
			chomp = true
		} else {
			break
		}
	}
	for p < len(s) && isBlank(s[p]) {
		p++
	}
	if p < len(s) && s[p] != '#' && r.breakAt(p) == 0 {
		r.problem(p, "a block scalar header with more after it")
	}
	r.p = p
	r.skipLine()
	base := max(r.indent(), 0)
	n := 0
	if m > 0 {
		n = base + m
	}
	longest := 0 // the most spaces on the empty lines before the first non-empty one
	for r.p < len(s) && r.err == nil {
		i := r.p
		for i < len(s) && s[i] == ' ' {
			i++
		}
		sp := i - r.p
		empty := i >= len(s) || r.breakAt(i) > 0
		if n == 0 {
			if empty {
				longest = max(longest, sp)
				r.p = i
				r.skipLine()
				continue
			}
			n = max(sp, longest, base+1)
		}
		if sp < n && !empty {
			break
		}
		r.p = i
		r.skipLine()
	}
	return true
}
