package pipelines

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/rings"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// rwTag is one VLAN tag of a test packet.
type rwTag struct {
	tpid uint16
	pcp  uint8
	id   uint16
}

// rwPkt describes a test packet; bytes() serializes it with gopacket, full
// checksums included. The rewrite tests apply the expected rewrite to the
// spec (a reference model) and compare against the stage's output bytes.
type rwPkt struct {
	dstMAC, srcMAC [6]byte
	tags           []rwTag
	v6             bool
	srcIP, dstIP   net.IP
	ttl            uint8
	ipOpts         []layers.IPv4Option
	fragOff        uint16 // in 8-byte units
	moreFrags      bool
	proto          layers.IPProtocol // TCP, UDP or ICMPv4
	sport, dport   uint16
	tcpOpts        []layers.TCPOption
	udpNoCsum      bool
	payload        []byte
}

func (s rwPkt) clone() rwPkt {
	c := s
	c.tags = append([]rwTag(nil), s.tags...)
	c.srcIP = append(net.IP(nil), s.srcIP...)
	c.dstIP = append(net.IP(nil), s.dstIP...)
	return c
}

func (s rwPkt) nonFirstFrag() bool { return !s.v6 && s.fragOff != 0 }

func (s rwPkt) bytes(t testing.TB) []byte {
	t.Helper()
	var ls []gopacket.SerializableLayer
	eth := &layers.Ethernet{SrcMAC: s.srcMAC[:], DstMAC: s.dstMAC[:]}
	ls = append(ls, eth)
	l3Type := layers.EthernetTypeIPv4
	if s.v6 {
		l3Type = layers.EthernetTypeIPv6
	}
	typ := &eth.EthernetType
	for _, tg := range s.tags {
		*typ = layers.EthernetType(tg.tpid)
		q := &layers.Dot1Q{Priority: tg.pcp, VLANIdentifier: tg.id}
		ls = append(ls, q)
		typ = &q.Type
	}
	*typ = l3Type
	if s.v6 {
		ls = append(ls, &layers.IPv6{Version: 6, HopLimit: s.ttl, NextHeader: s.proto, SrcIP: s.srcIP, DstIP: s.dstIP})
	} else {
		ip := &layers.IPv4{Version: 4, TTL: s.ttl, Protocol: s.proto, SrcIP: s.srcIP, DstIP: s.dstIP,
			Options: s.ipOpts, FragOffset: s.fragOff, Id: 0x1234}
		if s.moreFrags {
			ip.Flags = layers.IPv4MoreFragments
		}
		ls = append(ls, ip)
	}
	if s.nonFirstFrag() {
		ls = append(ls, gopacket.Payload(s.payload))
	} else {
		switch s.proto {
		case layers.IPProtocolTCP:
			ls = append(ls, &layers.TCP{SrcPort: layers.TCPPort(s.sport), DstPort: layers.TCPPort(s.dport),
				Seq: 7, Ack: 9, ACK: true, Window: 512, Options: s.tcpOpts}, gopacket.Payload(s.payload))
		case layers.IPProtocolUDP:
			ls = append(ls, &layers.UDP{SrcPort: layers.UDPPort(s.sport), DstPort: layers.UDPPort(s.dport)}, gopacket.Payload(s.payload))
		case layers.IPProtocolICMPv4:
			ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(8, 0), Id: s.sport, Seq: s.dport}, gopacket.Payload(s.payload))
		}
	}
	p := stSerialize(t, ls...)
	if s.udpNoCsum && s.proto == layers.IPProtocolUDP && !s.nonFirstFrag() {
		m := stMeta(p)
		p[m.L4Off+6], p[m.L4Off+7] = 0, 0
	}
	return p
}

