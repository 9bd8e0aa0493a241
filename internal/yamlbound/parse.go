package yamlbound

// The parser half of the port: yaml.v3's parserc.go state machine, which
// turns tokens into events, with each event that becomes a yaml.Node
// (document, scalar, sequence, mapping; an empty value is a scalar)
// counted instead of emitted, and the open collections counted as depth.

type state uint8

const (
	sStreamStart state = iota
	sImplicitDocumentStart
	sDocumentStart
	sDocumentContent
	sDocumentEnd
	sBlockNode
	sBlockNodeOrIndentlessSequence
	sFlowNode
	sBlockSequenceFirstEntry
	sBlockSequenceEntry
	sIndentlessSequenceEntry
	sBlockMappingFirstKey
	sBlockMappingKey
	sBlockMappingValue
	sFlowSequenceFirstEntry
	sFlowSequenceEntry
	sFlowSequenceEntryMappingKey
	sFlowSequenceEntryMappingValue
	sFlowSequenceEntryMappingEnd
	sFlowMappingFirstKey
	sFlowMappingKey
	sFlowMappingValue
	sFlowMappingEmptyValue
	sEnd
)

type parser struct {
	s      *scanner
	state  state
	states []state

	nodes, depth, maxDepth, docs int
	secondDoc                    mark // where the second document starts
}

// node counts one node that starts at m.
func (p *parser) node(m mark) bool {
	p.nodes++
	if p.nodes > p.s.lim.MaxNodes {
		return p.s.refuse(m, LimitNodes, nodesMsg(p.s.lim.MaxNodes))
	}
	return true
}

// open counts a collection node that starts at m and goes one level in.
func (p *parser) open(m mark) bool {
	if !p.node(m) {
		return false
	}
	p.depth++
	if p.depth > p.maxDepth {
		p.maxDepth = p.depth
	}
	if p.depth > p.s.lim.MaxDepth {
		return p.s.refuse(m, LimitDepth, depthMsg(p.s.lim.MaxDepth))
	}
	return true
}

func (p *parser) close() { p.depth-- }

func (p *parser) push(st state) bool {
	if len(p.states) > 2*p.s.lim.MaxDepth+8 {
		// Each open collection pushes at most two states; this is the
		// depth check's backstop, never reached before it.
		return p.s.refuse(p.s.m, LimitDepth, depthMsg(p.s.lim.MaxDepth))
	}
	p.states = append(p.states, st)
	return true
}

func (p *parser) pop() {
	p.state = p.states[len(p.states)-1]
	p.states = p.states[:len(p.states)-1]
}

// run drives the state machine to the end of the stream or the first
// stop.
func (p *parser) run() {
	for p.state != sEnd && !p.s.stop {
		if !p.step() {
			return
		}
	}
}

func (p *parser) step() bool {
	switch p.state {
	case sStreamStart:
		t := p.s.peek()
		if t == nil {
			return false
		}
		if t.typ != tStreamStart {
			return p.s.failAt(t.m)
		}
		p.state = sImplicitDocumentStart
		p.s.take()
		return true
	case sImplicitDocumentStart:
		return p.documentStart(true)
	case sDocumentStart:
		return p.documentStart(false)
	case sDocumentContent:
		t := p.s.peek()
		if t == nil {
			return false
		}
		switch t.typ {
		case tDirective, tDocStart, tDocEnd, tStreamEnd:
			p.pop()
			return p.node(t.m) // the empty document's null
		}
		return p.parseNode(true, false)
	case sDocumentEnd:
		t := p.s.peek()
		if t == nil {
			return false
		}
		if t.typ == tDocEnd {
			p.s.take()
		}
		p.state = sDocumentStart
		return true
	case sBlockNode:
		return p.parseNode(true, false)
	case sBlockNodeOrIndentlessSequence:
		return p.parseNode(true, true)
	case sFlowNode:
		return p.parseNode(false, false)
	case sBlockSequenceFirstEntry:
		p.s.take()
		return p.blockSequenceEntry()
	case sBlockSequenceEntry:
		return p.blockSequenceEntry()
	case sIndentlessSequenceEntry:
		return p.indentlessSequenceEntry()
	case sBlockMappingFirstKey:
		p.s.take()
		return p.blockMappingKey()
	case sBlockMappingKey:
		return p.blockMappingKey()
	case sBlockMappingValue:
		return p.blockMappingValue()
	case sFlowSequenceFirstEntry:
		p.s.take()
		return p.flowSequenceEntry(true)
	case sFlowSequenceEntry:
		return p.flowSequenceEntry(false)
	case sFlowSequenceEntryMappingKey:
		return p.flowSequenceEntryMappingKey()
	case sFlowSequenceEntryMappingValue:
		return p.flowSequenceEntryMappingValue()
	case sFlowSequenceEntryMappingEnd:
		if p.s.peek() == nil {
			return false
		}
		p.close()
		p.state = sFlowSequenceEntry
		return true
	case sFlowMappingFirstKey:
		p.s.take()
		return p.flowMappingKey(true)
	case sFlowMappingKey:
		return p.flowMappingKey(false)
	case sFlowMappingValue:
		return p.flowMappingValue(false)
	case sFlowMappingEmptyValue:
		return p.flowMappingValue(true)
	}
	return p.s.fail()
}

