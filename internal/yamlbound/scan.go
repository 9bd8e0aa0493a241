package yamlbound

// The scanner half of the port: yaml.v3's scannerc.go without values,
// comments or error messages. Function names follow the original
// (yaml_parser_fetch_value is fetchValue) so the two can be read side by
// side; where yaml.v3 sets a scanner error, this sets s.stop and returns
// false, and the caller accepts what was read so far.

type tokType uint8

const (
	tNone tokType = iota
	tStreamStart
	tStreamEnd
	tDirective // %YAML or %TAG: yaml.v3 tells them apart, nothing here needs to
	tDocStart
	tDocEnd
	tBlockSeqStart
	tBlockMapStart
	tBlockEnd
	tFlowSeqStart
	tFlowSeqEnd
	tFlowMapStart
	tFlowMapEnd
	tBlockEntry
	tFlowEntry
	tKey
	tValue
	tAlias
	tAnchor
	tTag
	tScalar
)

// mark is a position as yaml.v3 counts it: index and column in
// characters, not bytes; line and column 0-based.
type mark struct{ index, line, col int }

type token struct {
	typ tokType
	m   mark
}

type simpleKey struct {
	possible, required bool
	tokenNumber        int
	m                  mark
}

// scanner holds the scanner's state. tokens is the queue yaml.v3 keeps:
// tokens[head:] are fetched and not yet taken by the parser; parsed counts
// the tokens taken, so a token's number is parsed + its offset from head.
type scanner struct {
	buf []byte
	pos int // byte offset of m
	m   mark

	tokens         []token
	head           int
	parsed         int
	tokenAvailable bool

	streamStartProduced, streamEndProduced bool

	indent  int
	indents []int

	flowLevel        int
	simpleKeys       []simpleKey
	simpleKeyAllowed bool

	lim  Limits
	stop bool   // yaml.v3 would have stopped with an error here (or refused: err)
	err  *Error // the refusal, when there is one

	failed   bool // stopped where yaml.v3 reports a syntax error
	failMark mark // where
	failPos  int  // the scanner's byte offset then
}

// at returns the byte at offset i from the current position, 0 past the
// end (yaml.v3's buffer is NUL-terminated, and its reader refuses a NUL in
// the input, so a NUL is the end either way).
func (s *scanner) at(i int) byte {
	if p := s.pos + i; p < len(s.buf) {
		return s.buf[p]
	}
	return 0
}

func (s *scanner) isZ(i int) bool     { return s.at(i) == 0 }
func (s *scanner) isBlank(i int) bool { c := s.at(i); return c == ' ' || c == '\t' }
func (s *scanner) isBreak(i int) bool {
	c := s.at(i)
	return c == '\r' || c == '\n' ||
		c == 0xC2 && s.at(i+1) == 0x85 || // NEL
		c == 0xE2 && s.at(i+1) == 0x80 && (s.at(i+2) == 0xA8 || s.at(i+2) == 0xA9) // LS, PS
}
func (s *scanner) isBreakZ(i int) bool { return s.isBreak(i) || s.isZ(i) }
func (s *scanner) isBlankZ(i int) bool { return s.isBlank(i) || s.isBreakZ(i) }
func (s *scanner) isAlpha(i int) bool {
	c := s.at(i)
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '_' || c == '-'
}

// width is the length of the UTF-8 sequence that starts with c, as
// yaml.v3's width() computes it (0 for a byte no sequence starts with:
// its reader has refused the input by then).
func width(c byte) int {
	switch {
	case c&0x80 == 0x00:
		return 1
	case c&0xE0 == 0xC0:
		return 2
	case c&0xF0 == 0xE0:
		return 3
	case c&0xF8 == 0xF0:
		return 4
	}
	return 0
}

// skip advances one character.
func (s *scanner) skip() {
	w := width(s.at(0))
	if w == 0 || s.pos >= len(s.buf) {
		// Invalid UTF-8: yaml.v3's reader fails here. End the scan.
		s.failAt(s.m)
		s.pos = len(s.buf)
		return
	}
	s.pos += w
	s.m.index++
	s.m.col++
}

