package pipelines

import (
	"strconv"

	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/rings"
	"go.yaml.in/yaml/v3"
)

// countKind is the built-in "count" stage: packet and byte counters, in
// total and optionally by key.
//
// Option: by: [protocol, vlan, class] (any subset; empty or absent counts
// only the total). Keys:
//   - protocol: the IP protocol of IPv4/IPv6 packets ("proto=tcp",
//     "proto=47"); packets that are not IP count as "proto=none".
//   - vlan: the outer VLAN ID ("vlan=10"), or "vlan=none" for untagged.
//   - class: the parse class ("class=ok", "class=truncated").
//
// Counters live in dense per-instance arrays indexed by the key's value, so
// counting is an add, never a map lookup. The families, in report order:
// total; proto (the named protocols by number, then "none", then the
// numbers without a name, which share one metric series); vlan (the IDs,
// then "none": in the stats only, 4097 keys are too many for series); and
// class. Edge: 0 next.
var countKind = Kind{Name: "count", Build: buildCount, Counters: []counters.Decl{countTotalDecl, countProtoDecl, countVLANDecl, countClassDecl}}

// The count stage's families.
var (
	countTotalDecl = counters.Decl{Name: "total", Kind: counters.Counter, Unit: "packets", Bytes: true,
		Help: "Packets that a count stage counted."}
	countProtoDecl = counters.Decl{Name: "proto", Kind: counters.Counter, Unit: "packets", Bytes: true, Label: "proto",
		Help: "Packets that a count stage counted, by IP protocol (none: not IP; a protocol without a name is its number, in metrics summed as other)."}
	countVLANDecl = counters.Decl{Name: "vlan", Kind: counters.Counter, Unit: "packets", Bytes: true, Label: "vlan", StatsOnly: true,
		Help: "Packets that a count stage counted, by outer VLAN ID (none: untagged)."}
	countClassDecl = counters.Decl{Name: "class", Kind: counters.Counter, Unit: "packets", Bytes: true, Label: "class",
		Help: "Packets that a count stage counted, by the parse stage's class."}
)

// countProtoKeys is the proto family's keys and countProtoAt, by protocol
// number (countProtoNone for none), each protocol's index among them:
// named protocols first, so that the ones without a name, folded into one
// metric series from countProtoFold on, come last.
var countProtoKeys, countProtoAt, countProtoFold = func() (keys []string, at [countProtoNone + 1]int, fold int) {
	var named, unnamed []int
	for p := 0; p < countProtoNone; p++ {
		if countProtoName(p) != strconv.Itoa(p) {
			named = append(named, p)
		} else {
			unnamed = append(unnamed, p)
		}
	}
	order := append(append(named, countProtoNone), unnamed...)
	for i, p := range order {
		keys = append(keys, countProtoName(p))
		at[p] = i
	}
	return keys, at, len(named) + 1
}()

type countOptions struct {
	By yaml.Node `yaml:"by"`
}

// countKeys says which keys a count stage counts by.
type countKeys struct{ proto, vlan, class bool }

func buildCount(c *BuildContext) Template {
	var o countOptions
	if !c.Decode(&o) {
		return nil
	}
	var keys countKeys
	ok := true
	if by := c.Option("by"); by != nil && !(by.Kind == yaml.ScalarNode && by.Tag == "!!null") {
		if by.Kind != yaml.SequenceNode {
			c.Errorf(by, "by: want a list of protocol, vlan, class")
			return nil
		}
		for _, n := range by.Content {
			var seen *bool
			switch n.Value {
			case "protocol":
				seen = &keys.proto
			case "vlan":
				seen = &keys.vlan
			case "class":
				seen = &keys.class
			}
			switch {
			case n.Kind != yaml.ScalarNode || seen == nil:
				c.Errorf(n, "by: unknown key %q (known: protocol, vlan, class)", n.Value)
				ok = false
			case *seen:
				c.Errorf(n, "by: %s listed twice", n.Value)
				ok = false
			default:
				*seen = true
			}
		}
	}
	next, hasNext := rwNextTarget(c)
	if !ok || !hasNext {
		return nil
	}
	fams := []counters.Family{counters.Single(countTotalDecl)}
	if keys.proto {
		f := counters.Keyed(countProtoDecl, countProtoKeys)
		f.Fold = countProtoFold
		fams = append(fams, f)
	}
	if keys.vlan {
		vk := make([]string, countVLANNone+1)
		for i := range countVLANNone {
			vk[i] = strconv.Itoa(i)
		}
		vk[countVLANNone] = "none"
		fams = append(fams, counters.Keyed(countVLANDecl, vk))
	}
	if keys.class {
		ck := make([]string, rings.NumClasses)
		for i := range ck {
			ck[i] = rings.Class(i).String()
		}
		fams = append(fams, counters.Keyed(countClassDecl, ck))
	}
	return &countTemplate{keys: keys, edges: []Target{next}, counters: counters.NewLayout(fams...)}
}

type countTemplate struct {
	keys     countKeys
	edges    []Target
	counters *counters.Layout // total, then proto, vlan, class as counted
}

func (t *countTemplate) Edges() []Target { return t.edges }

// Counters implements CountedTemplate.
func (t *countTemplate) Counters() *counters.Layout { return t.counters }