func (p *parser) documentStart(implicit bool) bool {
	t := p.s.peek()
	if t == nil {
		return false
	}
	if !implicit {
		for t.typ == tDocEnd {
			p.s.take()
			if t = p.s.peek(); t == nil {
				return false
			}
		}
	}
	if implicit && t.typ != tDirective && t.typ != tDocStart && t.typ != tStreamEnd {
		if !p.document(t.m) || !p.push(sDocumentEnd) {
			return false
		}
		p.state = sBlockNode
		return true
	}
	if t.typ == tStreamEnd {
		p.state = sEnd
		p.s.take()
		return true
	}
	m := t.m
	for t.typ == tDirective {
		p.s.take()
		if t = p.s.peek(); t == nil {
			return false
		}
	}
	if t.typ != tDocStart {
		return p.s.failAt(t.m) // "did not find expected <document start>"
	}
	if !p.document(m) || !p.push(sDocumentEnd) {
		return false
	}
	p.state = sDocumentContent
	p.s.take()
	return true
}

// document counts a document node.
func (p *parser) document(m mark) bool {
	p.docs++
	if p.docs == 2 {
		p.secondDoc = m
	}
	return p.node(m)
}

func (p *parser) parseNode(block, indentlessSequence bool) bool {
	t := p.s.peek()
	if t == nil {
		return false
	}
	m := t.m
	// An alias or an anchor never reaches here: the scanner refuses it.
	tagged := t.typ == tTag
	if tagged {
		p.s.take()
		if t = p.s.peek(); t == nil {
			return false
		}
	}
	if indentlessSequence && t.typ == tBlockEntry {
		p.state = sIndentlessSequenceEntry
		return p.open(m)
	}
	switch {
	case t.typ == tScalar:
		p.pop()
		p.s.take()
		return p.node(m)
	case t.typ == tFlowSeqStart:
		p.state = sFlowSequenceFirstEntry
		return p.open(m)
	case t.typ == tFlowMapStart:
		p.state = sFlowMappingFirstKey
		return p.open(m)
	case block && t.typ == tBlockSeqStart:
		p.state = sBlockSequenceFirstEntry
		return p.open(m)
	case block && t.typ == tBlockMapStart:
		p.state = sBlockMappingFirstKey
		return p.open(m)
	case tagged: // a tag with no content: an empty scalar
		p.pop()
		return p.node(m)
	}
	return p.s.failAt(t.m) // "did not find expected node content"
}

func (p *parser) blockSequenceEntry() bool {
	t := p.s.peek()
	if t == nil {
		return false
	}
	if t.typ == tBlockEntry {
		m := t.m
		p.s.take()
		if t = p.s.peek(); t == nil {
			return false
		}
		if t.typ != tBlockEntry && t.typ != tBlockEnd {
			return p.push(sBlockSequenceEntry) && p.parseNode(true, false)
		}
		p.state = sBlockSequenceEntry
		return p.node(m)
	}
	if t.typ == tBlockEnd {
		p.pop()
		p.close()
		p.s.take()
		return true
	}
	return p.s.failAt(t.m) // "did not find expected '-' indicator"
}

func (p *parser) indentlessSequenceEntry() bool {
	t := p.s.peek()
	if t == nil {
		return false
	}
	if t.typ == tBlockEntry {
		m := t.m
		p.s.take()
		if t = p.s.peek(); t == nil {
			return false
		}
		if t.typ != tBlockEntry && t.typ != tKey && t.typ != tValue && t.typ != tBlockEnd {
			return p.push(sIndentlessSequenceEntry) && p.parseNode(true, false)
		}
		p.state = sIndentlessSequenceEntry
		return p.node(m)
	}
	p.pop()
	p.close()
	return true
}