// rwRandPkt returns a random packet: IPv4 (mostly) or IPv6, TCP, UDP or
// ICMP, with or without IP and TCP options, 0 to 2 tags, fragments and odd
// payload lengths.
func rwRandPkt(r *rand.Rand) rwPkt {
	var s rwPkt
	for i := range s.srcMAC {
		s.srcMAC[i], s.dstMAC[i] = byte(r.Uint32()), byte(r.Uint32())
	}
	for n := r.IntN(3); n > 0; n-- {
		tpid := uint16(0x8100)
		if r.IntN(2) == 0 {
			tpid = 0x88a8
		}
		s.tags = append(s.tags, rwTag{tpid: tpid, pcp: uint8(r.IntN(8)), id: uint16(r.IntN(4096))})
	}
	s.v6 = r.IntN(6) == 0
	ipLen := 4
	if s.v6 {
		ipLen = 16
	}
	s.srcIP, s.dstIP = make(net.IP, ipLen), make(net.IP, ipLen)
	for i := 0; i < ipLen; i++ {
		s.srcIP[i], s.dstIP[i] = byte(r.Uint32()), byte(r.Uint32())
	}
	s.ttl = uint8(r.IntN(256))
	switch r.IntN(7) {
	case 0:
		s.proto = layers.IPProtocolICMPv4
	case 1, 2, 3:
		s.proto = layers.IPProtocolUDP
	default:
		s.proto = layers.IPProtocolTCP
	}
	if s.v6 && s.proto == layers.IPProtocolICMPv4 {
		s.proto = layers.IPProtocolTCP
	}
	s.sport, s.dport = uint16(r.Uint32()), uint16(r.Uint32())
	if !s.v6 && r.IntN(3) == 0 {
		for n := 1 + r.IntN(3); n > 0; n-- {
			data := make([]byte, r.IntN(7))
			for i := range data {
				data[i] = byte(r.Uint32())
			}
			// Not LSRR/SSRR: with source routing the L4 pseudo-header
			// holds the final hop, not the header's destination.
			typ := [...]uint8{0x82, 0x86, 0x88, 0x94}[r.IntN(4)]
			s.ipOpts = append(s.ipOpts, layers.IPv4Option{OptionType: typ, OptionLength: uint8(2 + len(data)), OptionData: data})
		}
	}
	if r.IntN(3) == 0 {
		mss := make([]byte, 2)
		binary.BigEndian.PutUint16(mss, uint16(r.Uint32()))
		s.tcpOpts = append(s.tcpOpts, layers.TCPOption{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: mss})
		if r.IntN(2) == 0 {
			s.tcpOpts = append(s.tcpOpts, layers.TCPOption{OptionType: layers.TCPOptionKindNop, OptionLength: 1},
				layers.TCPOption{OptionType: layers.TCPOptionKindWindowScale, OptionLength: 3, OptionData: []byte{byte(r.IntN(15))}})
		}
	}
	s.udpNoCsum = r.IntN(8) == 0
	if !s.v6 {
		switch r.IntN(10) {
		case 0: // first fragment
			s.moreFrags = true
		case 1: // later fragment
			s.fragOff = uint16(1 + r.IntN(1000))
			s.moreFrags = r.IntN(2) == 0
		}
	}
	s.payload = make([]byte, r.IntN(80)) // odd and even lengths
	for i := range s.payload {
		s.payload[i] = byte(r.Uint32())
	}
	if s.nonFirstFrag() && len(s.payload) < 8 {
		s.payload = append(s.payload, 1, 2, 3, 4, 5, 6, 7, 8)
	}
	return s
}

// rwModel is the reference model of a rewrite config: it applies the
// documented semantics to a spec, field by field, without any checksum
// arithmetic (gopacket recomputes every checksum from scratch).
type rwModel struct {
	pop        bool
	push       *rwTag
	src, dst   *[6]byte
	swap       bool
	ttl        bool
	snat, dnat *rwNATModel
}

type rwNATModel struct {
	addr net.IP
	port uint16 // 0: address only
}

// apply returns the expected packet and edge name ("next",
// "ttl_exceeded"); the spec is returned unchanged for a drop.
func (m rwModel) apply(s rwPkt) (rwPkt, string) {
	if m.ttl && s.ttl <= 1 {
		return s, "ttl_exceeded"
	}
	s = s.clone()
	if m.pop && len(s.tags) > 0 {
		s.tags = s.tags[1:]
	}
	if m.push != nil {
		s.tags = append([]rwTag{*m.push}, s.tags...)
	}
	if m.src != nil {
		s.srcMAC = *m.src
	}
	if m.dst != nil {
		s.dstMAC = *m.dst
	}
	if m.swap {
		s.srcMAC, s.dstMAC = s.dstMAC, s.srcMAC
	}
	if m.ttl {
		s.ttl--
	}
	l4 := !s.nonFirstFrag() && (s.proto == layers.IPProtocolTCP || s.proto == layers.IPProtocolUDP)
	if m.snat != nil && !s.v6 {
		s.srcIP = m.snat.addr
		if m.snat.port != 0 && l4 {
			s.sport = m.snat.port
		}
	}
	if m.dnat != nil && !s.v6 {
		s.dstIP = m.dnat.addr
		if m.dnat.port != 0 && l4 {
			s.dport = m.dnat.port
		}
	}
	return s, "next"
}

var (
	rwMAC1 = [6]byte{0x02, 0, 0, 0, 0, 1}
	rwMAC2 = [6]byte{0x02, 0, 0, 0, 0, 2}
)

