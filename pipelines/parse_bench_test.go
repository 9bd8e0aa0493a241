package pipelines

import (
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// ptBenchBatch is 64 minimum-size (64-byte, padded) UDP/IPv4 frames with
// distinct ports, loaded the way a port would leave them.
func ptBenchBatch(b testing.TB) *ptBatch {
	b.Helper()
	pkts := make([][]byte, 64)
	for i := range pkts {
		p := ptSerialize(b, &layers.Ethernet{SrcMAC: ptMacA, DstMAC: ptMacB, EthernetType: layers.EthernetTypeIPv4},
			&layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: ptV4A, DstIP: ptV4B},
			&layers.UDP{SrcPort: layers.UDPPort(40000 + i), DstPort: 50000},
			gopacket.Payload(make([]byte, 18)))
		if len(p) != 60 {
			b.Fatalf("frame is %d bytes, want 60 (+4 FCS on the wire = 64)", len(p))
		}
		pkts[i] = p
	}
	tb := newPTBatch(b, 64)
	tb.load(b, pkts)
	return tb
}

// ptReportRate reports per-packet cost and packet rate for n packets per op.
func ptReportRate(b *testing.B, n int) {
	ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N*n)
	b.ReportMetric(ns, "ns/pkt")
	b.ReportMetric(1e3/ns, "Mpps")
}

// BenchmarkParseStage is the parse stage over a batch of 64 UDP/IPv4 frames.
func BenchmarkParseStage(b *testing.B) {
	tb := ptBenchBatch(b)
	st := &parseStage{tunnels: true}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st.Process(tb.b, tb.idx, tb.next)
	}
	b.StopTimer()
	if tb.b.Meta[63].SrcPort != 40063 {
		b.Fatalf("parse did not run: %s", ptFmtMeta(tb.b.Meta[63]))
	}
	ptReportRate(b, 64)
}

// BenchmarkParseGopacketDLP is the baseline: gopacket's fastest idiomatic
// decode, a DecodingLayerParser into preallocated layers, over the same
// frames, reading the same outer 5-tuple out of the decoded layers.
func BenchmarkParseGopacketDLP(b *testing.B) {
	tb := ptBenchBatch(b)
	var (
		eth layers.Ethernet
		ip4 layers.IPv4
		ip6 layers.IPv6
		tcp layers.TCP
		udp layers.UDP
	)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip4, &ip6, &tcp, &udp)
	parser.IgnoreUnsupported = true
	decoded := make([]gopacket.LayerType, 0, 8)
	var sink uint16
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range tb.idx {
			if err := parser.DecodeLayers(tb.b.Packet(k), &decoded); err != nil {
				b.Fatal(err)
			}
			for _, lt := range decoded {
				if lt == layers.LayerTypeUDP {
					sink += uint16(udp.SrcPort) ^ uint16(udp.DstPort)
				}
			}
		}
	}
	b.StopTimer()
	if len(decoded) != 3 {
		b.Fatalf("decoded %v", decoded)
	}
	_ = sink
	ptReportRate(b, 64)
}

// BenchmarkParseStageMixed is the parse stage over 64 mixed frames (VLANs,
// IPv6 extension headers, fragments, tunnels, malformed fixtures).
func BenchmarkParseStageMixed(b *testing.B) {
	tb := newPTBatch(b, 64)
	tb.load(b, ptMixed(b, 64))
	st := &parseStage{tunnels: true}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st.Process(tb.b, tb.idx, tb.next)
	}
	b.StopTimer()
	ptReportRate(b, 64)
}
