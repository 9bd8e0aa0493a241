package dataplane

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/warpflow/warpflow/rings"
)

// streamPackets is the length of the benchmark captures: long enough that
// the rewind between passes is amortised as it is for real captures, short
// enough to stay in cache as a real capture would in the page cache.
const streamPackets = 12800

// udpFrame is an Ethernet/IPv4/UDP frame of size bytes (at least 42).
func udpFrame(size int) []byte {
	ip := []byte{0x45, 0, 0, 0, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2}
	binary.BigEndian.PutUint16(ip[2:], uint16(size-14))
	udp := []byte{0x30, 0x39, 0x00, 0x35, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(udp[4:], uint16(size-34))
	return eth(srcMAC, 0x0800, cat(ip, udp, make([]byte, size-42)))
}

// streamCapture is a pcap (or pcapng) capture of streamPackets
// Ethernet/IPv4/UDP packets of size bytes each.
func streamCapture(tb testing.TB, size int, ng bool) []byte {
	tb.Helper()
	pkt := udpFrame(size)
	var buf bytes.Buffer
	ci := gopacket.CaptureInfo{Timestamp: epoch(0), CaptureLength: size, Length: size}
	if ng {
		w, err := pcapgo.NewNgWriter(&buf, layers.LinkTypeEthernet)
		if err != nil {
			tb.Fatal(err)
		}
		for range streamPackets {
			if err := w.WritePacket(ci, pkt); err != nil {
				tb.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			tb.Fatal(err)
		}
		return buf.Bytes()
	}
	return pcapFile(tb, 1, func() [][]byte {
		recs := make([][]byte, streamPackets)
		for i := range recs {
			recs[i] = pkt
		}
		return recs
	}()...)
}

// BenchmarkStream measures streaming replay of 64-byte packets from memory,
// layer by layer, in one process so the ratios are not skewed by machine
// noise between runs:
//
//	pcapgo   pcapgo's ZeroCopyReadPacketData alone over a 64 KiB bufio.Reader
//	         (a new reader per pass): the floor our reader builds on.
//	decode   pcapgo plus a gopacket DecodingLayerParser (Ethernet, IPv4,
//	         IPv6, TCP, UDP) per packet: the naive gopacket replay program
//	         (internal/baseline) that ours should beat.
//	records  recordReader.next: our own parser (in place from the read
//	         buffer), error mapping, link type
//	         (rewound per pass).
//	receive  ReplayPort.Receive in batches of 64 with Recycle, looping
//	         forever: records plus normalisation and the copy into a frame.
//
// ns/pkt is the figure to compare; ns/op is per packet too except for
// receive, where it is per batch.
func BenchmarkStream(b *testing.B) {
	for _, format := range []struct {
		name string
		ng   bool
	}{{"pcap", false}, {"pcapng", true}} {
		capture := streamCapture(b, 64, format.ng)
		for _, decode := range []bool{false, true} {
			name := format.name + "/pcapgo"
			if decode {
				name = format.name + "/decode"
			}
			b.Run(name, func(b *testing.B) {
				benchPcapgo(b, capture, format.ng, decode)
			})
		}
		b.Run(format.name+"/records", func(b *testing.B) {
			src := bytes.NewReader(capture)
			r, err := newRecordReader("s", src)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			sum := 0
			for b.Loop() {
				rec, err := r.next()
				if err == io.EOF {
					src.Reset(capture)
					if err = r.rewind(); err != nil {
						b.Fatal(err)
					}
					rec, err = r.next()
				}
				if err != nil {
					b.Fatal(err)
				}
				sum += len(rec.data)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/pkt")
			_ = sum
		})
		b.Run(format.name+"/receive", func(b *testing.B) {
			a := newArena(b, 2048, 2048, 256)
			p, err := NewReplay("s", bytes.NewReader(capture), a, ReplayOptions{Loops: -1})
			if err != nil {
				b.Fatal(err)
			}
			batch := rings.NewBatch(64, a)
			b.ReportAllocs()
			pkts := 0
			for b.Loop() {
				batch.Clear()
				n, err := p.Receive(batch)
				if err != nil {
					b.Fatal(err)
				}
				p.Recycle(batch.Descs)
				pkts += n
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(pkts), "ns/pkt")
		})
	}
}

// benchPcapgo loops pcapgo's ZeroCopyReadPacketData over capture (a new
// reader per pass), decoding each packet with a DecodingLayerParser when
// decode is set. One op is one packet.
func benchPcapgo(b *testing.B, capture []byte, ng, decode bool) {
	src := bytes.NewReader(capture)
	type zeroCopyReader interface {
		ZeroCopyReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	}
	open := func() zeroCopyReader {
		src.Reset(capture)
		br := bufio.NewReaderSize(src, streamBufSize)
		var r zeroCopyReader
		var err error
		if ng {
			r, err = pcapgo.NewNgReader(br, pcapgo.DefaultNgReaderOptions)
		} else {
			r, err = pcapgo.NewReader(br)
		}
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	var (
		eth     layers.Ethernet
		ip4     layers.IPv4
		ip6     layers.IPv6
		tcp     layers.TCP
		udp     layers.UDP
		decoded = make([]gopacket.LayerType, 0, 8)
	)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip4, &ip6, &tcp, &udp)
	parser.IgnoreUnsupported = true
	r := open()
	b.ReportAllocs()
	sum := 0
	for b.Loop() {
		data, _, err := r.ZeroCopyReadPacketData()
		if err == io.EOF {
			r = open()
			data, _, err = r.ZeroCopyReadPacketData()
		}
		if err != nil {
			b.Fatal(err)
		}
		if decode {
			if err := parser.DecodeLayers(data, &decoded); err != nil {
				b.Fatal(err)
			}
			sum += int(udp.DstPort)
		}
		sum += len(data)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/pkt")
	_ = sum
}