// rewriteCases pairs rewrite configs with their reference models.
var rewriteCases = []struct {
	name  string
	yaml  string
	model rwModel
}{
	{"swap_macs", `{swap_macs: true}`, rwModel{swap: true}},
	{"macs", `{src_mac: "02:00:00:00:00:01", dst_mac: "02-00-00-00-00-02"}`, rwModel{src: &rwMAC1, dst: &rwMAC2}},
	{"ttl", `{ttl_decrement: true}`, rwModel{ttl: true}},
	{"snat_port_ttl", `{ttl_decrement: true, snat: {addr: 198.51.100.1, port: 4000}}`,
		rwModel{ttl: true, snat: &rwNATModel{net.IPv4(198, 51, 100, 1).To4(), 4000}}},
	{"dnat_port", `{dnat: {addr: 203.0.113.9, port: 8080}}`, rwModel{dnat: &rwNATModel{net.IPv4(203, 0, 113, 9).To4(), 8080}}},
	{"snat_addr_only", `{snat: {addr: 10.1.2.3}}`, rwModel{snat: &rwNATModel{net.IPv4(10, 1, 2, 3).To4(), 0}}},
	{"everything", `{pop_vlan: true, push_vlan: 4095, push_vlan_tpid: 0x88a8, push_vlan_pcp: 7, src_mac: "02:00:00:00:00:01",
		dst_mac: "02:00:00:00:00:02", swap_macs: true, ttl_decrement: true,
		snat: {addr: 255.255.255.255, port: 65535}, dnat: {addr: 0.0.0.1, port: 1}}`,
		rwModel{pop: true, push: &rwTag{0x88a8, 7, 4095}, src: &rwMAC1, dst: &rwMAC2, swap: true, ttl: true,
			snat: &rwNATModel{net.IPv4(255, 255, 255, 255).To4(), 65535}, dnat: &rwNATModel{net.IPv4(0, 0, 0, 1).To4(), 1}}},
	{"pop", `{pop_vlan: true}`, rwModel{pop: true}},
	{"push", `{push_vlan: 100, push_vlan_pcp: 5}`, rwModel{push: &rwTag{0x8100, 5, 100}}},
}

// stEdgeName maps an edge number of tpl back to the model's names.
func stEdgeName(tpl Template, e Edge) string {
	tg := tpl.Edges()[e]
	if tg.Drop != "" {
		return tg.Drop
	}
	return "next"
}

// TestRewriteMatchesFullRecompute checks, over many random packets, that
// the stage's output bytes equal gopacket's serialization of the expected
// packet with every checksum recomputed in full, and that Meta matches a
// fresh decode of those bytes.
func TestRewriteMatchesFullRecompute(t *testing.T) {
	const n = 600
	for _, tc := range rewriteCases {
		t.Run(tc.name, func(t *testing.T) {
			tpl := stMustBuild(t, rewriteKind, tc.yaml)
			st := tpl.NewInstance()
			r := rand.New(rand.NewPCG(1, uint64(len(tc.name))))
			specs := make([]rwPkt, n)
			pkts := make([][]byte, n)
			for i := range specs {
				specs[i] = rwRandPkt(r)
				if tc.model.push != nil && len(specs[i].tags) == 2 && !tc.model.pop {
					specs[i].tags = specs[i].tags[:1] // Meta holds two tags
				}
				pkts[i] = specs[i].bytes(t)
			}
			a := stArena(t)
			b := stFillBatch(t, a, pkts)
			edges := stRunAll(st, b)
			var skipped uint64
			for i := range specs {
				want, wantEdge := tc.model.apply(specs[i])
				if (tc.model.snat != nil || tc.model.dnat != nil) && specs[i].v6 && wantEdge == "next" {
					skipped++
				}
				wantBytes := want.bytes(t)
				got := b.Packet(i)
				if e := stEdgeName(tpl, edges[i]); e != wantEdge {
					t.Fatalf("packet %d: edge %s, want %s", i, e, wantEdge)
				}
				// gopacket pads frames to 60 bytes; the stage keeps the
				// input's padding, so compare up to the IP packet's end and
				// check that the rest is the input's (zero) padding.
				end := stIPEnd(wantBytes)
				wantLen := len(pkts[i]) + 4*(len(want.tags)-len(specs[i].tags))
				if len(got) != wantLen || !bytes.Equal(got[:end], wantBytes[:end]) || !stAllZero(got[end:]) {
					t.Fatalf("packet %d (%+v):\n got %x\nwant %x\n  in %x", i, specs[i], got, wantBytes, pkts[i])
				}
				gotMeta := b.Meta[i]
				gotMeta.Seq = 0
				if wantMeta := stMeta(wantBytes); gotMeta != wantMeta {
					t.Fatalf("packet %d: meta\n got %+v\nwant %+v", i, gotMeta, wantMeta)
				}
			}
			if got := stCounter(st, "exception=skipped"); got != skipped {
				t.Errorf("skipped counter %d, want %d", got, skipped)
			}
		})
	}
}

func stAllZero(p []byte) bool {
	for _, c := range p {
		if c != 0 {
			return false
		}
	}
	return true
}

func TestRewriteBuildErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{`{}`, "no operations"},
		{`{swap_mac: true}`, `unknown option "swap_mac"`},
		{`{push_vlan: 4096}`, "push_vlan 4096: want a VLAN ID in 0..4095"},
		{`{push_vlan: -1}`, "push_vlan -1"},
		{`{push_vlan: 1, push_vlan_tpid: 0x9100}`, "push_vlan_tpid 0x9100: want 0x8100 or 0x88a8"},
		{`{push_vlan: 1, push_vlan_pcp: 8}`, "push_vlan_pcp 8: want 0..7"},
		{`{pop_vlan: true, push_vlan_pcp: 1}`, "push_vlan_pcp needs push_vlan"},
		{`{src_mac: "02:00:00:00:00"}`, `src_mac "02:00:00:00:00"`},
		{`{dst_mac: "00:00:00:00:fe:80:00:00:00:00:00:00:02:00:5e:10:00:00:00:01"}`, "dst_mac"},
		{`{snat: {addr: "2001:db8::1"}}`, `snat addr "2001:db8::1": want an IPv4 address`},
		{`{dnat: {addr: 10.0.0.1, port: 0}}`, "dnat port 0: want 1..65535"},
		{`{dnat: {addr: 10.0.0.1, port: 70000}}`, "dnat port 70000"},
		{`{snat: {addr: 10.0.0.1, prt: 1}}`, `unknown option "prt"`},
		{`{ttl_decrement: maybe}`, "cannot unmarshal"},
	} {
		t.Run(tc.yaml, func(t *testing.T) { stWantBuildError(t, rewriteKind, tc.yaml, tc.want) })
	}
}

