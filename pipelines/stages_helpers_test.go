package pipelines

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/rings"
	"go.yaml.in/yaml/v3"
)

// Helpers shared by the rewrite, balance, count and sample tests. They build
// stages straight from a YAML mapping (no compiler) and fill Meta the way the
// parse stage does, from gopacket's decode, so these tests do not depend on
// the parse stage's code.

// stBuild builds kind from the YAML mapping src (one stage's keys) as
// a stage followed by a stage named "next". It returns the template (nil on
// error) and the errors recorded.
func stBuild(t testing.TB, kind Kind, src string) (Template, *ErrorList) {
	t.Helper()
	c := stContext(t, kind, src, nil)
	tpl := kind.Build(c)
	if c.errs.Len() > 0 && tpl != nil {
		t.Errorf("build returned a template despite errors: %v", c.errs)
	}
	return tpl, c.errs
}

// stContext returns the BuildContext for the stage src of kind, followed by
// a stage named "next". Contexts made with the same prev share its sampler
// registry, like the stages of one pipeline.
func stContext(t testing.TB, kind Kind, src string, prev *BuildContext) *BuildContext {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatalf("bad test yaml: %v", err)
	}
	n := doc.Content[0]
	c := &BuildContext{
		Name:   "st",
		Kind:   kind.Name,
		File:   "test.yaml",
		Node:   n,
		next:   Target{Stage: "next"},
		hasNxt: true,
		errs:   &ErrorList{},
		common: []string{"name", "type", "next"},
	}
	if v := mappingValue(n, "name"); v != nil {
		c.Name = v.Value
	}
	if prev != nil {
		if prev.samplers == nil {
			prev.samplers = new([]SamplerInfo)
		}
		c.samplers, c.errs = prev.samplers, prev.errs
	}
	return c
}

// stMustBuild builds kind from src and fails the test on any error.
func stMustBuild(t testing.TB, kind Kind, src string) Template {
	t.Helper()
	tpl, errs := stBuild(t, kind, src)
	if errs.Len() > 0 || tpl == nil {
		t.Fatalf("build %q: %v", src, errs)
	}
	return tpl
}

// stWantBuildError builds kind from src and checks that it fails with an error
// mentioning want.
func stWantBuildError(t *testing.T, kind Kind, src, want string) {
	t.Helper()
	tpl, errs := stBuild(t, kind, src)
	if tpl != nil || errs.Len() == 0 {
		t.Fatalf("build %q: want error containing %q, got none", src, want)
	}
	if !strings.Contains(errs.Error(), want) {
		t.Fatalf("build %q: error %q does not mention %q", src, errs.Error(), want)
	}
	if errs.Errs[0].Pos.Line == 0 || errs.Errs[0].Pos.File != "test.yaml" {
		t.Fatalf("build %q: error without position: %+v", src, errs.Errs[0])
	}
}

