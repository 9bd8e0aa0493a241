package pipelines

import (
	"strconv"

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
// counting is an add, never a map lookup. Report lists "total" first, then
// the non-zero counters of each key in the order protocol, vlan, class, by
// ascending value with "none" last. Edge: 0 next.
var countKind = Kind{Name: "count", Build: buildCount}

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
	return &countTemplate{keys: keys, edges: []Target{next}}
}

type countTemplate struct {
	keys  countKeys
	edges []Target
}

func (t *countTemplate) Edges() []Target { return t.edges }

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
	s := &countStage{all: make([]rwCounter, n), live: newLiveTable(n)}
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

// Report implements Reporter. It allocates key strings: it runs on the
// control path, not per packet.
func (s *countStage) Report(dst []Counter) []Counter {
	return s.report(dst, func(i int) (uint64, uint64) { return s.all[i].packets, s.all[i].bytes })
}

// PublishCounters implements LiveReporter: the keys counted since the
// last publish (at most a batch's worth).
func (s *countStage) PublishCounters() { s.live.publishCounters(s.all) }

// LiveReport implements LiveReporter: Report's counters as published.
func (s *countStage) LiveReport(dst []Counter) []Counter { return s.report(dst, s.live.load) }

// report lists the non-zero counters of all, read through get.
func (s *countStage) report(dst []Counter, get func(i int) (uint64, uint64)) []Counter {
	if p, b := get(0); p != 0 {
		dst = append(dst, Counter{Key: "total", Packets: p, Bytes: b})
	}
	for i := range s.proto {
		if p, b := get(s.protoAt + i); p != 0 {
			dst = append(dst, Counter{Key: "proto=" + countProtoName(i), Packets: p, Bytes: b})
		}
	}
	for i := range s.vlan {
		if p, b := get(s.vlanAt + i); p != 0 {
			name := "none"
			if i != countVLANNone {
				name = strconv.Itoa(i)
			}
			dst = append(dst, Counter{Key: "vlan=" + name, Packets: p, Bytes: b})
		}
	}
	for i := range s.class {
		if p, b := get(s.classAt + i); p != 0 {
			dst = append(dst, Counter{Key: "class=" + rings.Class(i).String(), Packets: p, Bytes: b})
		}
	}
	return dst
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