// skipLine advances over one line break (CR LF counts as one).
func (s *scanner) skipLine() {
	if s.at(0) == '\r' && s.at(1) == '\n' {
		s.pos += 2
		s.m.index += 2
		s.m.col = 0
		s.m.line++
	} else if s.isBreak(0) {
		s.pos += width(s.at(0))
		s.m.index++
		s.m.col = 0
		s.m.line++
	}
}

// fail records that yaml.v3 stops with an error here.
func (s *scanner) fail() bool { return s.failAt(s.m) }

// failAt records that yaml.v3 stops with an error at m (a parser error
// is at the token it did not expect, behind the scanner's position).
func (s *scanner) failAt(m mark) bool {
	if !s.stop {
		s.failed, s.failMark, s.failPos = true, m, s.pos
	}
	s.stop = true
	return false
}

// refuse records a refusal at m.
func (s *scanner) refuse(m mark, limit, msg string) bool {
	if s.err == nil {
		s.err = &Error{Line: m.line + 1, Col: m.col + 1, Limit: limit, Msg: msg}
	}
	s.stop = true
	return false
}

// insert puts a token in the queue at offset at from head (-1: at the end).
func (s *scanner) insert(at int, t token) {
	if s.head > 0 && len(s.tokens) == cap(s.tokens) {
		if s.head != len(s.tokens) {
			copy(s.tokens, s.tokens[s.head:])
		}
		s.tokens = s.tokens[:len(s.tokens)-s.head]
		s.head = 0
	}
	s.tokens = append(s.tokens, t)
	if at < 0 {
		return
	}
	copy(s.tokens[s.head+at+1:], s.tokens[s.head+at:])
	s.tokens[s.head+at] = t
}

// peek returns the next token, fetching as yaml.v3's peek_token does; nil
// when the scan stopped.
func (s *scanner) peek() *token {
	if s.tokenAvailable || s.fetchMoreTokens() {
		return &s.tokens[s.head]
	}
	return nil
}

// take consumes the token peek returned.
func (s *scanner) take() {
	s.tokenAvailable = false
	s.parsed++
	if s.tokens[s.head].typ == tStreamEnd {
		s.streamEndProduced = true
	}
	s.head++
}

func (s *scanner) fetchMoreTokens() bool {
	if s.stop || s.streamEndProduced {
		return false
	}
	for {
		// yaml.v3 keeps two tokens of lookahead for its comments, and
		// more while the head token may still become a simple key.
		if s.head < len(s.tokens)-2 {
			i := s.headSimpleKey()
			if i < 0 {
				break
			}
			valid, ok := s.simpleKeyIsValid(&s.simpleKeys[i])
			if !ok {
				return false
			}
			if !valid {
				break
			}
		}
		if !s.fetchNextToken() {
			return false
		}
	}
	s.tokenAvailable = true
	return true
}

// headSimpleKey is the simple key whose token is the head one, -1 if none
// (yaml.v3's simple_keys_by_tok lookup; the stack is at most MaxDepth).
func (s *scanner) headSimpleKey() int {
	for i := len(s.simpleKeys) - 1; i >= 0; i-- {
		if k := &s.simpleKeys[i]; k.possible && k.tokenNumber == s.parsed {
			return i
		}
	}
	return -1
}

