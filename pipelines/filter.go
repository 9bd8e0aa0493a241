package pipelines

import (
	"strconv"

	"github.com/warpflow/warpflow/counters"

	"github.com/warpflow/warpflow/rings"
	"go.yaml.in/yaml/v3"
)

// filterKind is the built-in "filter" stage: an ordered ACL over the
// metadata the parse stage wrote (it never reads packet bytes). The first
// matching rule's action decides; packets no rule matches take the default.
//
//	type: filter
//	default: accept              # accept | drop:<reason> | <stage>
//	rules:
//	  - {proto: tcp, dst_port: 23, action: "drop:telnet"}
//	  - {src: [10.0.0.0/8, 2001:db8::/32], dst_port: 1000-2000, action: accept}
//	  - {vlan: [none, 10-20], tcp_flags: "syn,!ack", action: other-stage}
//	  - {class: malformed, action: "drop:malformed"}
//
// Match fields (all optional; a rule without any matches everything; most
// take a value or a list, meaning any of them):
//
//   - proto: tcp, udp, icmp, icmpv6, sctp, gre, esp, ah, igmp or a number
//     (the IP protocol, IPv4 or IPv6), or ipv4, ipv6, arp (the L3 kind).
//   - src, dst: addresses or CIDR prefixes. A prefix only matches packets of
//     its own family.
//   - src_port, dst_port: N or LO-HI. Only TCP, UDP, SCTP, DCCP and UDP-Lite
//     packets whose L4 header was parsed have ports.
//   - vlan: the outer VLAN id, N or LO-HI in 0-4095; none for untagged.
//   - tcp_flags: "syn,!ack": flags (fin syn rst psh ack urg ece cwr) that must
//     be set, or clear with '!'. Only TCP packets with a parsed header match.
//   - class: a rings.Class name, or malformed for every class that says the
//     packet is broken (all but unparsed, ok and unknown_l3).
//   - fragment: true matches IP fragments, false everything else.
//   - ct: new, established, related, invalid, untracked: the state a
//     conntrack stage before this filter gave the packet (rings.Meta.CT;
//     untracked when none did), Linux's ct state.
//   - ct_dir: original or reply: the packet's direction in its flow. Only
//     new, established and related packets have one: ct_dir matches no
//     untracked or invalid packet, as Linux's ct direction.
//
// Edge 0 is accept (the stage's next); each distinct other target gets one
// edge, in order of first use (default first). Build compiles the rules
// into a classifier (design in filter_classify.go: rules grouped by which
// fields they constrain narrowly and by address family, one HyperSplit-style
// decision tree per group over an 11-integer packet key, each tree behind
// bitmap gates that skip it in a load or two when no rule in it can match,
// and pre-gates, the trees' first gates merged by dimension, that send a
// packet no rule can match to the default before any tree; leaves of
// usually at most 3 rules, first match kept by rule index) shared
// read-only by every worker; each worker's instance keeps plain per-rule
// hit counters.
//
// What the gates and pre-gates save, and what a build costs:
// BENCHMARKS.md, "The filter's gates and pre-gates".
var filterKind = Kind{Name: "filter", Build: buildFilter, Counters: []counters.Decl{filterRuleDecl}}

// filterRuleDecl is a filter's one family of counters: its hits per rule,
// keyed by the rule's index, and "default" first (where no rule matched).
var filterRuleDecl = counters.Decl{Name: "rule", Kind: counters.Counter, Unit: "packets", Bytes: true, Label: "rule",
	Help: "Packets that a filter's rule matched first (rule: its index from 0; default: none matched)."}

// filterRuleSeries is how many rules have a metric series of their own;
// the rest share one (counters.OtherKey), so a 100,000-rule ACL makes 258
// series, not 100,001. The stats show every rule.
const filterRuleSeries = 256

// filterOptions are the stage's options as written.
type filterOptions struct {
	Default yaml.Node `yaml:"default"` // Kind 0 when absent
	Rules   yaml.Node `yaml:"rules"`
}