// NewInstance allocates only the arrays of the keys counted by, as
// windows of one table (total first) that the live side publishes.
func (t *countTemplate) NewInstance() Stage {
	n := 1
	if t.keys.proto {
		n += countProtoNone + 1
	}
	if t.keys.vlan {
		n += countVLANNone + 1
	}
	if t.keys.class {
		n += rings.NumClasses
	}
	s := &countStage{all: make([]rwCounter, n), live: newLiveTable(n), layout: t.counters}
	s.total = &s.all[0]
	off := 1
	window := func(w int) ([]rwCounter, int) {
		at := off
		off += w
		return s.all[at:off:off], at
	}
	if t.keys.proto {
		s.proto, s.protoAt = window(countProtoNone + 1)
	}
	if t.keys.vlan {
		s.vlan, s.vlanAt = window(countVLANNone + 1)
	}
	if t.keys.class {
		s.class, s.classAt = window(rings.NumClasses)
	}
	return s
}

// Dense index of the "none" entry of the protocol and VLAN arrays.
const (
	countProtoNone = 256
	countVLANNone  = 4096
)

// countStage is one worker's count instance. A nil array means the key is
// not counted.
type countStage struct {
	all   []rwCounter // total, then the windows below
	total *rwCounter  // &all[0]
	proto []rwCounter // 256 protocols + none
	vlan  []rwCounter // 4096 IDs + none
	class []rwCounter // rings.NumClasses
	// protoAt, vlanAt and classAt are the windows' offsets in all.
	protoAt, vlanAt, classAt int
	live                     liveTable // all, published (PublishCounters)
	layout                   *counters.Layout
}

// Process implements Stage.
func (s *countStage) Process(b *rings.Batch, idx []uint16, next []Edge) {
	if s.proto != nil && s.vlan == nil && s.class == nil {
		clear(next[:len(idx)])
		s.processProto(b, idx)
		return
	}
	for k, i := range idx {
		next[k] = 0
		n := b.Descs[i].Len
		m := &b.Meta[i]
		s.total.add(n)
		if s.proto != nil {
			p := countProtoNone
			if m.Flags&(rings.FlagIPv4|rings.FlagIPv6) != 0 {
				p = int(m.IPProto)
			}
			s.proto[p].add(n)
			s.live.mark(s.protoAt + p)
		}
		if s.vlan != nil {
			v := countVLANNone
			if m.NumVLANs > 0 {
				v = int(m.VLANs[0] & 0xfff)
			}
			s.vlan[v].add(n)
			s.live.mark(s.vlanAt + v)
		}
		if s.class != nil && int(m.Class) < len(s.class) {
			s.class[m.Class].add(n)
			s.live.mark(s.classAt + int(m.Class))
		}
	}
	if len(idx) > 0 {
		s.live.mark(0)
	}
}

// processProto is Process for by: [protocol]. A run of packets of one
// protocol (the common case: a batch of one flow or one protocol) adds up
// in registers and touches its counter once, rather than making every
// packet wait on the previous one's store to the same counter.
func (s *countStage) processProto(b *rings.Batch, idx []uint16) {
	cur := -1
	var pkts, bytes, total uint64
	for _, i := range idx {
		n := uint64(b.Descs[i].Len)
		m := &b.Meta[i]
		p := countProtoNone
		if m.Flags&(rings.FlagIPv4|rings.FlagIPv6) != 0 {
			p = int(m.IPProto)
		}
		total += n
		if p != cur {
			if cur >= 0 {
				s.proto[cur].packets += pkts
				s.proto[cur].bytes += bytes
				s.live.mark(s.protoAt + cur)
			}
			cur, pkts, bytes = p, 0, 0
		}
		pkts++
		bytes += n
	}
	if cur >= 0 {
		s.proto[cur].packets += pkts
		s.proto[cur].bytes += bytes
		s.live.mark(s.protoAt + cur)
		s.live.mark(0)
	}
	s.total.packets += uint64(len(idx))
	s.total.bytes += total
}

// Report implements Reporter.
func (s *countStage) Report(dst []counters.Value) {
	s.report(dst, func(i int) (uint64, uint64) { return s.all[i].packets, s.all[i].bytes })
}

// PublishCounters implements LiveReporter: the keys counted since the
// last publish (at most a batch's worth).
func (s *countStage) PublishCounters() { s.live.publishCounters(s.all) }

// LiveReport implements LiveReporter: Report's counters as published.
func (s *countStage) LiveReport(dst []counters.Value) { s.report(dst, s.live.load) }

// report adds the counters of all, read through get, into dst in the
// layout's order (the stage keeps protocols by number, the layout named
// ones first).
func (s *countStage) report(dst []counters.Value, get func(i int) (uint64, uint64)) {
	add := func(at, i int) {
		p, b := get(i)
		dst[at].Value += p
		dst[at].Bytes += b
	}
	add(0, 0)
	at := 1
	if s.proto != nil {
		for p := range s.proto {
			add(at+countProtoAt[p], s.protoAt+p)
		}
		at += len(s.proto)
	}
	for i := range s.vlan {
		add(at+i, s.vlanAt+i)
	}
	at += len(s.vlan)
	for i := range s.class {
		add(at+i, s.classAt+i)
	}
}

var _ LiveReporter = (*countStage)(nil)

// countProtoName names IP protocol p in counter keys: the name filter rules
// use for it (protoNames), else the number.
func countProtoName(p int) string {
	if p == countProtoNone {
		return "none"
	}
	for name, n := range protoNames {
		if int(n) == p {
			return name
		}
	}
	return strconv.Itoa(p)
}

// KeepsLength implements LengthKeeper: counting only reads.
func (s *countStage) KeepsLength() bool { return true }
