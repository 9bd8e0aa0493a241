package baseline

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/warpflow/warpflow/internal/allocs"
)

const captures = "../../testdata/captures"

// writeCapture writes n UDP frames (plus one truncated frame) to a temp
// pcap and returns its path and record count.
func writeCapture(t testing.TB, n int) (string, int) {
	t.Helper()
	var f bytes.Buffer
	w := pcapgo.NewWriter(&f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	ts := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	write := func(d []byte) {
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(d), Length: len(d)}, d); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: []byte{10, 0, 0, byte(i)}, DstIP: []byte{10, 0, 1, 1}}
		udp := &layers.UDP{SrcPort: layers.UDPPort(1000 + i), DstPort: 53}
		_ = udp.SetNetworkLayerForChecksum(ip)
		buf := gopacket.NewSerializeBuffer()
		err := gopacket.SerializeLayers(buf, opts,
			&layers.Ethernet{SrcMAC: make([]byte, 6), DstMAC: make([]byte, 6), EthernetType: layers.EthernetTypeIPv4},
			ip, udp, gopacket.Payload("hello"))
		if err != nil {
			t.Fatal(err)
		}
		write(buf.Bytes())
	}
	write([]byte{1, 2, 3}) // a truncated frame still counts as a packet
	path := filepath.Join(t.TempDir(), "gen.pcap")
	if err := os.WriteFile(path, f.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, n + 1
}

func TestGopacketParseCountsPackets(t *testing.T) {
	gen, genN := writeCapture(t, 37)
	tests := []struct {
		path  string
		loops int
		want  uint64
	}{
		{gen, 1, uint64(genN)},
		{gen, 5, 5 * uint64(genN)},
		{filepath.Join(captures, "mixed.pcap"), 2, 2 * 300},
		{filepath.Join(captures, "malformed.pcap"), 1, 25},
		{filepath.Join(captures, "bench-64.pcap"), 3, 3 * 4096},
		{filepath.Join(captures, "linktypes/ethernet.pcapng"), 1, 10},
	}
	for _, tt := range tests {
		for name, fn := range map[string]func(string, int) (Result, error){"parse": GopacketParse, "sparse": GopacketParseSparse, "reader": GopacketParseReader} {
			r, err := fn(tt.path, tt.loops)
			if err != nil {
				t.Fatalf("%s %s: %v", name, tt.path, err)
			}
			if r.Packets != tt.want {
				t.Errorf("%s %s x%d: %d packets, want %d", name, filepath.Base(tt.path), tt.loops, r.Packets, tt.want)
			}
			if r.Elapsed <= 0 || r.Mpps <= 0 || r.NsPerPacket <= 0 {
				t.Errorf("%s %s: empty rate %+v", name, filepath.Base(tt.path), r)
			}
		}
	}
}

func TestGopacketParseErrors(t *testing.T) {
	tests := []struct {
		path  string
		loops int
		is    error
	}{
		{filepath.Join(captures, "mixed.pcap"), 0, nil},
		{filepath.Join(captures, "linktypes/raw-101.pcap"), 1, ErrUnsupportedLinkType},
		{filepath.Join(captures, "bad/corrupt-magic.pcap"), 1, nil},
		{filepath.Join(captures, "bad/truncated-record.pcap"), 1, nil},
		{filepath.Join(t.TempDir(), "missing.pcap"), 1, os.ErrNotExist},
	}
	for _, tt := range tests {
		for name, fn := range map[string]func(string, int) (Result, error){"parse": GopacketParse, "sparse": GopacketParseSparse, "reader": GopacketParseReader} {
			_, err := fn(tt.path, tt.loops)
			if err == nil {
				t.Errorf("%s %s loops %d: no error", name, tt.path, tt.loops)
				continue
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("%s %s: error %v, want %v", name, tt.path, err, tt.is)
			}
		}
	}
	// A valid header with no records is zero packets, not an error.
	r, err := GopacketParse(filepath.Join(captures, "bad/empty.pcap"), 3)
	if err != nil || r.Packets != 0 {
		t.Errorf("empty.pcap: %+v, %v", r, err)
	}
}

// TestParserTouchesTuple checks the fold changes with the 5-tuple, so the
// timed loop really reads the decoded fields.
func TestParserTouchesTuple(t *testing.T) {
	path, _ := writeCapture(t, 2)
	_, r, err := loadCapture(path)
	if err != nil {
		t.Fatal(err)
	}
	var sums []uint64
	for range 2 {
		d, _, err := r.ZeroCopyReadPacketData()
		if err != nil {
			t.Fatal(err)
		}
		p := newParser()
		p.parse(d)
		if len(p.decoded) != 3 {
			t.Fatalf("decoded %v, want Ethernet IPv4 UDP", p.decoded)
		}
		sums = append(sums, p.sum)
	}
	if sums[0] == sums[1] || sums[0] == 0 {
		t.Errorf("fold does not depend on the tuple: %v", sums)
	}
}

// TestParserDoesNotAllocate holds the baseline to what the obvious program
// achieves on the bench captures: no allocation per packet. (gopacket does
// allocate on some inputs, e.g. IPv6 hop-by-hop options in mixed.pcap; that cost is
// gopacket's and stays in the mixed figure.)
func TestParserDoesNotAllocate(t *testing.T) {
	for _, name := range []string{"bench-64.pcap", "bench-64-tcp.pcap"} {
		data, err := os.ReadFile(filepath.Join(captures, name))
		if err != nil {
			t.Fatal(err)
		}
		r, err := newReader(data)
		if err != nil {
			t.Fatal(err)
		}
		pkts, err := readAll(r)
		if err != nil {
			t.Fatal(err)
		}
		p := newParser()
		p.parse(pkts[0])
		if n := allocs.Count(5, func() {
			for _, d := range pkts {
				p.parse(d)
			}
		}); n != 0 {
			t.Errorf("%s: parse allocated %d times in 5 passes, want 0", name, n)
		}
	}
}

// BenchmarkParser is the baseline's inner loop: one op is one packet.
func BenchmarkParser(b *testing.B) {
	for _, name := range []string{"bench-64.pcap", "bench-64-tcp.pcap", "mixed.pcap"} {
		b.Run(name, func(b *testing.B) {
			data, err := os.ReadFile(filepath.Join(captures, name))
			if err != nil {
				b.Fatal(err)
			}
			r, err := newReader(data)
			if err != nil {
				b.Fatal(err)
			}
			pkts, err := readAll(r)
			if err != nil {
				b.Fatal(err)
			}
			p := newParser()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				p.parse(pkts[i])
				if i++; i == len(pkts) {
					i = 0
				}
			}
		})
	}
}

// TestSparseParserDecodesTheSame: the sparse-container parser folds the same
// 5-tuples as the default one over real traffic, so the faster baseline
// does the same work.
func TestSparseParserDecodesTheSame(t *testing.T) {
	for _, name := range []string{"mixed.pcap", "malformed.pcap", "bench-64.pcap"} {
		_, r, err := loadCapture(filepath.Join(captures, name))
		if err != nil {
			t.Fatal(err)
		}
		pkts, err := readAll(r)
		if err != nil {
			t.Fatal(err)
		}
		def, sparse := newParser(), newParserWith(gopacket.DecodingLayerSparse(nil))
		for _, d := range pkts {
			def.parse(d)
			sparse.parse(d)
		}
		if n := len(pkts); n == 0 || def.sum == 0 || def.sum != sparse.sum {
			t.Errorf("%s: %d packets, default fold %#x, sparse fold %#x", name, len(pkts), def.sum, sparse.sum)
		}
	}
}