func TestRewriteEdges(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want []string
	}{
		{`{swap_macs: true}`, []string{"next"}},
		{`{ttl_decrement: true}`, []string{"next", "drop:ttl_exceeded"}},
		{`{push_vlan: 5}`, []string{"next", "drop:no_headroom"}},
		{`{push_vlan: 5, ttl_decrement: true, next: out}`, []string{"next", "drop:ttl_exceeded", "drop:no_headroom"}},
	} {
		tpl := stMustBuild(t, rewriteKind, tc.yaml)
		var got []string
		for _, e := range tpl.Edges() {
			got = append(got, e.String())
		}
		if len(got) != len(tc.want) {
			t.Fatalf("%s: edges %v, want %v", tc.yaml, got, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("%s: edges %v, want %v", tc.yaml, got, tc.want)
			}
		}
	}
}

// stPlaceAt copies p into a fresh frame so that it starts headroom bytes into
// the frame, and returns a one-packet batch holding it.
func stPlaceAt(t *testing.T, a *rings.Arena, p []byte, headroom int) *rings.Batch {
	t.Helper()
	addr, _ := a.Alloc()
	base := addr &^ uint64(a.FrameSize()-1)
	addr = base + uint64(headroom)
	copy(a.Frame(addr)[headroom:], p)
	b := rings.NewBatch(1, a)
	b.SetLen(1)
	b.Descs[0] = rings.Desc{Addr: addr, Len: uint32(len(p))}
	b.Meta[0] = stMeta(p)
	return b
}

func TestRewriteNoHeadroom(t *testing.T) {
	a := stArena(t)
	untagged := rwPkt{ttl: 9, srcIP: net.IP{1, 2, 3, 4}, dstIP: net.IP{5, 6, 7, 8}, proto: layers.IPProtocolUDP, sport: 1, dport: 2}
	tagged := untagged.clone()
	tagged.tags = []rwTag{{0x8100, 0, 7}}

	tpl := stMustBuild(t, rewriteKind, `{push_vlan: 10, swap_macs: true}`)
	for _, hr := range []int{0, 3} {
		in := untagged.bytes(t)
		b := stPlaceAt(t, a, in, hr)
		if e := stEdgeName(tpl, stRunAll(tpl.NewInstance(), b)[0]); e != "no_headroom" {
			t.Fatalf("headroom %d: edge %s, want no_headroom", hr, e)
		}
		if !bytes.Equal(b.Packet(0), in) || b.Headroom(0) != hr {
			t.Fatalf("headroom %d: dropped packet was modified", hr)
		}
	}
	b := stPlaceAt(t, a, untagged.bytes(t), 4)
	if e := stEdgeName(tpl, stRunAll(tpl.NewInstance(), b)[0]); e != "next" || b.Headroom(0) != 0 {
		t.Fatalf("headroom 4: edge %s, headroom left %d", e, b.Headroom(0))
	}

	// Pop then push needs no headroom: the popped tag makes room.
	tpl = stMustBuild(t, rewriteKind, `{pop_vlan: true, push_vlan: 10}`)
	b = stPlaceAt(t, a, tagged.bytes(t), 0)
	if e := stEdgeName(tpl, stRunAll(tpl.NewInstance(), b)[0]); e != "next" {
		t.Fatalf("pop+push without headroom: edge %s, want next", e)
	}
	want := untagged.clone()
	want.tags = []rwTag{{0x8100, 0, 10}}
	if wb := want.bytes(t); !bytes.Equal(b.Packet(0), wb) {
		t.Fatalf("pop+push:\n got %x\nwant %x", b.Packet(0), wb)
	}
	// ... but an untagged packet still does.
	b = stPlaceAt(t, a, untagged.bytes(t), 0)
	if e := stEdgeName(tpl, stRunAll(tpl.NewInstance(), b)[0]); e != "no_headroom" {
		t.Fatalf("pop+push on untagged without headroom: edge %s, want no_headroom", e)
	}
}

