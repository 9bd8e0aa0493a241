package pipelines

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/warpflow/warpflow/rings"
)

// ptCorpusDir holds the shared real-world captures (see its README).
const ptCorpusDir = "../testdata/corpus"

// TestParseCorpus runs the parse stage over every Ethernet capture of the
// corpus (testdata/corpus): no panic, offsets always inside the packet, and for every
// packet gopacket decodes without error, the same L3/L4 view.
//
// Principled disagreements (ptPrincipled names them; the assertion is on
// the agreement without them, and the raw figure is logged beside it):
//   - more than two VLAN tags: ClassTooDeep by design; gopacket goes on.
//   - MPLS and other ethertypes we do not decode: ClassUnknownL3 with
//     L3Off at the end of the L2 header; gopacket decodes MPLS and leaves
//     no L3 offset for the rest. Only the ethertype is compared for them.
//   - an IPv6 fragment header behind another one (an evasion trick): we
//     walk both and decode the L4 header; gopacket stops at the first.
//
// Not disagreements: gopacket decodes nothing behind a first fragment, and
// the oracle decodes that L4 header apart. A first fragment too short for
// its L4 header is ClassTruncated for us (RFC 1858 tiny fragment) and has
// no L4 layer for gopacket either.
func TestParseCorpus(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(ptCorpusDir, "*.pcap"))
	if len(files) < 50 {
		t.Fatalf("%d captures under %s, want the 51 committed ones", len(files), ptCorpusDir)
	}
	tb := newPTBatch(t, 64)
	st := &parseStage{tunnels: true}
	var total, compared, l3Agree, l4Agree, fullAgree, skippedLink int
	classes := make(map[rings.Class]int)
	var pending [][]byte
	principled := make(map[string]int)

	flush := func(name string) {
		if len(pending) == 0 {
			return
		}
		tb.load(t, pending)
		for k, e := range tb.process(st) {
			if e != 0 {
				t.Fatalf("%s: edge %d, want 0", name, e)
			}
			m := tb.b.Meta[k]
			m.Hash, m.SampleMask, m.Seq = 0, 0, 0
			classes[m.Class]++
			ptCheckOffsets(t, name, pending[k], m)
			pkt := gopacket.NewPacket(pending[k], layers.LayerTypeEthernet, gopacket.Default)
			if pkt.ErrorLayer() != nil {
				continue
			}
			compared++
			want := ptOracleMeta(pkt, true)
			want.Class = m.Class
			if why := ptPrincipled(m, want); why != "" {
				principled[why]++
				continue
			}
			if m.Class == rings.ClassUnknownL3 {
				want.L3Off = m.L3Off // we record where L3 would start; gopacket has no layer there
			}
			l3 := m.EtherType == want.EtherType && m.L3Off == want.L3Off &&
				m.Flags&(rings.FlagIPv4|rings.FlagIPv6|rings.FlagARP) == want.Flags&(rings.FlagIPv4|rings.FlagIPv6|rings.FlagARP)
			l4 := l3 && m.IPProto == want.IPProto && m.L4Off == want.L4Off && m.SrcPort == want.SrcPort && m.DstPort == want.DstPort &&
				m.Flags&rings.FlagL4 == want.Flags&rings.FlagL4
			if l3 {
				l3Agree++
			}
			if l4 {
				l4Agree++
			} else if compared-l4Agree <= 10 {
				t.Logf("%s packet %d disagrees:\n got %s\nwant %s", name, k, ptFmtMeta(m), ptFmtMeta(want))
			}
			if m == want {
				fullAgree++
			}
		}
		pending = pending[:0]
	}

	for _, f := range files {
		name := filepath.Base(f)
		r, closeFile, err := ptOpenCapture(f)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.LinkType() != layers.LinkTypeEthernet {
			t.Logf("%s: link type %d, not Ethernet: skipped", name, r.LinkType())
			skippedLink++
			closeFile()
			continue
		}
		for {
			data, _, err := r.ReadPacketData()
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				break
			}
			if err != nil {
				t.Logf("%s: read: %v (rest of file skipped)", name, err)
				break
			}
			if len(data) > ptMaxPacket {
				continue
			}
			total++
			pending = append(pending, data)
			if len(pending) == 64 {
				flush(name)
			}
		}
		flush(name)
		closeFile()
	}
	t.Logf("corpus: %d files (%d skipped for link type), %d Ethernet packets, classes %v", len(files), skippedLink, total, ptClassCounts(classes))
	np := 0
	for _, n := range principled {
		np += n
	}
	strict := compared - np
	t.Logf("gopacket decoded %d without error; %d principled disagreements %v", compared, np, principled)
	t.Logf("agreement over the other %d: L3 %d (%.2f%%), L3+L4+ports %d (%.2f%%), whole Meta %d (%.2f%%); raw L3+L4+ports %.2f%% of %d",
		strict, l3Agree, pct(l3Agree, strict), l4Agree, pct(l4Agree, strict), fullAgree, pct(fullAgree, strict), pct(l4Agree, compared), compared)
	if total < 500 || compared < total/2 {
		t.Fatalf("corpus too small to mean anything: %d packets, %d compared", total, compared)
	}
	if pct(l4Agree, strict) < 99.5 {
		t.Errorf("L3+L4+ports agreement %.2f%%, want >= 99.5%%", pct(l4Agree, strict))
	}
	if pct(l4Agree, compared) < 98 {
		t.Errorf("raw L3+L4+ports agreement %.2f%%, want >= 98%%", pct(l4Agree, compared))
	}
}

// ptPrincipled names the documented reason why our m may differ from
// gopacket's want, or returns "" when they must agree.
func ptPrincipled(m, want rings.Meta) string {
	switch {
	case m.Class == rings.ClassTooDeep && m.NumVLANs == 2 && isVLANTPID(m.EtherType):
		return "more than 2 vlan tags"
	case m.Class == rings.ClassUnknownL3 && m.EtherType == want.EtherType:
		if want.L3Off == 0 && want.Flags == 0 {
			return "" // gopacket also decoded nothing: compare as usual below
		}
		return "ethertype we do not decode"
	case m.Flags&rings.FlagIPv6 != 0 && want.IPProto == protoFragment && m.IPProto != protoFragment:
		return "nested ipv6 fragment headers"
	}
	return ""
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func ptClassCounts(m map[rings.Class]int) map[string]int {
	out := make(map[string]int, len(m))
	for c, n := range m {
		out[c.String()] = n
	}
	return out
}

// ptCapture is what both pcapgo readers offer.
type ptCapture interface {
	ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	LinkType() layers.LinkType
}

// ptOpenCapture opens a pcap (or pcapng) file.
func ptOpenCapture(path string) (ptCapture, func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	closeFile := func() { f.Close() }
	if r, err := pcapgo.NewReader(f); err == nil {
		return r, closeFile, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		closeFile()
		return nil, nil, err
	}
	r, err := pcapgo.NewNgReader(f, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		closeFile()
		return nil, nil, err
	}
	return r, closeFile, nil
}
