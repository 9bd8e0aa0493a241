package dataplane

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"

	"github.com/warpflow/warpflow/internal/allocs"
)

// ipv4Pkt and ipv6Pkt are minimal L3 packets (headers only) used as record
// payloads; their content only matters for the version nibble.
var (
	ipv4Pkt = []byte{0x45, 0, 0, 20, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2}
	ipv6Pkt = append([]byte{0x60, 0, 0, 0, 0, 0, 59, 64}, make([]byte, 32)...)
	srcMAC  = []byte{0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee}
)

// eth builds the Ethernet frame the replay port should produce.
func eth(src []byte, et uint16, payload []byte) []byte {
	f := make([]byte, 14, 14+len(payload))
	if src != nil {
		copy(f[6:12], src)
	}
	f[12], f[13] = byte(et>>8), byte(et)
	return append(f, payload...)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// sll builds a Linux cooked v1 header: pkttype, hatype, halen, addr (8), protocol.
func sll(halen uint16, addr []byte, proto uint16) []byte {
	h := make([]byte, 16)
	h[3] = 1 // ARPHRD_ETHER
	h[4], h[5] = byte(halen>>8), byte(halen)
	copy(h[6:14], addr)
	h[14], h[15] = byte(proto>>8), byte(proto)
	return h
}

// sll2 builds a Linux cooked v2 header: protocol, reserved, ifindex, hatype,
// pkttype, halen, addr (8).
func sll2(halen byte, addr []byte, proto uint16) []byte {
	h := make([]byte, 20)
	h[0], h[1] = byte(proto>>8), byte(proto)
	h[7] = 3 // ifindex
	h[9] = 1 // ARPHRD_ETHER
	h[10] = 4
	h[11] = halen
	copy(h[12:20], addr)
	return h
}

// linkCases: one record of a link type and the Ethernet frame it becomes.
var linkCases = []struct {
	name string
	lt   layers.LinkType
	rec  []byte
	want []byte
}{
	{"ethernet", 1, eth(srcMAC, 0x0800, ipv4Pkt), eth(srcMAC, 0x0800, ipv4Pkt)},
	{"raw101 v4", 101, ipv4Pkt, eth(nil, 0x0800, ipv4Pkt)},
	{"raw101 v6", 101, ipv6Pkt, eth(nil, 0x86DD, ipv6Pkt)},
	{"raw101 bad version is ipv4", 101, []byte{0x50, 1, 2, 3}, eth(nil, 0x0800, []byte{0x50, 1, 2, 3})},
	{"dlt12 v6", 12, ipv6Pkt, eth(nil, 0x86DD, ipv6Pkt)},
	{"dlt14 v4", 14, ipv4Pkt, eth(nil, 0x0800, ipv4Pkt)},
	{"ipv4 228", 228, ipv4Pkt, eth(nil, 0x0800, ipv4Pkt)},
	{"ipv6 229", 229, ipv6Pkt, eth(nil, 0x86DD, ipv6Pkt)},
	{"ipv6 229 trusts link type", 229, ipv4Pkt, eth(nil, 0x86DD, ipv4Pkt)},
	{"null le inet", 0, cat([]byte{2, 0, 0, 0}, ipv4Pkt), eth(nil, 0x0800, ipv4Pkt)},
	{"null be inet", 0, cat([]byte{0, 0, 0, 2}, ipv4Pkt), eth(nil, 0x0800, ipv4Pkt)},
	{"null le inet6 24", 0, cat([]byte{24, 0, 0, 0}, ipv6Pkt), eth(nil, 0x86DD, ipv6Pkt)},
	{"null le inet6 28", 0, cat([]byte{28, 0, 0, 0}, ipv6Pkt), eth(nil, 0x86DD, ipv6Pkt)},
	{"null be inet6 30", 0, cat([]byte{0, 0, 0, 30}, ipv6Pkt), eth(nil, 0x86DD, ipv6Pkt)},
	{"null unknown af", 0, cat([]byte{7, 0, 0, 0}, ipv4Pkt), eth(nil, 0, ipv4Pkt)},
	{"loop inet", 108, cat([]byte{0, 0, 0, 2}, ipv4Pkt), eth(nil, 0x0800, ipv4Pkt)},
	{"loop inet6", 108, cat([]byte{0, 0, 0, 24}, ipv6Pkt), eth(nil, 0x86DD, ipv6Pkt)},
	{"sll ipv4 with mac", 113, cat(sll(6, srcMAC, 0x0800), ipv4Pkt), eth(srcMAC, 0x0800, ipv4Pkt)},
	{"sll ipv6 no mac", 113, cat(sll(0, nil, 0x86DD), ipv6Pkt), eth(nil, 0x86DD, ipv6Pkt)},
	{"sll 8-byte addr", 113, cat(sll(8, []byte{1, 2, 3, 4, 5, 6, 7, 8}, 0x0806), ipv4Pkt), eth(nil, 0x0806, ipv4Pkt)},
	{"sll llc is 802.3 length", 113, cat(sll(6, srcMAC, 4), []byte{0x42, 0x42, 3, 0}), eth(srcMAC, 4, []byte{0x42, 0x42, 3, 0})},
	{"sll2 ipv6 with mac", 276, cat(sll2(6, srcMAC, 0x86DD), ipv6Pkt), eth(srcMAC, 0x86DD, ipv6Pkt)},
	{"sll2 vlan", 276, cat(sll2(0, nil, 0x8100), ipv4Pkt), eth(nil, 0x8100, ipv4Pkt)},
	{"ppp hdlc-framed ipv4", 9, cat([]byte{0xff, 0x03, 0x00, 0x21}, ipv4Pkt), eth(nil, 0x0800, ipv4Pkt)},
	{"ppp hdlc-framed ipv6", 9, cat([]byte{0xff, 0x03, 0x00, 0x57}, ipv6Pkt), eth(nil, 0x86DD, ipv6Pkt)},
	{"ppp unframed ipv4", 9, cat([]byte{0x00, 0x21}, ipv4Pkt), eth(nil, 0x0800, ipv4Pkt)},
	{"ppp unframed ipv6", 9, cat([]byte{0x00, 0x57}, ipv6Pkt), eth(nil, 0x86DD, ipv6Pkt)},
	{"ppp compressed ipv4", 9, cat([]byte{0x21}, ipv4Pkt), eth(nil, 0x0800, ipv4Pkt)},
	{"ppp compressed ipv6", 9, cat([]byte{0x57}, ipv6Pkt), eth(nil, 0x86DD, ipv6Pkt)},
	{"ppp framed and compressed", 9, cat([]byte{0xff, 0x03, 0x21}, ipv4Pkt), eth(nil, 0x0800, ipv4Pkt)},
	{"ppp mpls unicast", 9, cat([]byte{0x02, 0x81}, []byte{0, 0x01, 0x01, 0x40}, ipv4Pkt), eth(nil, 0x8847, cat([]byte{0, 0x01, 0x01, 0x40}, ipv4Pkt))},
	{"ppp lcp is unknown l3", 9, cat([]byte{0xff, 0x03, 0xc0, 0x21}, []byte{1, 1, 0, 4}), eth(nil, 0, []byte{1, 1, 0, 4})},
	{"ppp ipcp unframed is unknown l3", 9, cat([]byte{0x80, 0x21}, []byte{1, 1, 0, 4}), eth(nil, 0, []byte{1, 1, 0, 4})},
	// ff not followed by 03 is no framing: ff is odd, a 1-byte protocol.
	{"ppp ff without 03", 9, cat([]byte{0xff, 0x05}, ipv4Pkt), eth(nil, 0, cat([]byte{0x05}, ipv4Pkt))},
	{"ppp_hdlc ipv4", 50, cat([]byte{0xff, 0x03, 0x00, 0x21}, ipv4Pkt), eth(nil, 0x0800, ipv4Pkt)},
	{"ppp_hdlc compressed ipv6", 50, cat([]byte{0xff, 0x03, 0x57}, ipv6Pkt), eth(nil, 0x86DD, ipv6Pkt)},
	{"ppp_hdlc unframed ipv4 (acfc)", 50, cat([]byte{0x00, 0x21}, ipv4Pkt), eth(nil, 0x0800, ipv4Pkt)},
	{"ppp_hdlc unframed compressed ipv6", 50, cat([]byte{0x57}, ipv6Pkt), eth(nil, 0x86DD, ipv6Pkt)},
	{"ppp_hdlc carrying cisco hdlc ipv4", 50, cat([]byte{0x0f, 0x00, 0x08, 0x00}, ipv4Pkt), eth(nil, 0x0800, ipv4Pkt)},
	{"ppp_hdlc carrying cisco hdlc broadcast ipv6", 50, cat([]byte{0x8f, 0x00, 0x86, 0xdd}, ipv6Pkt), eth(nil, 0x86DD, ipv6Pkt)},
	{"ppp_hdlc lcp", 50, cat([]byte{0xff, 0x03, 0xc0, 0x21}, []byte{9, 1, 0, 4}), eth(nil, 0, []byte{9, 1, 0, 4})},
	{"ppp_pppd sent ipv4", 166, cat([]byte{0x01, 0x03, 0x00, 0x21}, ipv4Pkt), eth(nil, 0x0800, ipv4Pkt)},
	{"ppp_pppd received ipv6", 166, cat([]byte{0x00, 0x03, 0x00, 0x57}, ipv6Pkt), eth(nil, 0x86DD, ipv6Pkt)},
	{"c_hdlc unicast ipv4", 104, cat([]byte{0x0f, 0x00, 0x08, 0x00}, ipv4Pkt), eth(nil, 0x0800, ipv4Pkt)},
	{"c_hdlc unicast ipv6", 104, cat([]byte{0x0f, 0x00, 0x86, 0xdd}, ipv6Pkt), eth(nil, 0x86DD, ipv6Pkt)},
	{"c_hdlc broadcast slarp", 104, cat([]byte{0x8f, 0x00, 0x80, 0x35}, []byte{0, 0, 0, 2}), eth(nil, 0x8035, []byte{0, 0, 0, 2})},
	{"c_hdlc non-ethertype is unknown l3", 104, cat([]byte{0x0f, 0x00, 0x00, 0x21}, ipv4Pkt), eth(nil, 0, ipv4Pkt)},
}

// TestLinkTypes replays a one-record capture of every supported link type,
// in pcap and in pcapng, and checks the frame the pipeline gets.
func TestLinkTypes(t *testing.T) {
	for _, c := range linkCases {
		for _, ng := range []bool{false, true} {
			name := c.name + "/pcap"
			capture := pcapFile(t, c.lt, c.rec)
			if ng {
				name = c.name + "/pcapng"
				capture = ngFile(t, []layers.LinkType{c.lt}, ngRec{0, c.rec})
			}
			t.Run(name, func(t *testing.T) {
				a := newArena(t, 16, 2048, 256)
				p, err := NewReplay("t.pcap", bytes.NewReader(capture), a, DefaultReplayOptions())
				if err != nil {
					t.Fatal(err)
				}
				got := drain(t, p, a, 8)
				if len(got.pkts) != 1 {
					t.Fatalf("got %d packets, want 1 (err %v)", len(got.pkts), got.err)
				}
				if !bytes.Equal(got.pkts[0], c.want) {
					t.Errorf("frame\n got  %x\n want %x", got.pkts[0], c.want)
				}
				if got.addrs[0]%2048 != 256 {
					t.Errorf("packet at frame offset %d, want the headroom 256", got.addrs[0]%2048)
				}
			})
		}
	}
}

// TestLinkTypeShortRecords: a record shorter than its link-layer header is
// skipped and counted as malformed, not handed out and not an error.
func TestLinkTypeShortRecords(t *testing.T) {
	for _, c := range []struct {
		lt  layers.LinkType
		rec []byte
	}{
		{0, []byte{2, 0, 0}},
		{108, []byte{0}},
		{113, sll(6, srcMAC, 0x0800)[:15]},
		{276, sll2(6, srcMAC, 0x0800)[:19]},
		{9, []byte{0xff, 0x03}},
		{9, []byte{0x00}},
		{50, []byte{0xff, 0x03, 0x00}},
		{166, []byte{0x01}},
		{104, []byte{0x0f, 0x00, 0x08}},
	} {
		a := newArena(t, 16, 2048, 256)
		capture := pcapFile(t, c.lt, c.rec, eth(nil, 0x0800, ipv4Pkt)[14:]) // second record valid for every type but null/loop/sll
		p, err := NewReplay("short.pcap", bytes.NewReader(capture), a, DefaultReplayOptions())
		if err != nil {
			t.Fatal(err)
		}
		got := drain(t, p, a, 8)
		if got.err != nil {
			t.Fatalf("link type %d: %v", c.lt, got.err)
		}
		st := p.Stats()
		if st.Records != 2 || st.Malformed != 1 || st.Packets != 1 {
			t.Errorf("link type %d: stats %+v, want 2 records, the short one malformed", c.lt, st)
		}
	}
}

// Normalisation writes the whole synthetic header every time, so a frame
// never inherits a previous packet's MAC.
func TestNormalizeOverwritesHeader(t *testing.T) {
	var hdr [ethHeaderLen]byte
	normalize(kindSLL, cat(sll(6, srcMAC, 0x0800), ipv4Pkt), &hdr)
	hl, skip, ok := normalize(kindRawIP, ipv6Pkt, &hdr)
	if !ok || hl != 14 || skip != 0 {
		t.Fatalf("normalize = %d, %d, %v", hl, skip, ok)
	}
	if want := eth(nil, 0x86DD, nil); !bytes.Equal(hdr[:], want) {
		t.Errorf("header %x, want %x", hdr, want)
	}
}

func TestUnsupportedLinkType(t *testing.T) {
	for _, c := range []struct {
		lt   layers.LinkType
		want string
	}{
		{127, "capture foo.pcap: link type 127 (IEEE802_11_RADIOTAP) is not supported (supported: ethernet, raw ipv4/ipv6, linux sll/sll2, bsd null/loop, ppp/ppp_hdlc/ppp_pppd, cisco hdlc)"},
		{51, "capture foo.pcap: link type 51 (PPP_ETHER) is not supported (supported: ethernet, raw ipv4/ipv6, linux sll/sll2, bsd null/loop, ppp/ppp_hdlc/ppp_pppd, cisco hdlc)"},
		{105, "capture foo.pcap: link type 105 (IEEE802_11) is not supported (supported: ethernet, raw ipv4/ipv6, linux sll/sll2, bsd null/loop, ppp/ppp_hdlc/ppp_pppd, cisco hdlc)"},
		{150, "capture foo.pcap: link type 150 (USER3) is not supported (supported: ethernet, raw ipv4/ipv6, linux sll/sll2, bsd null/loop, ppp/ppp_hdlc/ppp_pppd, cisco hdlc)"},
		{4000, "capture foo.pcap: link type 4000 (unknown) is not supported (supported: ethernet, raw ipv4/ipv6, linux sll/sll2, bsd null/loop, ppp/ppp_hdlc/ppp_pppd, cisco hdlc)"},
	} {
		a := newArena(t, 4, 2048, 0)
		_, err := NewReplay("foo.pcap", bytes.NewReader(pcapFile(t, c.lt, ipv4Pkt)), a, DefaultReplayOptions())
		if !errors.Is(err, ErrUnsupportedLinkType) {
			t.Fatalf("link type %d: err %v, want ErrUnsupportedLinkType", c.lt, err)
		}
		if err.Error() != c.want {
			t.Errorf("link type %d:\n got  %s\n want %s", c.lt, err, c.want)
		}
		var lte *LinkTypeError
		if !errors.As(err, &lte) || lte.LinkType != uint32(c.lt) || lte.Interface != -1 {
			t.Errorf("link type %d: LinkTypeError %+v", c.lt, lte)
		}
		if a.FreeFrames() != a.Frames() {
			t.Errorf("link type %d: %d frames leaked", c.lt, a.Frames()-a.FreeFrames())
		}
	}
}

func TestLinkTypeErrorIsOneLine(t *testing.T) {
	err := error(&LinkTypeError{Capture: "x.pcapng", LinkType: 127, Interface: 2})
	want := "capture x.pcapng: interface 2 link type 127 (IEEE802_11_RADIOTAP) is not supported (supported: ethernet, raw ipv4/ipv6, linux sll/sll2, bsd null/loop, ppp/ppp_hdlc/ppp_pppd, cisco hdlc)"
	if err.Error() != want || strings.Contains(err.Error(), "\n") {
		t.Errorf("got %q, want %q", err, want)
	}
}

// TestNormalizeShortRecords: a record too short for its own link-layer
// header is refused (ok false) for every kind that has one; the shortest
// record that holds the header is accepted.
func TestNormalizeShortRecords(t *testing.T) {
	for _, c := range []struct {
		name  string
		k     linkKind
		short []byte
		fits  []byte
	}{
		{"null", kindNull, []byte{2, 0, 0}, []byte{2, 0, 0, 0}},
		{"loop", kindLoop, []byte{0, 0, 0}, []byte{0, 0, 0, 2}},
		{"sll", kindSLL, make([]byte, 15), make([]byte, 16)},
		{"sll2", kindSLL2, make([]byte, 19), make([]byte, 20)},
		{"ppp empty", kindPPP, nil, []byte{0x21}},
		{"ppp even byte alone", kindPPP, []byte{0x00}, []byte{0x00, 0x21}},
		{"ppp framing only", kindPPP, []byte{0xff, 0x03}, []byte{0xff, 0x03, 0x21}},
		{"ppp framing, half a protocol", kindPPP, []byte{0xff, 0x03, 0x00}, []byte{0xff, 0x03, 0x00, 0x57}},
		{"ppp_hdlc empty", kindPPPFramed, nil, []byte{0xff, 0x03, 0x21}},
		{"ppp_hdlc one byte", kindPPPFramed, []byte{0xff}, []byte{0xff, 0x03, 0x57}},
		{"ppp_hdlc framing only", kindPPPFramed, []byte{0xff, 0x03}, []byte{0xff, 0x03, 0x00, 0x21}},
		{"ppp_hdlc by first byte: empty", kindPPPHDLC, nil, []byte{0x21}},
		{"ppp_hdlc by first byte: framed", kindPPPHDLC, []byte{0xff, 0x03, 0x00}, []byte{0xff, 0x03, 0x00, 0x21}},
		{"ppp_hdlc by first byte: unframed", kindPPPHDLC, []byte{0x00}, []byte{0x00, 0x57}},
		{"ppp_hdlc by first byte: cisco", kindPPPHDLC, []byte{0x0f, 0x00, 0x08}, []byte{0x0f, 0x00, 0x08, 0x00}},
		{"c_hdlc", kindCHDLC, []byte{0x0f, 0x00, 0x08}, []byte{0x0f, 0x00, 0x08, 0x00}},
	} {
		var hdr [ethHeaderLen]byte
		if hl, skip, ok := normalize(c.k, c.short, &hdr); ok {
			t.Errorf("%s: %x accepted (hl %d, skip %d), want refused", c.name, c.short, hl, skip)
		}
		hl, skip, ok := normalize(c.k, c.fits, &hdr)
		if !ok || hl != ethHeaderLen || skip != len(c.fits) {
			t.Errorf("%s: %x = %d, %d, %v; want 14, %d, true", c.name, c.fits, hl, skip, ok, len(c.fits))
		}
	}
}

// TestNormalizeNoAllocs: normalisation runs per packet.
func TestNormalizeNoAllocs(t *testing.T) {
	var hdr [ethHeaderLen]byte
	recs := make([][]byte, len(linkCases))
	kinds := make([]linkKind, len(linkCases))
	for i, c := range linkCases {
		recs[i], kinds[i] = c.rec, linkKindOf(uint32(c.lt))
	}
	n := allocs.Count(100, func() {
		for i := range recs {
			normalize(kinds[i], recs[i], &hdr)
		}
	})
	if n != 0 {
		t.Errorf("normalize allocated %d times in 100 runs over every link type, want 0", n)
	}
}

// linktypeCaptures are the generated captures of testdata/captures/linktypes
// that carry the ten shared packets under another link type.
var linktypeCaptures = []string{
	"raw-101.pcap", "sll-113.pcap", "sll2-276.pcap", "null-0.pcap", "loop-108.pcap",
	"ppp-9.pcap", "ppp_hdlc-50.pcap", "ppp_pppd-166.pcap", "c_hdlc-104.pcap",
}

// TestLinktypeCapturesMatchEthernet replays each generated capture and
// checks it yields the same frames as ethernet.pcap after the MACs (which
// only SLL records keep) and, through the default pipeline, the same
// parse-stage counters and verdicts.
func TestLinktypeCapturesMatchEthernet(t *testing.T) {
	const dir = "../testdata/captures/linktypes/"
	frames := func(t *testing.T, name string) [][]byte {
		a := newArena(t, 64, 2048, 128)
		p, err := OpenReplay(dir+name, a, DefaultReplayOptions())
		if err != nil {
			t.Fatal(err)
		}
		got := drain(t, p, a, 4)
		if got.err != nil {
			t.Fatal(got.err)
		}
		if st := p.Stats(); st.Malformed != 0 || st.Records != uint64(len(got.pkts)) {
			t.Fatalf("%s: stats %+v for %d packets", name, st, len(got.pkts))
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		return got.pkts
	}
	report := func(t *testing.T, name string) Report {
		cfg := ReplayConfig{Capture: dir + name, Graph: defaultGraph(t), Engine: DefaultOptions(), Replay: DefaultReplayOptions()}
		cfg.Engine.Workers = 1
		rep, err := Replay(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Balanced || rep.Received != 10 {
			t.Fatalf("%s: %s", name, rep.AccountingLine())
		}
		rep = rep.Deterministic()
		rep.Input = ""
		return rep
	}
	want := frames(t, "ethernet.pcap")
	if len(want) != 10 {
		t.Fatalf("ethernet.pcap: %d packets, want 10", len(want))
	}
	wantRep := report(t, "ethernet.pcap")
	for _, name := range linktypeCaptures {
		t.Run(name, func(t *testing.T) {
			got := frames(t, name)
			if len(got) != len(want) {
				t.Fatalf("%d packets, want %d", len(got), len(want))
			}
			for i := range got {
				if !bytes.Equal(got[i][12:], want[i][12:]) {
					t.Errorf("packet %d: ethertype and payload\n got  %x\n want %x", i, got[i][12:], want[i][12:])
				}
				if !bytes.Equal(got[i][0:6], make([]byte, 6)) {
					t.Errorf("packet %d: destination MAC %x, want zeros", i, got[i][0:6])
				}
			}
			if rep := report(t, name); !reflect.DeepEqual(rep, wantRep) {
				t.Errorf("default pipeline counters differ from ethernet.pcap:\n got  %+v\n want %+v", rep, wantRep)
			}
		})
	}
}

// TestLinktypeCaptureUnsupported: the generated example of an unsupported
// link type is refused at open with the one-line error.
func TestLinktypeCaptureUnsupported(t *testing.T) {
	path := "../testdata/captures/linktypes/unsupported-ieee802_11-105.pcap"
	_, err := OpenReplay(path, newArena(t, 4, 2048, 0), DefaultReplayOptions())
	want := "capture " + path + ": link type 105 (IEEE802_11) is not supported (supported: " + supportedLinkTypes + ")"
	if !errors.Is(err, ErrUnsupportedLinkType) || err.Error() != want {
		t.Errorf("err %v\nwant %s", err, want)
	}
}
