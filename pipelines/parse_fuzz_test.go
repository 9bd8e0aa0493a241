package pipelines

import (
	"testing"

	"github.com/warpflow/warpflow/rings"
)

// FuzzParseStage feeds arbitrary bytes to the parse stage: it must never
// panic, always take edge 0, keep every offset inside the packet, leave the
// fields it does not own alone, and give the same outer view with tunnels
// off. Seeds: every generated case and fixture, plus testdata/fuzz.
func FuzzParseStage(f *testing.F) {
	for _, c := range ptCases(f) {
		f.Add(c.pkt)
	}
	for _, fx := range ptFixtures() {
		f.Add(fx.pkt)
	}
	tb := newPTBatch(f, 1)
	on, off := &parseStage{tunnels: true}, &parseStage{tunnels: false}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > ptMaxPacket {
			data = data[:ptMaxPacket]
		}
		tb.load(t, [][]byte{data})
		if e := tb.process(on)[0]; e != 0 {
			t.Fatalf("edge %d, want 0", e)
		}
		m := tb.b.Meta[0]
		ptCheckOffsets(t, "fuzz", data, m)
		if m.Seq != 0 || m.Hash != ptGarbageMeta.Hash || m.SampleMask != ptGarbageMeta.SampleMask {
			t.Fatalf("fields the stage does not own changed: %+v", m)
		}
		tb.load(t, [][]byte{data})
		tb.process(off)
		o := tb.b.Meta[0]
		m.Flags &^= rings.FlagTunnel | rings.FlagInnerL4
		m.Tunnel, m.InnerL2Off, m.InnerL3Off, m.InnerL4Off = 0, 0, 0, 0
		if m != o {
			t.Fatalf("outer view depends on tunnels:\n on %s\noff %s", ptFmtMeta(m), ptFmtMeta(o))
		}
	})
}

// FuzzParseFastPath checks that the fast paths (decodeFast and
// decodeInline) agree with the general decoder on arbitrary bytes, with
// tunnels on and off.
func FuzzParseFastPath(f *testing.F) {
	for _, c := range ptCases(f) {
		f.Add(c.pkt)
	}
	for _, fx := range ptFixtures() {
		f.Add(fx.pkt)
	}
	tb := newPTBatch(f, 1)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > ptMaxPacket {
			data = data[:ptMaxPacket]
		}
		for _, tunnels := range []bool{true, false} {
			ptFastAgrees(t, data, tunnels)
			tb.load(t, [][]byte{data})
			decodeInline(tb.b, tb.idx, tunnels)
			ptInlineAgrees(t, data, ptGarbageMeta, tb.b.Meta[0], tunnels)
		}
	})
}