// TestRewriteTruncated cuts packets at every length inside their L4 header
// and checks that NAT writes only the fields wholly inside the packet,
// never past its end, and counts the packet as truncated.
func TestRewriteTruncated(t *testing.T) {
	tpl := stMustBuild(t, rewriteKind, `{ttl_decrement: true, snat: {addr: 198.51.100.1, port: 4000}, dnat: {addr: 203.0.113.9, port: 8080}}`)
	a := stArena(t)
	for _, proto := range []layers.IPProtocol{layers.IPProtocolTCP, layers.IPProtocolUDP} {
		s := rwPkt{ttl: 9, srcIP: net.IP{1, 2, 3, 4}, dstIP: net.IP{5, 6, 7, 8}, proto: proto, sport: 1111, dport: 2222, payload: []byte("hello")}
		full := s.bytes(t)
		m := stMeta(full)
		l4 := int(m.L4Off)
		csumOff := l4 + 6
		if proto == layers.IPProtocolTCP {
			csumOff = l4 + 16
		}
		for cut := l4; cut < csumOff+2; cut++ {
			st := tpl.NewInstance()
			in := full[:cut]
			b := stPlaceAt(t, a, in, 256)
			b.Meta[0] = m // the parse stage's view of the uncut packet: offsets past the end
			frame := a.Frame(b.Descs[0].Addr)
			end := 256 + cut
			for i := end; i < end+64; i++ {
				frame[i] = 0xee // canary
			}
			if e := stEdgeName(tpl, stRunAll(st, b)[0]); e != "next" {
				t.Fatalf("%v cut %d: edge %s", proto, cut, e)
			}
			for i := end; i < end+64; i++ {
				if frame[i] != 0xee {
					t.Fatalf("%v cut %d: byte %d past the end written", proto, cut, i-256)
				}
			}
			got := b.Packet(0)
			ip := got[m.L3Off:]
			if !bytes.Equal(ip[12:20], []byte{198, 51, 100, 1, 203, 0, 113, 9}) || ip[8] != 8 {
				t.Fatalf("%v cut %d: addresses/TTL not rewritten: %x", proto, cut, ip[:20])
			}
			if gopacket.FoldChecksum(gopacket.ComputeChecksum(ip[:20], 0)) != 0 && ^gopacket.FoldChecksum(gopacket.ComputeChecksum(ip[:20], 0)) != 0 {
				t.Fatalf("%v cut %d: IPv4 header checksum wrong", proto, cut)
			}
			if cut >= l4+2 {
				if got := binary.BigEndian.Uint16(got[l4:]); got != 4000 {
					t.Fatalf("%v cut %d: source port %d, want 4000", proto, cut, got)
				}
			}
			if cut >= l4+4 {
				if got := binary.BigEndian.Uint16(got[l4+2:]); got != 8080 {
					t.Fatalf("%v cut %d: destination port %d, want 8080", proto, cut, got)
				}
			}
			if n := stCounter(st, "exception=truncated"); n != 1 {
				t.Fatalf("%v cut %d: truncated counter %d, want 1", proto, cut, n)
			}
		}
	}
}

func TestRewriteRunt(t *testing.T) {
	tpl := stMustBuild(t, rewriteKind, `{swap_macs: true, push_vlan: 3}`)
	a := stArena(t)
	in := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}
	b := stPlaceAt(t, a, in, 0)
	st := tpl.NewInstance()
	if e := stEdgeName(tpl, stRunAll(st, b)[0]); e != "next" || !bytes.Equal(b.Packet(0), in) {
		t.Fatalf("runt: edge %s, bytes %x", e, b.Packet(0))
	}
	if n := stCounter(st, "exception=runt"); n != 1 {
		t.Fatalf("runt counter %d, want 1", n)
	}
}

// TestRewriteChecksumZero builds packets whose rewritten checksum folds to
// zero: TCP keeps 0x0000, UDP sends 0xffff (RFC 768), as a full recompute
// does; and a UDP packet without a checksum keeps none.
func TestRewriteChecksumZero(t *testing.T) {
	model := rwModel{snat: &rwNATModel{net.IP{198, 51, 100, 1}, 4000}}
	tpl := stMustBuild(t, rewriteKind, `{snat: {addr: 198.51.100.1, port: 4000}}`)
	a := stArena(t)
	for _, proto := range []layers.IPProtocol{layers.IPProtocolTCP, layers.IPProtocolUDP} {
		s := rwPkt{ttl: 9, srcIP: net.IP{1, 2, 3, 4}, dstIP: net.IP{5, 6, 7, 8}, proto: proto, sport: 1, dport: 2, payload: make([]byte, 20)}
		want, _ := model.apply(s)
		wb := want.bytes(t)
		m := stMeta(wb)
		csumOff := int(m.L4Off) + 6
		if proto == layers.IPProtocolTCP {
			csumOff = int(m.L4Off) + 16
		}
		// Choose the payload's last word so that the rewritten packet's
		// checksum is exactly zero (or 0xffff for UDP).
		c := binary.BigEndian.Uint16(wb[csumOff:])
		binary.BigEndian.PutUint16(s.payload[18:], c)
		want, _ = model.apply(s)
		wb = want.bytes(t)
		wantCsum := uint16(0)
		if proto == layers.IPProtocolUDP {
			wantCsum = 0xffff
		}
		if got := binary.BigEndian.Uint16(wb[csumOff:]); got != wantCsum {
			t.Fatalf("%v: test setup: checksum %#x, want %#x", proto, got, wantCsum)
		}
		b := stPlaceAt(t, a, s.bytes(t), 256)
		stRunAll(tpl.NewInstance(), b)
		if !bytes.Equal(b.Packet(0), wb) {
			t.Fatalf("%v:\n got %x\nwant %x", proto, b.Packet(0), wb)
		}
	}
	s := rwPkt{ttl: 9, srcIP: net.IP{1, 2, 3, 4}, dstIP: net.IP{5, 6, 7, 8}, proto: layers.IPProtocolUDP, sport: 1, dport: 2, udpNoCsum: true, payload: []byte{1, 2, 3}}
	b := stPlaceAt(t, a, s.bytes(t), 256)
	stRunAll(tpl.NewInstance(), b)
	want, _ := model.apply(s)
	if wb := want.bytes(t); !bytes.Equal(b.Packet(0)[:stIPEnd(wb)], wb[:stIPEnd(wb)]) {
		t.Fatalf("udp without checksum:\n got %x\nwant %x", b.Packet(0), wb)
	}
}