func (s *scanner) fetchNextToken() bool {
	if !s.streamStartProduced {
		return s.fetchStreamStart()
	}
	if !s.scanToNextToken() {
		return false
	}
	if !s.unrollIndent(s.m.col) {
		return false
	}
	if s.isZ(0) {
		return s.fetchStreamEnd()
	}
	c := s.at(0)
	if s.m.col == 0 && c == '%' {
		return s.fetchDirective()
	}
	if s.m.col == 0 && s.isDocIndicator() {
		if c == '-' {
			return s.fetchDocumentIndicator(tDocStart)
		}
		return s.fetchDocumentIndicator(tDocEnd)
	}
	switch {
	case c == '[':
		return s.fetchFlowCollectionStart(tFlowSeqStart)
	case c == '{':
		return s.fetchFlowCollectionStart(tFlowMapStart)
	case c == ']':
		return s.fetchFlowCollectionEnd(tFlowSeqEnd)
	case c == '}':
		return s.fetchFlowCollectionEnd(tFlowMapEnd)
	case c == ',':
		return s.fetchFlowEntry()
	case c == '-' && s.isBlankZ(1):
		return s.fetchBlockEntry()
	case c == '?' && (s.flowLevel > 0 || s.isBlankZ(1)):
		return s.fetchKey()
	case c == ':' && (s.flowLevel > 0 || s.isBlankZ(1)):
		return s.fetchValue()
	case c == '*':
		return s.refuse(s.m, LimitAnchor, "yaml alias "+s.name()+": anchors and aliases are not supported")
	case c == '&':
		return s.refuse(s.m, LimitAnchor, "yaml anchor "+s.name()+": anchors and aliases are not supported")
	case c == '!':
		return s.fetchTag()
	case c == '|' && s.flowLevel == 0:
		return s.fetchBlockScalar()
	case c == '>' && s.flowLevel == 0:
		return s.fetchBlockScalar()
	case c == '\'':
		return s.fetchFlowScalar(true)
	case c == '"':
		return s.fetchFlowScalar(false)
	}
	// The plain scalar rule, as yaml.v3 has it.
	if !(s.isBlankZ(0) || c == '-' || c == '?' || c == ':' || c == ',' || c == '[' || c == ']' ||
		c == '{' || c == '}' || c == '#' || c == '&' || c == '*' || c == '!' || c == '|' ||
		c == '>' || c == '\'' || c == '"' || c == '%' || c == '@' || c == '`') ||
		(c == '-' && !s.isBlank(1)) ||
		(s.flowLevel == 0 && (c == '?' || c == ':') && !s.isBlankZ(1)) {
		return s.fetchPlainScalar()
	}
	return s.fail() // "found character that cannot start any token"
}

// name is the anchor or alias name at the current position for an error:
// at most 32 bytes of it, quoted.
func (s *scanner) name() string {
	end := s.pos + 1
	for end < len(s.buf) && end-s.pos < 64 {
		c := s.buf[end]
		if c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ',' || c == '[' || c == ']' || c == '{' || c == '}' || c == 0 {
			break
		}
		end++
	}
	return Quote(string(s.buf[s.pos:end]), 33)
}

func (s *scanner) isDocIndicator() bool {
	c := s.at(0)
	return (c == '-' && s.at(1) == '-' && s.at(2) == '-' || c == '.' && s.at(1) == '.' && s.at(2) == '.') && s.isBlankZ(3)
}

func (s *scanner) simpleKeyIsValid(k *simpleKey) (valid, ok bool) {
	if !k.possible {
		return false, true
	}
	if k.m.line < s.m.line || k.m.index+1024 < s.m.index {
		if k.required {
			return false, s.fail() // "could not find expected ':'"
		}
		k.possible = false
		return false, true
	}
	return true, true
}

func (s *scanner) saveSimpleKey() bool {
	required := s.flowLevel == 0 && s.indent == s.m.col
	if s.simpleKeyAllowed {
		k := simpleKey{possible: true, required: required, tokenNumber: s.parsed + len(s.tokens) - s.head, m: s.m}
		if !s.removeSimpleKey() {
			return false
		}
		s.simpleKeys[len(s.simpleKeys)-1] = k
	}
	return true
}

func (s *scanner) removeSimpleKey() bool {
	k := &s.simpleKeys[len(s.simpleKeys)-1]
	if k.possible {
		if k.required {
			return s.fail() // "could not find expected ':'"
		}
		k.possible = false
	}
	return true
}

