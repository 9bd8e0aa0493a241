package pipelines

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/warpflow/warpflow/rings"
)

// Hand-built byte fixtures, one or more per class and per decision in the
// class mapping documented on parseKind. Builders keep them readable: each
// fixture names the one field it breaks.

func ptCat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// ptEthHdr is a 14-byte Ethernet header with ethertype et.
func ptEthHdr(et uint16) []byte {
	return binary.BigEndian.AppendUint16([]byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1}, et)
}

// ptTag is one 4-byte VLAN tag (TCI vid) followed by the next ethertype.
func ptTag(vid, next uint16) []byte {
	return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, vid), next)
}

// ptV4 is an IPv4 header of ihl words with total length tot, flags+offset
// word frag and protocol proto (options are zero, i.e. end-of-list).
func ptV4(ihl int, tot int, frag uint16, proto byte) []byte {
	n := ihl * 4
	if n < ipv4MinHdr {
		n = ipv4MinHdr
	}
	h := make([]byte, n)
	h[0] = 0x40 | byte(ihl&0x0f)
	binary.BigEndian.PutUint16(h[2:], uint16(tot))
	binary.BigEndian.PutUint16(h[6:], frag)
	h[8], h[9] = 64, proto
	copy(h[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	return h
}

// ptV6 is an IPv6 header with payload length plen and next header nh.
func ptV6(plen int, nh byte) []byte {
	h := make([]byte, ipv6HdrLen)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(plen))
	h[6], h[7] = nh, 64
	h[8], h[39] = 0x20, 1
	return h
}

func ptUDPHdr(sp, dp uint16, plen int) []byte {
	h := make([]byte, udpHdrLen)
	binary.BigEndian.PutUint16(h, sp)
	binary.BigEndian.PutUint16(h[2:], dp)
	binary.BigEndian.PutUint16(h[4:], uint16(udpHdrLen+plen))
	return h
}

// ptTCPHdr is a 20-byte TCP header claiming doff words.
func ptTCPHdr(doff byte, flags byte) []byte {
	h := make([]byte, tcpMinHdr)
	binary.BigEndian.PutUint16(h, 1234)
	binary.BigEndian.PutUint16(h[2:], 80)
	h[12], h[13] = doff<<4, flags
	return h
}

// ptExt is an IPv6 extension header of 8 bytes (hop-by-hop, routing or
// destination options) with next header nh.
func ptExt(nh byte) []byte { return []byte{nh, 0, 1, 4, 0, 0, 0, 0} }

// ptPad pads b with zeros to n bytes (Ethernet minimum frame padding).
func ptPad(b []byte, n int) []byte {
	for len(b) < n {
		b = append(b, 0)
	}
	return b
}

// ptFixture is one annotated byte fixture and what the stage must make of it.
type ptFixture struct {
	name  string
	pkt   []byte
	class rings.Class
	check func(m rings.Meta) error // further expectations; nil for none
}

func ptExpect(cond bool, format string, args ...any) error {
	if cond {
		return nil
	}
	return fmt.Errorf(format, args...)
}

func ptFixtures() []ptFixture {
	udp := func(tot int) []byte { return ptV4(5, tot, 0, protoUDP) }
	vxlan := func(inner []byte) []byte {
		plen := 8 + len(inner)
		return ptCat(ptEthHdr(etIPv4), udp(20+8+plen), ptUDPHdr(1, portVXLAN, plen), []byte{8, 0, 0, 0, 0, 0, 42, 0}, inner)
	}
	noInner := func(t rings.Tunnel) func(m rings.Meta) error {
		return func(m rings.Meta) error {
			return ptExpect(m.Tunnel == t && m.Flags&rings.FlagTunnel != 0 && m.InnerL2Off == 0 && m.InnerL3Off == 0 && m.InnerL4Off == 0,
				"want tunnel %d without inner offsets", t)
		}
	}
	return []ptFixture{
		// Truncated: a header runs past the end of the frame.
		{"empty frame", nil, rings.ClassTruncated, nil},
		{"13-byte frame", ptEthHdr(etIPv4)[:13], rings.ClassTruncated, nil},
		{"vlan tag cut", ptCat(ptEthHdr(etDot1Q), []byte{0, 10}), rings.ClassTruncated, nil},
		{"ipv4 ethertype, no header", ptEthHdr(etIPv4), rings.ClassTruncated, nil},
		{"ipv4 header 19 bytes", ptCat(ptEthHdr(etIPv4), udp(28)[:19]), rings.ClassTruncated, nil},
		{"ipv4 ihl 15 in a 30-byte ip packet", ptCat(ptEthHdr(etIPv4), ptV4(15, 60, 0, protoUDP)[:30]), rings.ClassTruncated, nil},
		{"udp header cut at frame end", ptCat(ptEthHdr(etIPv4), udp(28), ptUDPHdr(1, 2, 0)[:4]), rings.ClassTruncated, nil},
		{"udp header past ip end, inside ethernet padding", ptPad(ptCat(ptEthHdr(etIPv4), udp(24), ptUDPHdr(1, 2, 0)), 60), rings.ClassTruncated,
			func(m rings.Meta) error { return ptExpect(m.Flags&rings.FlagL4 == 0, "FlagL4 set") }},
		{"tcp header 19 bytes", ptCat(ptEthHdr(etIPv4), ptV4(5, 39, 0, protoTCP), ptTCPHdr(5, 0)[:19]), rings.ClassTruncated, nil},
		{"tcp doff 15, no options", ptCat(ptEthHdr(etIPv4), ptV4(5, 40, 0, protoTCP), ptTCPHdr(15, 0)), rings.ClassTruncated, nil},
		{"icmp 4 bytes", ptCat(ptEthHdr(etIPv4), ptV4(5, 24, 0, protoICMP), []byte{8, 0, 0, 0}), rings.ClassTruncated, nil},
		{"ipv6 header 39 bytes", ptCat(ptEthHdr(etIPv6), ptV6(0, 59)[:39]), rings.ClassTruncated, nil},
		{"ipv6 hop-by-hop says 16 bytes, 8 there", ptCat(ptEthHdr(etIPv6), ptV6(8, protoHopByHop), []byte{protoUDP, 1, 1, 4, 0, 0, 0, 0}), rings.ClassTruncated,
			func(m rings.Meta) error {
				return ptExpect(m.IPProto == protoHopByHop, "IPProto %d, want 0 (stopped there)", m.IPProto)
			}},
		{"icmpv6 echo 6 bytes", ptCat(ptEthHdr(etIPv6), ptV6(6, protoICMPv6), []byte{128, 0, 0, 0, 0, 1}), rings.ClassTruncated, nil},
		{"arp addresses cut", ptCat(ptEthHdr(etARP), []byte{0, 1, 8, 0, 6, 4, 0, 1}, make([]byte, 10)), rings.ClassTruncated,
			func(m rings.Meta) error {
				return ptExpect(m.Flags&rings.FlagARP != 0 && m.L3Off == 14, "want FlagARP at 14")
			}},

		// BadHeaderLen: an impossible header length field.
		{"ipv4 ihl 4", ptCat(ptEthHdr(etIPv4), ptV4(4, 28, 0, protoUDP), ptUDPHdr(1, 2, 0)), rings.ClassBadHeaderLen, nil},
		{"tcp doff 4", ptCat(ptEthHdr(etIPv4), ptV4(5, 40, 0, protoTCP), ptTCPHdr(4, 0)), rings.ClassBadHeaderLen, nil},
		{"ipv6 ah length 0 (8 < 12 bytes)", ptCat(ptEthHdr(etIPv6), ptV6(16, protoAH), []byte{protoUDP, 0, 0, 0, 0, 0, 0, 1}, ptUDPHdr(1, 2, 0)), rings.ClassBadHeaderLen, nil},

		// BadVersion: the version nibble disagrees with the ethertype.
		{"ipv4 ethertype, version 6", ptCat(ptEthHdr(etIPv4), ptV6(0, 59)), rings.ClassBadVersion, nil},
		{"ipv6 ethertype, version 4", ptCat(ptEthHdr(etIPv6), ptV4(5, 20, 0, 59), make([]byte, 20)), rings.ClassBadVersion, nil},

		// BadTotalLen: the IP length disagrees with the frame; L4 is still decoded.
		{"ipv4 total length 10 < ihl", ptCat(ptEthHdr(etIPv4), udp(10), ptUDPHdr(7, 9, 0)), rings.ClassBadTotalLen,
			func(m rings.Meta) error {
				return ptExpect(m.Flags&rings.FlagL4 != 0 && m.SrcPort == 7 && m.DstPort == 9, "want ports 7/9 decoded")
			}},
		{"ipv4 total length 0 (TSO capture)", ptCat(ptEthHdr(etIPv4), udp(0), ptUDPHdr(7, 9, 0)), rings.ClassBadTotalLen, nil},
		{"ipv4 total length 100, frame has 28", ptCat(ptEthHdr(etIPv4), udp(100), ptUDPHdr(7, 9, 72)), rings.ClassBadTotalLen,
			func(m rings.Meta) error { return ptExpect(m.L4Off == 34 && m.DstPort == 9, "want L4 at 34, port 9") }},
		{"ipv6 payload length 100, frame has 8", ptCat(ptEthHdr(etIPv6), ptV6(100, protoUDP), ptUDPHdr(7, 9, 92)), rings.ClassBadTotalLen,
			func(m rings.Meta) error { return ptExpect(m.L4Off == 54 && m.SrcPort == 7, "want L4 at 54, port 7") }},

		// TooDeep: more structure than we walk.
		{"three vlan tags", ptCat(ptEthHdr(etQinQ), ptTag(1, etDot1Q), ptTag(2, etDot1Q), ptTag(3, etIPv4), udp(28), ptUDPHdr(1, 2, 0)), rings.ClassTooDeep,
			func(m rings.Meta) error {
				return ptExpect(m.NumVLANs == 2 && m.VLANs == [2]uint16{1, 2}, "vlans %v/%d, want [1 2]/2", m.VLANs, m.NumVLANs)
			}},
		{"nine ipv6 destination options headers", func() []byte {
			var ext []byte
			for i := 0; i < 8; i++ {
				ext = append(ext, ptExt(protoDstOpts)...)
			}
			ext = append(ext, ptExt(protoUDP)...)
			return ptCat(ptEthHdr(etIPv6), ptV6(len(ext)+8, protoDstOpts), ext, ptUDPHdr(1, 2, 0))
		}(), rings.ClassTooDeep, nil},

		// UnknownL3: not malformed, just not ours.
		{"lldp", ptPad(ptEthHdr(0x88cc), 60), rings.ClassUnknownL3,
			func(m rings.Meta) error {
				return ptExpect(m.EtherType == 0x88cc && m.L3Off == 14, "want ethertype 0x88cc at 14")
			}},
		{"mpls pseudowire under a vlan tag", ptPad(ptCat(ptEthHdr(etDot1Q), ptTag(5, 0x8847), []byte{0, 1, 0x01, 64}, []byte{0, 0, 0, 0}), 60), rings.ClassUnknownL3,
			func(m rings.Meta) error {
				return ptExpect(m.L3Off == 18 && m.NumVLANs == 1 && m.EtherType == etMPLS, "want L3Off 18, 1 vlan, ethertype mpls")
			}},
		{"mpls stack without a bottom", ptPad(ptCat(ptEthHdr(etMPLS)), 60), rings.ClassTooDeep, nil},
		{"mpls label cut", ptCat(ptEthHdr(etMPLS), []byte{0, 1, 0}), rings.ClassTruncated, nil},
		{"mpls stack, nothing below", ptCat(ptEthHdr(etMPLS), []byte{0, 1, 1, 64}), rings.ClassTruncated, nil},
		{"pppoe header cut", ptCat(ptEthHdr(etPPPoES), []byte{0x11, 0, 0, 1, 0, 20, 0}), rings.ClassTruncated, nil},
		{"pppoe lcp", ptPad(ptCat(ptEthHdr(etPPPoES), []byte{0x11, 0, 0, 1, 0, 20, 0xc0, 0x21}), 60), rings.ClassUnknownL3,
			func(m rings.Meta) error {
				return ptExpect(m.EtherType == etPPPoES && m.L3Off == 14, "want ethertype pppoe at 14")
			}},

		// OK: decisions that must not be mistaken for malformation.
		{"ethernet padding after ipv4/udp", ptPad(ptCat(ptEthHdr(etIPv4), udp(28), ptUDPHdr(1, 2, 0)), 60), rings.ClassOK,
			func(m rings.Meta) error { return ptExpect(m.Flags&rings.FlagL4 != 0 && m.L4Off == 34, "want L4 at 34") }},
		{"ipv4 later fragment, garbage behind", ptCat(ptEthHdr(etIPv4), ptV4(5, 24, 100, protoTCP), []byte{1, 2, 3, 4}), rings.ClassOK,
			func(m rings.Meta) error {
				return ptExpect(m.Flags&(rings.FlagFragment|rings.FlagFirstFrag|rings.FlagL4) == rings.FlagFragment && m.IPProto == protoTCP,
					"flags %#x, want fragment only", uint16(m.Flags))
			}},
		{"ipv6 later fragment", ptCat(ptEthHdr(etIPv6), ptV6(12, protoFragment), []byte{protoTCP, 0, 0, 0x81, 0, 0, 0, 1}, []byte{1, 2, 3, 4}), rings.ClassOK,
			func(m rings.Meta) error {
				return ptExpect(m.Flags&(rings.FlagFragment|rings.FlagL4) == rings.FlagFragment && m.IPProto == protoTCP, "want later fragment of tcp")
			}},
		{"ipv4 esp: protocol we do not decode", ptCat(ptEthHdr(etIPv4), ptV4(5, 28, 0, 50), make([]byte, 8)), rings.ClassOK,
			func(m rings.Meta) error {
				return ptExpect(m.Flags&rings.FlagL4 == 0 && m.IPProto == 50, "want proto 50 without L4")
			}},

		// Tunnels: a broken inner packet leaves the outer OK.
		{"vxlan, inner ethernet cut", vxlan(make([]byte, 10)), rings.ClassOK, noInner(rings.TunnelVXLAN)},
		{"vxlan header cut", ptCat(ptEthHdr(etIPv4), udp(32), ptUDPHdr(1, portVXLAN, 4), []byte{8, 0, 0, 0}), rings.ClassOK, noInner(rings.TunnelVXLAN)},
		{"vxlan, inner ipv4 ihl 3", vxlan(ptCat(ptEthHdr(etIPv4), []byte{0x43}, make([]byte, 19))), rings.ClassOK,
			func(m rings.Meta) error {
				return ptExpect(m.InnerL2Off == 50 && m.InnerL3Off == 0 && m.Tunnel == rings.TunnelVXLAN, "want inner L2 at 50 only")
			}},
		{"vxlan, inner tcp doff 2", vxlan(ptCat(ptEthHdr(etIPv4), ptV4(5, 40, 0, protoTCP), ptTCPHdr(2, 0))), rings.ClassOK,
			func(m rings.Meta) error {
				return ptExpect(m.InnerL3Off == 64 && m.InnerL4Off == 0 && m.Flags&rings.FlagInnerL4 == 0, "want inner L3 at 64, no L4")
			}},
		{"gre version 1 (pptp)", ptCat(ptEthHdr(etIPv4), ptV4(5, 36, 0, protoGRE), []byte{0x30, 0x01, 0x88, 0x0b}, make([]byte, 12)), rings.ClassOK,
			noInner(rings.TunnelGRE)},
		{"gre key flag, key cut", ptCat(ptEthHdr(etIPv4), ptV4(5, 26, 0, protoGRE), []byte{0x20, 0, 0x08, 0, 0, 0}), rings.ClassOK, noInner(rings.TunnelGRE)},
		{"gre, inner ipv6 cut at 30 bytes", ptCat(ptEthHdr(etIPv4), ptV4(5, 54, 0, protoGRE), []byte{0, 0, 0x86, 0xdd}, ptV6(0, 59)[:30]), rings.ClassOK,
			noInner(rings.TunnelGRE)},
		{"geneve options longer than packet", ptCat(ptEthHdr(etIPv4), udp(36), ptUDPHdr(1, portGENEVE, 8), []byte{0x3f, 0, 0x65, 0x58, 0, 0, 1, 0}), rings.ClassOK,
			noInner(rings.TunnelGENEVE)},
		{"geneve version 1", ptCat(ptEthHdr(etIPv4), udp(36+20), ptUDPHdr(1, portGENEVE, 28), []byte{0x40, 0, 0x08, 0, 0, 0, 1, 0}, ptV4(5, 20, 0, 59)), rings.ClassOK,
			noInner(rings.TunnelGENEVE)},
		{"gre erspan type III with platform sub-header", ptCat(ptEthHdr(etIPv4), ptV4(5, 20+8+20+42, 0, protoGRE),
			[]byte{0x10, 0, 0x22, 0xeb, 0, 0, 0, 1},                        // GRE with sequence number
			[]byte{0x20, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 1}, make([]byte, 8), // ERSPAN III, O flag, sub-header
			ptEthHdr(etIPv4), ptV4(5, 28, 0, protoUDP), ptUDPHdr(1, 2, 0)), rings.ClassOK,
			func(m rings.Meta) error {
				return ptExpect(m.Tunnel == rings.TunnelGRE && m.InnerL2Off == 62 && m.InnerL3Off == 76 && m.InnerL4Off == 96,
					"inner %d/%d/%d, want 62/76/96", m.InnerL2Off, m.InnerL3Off, m.InnerL4Off)
			}},
		{"gre erspan type I (no sequence, no header)", ptCat(ptEthHdr(etIPv4), ptV4(5, 20+4+42, 0, protoGRE), []byte{0, 0, 0x88, 0xbe},
			ptEthHdr(etIPv4), ptV4(5, 28, 0, protoUDP), ptUDPHdr(1, 2, 0)), rings.ClassOK,
			func(m rings.Meta) error {
				return ptExpect(m.InnerL2Off == 38 && m.InnerL3Off == 52 && m.InnerL4Off == 72, "inner %d/%d/%d, want 38/52/72", m.InnerL2Off, m.InnerL3Off, m.InnerL4Off)
			}},
	}
}

func TestParseFixtures(t *testing.T) {
	seen := make(map[rings.Class]bool)
	for _, f := range ptFixtures() {
		m := ptParse(t, f.pkt, true)
		seen[m.Class] = true
		if m.Class != f.class {
			t.Errorf("%s: class %s, want %s (%s)", f.name, m.Class, f.class, ptFmtMeta(m))
			continue
		}
		if f.check != nil {
			if err := f.check(m); err != nil {
				t.Errorf("%s: %v (%s)", f.name, err, ptFmtMeta(m))
			}
		}
		ptCheckOffsets(t, f.name, f.pkt, m)
	}
	for c := rings.ClassOK; int(c) < rings.NumClasses; c++ {
		if !seen[c] {
			t.Errorf("no fixture produces class %s", c)
		}
	}
}

// ptCheckOffsets reports offsets outside the packet or set without their flag.
func ptCheckOffsets(tb testing.TB, name string, pkt []byte, m rings.Meta) {
	tb.Helper()
	n := len(pkt)
	for _, o := range []struct {
		what string
		off  uint16
		hdr  int // bytes that must follow the offset when it is valid
	}{
		{"L3Off", m.L3Off, 0},
		{"L4Off", m.L4Off, 4},
		{"InnerL2Off", m.InnerL2Off, ethHdrLen},
		{"InnerL3Off", m.InnerL3Off, ipv4MinHdr},
		{"InnerL4Off", m.InnerL4Off, icmp6HdrLen},
	} {
		if int(o.off) > n || (o.off != 0 && int(o.off)+o.hdr > n) {
			tb.Errorf("%s: %s %d outside a %d-byte packet (%s)", name, o.what, o.off, n, ptFmtMeta(m))
		}
	}
	if m.Flags&rings.FlagL4 == 0 && m.L4Off != 0 {
		tb.Errorf("%s: L4Off %d without FlagL4", name, m.L4Off)
	}
	if m.Flags&rings.FlagInnerL4 == 0 && m.InnerL4Off != 0 {
		tb.Errorf("%s: InnerL4Off %d without FlagInnerL4", name, m.InnerL4Off)
	}
	if m.Flags&rings.FlagTunnel == 0 && (m.Tunnel != 0 || m.InnerL2Off != 0 || m.InnerL3Off != 0) {
		tb.Errorf("%s: inner fields without FlagTunnel", name)
	}
	if m.Class == rings.ClassUnparsed || int(m.Class) >= rings.NumClasses {
		tb.Errorf("%s: class %d", name, m.Class)
	}
}