// rewriteAllocBatch returns a batch of 64 64-byte TCP packets.
func stBenchPackets(t testing.TB, n int) [][]byte {
	pkts := make([][]byte, n)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range pkts {
		s := rwPkt{ttl: 64, srcIP: net.IP{10, 0, byte(i), 1}, dstIP: net.IP{10, 1, 0, byte(i)}, proto: layers.IPProtocolTCP,
			sport: uint16(r.Uint32()), dport: 80, payload: make([]byte, 10)}
		pkts[i] = s.bytes(t) // 14 + 20 + 20 + 10 = 64 bytes
	}
	return pkts
}

func TestRewriteZeroAlloc(t *testing.T) {
	tpl := stMustBuild(t, rewriteKind, rewriteCases[len(rewriteCases)-3].yaml) // everything
	st := tpl.NewInstance()
	b := stFillBatch(t, stArena(t), stBenchPackets(t, 64))
	idx, next := stDense(b.Len())
	n := allocs.Count(100, func() {
		for i := range b.Meta {
			b.Packet(i)[b.Meta[i].L3Off+8] = 64 // keep TTL alive
		}
		st.Process(b, idx, next)
	})
	if n != 0 {
		t.Fatalf("Process allocated %d times in 100 batches, want 0", n)
	}
	for i, e := range next {
		if e != 0 {
			t.Fatalf("packet %d went to edge %d", i, e)
		}
	}
}

func rwBenchmark(b *testing.B, cfg string, resetTTL bool) {
	tpl := stMustBuild(b, rewriteKind, cfg)
	st := tpl.NewInstance()
	const n = 64
	batch := stFillBatch(b, stArena(b), stBenchPackets(b, n))
	if len(batch.Packet(0)) != 64 {
		b.Fatalf("packet length %d, want 64", len(batch.Packet(0)))
	}
	idx, next := stDense(n)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		// With ttl_decrement, reset the TTL byte so every iteration
		// rewrites (64 byte stores, included in the timing); the checksum
		// drifts, which the stage does not care about.
		if resetTTL {
			for i := range batch.Meta {
				batch.Packet(i)[batch.Meta[i].L3Off+8] = 64
			}
		}
		st.Process(batch, idx, next)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/pkt")
}

func BenchmarkRewriteSwapMACs(b *testing.B) { rwBenchmark(b, `{swap_macs: true}`, false) }

// BenchmarkRewriteSNATSwap is the bench's default-shape rewrite: SNAT to
// one address and port plus a MAC swap, the straight-line NAT loop.
func BenchmarkRewriteSNATSwap(b *testing.B) {
	rwBenchmark(b, `{swap_macs: true, snat: {addr: 198.51.100.1, port: 4000}}`, false)
}

func BenchmarkRewriteNATTTL(b *testing.B) {
	rwBenchmark(b, `{ttl_decrement: true, snat: {addr: 198.51.100.1, port: 4000}, dnat: {addr: 203.0.113.9, port: 8080}}`, true)
}

