package pipelines

import (
	"testing"

	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/rings"
)

// ptParseCut parses pkt as a port hands out a packet the capture cut.
func ptParseCut(tb testing.TB, pkt []byte) rings.Meta {
	tb.Helper()
	t := newPTBatch(tb, 1)
	t.load(tb, [][]byte{pkt})
	t.b.Meta[0].Flags |= rings.FlagCut
	t.process(&parseStage{tunnels: true})
	return t.b.Meta[0]
}

// TestParseCutByCapture: a headers-only capture (tcpdump -s 96) is parsed
// as usual when its headers are all there, and only a header that is
// itself cut is truncated. Without FlagCut the same bytes are a bad total
// length, as before.
func TestParseCutByCapture(t *testing.T) {
	full := func(p []byte, n int) []byte { return p[:n] }
	udp4 := ptCat(ptEthHdr(etIPv4), ptV4(5, 20+8+1000, 0, protoUDP), ptUDPHdr(53, 4000, 8+1000), make([]byte, 1000))
	tcp6 := ptCat(ptEthHdr(etIPv6), ptV6(20+1400, protoTCP), ptTCPHdr(5, 0x18), make([]byte, 1400))
	tcp4 := ptCat(ptEthHdr(etIPv4), ptV4(5, 20+20+500, 0, protoTCP), ptTCPHdr(8, 0x10), make([]byte, 12+500))
	for _, c := range []struct {
		name   string
		pkt    []byte
		cut    rings.Class // class with FlagCut
		uncut  rings.Class // the same bytes without
		l4     bool
		sport  uint16
		family rings.Flags
	}{
		{"udp/ipv4 headers kept", full(udp4, 96), rings.ClassOK, rings.ClassBadTotalLen, true, 53, rings.FlagIPv4},
		{"tcp/ipv6 headers kept", full(tcp6, 96), rings.ClassOK, rings.ClassBadTotalLen, true, 0, rings.FlagIPv6},
		{"tcp options cut", full(tcp4, 14+20+24), rings.ClassTruncated, rings.ClassTruncated, false, 0, rings.FlagIPv4},
		{"ipv4 header cut", full(udp4, 14+12), rings.ClassTruncated, rings.ClassTruncated, false, 0, 0},
	} {
		got := ptParseCut(t, c.pkt)
		if got.Class != c.cut || got.Flags&rings.FlagCut == 0 || (got.Flags&rings.FlagL4 != 0) != c.l4 || got.Flags&(rings.FlagIPv4|rings.FlagIPv6) != c.family {
			t.Errorf("%s: cut: %s", c.name, ptFmtMeta(got))
		}
		if c.sport != 0 && got.SrcPort != c.sport {
			t.Errorf("%s: source port %d, want %d", c.name, got.SrcPort, c.sport)
		}
		if plain := ptParse(t, c.pkt, true); plain.Class != c.uncut || plain.Flags&rings.FlagCut != 0 {
			t.Errorf("%s: not cut: %s", c.name, ptFmtMeta(plain))
		}
	}
}

// TestParseCutNoAllocs: the cut path allocates nothing either.
func TestParseCutNoAllocs(t *testing.T) {
	pkt := ptCat(ptEthHdr(etIPv4), ptV4(5, 20+8+1000, 0, protoUDP), ptUDPHdr(53, 4000, 8+1000))
	b := newPTBatch(t, 1)
	b.load(t, [][]byte{pkt})
	st := &parseStage{tunnels: true}
	n := allocs.Count(100, func() {
		b.b.Meta[0].Flags = rings.FlagCut
		b.process(st)
	})
	if n != 0 || b.b.Meta[0].Class != rings.ClassOK {
		t.Fatalf("%d allocations in 100 runs (want 0), class %v", n, b.b.Meta[0].Class)
	}
}

// TestParseEveryCaseNoAllocs: every generated case (each encapsulation and
// tunnel) and fixture parses without allocating, 64 at a time.
func TestParseEveryCaseNoAllocs(t *testing.T) {
	var all [][]byte
	for _, c := range ptCases(t) {
		all = append(all, c.pkt)
	}
	for _, f := range ptFixtures() {
		all = append(all, f.pkt)
	}
	tb := newPTBatch(t, 64)
	st := &parseStage{tunnels: true}
	for i := 0; i < len(all); i += 64 {
		tb.load(t, all[i:min(i+64, len(all))])
		if n := allocs.Count(20, func() { tb.process(st) }); n != 0 {
			t.Fatalf("packets %d to %d: %d allocations in 20 batches, want 0", i, i+64, n)
		}
	}
}