func (s *scanner) increaseFlowLevel() bool {
	s.simpleKeys = append(s.simpleKeys, simpleKey{tokenNumber: s.parsed + len(s.tokens) - s.head, m: s.m})
	s.flowLevel++
	if s.flowLevel > s.lim.MaxDepth {
		return s.refuse(s.m, LimitDepth, depthMsg(s.lim.MaxDepth))
	}
	return true
}

func (s *scanner) decreaseFlowLevel() {
	if s.flowLevel > 0 {
		s.flowLevel--
		s.simpleKeys = s.simpleKeys[:len(s.simpleKeys)-1]
	}
}

// rollIndent pushes an indentation level and queues typ at token number
// number (-1: at the end) when column is deeper than the current level.
func (s *scanner) rollIndent(column, number int, typ tokType, m mark) bool {
	if s.flowLevel > 0 {
		return true
	}
	if s.indent < column {
		s.indents = append(s.indents, s.indent)
		s.indent = column
		if len(s.indents) > s.lim.MaxDepth {
			return s.refuse(m, LimitDepth, depthMsg(s.lim.MaxDepth))
		}
		if number > -1 {
			number -= s.parsed
		}
		s.insert(number, token{typ: typ, m: m})
	}
	return true
}

// unrollIndent pops indentation levels deeper than column, queueing a
// block end for each.
func (s *scanner) unrollIndent(column int) bool {
	if s.flowLevel > 0 {
		return true
	}
	for s.indent > column {
		s.insert(-1, token{typ: tBlockEnd, m: s.m})
		s.indent = s.indents[len(s.indents)-1]
		s.indents = s.indents[:len(s.indents)-1]
	}
	return true
}

func (s *scanner) fetchStreamStart() bool {
	s.indent = -1
	s.simpleKeys = append(s.simpleKeys, simpleKey{})
	s.simpleKeyAllowed = true
	s.streamStartProduced = true
	s.insert(-1, token{typ: tStreamStart, m: s.m})
	return true
}

func (s *scanner) fetchStreamEnd() bool {
	if s.m.col != 0 {
		s.m.col = 0
		s.m.line++
	}
	s.unrollIndent(-1)
	if !s.removeSimpleKey() {
		return false
	}
	s.simpleKeyAllowed = false
	s.insert(-1, token{typ: tStreamEnd, m: s.m})
	return true
}

func (s *scanner) fetchDirective() bool {
	s.unrollIndent(-1)
	if !s.removeSimpleKey() {
		return false
	}
	s.simpleKeyAllowed = false
	m := s.m
	// A directive runs to the end of its line. yaml.v3 checks its name
	// and arguments and fails on anything else; the line is consumed
	// either way.
	for !s.isBreakZ(0) {
		s.skip()
		if s.stop {
			return false
		}
	}
	s.skipLine()
	s.insert(-1, token{typ: tDirective, m: m})
	return true
}

func (s *scanner) fetchDocumentIndicator(typ tokType) bool {
	s.unrollIndent(-1)
	if !s.removeSimpleKey() {
		return false
	}
	s.simpleKeyAllowed = false
	m := s.m
	s.skip()
	s.skip()
	s.skip()
	s.insert(-1, token{typ: typ, m: m})
	return true
}

func (s *scanner) fetchFlowCollectionStart(typ tokType) bool {
	if !s.saveSimpleKey() {
		return false
	}
	if !s.increaseFlowLevel() {
		return false
	}
	s.simpleKeyAllowed = true
	m := s.m
	s.skip()
	s.insert(-1, token{typ: typ, m: m})
	return true
}

func (s *scanner) fetchFlowCollectionEnd(typ tokType) bool {
	if !s.removeSimpleKey() {
		return false
	}
	s.decreaseFlowLevel()
	s.simpleKeyAllowed = false
	m := s.m
	s.skip()
	s.insert(-1, token{typ: typ, m: m})
	return true
}

func (s *scanner) fetchFlowEntry() bool {
	if !s.removeSimpleKey() {
		return false
	}
	s.simpleKeyAllowed = true
	m := s.m
	s.skip()
	s.insert(-1, token{typ: tFlowEntry, m: m})
	return true
}

