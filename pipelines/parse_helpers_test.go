package pipelines

import (
	"testing"

	"github.com/warpflow/warpflow/rings"
	"go.yaml.in/yaml/v3"
)

// ptFrameSize is large enough for any fuzz input we keep (see ptMaxPacket).
const ptFrameSize = 16384

// ptMaxPacket is the longest packet a ptBatch holds.
const ptMaxPacket = ptFrameSize - 256

// ptBatch is a batch over its own small arena, with one frame per slot
// allocated up front so that reloading it never allocates.
type ptBatch struct {
	arena *rings.Arena
	b     *rings.Batch
	addrs []uint64
	idx   []uint16
	next  []Edge
}

// newPTBatch returns an empty ptBatch of the given capacity.
func newPTBatch(tb testing.TB, capacity int) *ptBatch {
	tb.Helper()
	a, err := rings.NewArena(rings.ArenaOptions{Frames: capacity, FrameSize: ptFrameSize, Headroom: 256})
	if err != nil {
		tb.Fatalf("new arena: %v", err)
	}
	t := &ptBatch{arena: a, b: rings.NewBatch(capacity, a), next: make([]Edge, capacity)}
	for i := 0; i < capacity; i++ {
		addr, ok := a.Alloc()
		if !ok {
			tb.Fatalf("arena exhausted at frame %d", i)
		}
		t.addrs = append(t.addrs, addr)
		t.idx = append(t.idx, uint16(i))
	}
	return t
}

// load copies pkts into the batch's frames (at the arena's headroom, the way
// a port receives them) and sets descriptors and fresh metadata. Each
// packet's Seq is its index. Garbage is left in the metadata's parse fields
// so that tests see whether the stage clears them.
func (t *ptBatch) load(tb testing.TB, pkts [][]byte) {
	tb.Helper()
	if len(pkts) > len(t.addrs) {
		tb.Fatalf("%d packets for a batch of %d", len(pkts), len(t.addrs))
	}
	t.b.SetLen(len(pkts))
	for i, p := range pkts {
		if len(p) > ptMaxPacket {
			tb.Fatalf("packet %d: %d bytes, want at most %d", i, len(p), ptMaxPacket)
		}
		addr := t.addrs[i]
		copy(t.arena.Frame(addr)[addr&(ptFrameSize-1):], p)
		t.b.Descs[i] = rings.Desc{Addr: addr, Len: uint32(len(p))}
		t.b.Meta[i] = ptGarbageMeta
		t.b.Meta[i].Seq = uint64(i)
	}
}

// ptGarbageMeta has every parse field set, to catch a stage that forgets to
// clear one; every flag but FlagCut, which the port owns.
var ptGarbageMeta = rings.Meta{
	Class: rings.ClassTooDeep, Tunnel: rings.TunnelGRE, Flags: 0xffff &^ rings.FlagCut, EtherType: 0xdead,
	VLANs: [2]uint16{7, 7}, NumVLANs: 2, IPProto: 99, TTL: 9, TCPFlags: 0xff,
	L3Off: 999, L4Off: 999, InnerL2Off: 999, InnerL3Off: 999, InnerL4Off: 999,
	SrcIP: [16]byte{1, 2, 3}, DstIP: [16]byte{4, 5, 6}, SrcPort: 1, DstPort: 2,
	Hash: 0x1234, SampleMask: 5,
}

// process runs st over the whole loaded batch and returns the edges.
func (t *ptBatch) process(st Stage) []Edge {
	n := t.b.Len()
	for i := range t.next[:n] {
		t.next[i] = 0xee
	}
	st.Process(t.b, t.idx[:n], t.next[:n])
	return t.next[:n]
}

// ptParse parses one packet with a fresh parse stage and returns its Meta.
func ptParse(tb testing.TB, pkt []byte, tunnels bool) rings.Meta {
	tb.Helper()
	t := newPTBatch(tb, 1)
	t.load(tb, [][]byte{pkt})
	next := t.process(&parseStage{tunnels: tunnels})
	if next[0] != 0 {
		tb.Fatalf("next edge %d, want 0", next[0])
	}
	return t.b.Meta[0]
}

// ptBuildContext returns a BuildContext for the stage mapping written in
// src, with the given next target (none when next is "").
func ptBuildContext(tb testing.TB, src, next string) (*BuildContext, *ErrorList) {
	tb.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		tb.Fatalf("yaml: %v", err)
	}
	errs := &ErrorList{}
	c := &BuildContext{
		Name:   "p",
		Kind:   "parse",
		File:   "test.yaml",
		Node:   doc.Content[0],
		errs:   errs,
		common: []string{"name", "type", "next"},
	}
	if next != "" {
		c.next, c.hasNxt = Target{Stage: next}, true
	}
	return c, errs
}