func buildFilter(c *BuildContext) Template {
	var o filterOptions
	if !c.Decode(&o) {
		return nil
	}
	ok := true
	var rules []filterRule
	var pos []rulePos
	if o.Rules.Kind != 0 {
		if o.Rules.Kind != yaml.SequenceNode {
			c.Errorf(&o.Rules, "rules: want a list of rules")
			ok = false
		} else {
			rules = make([]filterRule, 0, len(o.Rules.Content))
			pos = make([]rulePos, 0, len(o.Rules.Content))
			for _, n := range o.Rules.Content {
				r, good := parseFilterRule(c, n)
				ok = ok && good
				rules = append(rules, r)
				pos = append(pos, rulePos{line: int32(n.Line), col: int32(n.Column), accept: r.action == Target{}})
			}
		}
	}
	def := Target{}
	if o.Default.Kind != 0 {
		t, good := parseAction(c, &o.Default)
		def, ok = t, ok && good
	}
	next, hasNext := c.Next()
	if !ok || !hasNext {
		// A missing next edge is reported by the compiler.
		return nil
	}

	t, bad := newFilterTemplate(rules, def, next)
	if bad != nil {
		c.Errorf(&yaml.Node{Line: bad.Pos.Line, Column: bad.Pos.Col},
			"action %s: too many distinct filter actions (at most %d)", bad, MaxEdges-1)
		return nil
	}
	t.keepForKernel(rules, pos) // the kernel half's input (offload.go)
	return t
}

// newFilterTemplate assigns edges (0 = accept = next, then one per distinct
// target in order of first use, default first) and compiles the rules. It
// returns the first target that did not fit in MaxEdges edges, if any.
func newFilterTemplate(rules []filterRule, def, next Target) (*filterTemplate, *Target) {
	t := &filterTemplate{edges: []Target{next}, ruleEdge: make([]Edge, len(rules)+1)}
	seen := map[string]Edge{next.String(): 0}
	var bad *Target
	edgeOf := func(tg Target) Edge {
		if tg == (Target{}) {
			return 0
		}
		if e, found := seen[tg.String()]; found {
			return e
		}
		if len(t.edges) >= MaxEdges {
			if bad == nil {
				bad = &tg
			}
			return 0
		}
		e := Edge(len(t.edges))
		seen[tg.String()] = e
		t.edges = append(t.edges, tg)
		return e
	}
	t.ruleEdge[len(rules)] = edgeOf(def)
	for i := range rules {
		t.ruleEdge[i] = edgeOf(rules[i].action)
	}
	if bad != nil {
		return nil, bad
	}
	t.cls = buildClassifier(rules)
	for i := range rules {
		t.usesCT = t.usesCT || rules[i].hasCT()
	}
	keys := make([]string, len(rules)+1)
	keys[0] = "default"
	for i := range rules {
		keys[1+i] = strconv.Itoa(i)
	}
	fam := counters.Keyed(filterRuleDecl, keys)
	if len(rules) > filterRuleSeries {
		fam.Fold = 1 + filterRuleSeries
	}
	t.counters = counters.NewLayout(fam)
	return t, nil
}

// filterTemplate is a compiled filter: immutable, shared by all workers.
type filterTemplate struct {
	edges    []Target
	cls      *filterClassifier
	ruleEdge []Edge           // per rule, then the default's at index len(rules)
	counters *counters.Layout // rule: default, then rule 0, 1, ...
	kernel   kernelInput
	usesCT   bool // some rule matches ct or ct_dir
}

func (t *filterTemplate) Edges() []Target { return t.edges }

// Counters implements CountedTemplate.
func (t *filterTemplate) Counters() *counters.Layout { return t.counters }

func (t *filterTemplate) NewInstance() Stage {
	n := len(t.ruleEdge)
	return &filterStage{t: t, pkts: make([]uint64, n), bytes: make([]uint64, n), live: newLiveTable(n)}
}

// filterStage is one worker's filter: the shared classifier plus that
// worker's hit counters.
type filterStage struct {
	t     *filterTemplate
	pkts  []uint64 // per rule, then default
	bytes []uint64
	live  liveTable              // the published hits (PublishCounters)
	hits  [rings.MaxBatch]uint64 // preHits scratch (processCT's list of packets to look up)
	// hints, when set (SetFilterHints), holds each batch packet's rule as
	// another processor found it; Process then skips its own lookup.
	hints []uint32
}