func (s *scanner) fetchBlockEntry() bool {
	if s.flowLevel == 0 {
		if !s.simpleKeyAllowed {
			return s.fail() // "block sequence entries are not allowed in this context"
		}
		if !s.rollIndent(s.m.col, -1, tBlockSeqStart, s.m) {
			return false
		}
	}
	if !s.removeSimpleKey() {
		return false
	}
	s.simpleKeyAllowed = true
	m := s.m
	s.skip()
	s.insert(-1, token{typ: tBlockEntry, m: m})
	return true
}

func (s *scanner) fetchKey() bool {
	if s.flowLevel == 0 {
		if !s.simpleKeyAllowed {
			return s.fail() // "mapping keys are not allowed in this context"
		}
		if !s.rollIndent(s.m.col, -1, tBlockMapStart, s.m) {
			return false
		}
	}
	if !s.removeSimpleKey() {
		return false
	}
	s.simpleKeyAllowed = s.flowLevel == 0
	m := s.m
	s.skip()
	s.insert(-1, token{typ: tKey, m: m})
	return true
}

func (s *scanner) fetchValue() bool {
	k := &s.simpleKeys[len(s.simpleKeys)-1]
	if valid, ok := s.simpleKeyIsValid(k); !ok {
		return false
	} else if valid {
		s.insert(k.tokenNumber-s.parsed, token{typ: tKey, m: k.m})
		if !s.rollIndent(k.m.col, k.tokenNumber, tBlockMapStart, k.m) {
			return false
		}
		k.possible = false
		s.simpleKeyAllowed = false
	} else {
		if s.flowLevel == 0 {
			if !s.simpleKeyAllowed {
				return s.fail() // "mapping values are not allowed in this context"
			}
			if !s.rollIndent(s.m.col, -1, tBlockMapStart, s.m) {
				return false
			}
		}
		s.simpleKeyAllowed = s.flowLevel == 0
	}
	m := s.m
	s.skip()
	s.insert(-1, token{typ: tValue, m: m})
	return true
}

func (s *scanner) fetchTag() bool {
	if !s.saveSimpleKey() {
		return false
	}
	s.simpleKeyAllowed = false
	m := s.m
	if !s.scanTag() {
		return false
	}
	s.insert(-1, token{typ: tTag, m: m})
	return true
}

func (s *scanner) fetchBlockScalar() bool {
	if !s.removeSimpleKey() {
		return false
	}
	s.simpleKeyAllowed = true
	m := s.m
	if !s.scanBlockScalar() {
		return false
	}
	s.insert(-1, token{typ: tScalar, m: m})
	return true
}

func (s *scanner) fetchFlowScalar(single bool) bool {
	if !s.saveSimpleKey() {
		return false
	}
	s.simpleKeyAllowed = false
	m := s.m
	if !s.scanFlowScalar(single) {
		return false
	}
	s.insert(-1, token{typ: tScalar, m: m})
	return true
}

func (s *scanner) fetchPlainScalar() bool {
	if !s.saveSimpleKey() {
		return false
	}
	s.simpleKeyAllowed = false
	m := s.m
	if !s.scanPlainScalar() {
		return false
	}
	s.insert(-1, token{typ: tScalar, m: m})
	return true
}

func (s *scanner) scanToNextToken() bool {
	for {
		// yaml.v3 skips a BOM at the start of a line (its reader has
		// already taken the one that opens the stream).
		if s.m.col == 0 && s.at(0) == 0xEF && s.at(1) == 0xBB && s.at(2) == 0xBF {
			s.skip()
		}
		for s.at(0) == ' ' || ((s.flowLevel > 0 || !s.simpleKeyAllowed) && s.at(0) == '\t') {
			s.skip()
		}
		if s.at(0) == '#' {
			for !s.isBreakZ(0) {
				s.skip()
				if s.stop {
					return false
				}
			}
		}
		if !s.isBreak(0) {
			return !s.stop
		}
		s.skipLine()
		if s.flowLevel == 0 {
			s.simpleKeyAllowed = true
		}
	}
}