// FuzzRewrite runs every rewrite over arbitrary bytes with arbitrary Meta
// offsets and flags (as a buggy or hostile parse result might leave them):
// the stage must not panic and must not write past the packet's end.
func FuzzRewrite(f *testing.F) {
	s := rwPkt{ttl: 9, srcIP: net.IP{1, 2, 3, 4}, dstIP: net.IP{5, 6, 7, 8}, proto: layers.IPProtocolTCP, sport: 1, dport: 2, payload: []byte{1, 2, 3}}
	tcp := s.bytes(f)
	f.Add(tcp, uint16(14), uint16(rings.FlagIPv4|rings.FlagL4), uint16(34), uint8(0))
	f.Add(tcp[:40], uint16(14), uint16(rings.FlagIPv4|rings.FlagL4), uint16(34), uint8(1))
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x81, 0, 0, 1, 0x86, 0xdd}, uint16(18), uint16(rings.FlagIPv6), uint16(0), uint8(2))
	f.Add([]byte{}, uint16(0), uint16(0), uint16(0), uint8(3))
	cfgs := []string{
		`{pop_vlan: true, push_vlan: 7, swap_macs: true, ttl_decrement: true, snat: {addr: 9.9.9.9, port: 99}, dnat: {addr: 8.8.8.8, port: 88}}`,
		`{push_vlan: 7, ttl_decrement: true}`,
		`{pop_vlan: true, dnat: {addr: 8.8.8.8}}`,
		`{src_mac: "02:00:00:00:00:01", ttl_decrement: true, snat: {addr: 9.9.9.9, port: 99}}`,
	}
	tpls := make([]Template, len(cfgs))
	for i, c := range cfgs {
		tpls[i] = stMustBuild(f, rewriteKind, c)
	}
	a := stArena(f)
	addr, _ := a.Alloc()
	f.Fuzz(func(t *testing.T, pkt []byte, l3 uint16, flags uint16, l4 uint16, which uint8) {
		if len(pkt) > 1500 {
			pkt = pkt[:1500]
		}
		frame := a.Frame(addr)
		for i := range frame {
			frame[i] = 0xee
		}
		hr := a.Headroom() - int(which>>2)%8 // sometimes less headroom than a tag needs
		base := addr &^ uint64(a.FrameSize()-1)
		copy(frame[hr:], pkt)
		b := rings.NewBatch(1, a)
		b.SetLen(1)
		b.Descs[0] = rings.Desc{Addr: base + uint64(hr), Len: uint32(len(pkt))}
		b.Meta[0] = rings.Meta{L3Off: l3, L4Off: l4, Flags: rings.Flags(flags), NumVLANs: uint8(flags % 3)}
		st := tpls[int(which)%len(tpls)].NewInstance()
		stRunAll(st, b)
		if st.(LengthKeeper).KeepsLength() && (b.Descs[0].Len != uint32(len(pkt)) || b.Descs[0].Addr != base+uint64(hr)) {
			t.Fatalf("a stage that keeps lengths moved the packet to %d+%d from %d+%d", b.Descs[0].Addr-base, b.Descs[0].Len, hr, len(pkt))
		}
		start := int(b.Descs[0].Addr - base)
		end := start + int(b.Descs[0].Len)
		// The packet may have grown at the front by one tag, or shrunk by
		// one; nothing outside [min(start, hr), end] may change.
		lo := min(start, hr)
		for i := range frame {
			if (i < lo || i >= end) && frame[i] != 0xee {
				t.Fatalf("byte %d outside the packet [%d, %d) written", i, start, end)
			}
		}
		if end-start != len(pkt) && end-start != len(pkt)+4 && end-start != len(pkt)-4 {
			t.Fatalf("length %d from %d", end-start, len(pkt))
		}
	})
}

// rwFastCfgs are option sets for the differential tests of Process's
// specialised loops against the general per-packet path (s.one).
var rwFastCfgs = []string{
	`{swap_macs: true}`,
	`{src_mac: "02:00:00:00:00:01"}`,
	`{dst_mac: "02:00:00:00:00:02", swap_macs: true}`,
	`{src_mac: "02:00:00:00:00:01", dst_mac: "02:00:00:00:00:02", swap_macs: true}`,
	`{ttl_decrement: true}`,
	`{ttl_decrement: true, snat: {addr: 198.51.100.1, port: 4000}, dnat: {addr: 203.0.113.9, port: 8080}}`,
	`{swap_macs: true, ttl_decrement: true, snat: {addr: 255.255.255.255, port: 65535}}`,
	`{dnat: {addr: 10.0.0.1}}`,
	`{src_mac: "02:00:00:00:00:01", snat: {addr: 10.0.0.2}, dnat: {addr: 10.0.0.3, port: 1}}`,
	`{pop_vlan: true, swap_macs: true, ttl_decrement: true}`,
	// processNAT4: the bench's rewrite, then NAT with each MAC option.
	`{swap_macs: true, snat: {addr: 198.51.100.1, port: 4000}}`,
	`{dst_mac: "02:00:00:00:00:02", dnat: {addr: 203.0.113.9, port: 8080}}`,
	`{snat: {addr: 0.0.0.0, port: 1}, dnat: {addr: 255.255.255.255, port: 65535}}`,
}