// Process sends each packet to its first matching rule's edge. The
// pre-gates run first over the whole vector (preHits); packets they reject
// (most of an ACL's traffic) go to the default's edge without a tree walk,
// their hits summed in registers and added to the default's counters once
// per call.
func (s *filterStage) Process(b *rings.Batch, idx []uint16, next []Edge) {
	if s.hints != nil {
		s.processHinted(b, idx, next)
		return
	}
	t := s.t
	c := t.cls
	if c.preCTOnly {
		s.processCT(b, idx, next)
		return
	}
	next = next[:len(idx)]
	defEdge := t.ruleEdge[c.n]
	var defPkts, defBytes uint64
	hits := s.hits[:len(idx)]
	c.preHits(b.Meta, idx, hits)
	for k, i := range idx {
		n := uint64(b.Descs[i].Len)
		if hits[k]&1 == 0 {
			next[k] = defEdge
			defPkts++
			defBytes += n
			continue
		}
		r := c.lookupTrees(&b.Meta[i])
		next[k] = t.ruleEdge[r]
		s.pkts[r]++
		s.bytes[r] += n
		s.live.mark(int(r))
	}
	if defPkts != 0 {
		s.pkts[c.n] += defPkts
		s.bytes[c.n] += defBytes
		s.live.mark(int(c.n))
	}
}

// processCT is Process for a rule set whose only pre-gate tests the ct
// state (the stateful pipelines' ct: invalid, ct: new ...). Its first loop
// reads the gate's table itself, where preHits would take a pass of its
// own over the vector and a store and a load a packet, and makes no call
// (a call costs a loop its registers): it sends the packets the gate
// rejects to the default and notes the others, whose trees a second loop
// walks.
func (s *filterStage) processCT(b *rings.Batch, idx []uint16, next []Edge) {
	t := s.t
	c := t.cls
	next = next[:len(idx)]
	defEdge := t.ruleEdge[c.n]
	var defBytes uint64
	passed := 0 // s.hits[:passed] are the vector positions of the packets the gate passed
	// The metadata in a local: read through b, its slice is loaded again
	// after every store to next (which might alias b). (Descs too, in a
	// local, costs more: the loop runs out of registers.)
	meta := b.Meta
	for k, i := range idx {
		if c.preCT[meta[i].CT&(rings.CTStateMask|rings.CTReply)] != 0 {
			s.hits[passed] = uint64(k)
			passed++
			continue
		}
		next[k] = defEdge
		defBytes += uint64(b.Descs[i].Len)
	}
	for _, k := range s.hits[:passed] {
		i := idx[k]
		r := c.lookupTrees(&b.Meta[i])
		next[k] = t.ruleEdge[r]
		s.pkts[r]++
		s.bytes[r] += uint64(b.Descs[i].Len)
		s.live.mark(int(r))
	}
	if defPkts := uint64(len(idx) - passed); defPkts != 0 {
		s.pkts[c.n] += defPkts
		s.bytes[c.n] += defBytes
		s.live.mark(int(c.n))
	}
}

// Report implements Reporter: the default's hits first, then each
// rule's (the layout's order; the stage counts the default last).
func (s *filterStage) Report(dst []counters.Value) {
	n := len(s.pkts) - 1
	dst[0].Value += s.pkts[n]
	dst[0].Bytes += s.bytes[n]
	for i := range n {
		dst[1+i].Value += s.pkts[i]
		dst[1+i].Bytes += s.bytes[i]
	}
}

// PublishCounters implements LiveReporter: the rules hit since the last
// publish (at most the rules there are, usually a handful).
func (s *filterStage) PublishCounters() { s.live.publishPairs(s.pkts, s.bytes) }

// LiveReport implements LiveReporter: Report's counters as published.
func (s *filterStage) LiveReport(dst []counters.Value) {
	n := len(s.pkts) - 1
	s.live.addTo(dst[:1], n)
	s.live.addTo(dst[1:], 0)
}

var _ LiveReporter = (*filterStage)(nil)

// KeepsLength implements LengthKeeper: the filter only reads metadata.
func (s *filterStage) KeepsLength() bool { return true }