// stArena returns a fresh default arena.
func stArena(t testing.TB) *rings.Arena {
	t.Helper()
	a, err := rings.NewArena(rings.DefaultArenaOptions())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// stFillBatch copies pkts into fresh frames of a and returns a batch holding
// them, with Meta filled by stMeta and Seq numbered from 0.
func stFillBatch(t testing.TB, a *rings.Arena, pkts [][]byte) *rings.Batch {
	t.Helper()
	b := rings.NewBatch(len(pkts), a)
	b.SetLen(len(pkts))
	for i, p := range pkts {
		addr, ok := a.Alloc()
		if !ok {
			t.Fatal("arena exhausted")
		}
		f := a.Frame(addr)
		off := int(addr) & (a.FrameSize() - 1)
		copy(f[off:], p)
		b.Descs[i] = rings.Desc{Addr: addr, Len: uint32(len(p))}
		b.Meta[i] = stMeta(p)
		b.Meta[i].Seq = uint64(i)
	}
	return b
}

// stRunAll runs st over every packet of b and returns the edges.
func stRunAll(st Stage, b *rings.Batch) []Edge {
	idx, next := stDense(b.Len())
	st.Process(b, idx, next)
	return next
}

// stDense returns the index vector of a whole batch of n packets (0 to
// n-1, as the graph hands a stage every packet) and an edge vector for it.
func stDense(n int) ([]uint16, []Edge) {
	idx := make([]uint16, n)
	for i := range idx {
		idx[i] = uint16(i)
	}
	return idx, make([]Edge, n)
}

// stMeta fills a Meta the way the parse stage does, from gopacket's decode.
func stMeta(p []byte) rings.Meta {
	var m rings.Meta
	m.Class = rings.ClassOK
	pkt := gopacket.NewPacket(p, layers.LayerTypeEthernet, gopacket.DecodeOptions{NoCopy: true, Lazy: false})
	off := 0
	for _, l := range pkt.Layers() {
		switch l := l.(type) {
		case *layers.Ethernet:
			m.EtherType = uint16(l.EthernetType)
		case *layers.Dot1Q:
			if m.NumVLANs < 2 {
				m.VLANs[m.NumVLANs] = l.VLANIdentifier
				m.NumVLANs++
			}
			m.EtherType = uint16(l.Type)
		case *layers.IPv4:
			m.Flags |= rings.FlagIPv4
			m.L3Off = uint16(off)
			m.IPProto = uint8(l.Protocol)
			m.TTL = l.TTL
			copy(m.SrcIP[:], l.SrcIP.To4())
			copy(m.DstIP[:], l.DstIP.To4())
			if l.Flags&layers.IPv4MoreFragments != 0 || l.FragOffset != 0 {
				m.Flags |= rings.FlagFragment
				if l.FragOffset == 0 {
					m.Flags |= rings.FlagFirstFrag
				}
			}
		case *layers.IPv6:
			m.Flags |= rings.FlagIPv6
			m.L3Off = uint16(off)
			m.IPProto = uint8(l.NextHeader)
			m.TTL = l.HopLimit
			copy(m.SrcIP[:], l.SrcIP)
			copy(m.DstIP[:], l.DstIP)
		case *layers.TCP:
			m.Flags |= rings.FlagL4
			m.L4Off = uint16(off)
			m.SrcPort, m.DstPort = uint16(l.SrcPort), uint16(l.DstPort)
		case *layers.UDP:
			m.Flags |= rings.FlagL4
			m.L4Off = uint16(off)
			m.SrcPort, m.DstPort = uint16(l.SrcPort), uint16(l.DstPort)
		case *layers.ICMPv4:
			m.Flags |= rings.FlagL4
			m.L4Off = uint16(off)
			m.SrcPort = binary.BigEndian.Uint16(l.LayerContents()[:2])
			if t := l.TypeCode.Type(); t == layers.ICMPv4TypeEchoRequest || t == layers.ICMPv4TypeEchoReply {
				m.DstPort = l.Id
			}
		case *layers.ARP:
			m.Flags |= rings.FlagARP
			m.L3Off = uint16(off)
		}
		off += len(l.LayerContents())
	}
	// gopacket does not decode the L4 header of a first fragment; the parse
	// stage does.
	if m.Flags&rings.FlagFirstFrag != 0 && (m.IPProto == 6 || m.IPProto == 17) {
		l4 := int(m.L3Off) + int(p[m.L3Off]&0xf)*4
		if l4+4 <= len(p) {
			m.Flags |= rings.FlagL4
			m.L4Off = uint16(l4)
			m.SrcPort, m.DstPort = binary.BigEndian.Uint16(p[l4:]), binary.BigEndian.Uint16(p[l4+2:])
		}
	}
	if m.Flags&(rings.FlagIPv4|rings.FlagIPv6|rings.FlagARP) == 0 {
		m.Class = rings.ClassUnknownL3
	}
	return m
}

// stIPEnd returns where the IP packet in p ends (before Ethernet padding), or
// len(p) for non-IP packets.
func stIPEnd(p []byte) int {
	m := stMeta(p)
	l3 := int(m.L3Off)
	switch {
	case m.Flags&rings.FlagIPv4 != 0:
		return l3 + int(binary.BigEndian.Uint16(p[l3+2:]))
	case m.Flags&rings.FlagIPv6 != 0:
		return l3 + 40 + int(binary.BigEndian.Uint16(p[l3+4:]))
	}
	return len(p)
}

// stSerialize builds a packet from ls with lengths fixed and checksums computed.
func stSerialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	for _, l := range ls {
		switch l := l.(type) {
		case *layers.TCP:
			l.SetNetworkLayerForChecksum(stNetLayer(ls))
		case *layers.UDP:
			l.SetNetworkLayerForChecksum(stNetLayer(ls))
		}
	}
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatalf("stSerialize: %v", err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

func stNetLayer(ls []gopacket.SerializableLayer) gopacket.NetworkLayer {
	for _, l := range ls {
		if n, ok := l.(gopacket.NetworkLayer); ok {
			return n
		}
	}
	return nil
}

// Counter is a stage counter as the tests compare them: its text key
// (counters.Group.Text: "total", "proto=tcp", "rule=3") and values.
type Counter struct {
	Key            string
	Packets, Bytes uint64
}

// stLayout is the counter layout of instance st (nil: it keeps none).
func stLayout(st Stage) *counters.Layout {
	switch s := st.(type) {
	case *filterStage:
		return s.t.counters
	case *countStage:
		return s.layout
	case *rewriteStage:
		return rewriteLayout
	case *sampleStage:
		return sampleLayout
	case *tkMark:
		return tkMarkLayout
	case *ctStage:
		return ctLayout
	case *natStage:
		return natLayout
	case *raStage:
		return raLayout
	}
	return nil
}

// counterList is a layout's values as a list of the non-zero counters,
// in layout order.
func counterList(l *counters.Layout, vals []counters.Value) []Counter {
	var out []Counter
	for _, g := range l.Groups(vals) {
		for _, kv := range g.Values {
			if kv.Value != 0 || kv.Bytes != 0 {
				out = append(out, Counter{Key: g.Text(kv), Packets: kv.Value, Bytes: kv.Bytes})
			}
		}
	}
	return out
}

// stReport is st's Report as a counter list (nil when st keeps none).
func stReport(st Stage) []Counter {
	r, ok := st.(Reporter)
	l := stLayout(st)
	if !ok || l == nil {
		return nil
	}
	vals := make([]counters.Value, l.Len())
	r.Report(vals)
	return counterList(l, vals)
}

// StageCounter is a Counter of one stage, as the runner tests compare
// them.
type StageCounter struct {
	Stage string
	Counter
}

// runnerList is every stage's counters of r (live: as published) as a
// list of the non-zero ones, in node order.
func runnerList(r *Runner, live bool) []StageCounter {
	var out []StageCounter
	for i, si := range r.Graph().Stages() {
		if si.Counters == nil {
			continue
		}
		vals := make([]counters.Value, si.Counters.Len())
		if live {
			r.LiveCounters(i, vals)
		} else {
			r.Counters(i, vals)
		}
		for _, c := range counterList(si.Counters, vals) {
			out = append(out, StageCounter{Stage: si.Name, Counter: c})
		}
	}
	return out
}

// stCounter returns the packets of the counter of text key that st
// reports (0 when absent).
func stCounter(st Stage, key string) uint64 {
	for _, c := range stReport(st) {
		if c.Key == key {
			return c.Packets
		}
	}
	return 0
}

// stFillBatchBig is stFillBatch for more packets than a batch holds: it
// returns one batch of capacity rings.MaxBatch at most.
func stFillBatchBig(t testing.TB, pkts [][]byte) *rings.Batch {
	t.Helper()
	if len(pkts) > rings.MaxBatch {
		t.Fatalf("%d packets: more than a batch holds", len(pkts))
	}
	return stFillBatch(t, stArena(t), pkts)
}