func (s *scanner) scanTag() bool {
	if s.at(1) == '<' {
		s.skip()
		s.skip()
		if !s.scanTagURI(false) {
			return false
		}
		if s.at(0) != '>' {
			return s.fail()
		}
		s.skip()
	} else {
		// The handle: '!', letters, and a closing '!' if there is one.
		s.skip()
		for s.isAlpha(0) {
			s.skip()
		}
		named := false
		if s.at(0) == '!' {
			s.skip()
			named = true
		}
		// A handle that is not "!...!" is the tag's first part, and a
		// lone "!" with no URI is the non-specific tag.
		if !s.scanTagURI(!named) {
			return false
		}
	}
	if !s.isBlankZ(0) {
		return s.fail() // "did not find expected whitespace or line break"
	}
	return true
}

// scanTagURI consumes a tag's URI characters. hasHead says the handle
// already counts as part of the tag (yaml.v3's len(head) > 0), in which
// case an empty URI is not an error.
func (s *scanner) scanTagURI(hasHead bool) bool {
	has := hasHead
	for {
		c := s.at(0)
		if !(s.isAlpha(0) || c == ';' || c == '/' || c == '?' || c == ':' || c == '@' || c == '&' ||
			c == '=' || c == '+' || c == '$' || c == ',' || c == '.' || c == '!' || c == '~' ||
			c == '*' || c == '\'' || c == '(' || c == ')' || c == '[' || c == ']' || c == '%') {
			break
		}
		if c == '%' {
			// A %XX escape of one UTF-8 sequence: yaml.v3 checks the
			// digits and the sequence and fails on a bad one.
			w := 0
			for {
				if !(isHex(s.at(1)) && isHex(s.at(2))) {
					return s.fail()
				}
				b := hexVal(s.at(1))<<4 | hexVal(s.at(2))
				if w == 0 {
					w = width(b)
					if w == 0 {
						return s.fail()
					}
				} else if b&0xC0 != 0x80 {
					return s.fail()
				}
				s.skip()
				s.skip()
				s.skip()
				if w--; w == 0 {
					break
				}
				if s.at(0) != '%' {
					return s.fail()
				}
			}
		} else {
			s.skip()
		}
		if s.stop {
			return false
		}
		has = true
	}
	if !has {
		return s.fail() // "did not find expected tag URI"
	}
	return true
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'A' && c <= 'F' || c >= 'a' && c <= 'f' }
func hexVal(c byte) byte {
	switch {
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - '0'
}

func (s *scanner) scanBlockScalar() bool {
	s.skip() // '|' or '>'
	increment := 0
	if c := s.at(0); c == '+' || c == '-' {
		s.skip()
		if d := s.at(0); d >= '0' && d <= '9' {
			if d == '0' {
				return s.fail()
			}
			increment = int(d - '0')
			s.skip()
		}
	} else if c >= '0' && c <= '9' {
		if c == '0' {
			return s.fail()
		}
		increment = int(c - '0')
		s.skip()
		if d := s.at(0); d == '+' || d == '-' {
			s.skip()
		}
	}
	for s.isBlank(0) {
		s.skip()
	}
	if s.at(0) == '#' {
		for !s.isBreakZ(0) {
			s.skip()
			if s.stop {
				return false
			}
		}
	}
	if !s.isBreakZ(0) {
		return s.fail() // "did not find expected comment or line break"
	}
	if s.isBreak(0) {
		s.skipLine()
	}
	indent := 0
	if increment > 0 {
		if s.indent >= 0 {
			indent = s.indent + increment
		} else {
			indent = increment
		}
	}
	if !s.scanBlockScalarBreaks(&indent) {
		return false
	}
	for s.m.col == indent && !s.isZ(0) {
		for !s.isBreakZ(0) {
			s.skip()
			if s.stop {
				return false
			}
		}
		s.skipLine()
		if !s.scanBlockScalarBreaks(&indent) {
			return false
		}
	}
	return true
}

func (s *scanner) scanBlockScalarBreaks(indent *int) bool {
	maxIndent := 0
	for {
		for (*indent == 0 || s.m.col < *indent) && s.at(0) == ' ' {
			s.skip()
		}
		if s.m.col > maxIndent {
			maxIndent = s.m.col
		}
		if (*indent == 0 || s.m.col < *indent) && s.at(0) == '\t' {
			return s.fail() // "found a tab character where an indentation space is expected"
		}
		if !s.isBreak(0) {
			break
		}
		s.skipLine()
	}
	if *indent == 0 {
		*indent = maxIndent
		if *indent < s.indent+1 {
			*indent = s.indent + 1
		}
		if *indent < 1 {
			*indent = 1
		}
	}
	return true
}

func (s *scanner) scanFlowScalar(single bool) bool {
	s.skip() // the opening quote
	for {
		if s.m.col == 0 && s.isDocIndicator() {
			return s.fail() // "found unexpected document indicator"
		}
		if s.isZ(0) {
			return s.fail() // "found unexpected end of stream"
		}
		for !s.isBlankZ(0) {
			c := s.at(0)
			if single && c == '\'' && s.at(1) == '\'' {
				s.skip()
				s.skip()
			} else if single && c == '\'' {
				break
			} else if !single && c == '"' {
				break
			} else if !single && c == '\\' && s.isBreak(1) {
				s.skip()
				s.skipLine()
				break
			} else if !single && c == '\\' {
				n := 0
				switch s.at(1) {
				case '0', 'a', 'b', 't', '\t', 'n', 'v', 'f', 'r', 'e', ' ', '"', '\'', '\\', 'N', '_', 'L', 'P':
				case 'x':
					n = 2
				case 'u':
					n = 4
				case 'U':
					n = 8
				default:
					return s.fail() // "found unknown escape character"
				}
				s.skip()
				s.skip()
				if n > 0 {
					v := 0
					for k := 0; k < n; k++ {
						if !isHex(s.at(k)) {
							return s.fail()
						}
						v = v<<4 | int(hexVal(s.at(k)))
					}
					if v >= 0xD800 && v <= 0xDFFF || v > 0x10FFFF {
						return s.fail() // "found invalid Unicode character escape code"
					}
					for k := 0; k < n; k++ {
						s.skip()
					}
				}
			} else {
				s.skip()
			}
			if s.stop {
				return false
			}
		}
		if single && s.at(0) == '\'' || !single && s.at(0) == '"' {
			break
		}
		for s.isBlank(0) || s.isBreak(0) {
			if s.isBlank(0) {
				s.skip()
			} else {
				s.skipLine()
			}
		}
	}
	s.skip() // the closing quote
	return !s.stop
}

func (s *scanner) scanPlainScalar() bool {
	indent := s.indent + 1
	leadingBlanks := false
	for {
		if s.m.col == 0 && s.isDocIndicator() {
			break
		}
		if s.at(0) == '#' {
			break
		}
		for !s.isBlankZ(0) {
			c := s.at(0)
			if c == ':' && s.isBlankZ(1) ||
				s.flowLevel > 0 && (c == ',' || c == '?' || c == '[' || c == ']' || c == '{' || c == '}') {
				break
			}
			leadingBlanks = false
			s.skip()
			if s.stop {
				return false
			}
		}
		if !(s.isBlank(0) || s.isBreak(0)) {
			break
		}
		for s.isBlank(0) || s.isBreak(0) {
			if s.isBlank(0) {
				if leadingBlanks && s.m.col < indent && s.at(0) == '\t' {
					return s.fail() // "found a tab character that violates indentation"
				}
				s.skip()
			} else {
				s.skipLine()
				leadingBlanks = true
			}
		}
		if s.flowLevel == 0 && s.m.col < indent {
			break
		}
	}
	if leadingBlanks {
		s.simpleKeyAllowed = true
	}
	return true
}