func (p *parser) blockMappingKey() bool {
	t := p.s.peek()
	if t == nil {
		return false
	}
	if t.typ == tKey {
		m := t.m
		p.s.take()
		if t = p.s.peek(); t == nil {
			return false
		}
		if t.typ != tKey && t.typ != tValue && t.typ != tBlockEnd {
			return p.push(sBlockMappingValue) && p.parseNode(true, true)
		}
		p.state = sBlockMappingValue
		return p.node(m)
	}
	if t.typ == tBlockEnd {
		p.pop()
		p.close()
		p.s.take()
		return true
	}
	return p.s.failAt(t.m) // "did not find expected key"
}

func (p *parser) blockMappingValue() bool {
	t := p.s.peek()
	if t == nil {
		return false
	}
	if t.typ == tValue {
		m := t.m
		p.s.take()
		if t = p.s.peek(); t == nil {
			return false
		}
		if t.typ != tKey && t.typ != tValue && t.typ != tBlockEnd {
			return p.push(sBlockMappingKey) && p.parseNode(true, true)
		}
		p.state = sBlockMappingKey
		return p.node(m)
	}
	p.state = sBlockMappingKey
	return p.node(t.m)
}

func (p *parser) flowSequenceEntry(first bool) bool {
	t := p.s.peek()
	if t == nil {
		return false
	}
	if t.typ != tFlowSeqEnd {
		if !first {
			if t.typ != tFlowEntry {
				return p.s.failAt(t.m) // "did not find expected ',' or ']'"
			}
			p.s.take()
			if t = p.s.peek(); t == nil {
				return false
			}
		}
		if t.typ == tKey {
			m := t.m
			p.state = sFlowSequenceEntryMappingKey
			p.s.take()
			return p.open(m) // a single-pair mapping
		} else if t.typ != tFlowSeqEnd {
			return p.push(sFlowSequenceEntry) && p.parseNode(false, false)
		}
	}
	p.pop()
	p.close()
	p.s.take()
	return true
}

func (p *parser) flowSequenceEntryMappingKey() bool {
	t := p.s.peek()
	if t == nil {
		return false
	}
	if t.typ != tValue && t.typ != tFlowEntry && t.typ != tFlowSeqEnd {
		return p.push(sFlowSequenceEntryMappingValue) && p.parseNode(false, false)
	}
	m := t.m
	p.s.take()
	p.state = sFlowSequenceEntryMappingValue
	return p.node(m)
}

func (p *parser) flowSequenceEntryMappingValue() bool {
	t := p.s.peek()
	if t == nil {
		return false
	}
	if t.typ == tValue {
		p.s.take()
		if t = p.s.peek(); t == nil {
			return false
		}
		if t.typ != tFlowEntry && t.typ != tFlowSeqEnd {
			return p.push(sFlowSequenceEntryMappingEnd) && p.parseNode(false, false)
		}
	}
	p.state = sFlowSequenceEntryMappingEnd
	return p.node(t.m)
}

func (p *parser) flowMappingKey(first bool) bool {
	t := p.s.peek()
	if t == nil {
		return false
	}
	if t.typ != tFlowMapEnd {
		if !first {
			if t.typ != tFlowEntry {
				return p.s.failAt(t.m) // "did not find expected ',' or '}'"
			}
			p.s.take()
			if t = p.s.peek(); t == nil {
				return false
			}
		}
		if t.typ == tKey {
			p.s.take()
			if t = p.s.peek(); t == nil {
				return false
			}
			if t.typ != tValue && t.typ != tFlowEntry && t.typ != tFlowMapEnd {
				return p.push(sFlowMappingValue) && p.parseNode(false, false)
			}
			p.state = sFlowMappingValue
			return p.node(t.m)
		} else if t.typ != tFlowMapEnd {
			return p.push(sFlowMappingEmptyValue) && p.parseNode(false, false)
		}
	}
	p.pop()
	p.close()
	p.s.take()
	return true
}

func (p *parser) flowMappingValue(empty bool) bool {
	t := p.s.peek()
	if t == nil {
		return false
	}
	if empty {
		p.state = sFlowMappingKey
		return p.node(t.m)
	}
	if t.typ == tValue {
		p.s.take()
		if t = p.s.peek(); t == nil {
			return false
		}
		if t.typ != tFlowEntry && t.typ != tFlowMapEnd {
			return p.push(sFlowMappingKey) && p.parseNode(false, false)
		}
	}
	p.state = sFlowMappingKey
	return p.node(t.m)
}