// rwAgree runs tpl's Process and its general per-packet path on copies of
// pkt (placed hr bytes into a frame, with Meta m) and fails t unless the
// frames, descriptors, Meta, edges and counters come out the same.
func rwAgree(t testing.TB, a *rings.Arena, addrs [2]uint64, tpl Template, pkt []byte, hr int, m rings.Meta) {
	t.Helper()
	var (
		bs    [2]*rings.Batch
		sts   [2]*rewriteStage
		edges [2]Edge
	)
	for v := range bs {
		frame := a.Frame(addrs[v])
		for i := range frame {
			frame[i] = 0xee
		}
		copy(frame[hr:], pkt)
		base := addrs[v] &^ uint64(a.FrameSize()-1)
		b := rings.NewBatch(1, a)
		b.SetLen(1)
		b.Descs[0] = rings.Desc{Addr: base + uint64(hr), Len: uint32(len(pkt))}
		b.Meta[0] = m
		st := tpl.NewInstance().(*rewriteStage)
		next := []Edge{0xee}
		if v == 0 {
			st.Process(b, []uint16{0}, next)
		} else {
			next[0] = st.one(b, 0)
		}
		bs[v], sts[v], edges[v] = b, st, next[0]
	}
	fast, gen := bs[0], bs[1]
	if !bytes.Equal(a.Frame(addrs[0]), a.Frame(addrs[1])) || fast.Descs[0].Len != gen.Descs[0].Len ||
		fast.Headroom(0) != gen.Headroom(0) || fast.Meta[0] != gen.Meta[0] || edges[0] != edges[1] {
		t.Fatalf("in %x (hr %d, meta %+v):\nProcess edge %d %x\n         meta %+v\ngeneral edge %d %x\n         meta %+v",
			pkt, hr, m, edges[0], fast.Packet(0), fast.Meta[0], edges[1], gen.Packet(0), gen.Meta[0])
	}
	if r0, r1 := stReport(sts[0]), stReport(sts[1]); fmt.Sprint(r0) != fmt.Sprint(r1) {
		t.Fatalf("in %x: counters %v, general path %v", pkt, r0, r1)
	}
}

// TestRewriteFastPathsAgree checks Process's specialised loops against the
// general path on random packets (cut at random lengths, with parsed and
// with random Meta offsets and flags) for every option set in rwFastCfgs.
func TestRewriteFastPathsAgree(t *testing.T) {
	a := stArena(t)
	var addrs [2]uint64
	for v := range addrs {
		addrs[v], _ = a.Alloc()
	}
	r := rand.New(rand.NewPCG(7, 8))
	for _, cfg := range rwFastCfgs {
		tpl := stMustBuild(t, rewriteKind, cfg)
		for n := 0; n < 400; n++ {
			p := rwRandPkt(r).bytes(t)
			m := stMeta(p)
			if r.IntN(4) == 0 {
				p = p[:r.IntN(len(p)+1)]
			}
			if r.IntN(4) == 0 {
				m = rings.Meta{L3Off: uint16(r.IntN(64)), L4Off: uint16(r.IntN(96)), Flags: rings.Flags(r.Uint32()), NumVLANs: uint8(r.IntN(3))}
			}
			if r.IntN(8) == 0 && len(p) > 22 {
				p[14+r.IntN(8)] = byte(r.Uint32()) // version, IHL, TTL, protocol, ...
			}
			rwAgree(t, a, addrs, tpl, p, a.Headroom()-r.IntN(6), m)
		}
	}
}

// FuzzRewriteFastPaths is TestRewriteFastPathsAgree on arbitrary bytes and
// Meta.
func FuzzRewriteFastPaths(f *testing.F) {
	s := rwPkt{ttl: 9, srcIP: net.IP{1, 2, 3, 4}, dstIP: net.IP{5, 6, 7, 8}, proto: layers.IPProtocolUDP, sport: 1, dport: 2, payload: []byte{1, 2, 3}}
	udp := s.bytes(f)
	f.Add(udp, uint16(14), uint16(rings.FlagIPv4|rings.FlagL4), uint16(34), uint8(5))
	f.Add(udp[:13], uint16(14), uint16(rings.FlagIPv4|rings.FlagL4), uint16(34), uint8(0))
	f.Add(udp[:30], uint16(2), uint16(rings.FlagIPv4|rings.FlagIPv6), uint16(9), uint8(6))
	tpls := make([]Template, len(rwFastCfgs))
	for i, c := range rwFastCfgs {
		tpls[i] = stMustBuild(f, rewriteKind, c)
	}
	a := stArena(f)
	var addrs [2]uint64
	for v := range addrs {
		addrs[v], _ = a.Alloc()
	}
	f.Fuzz(func(t *testing.T, pkt []byte, l3 uint16, flags uint16, l4 uint16, which uint8) {
		if len(pkt) > 1500 {
			pkt = pkt[:1500]
		}
		m := rings.Meta{L3Off: l3, L4Off: l4, Flags: rings.Flags(flags), NumVLANs: uint8(flags % 3)}
		rwAgree(t, a, addrs, tpls[int(which)%len(tpls)], pkt, a.Headroom()-int(which>>4)%8, m)
	})
}

// TestRewriteFastPathsZeroAlloc checks that Process allocates nothing for
// every option set in rwFastCfgs (the MAC-only and NAT loops and the
// general path).
func TestRewriteFastPathsZeroAlloc(t *testing.T) {
	for _, cfg := range rwFastCfgs {
		st := stMustBuild(t, rewriteKind, cfg).NewInstance()
		b := stFillBatch(t, stArena(t), stBenchPackets(t, 64))
		idx, next := stDense(b.Len())
		n := allocs.Count(100, func() {
			for i := range b.Meta {
				b.Packet(i)[b.Meta[i].L3Off+8] = 64 // keep TTL alive
			}
			st.Process(b, idx, next)
		})
		if n != 0 {
			t.Fatalf("%s: Process allocated %d times in 100 batches, want 0", cfg, n)
		}
	}
}
