package pipelines

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/warpflow/warpflow/rings"
)

// This file checks the hand-written decoder against gopacket: ptOracleMeta
// derives from gopacket's full decode the Meta that the parse stage should
// write, and the tests build many packets with gopacket's serializers and
// compare.

// ptOracleMeta returns the parse fields gopacket's decode of pkt implies, with
// the class left to the caller. Offsets come from slice capacities: every
// layer's contents are a sub-slice of pkt.Data().
func ptOracleMeta(pkt gopacket.Packet, tunnels bool) rings.Meta {
	data := pkt.Data()
	off := func(l gopacket.Layer) uint16 { return uint16(cap(data) - cap(l.LayerContents())) }
	var m rings.Meta
	const (
		outerL2 = iota
		outerL3
		outerL4
		inner
	)
	phase := outerL2
	firstFrag := false
	var fragL4 gopacket.Layer // L4 header behind a first fragment, decoded apart
	var fragEcho *layers.ICMPv6Echo

	for _, l := range pkt.Layers() {
		if phase == inner {
			switch l.(type) {
			case *layers.Ethernet:
				if m.InnerL2Off == 0 && m.InnerL3Off == 0 {
					m.InnerL2Off = off(l)
				}
			case *layers.IPv4, *layers.IPv6:
				if m.InnerL3Off == 0 {
					m.InnerL3Off = off(l)
				}
			case *layers.TCP, *layers.UDP, *layers.SCTP, *layers.ICMPv4, *layers.ICMPv6, *layers.GRE:
				if m.InnerL3Off != 0 && m.InnerL4Off == 0 {
					m.InnerL4Off = off(l)
					m.Flags |= rings.FlagInnerL4
				}
			}
			continue
		}
		if phase != outerL2 {
			switch l.(type) {
			case *layers.Ethernet, *layers.Dot1Q, *layers.ARP:
				continue // inside an untracked tunnel
			}
		}
		switch l := l.(type) {
		case *layers.Ethernet:
			m.EtherType = uint16(l.EthernetType)
		case *layers.Dot1Q:
			if m.NumVLANs < 2 {
				m.VLANs[m.NumVLANs] = l.VLANIdentifier
			}
			m.NumVLANs++
			m.EtherType = uint16(l.Type)
		case *layers.ARP:
			m.Flags |= rings.FlagARP
			m.L3Off = off(l)
		case *layers.IPv4:
			if phase == outerL3 && (m.IPProto == protoIPIP || m.IPProto == protoIP6in) {
				ptOracleIPIP(&m, off(l), tunnels) // this is the inner header
				phase = inner
			}
			if phase != outerL2 {
				break
			}
			phase = outerL3
			m.Flags |= rings.FlagIPv4
			m.EtherType = uint16(layers.EthernetTypeIPv4) // also under PPPoE and MPLS
			m.L3Off, m.TTL, m.IPProto = off(l), l.TTL, uint8(l.Protocol)
			copy(m.SrcIP[:], l.SrcIP.To4())
			copy(m.DstIP[:], l.DstIP.To4())
			if l.IHL > 5 {
				m.Flags |= rings.FlagIPOptions
			}
			if l.Flags&layers.IPv4MoreFragments != 0 || l.FragOffset != 0 {
				m.Flags |= rings.FlagFragment
				if l.FragOffset == 0 {
					m.Flags |= rings.FlagFirstFrag
					firstFrag = true
				}
			}
		case *layers.IPv6:
			if phase == outerL3 && (m.IPProto == protoIPIP || m.IPProto == protoIP6in) {
				ptOracleIPIP(&m, off(l), tunnels) // this is the inner header
				phase = inner
			}
			if phase != outerL2 {
				break
			}
			phase = outerL3
			m.Flags |= rings.FlagIPv6
			m.EtherType = uint16(layers.EthernetTypeIPv6)
			m.L3Off, m.TTL, m.IPProto = off(l), l.HopLimit, uint8(l.NextHeader)
			copy(m.SrcIP[:], l.SrcIP.To16())
			copy(m.DstIP[:], l.DstIP.To16())
		case *layers.IPv6HopByHop, *layers.IPv6Routing, *layers.IPv6Destination, *layers.IPSecAH, *layers.IPv6Fragment:
			if phase != outerL3 {
				break
			}
			m.Flags |= rings.FlagIPOptions
			switch l := l.(type) {
			case *layers.IPv6HopByHop:
				m.IPProto = uint8(l.NextHeader)
			case *layers.IPv6Routing:
				m.IPProto = uint8(l.NextHeader)
			case *layers.IPv6Destination:
				m.IPProto = uint8(l.NextHeader)
			case *layers.IPSecAH:
				m.IPProto = uint8(l.NextHeader)
			case *layers.IPv6Fragment:
				m.IPProto = uint8(l.NextHeader)
				if l.MoreFragments || l.FragmentOffset != 0 {
					m.Flags |= rings.FlagFragment
					if l.FragmentOffset == 0 {
						m.Flags |= rings.FlagFirstFrag
						firstFrag = true
					}
				} else {
					// An atomic fragment is a whole packet (RFC 6946);
					// gopacket's NewPacket path still stops at it.
					firstFrag = true
				}
			}
		case *gopacket.Fragment:
			// gopacket stops at any fragment; we decode the L4 header of
			// a first fragment, so decode it here apart, in place.
			if phase == outerL3 && firstFrag {
				sub := gopacket.NewPacket(l.LayerContents(), layers.IPProtocol(m.IPProto).LayerType(), gopacket.NoCopy)
				if ls := sub.Layers(); len(ls) > 0 && sub.ErrorLayer() == nil {
					fragL4 = ls[0]
					if len(ls) > 1 {
						fragEcho, _ = ls[1].(*layers.ICMPv6Echo)
					}
				}
			}
		}
		if phase == outerL3 {
			l4 := l
			if fragL4 != nil {
				l4 = fragL4
			}
			if ptOracleL4(&m, l4, off(l4)) {
				phase = outerL4
				if fragEcho != nil {
					m.DstPort = fragEcho.Identifier
				}
				switch l4.(type) {
				case *layers.GRE:
					m.Tunnel, phase = rings.TunnelGRE, inner
				case *layers.UDP:
					switch m.DstPort {
					case portVXLAN:
						m.Tunnel, phase = rings.TunnelVXLAN, inner
					case portGENEVE:
						m.Tunnel, phase = rings.TunnelGENEVE, inner
					}
				}
				if !tunnels {
					m.Tunnel, phase = rings.TunnelNone, outerL4
				}
				if phase == inner {
					m.Flags |= rings.FlagTunnel
				}
			}
		}
		if phase == outerL4 {
			if e, ok := l.(*layers.ICMPv6Echo); ok {
				m.DstPort = e.Identifier
			}
		}
	}
	return m
}

// ptOracleIPIP records an IP-in-IP tunnel whose inner header is at o. With
// tunnels off the parser stops at the outer header, so the oracle skips the
// rest (phase inner with no inner L3 records nothing more).
func ptOracleIPIP(m *rings.Meta, o uint16, tunnels bool) {
	if tunnels {
		m.Tunnel = rings.TunnelIPIP
		m.Flags |= rings.FlagTunnel
		m.InnerL3Off = o
	}
}

// ptOracleL4 fills the outer L4 fields from gopacket layer l at offset o and
// reports whether l is an L4 header the parse stage decodes.
func ptOracleL4(m *rings.Meta, l gopacket.Layer, o uint16) bool {
	switch l := l.(type) {
	case *layers.TCP:
		m.SrcPort, m.DstPort = uint16(l.SrcPort), uint16(l.DstPort)
		m.TCPFlags = ptTCPFlags(l)
	case *layers.UDP:
		m.SrcPort, m.DstPort = uint16(l.SrcPort), uint16(l.DstPort)
	case *layers.SCTP:
		m.SrcPort, m.DstPort = uint16(l.SrcPort), uint16(l.DstPort)
	case *layers.ICMPv4:
		m.SrcPort = uint16(l.TypeCode)
		if t := l.TypeCode.Type(); t == layers.ICMPv4TypeEchoRequest || t == layers.ICMPv4TypeEchoReply {
			m.DstPort = l.Id
		}
	case *layers.ICMPv6:
		m.SrcPort = uint16(l.TypeCode)
	case *layers.GRE:
	default:
		return false
	}
	m.L4Off = o
	m.Flags |= rings.FlagL4
	return true
}

func ptTCPFlags(t *layers.TCP) uint8 {
	var f uint8
	for i, set := range []bool{t.FIN, t.SYN, t.RST, t.PSH, t.ACK, t.URG, t.ECE, t.CWR} {
		if set {
			f |= 1 << i
		}
	}
	return f
}

// ptSerialize builds a packet from ls with lengths fixed (and Ethernet padded
// to 60 bytes by gopacket).
func ptSerialize(tb testing.TB, ls ...gopacket.SerializableLayer) []byte {
	tb.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, ls...); err != nil {
		tb.Fatalf("ptSerialize %v: %v", ls, err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

var (
	ptMacA = []byte{0x02, 0, 0, 0, 0, 1}
	ptMacB = []byte{0x02, 0, 0, 0, 0, 2}
	ptV4A  = []byte{10, 0, 0, 1}
	ptV4B  = []byte{192, 0, 2, 77}
	ptV6A  = []byte{0x20, 0x01, 0x0d, 0xb8, 15: 1}
	ptV6B  = []byte{0x20, 0x01, 0x0d, 0xb8, 0xff, 15: 2}
)

// ptL2Variants are the link headers every case is built with: untagged,
// 802.1Q, QinQ. Each returns the layers up to the one carrying et.
var ptL2Variants = []struct {
	name string
	make func(et layers.EthernetType) []gopacket.SerializableLayer
}{
	{"eth", func(et layers.EthernetType) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&layers.Ethernet{SrcMAC: ptMacA, DstMAC: ptMacB, EthernetType: et}}
	}},
	{"vlan", func(et layers.EthernetType) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{
			&layers.Ethernet{SrcMAC: ptMacA, DstMAC: ptMacB, EthernetType: layers.EthernetTypeDot1Q},
			&layers.Dot1Q{VLANIdentifier: 10, Priority: 3, Type: et},
		}
	}},
	{"qinq", func(et layers.EthernetType) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{
			&layers.Ethernet{SrcMAC: ptMacA, DstMAC: ptMacB, EthernetType: layers.EthernetTypeQinQ},
			&layers.Dot1Q{VLANIdentifier: 100, Type: layers.EthernetTypeDot1Q},
			&layers.Dot1Q{VLANIdentifier: 4094, Type: et},
		}
	}},
	// Below: encapsulations between Ethernet and IP (no ARP over them).
	{"pppoe", func(et layers.EthernetType) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{
			&layers.Ethernet{SrcMAC: ptMacA, DstMAC: ptMacB, EthernetType: layers.EthernetTypePPPoESession},
			&layers.PPPoE{Version: 1, Type: 1, Code: layers.PPPoECodeSession, SessionId: 0x1234},
			&layers.PPP{PPPType: ptPPPType(et)},
		}
	}},
	{"vlan-pppoe", func(et layers.EthernetType) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{
			&layers.Ethernet{SrcMAC: ptMacA, DstMAC: ptMacB, EthernetType: layers.EthernetTypeDot1Q},
			&layers.Dot1Q{VLANIdentifier: 20, Type: layers.EthernetTypePPPoESession},
			&layers.PPPoE{Version: 1, Type: 1, Code: layers.PPPoECodeSession, SessionId: 7},
			&layers.PPP{PPPType: ptPPPType(et)},
		}
	}},
	{"mpls1", func(et layers.EthernetType) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{
			&layers.Ethernet{SrcMAC: ptMacA, DstMAC: ptMacB, EthernetType: layers.EthernetTypeMPLSUnicast},
			&layers.MPLS{Label: 16, StackBottom: true, TTL: 64},
		}
	}},
	{"vlan-mpls3-multicast", func(et layers.EthernetType) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{
			&layers.Ethernet{SrcMAC: ptMacA, DstMAC: ptMacB, EthernetType: layers.EthernetTypeDot1Q},
			&layers.Dot1Q{VLANIdentifier: 30, Type: layers.EthernetTypeMPLSMulticast},
			&layers.MPLS{Label: 1000, TrafficClass: 5, TTL: 255},
			&layers.MPLS{Label: 2000, TTL: 254},
			&layers.MPLS{Label: 3000, StackBottom: true, TTL: 253},
		}
	}},
}

// ptPPPType is the PPP protocol carrying ethertype et's protocol.
func ptPPPType(et layers.EthernetType) layers.PPPType {
	if et == layers.EthernetTypeIPv6 {
		return layers.PPPTypeIPv6
	}
	return layers.PPPTypeIPv4
}

// ptNoARP reports whether ARP cannot ride on L2 variant name.
func ptNoARP(name string) bool {
	return strings.Contains(name, "pppoe") || strings.Contains(name, "mpls")
}

// ptL4Variant is an L4 header plus payload for a given IP version.
type ptL4Variant struct {
	name  string
	proto layers.IPProtocol
	make  func() []gopacket.SerializableLayer
}

var ptPayload = gopacket.Payload([]byte("warpflow"))

func ptL4Variants(v6 bool) []ptL4Variant {
	vs := []ptL4Variant{
		{"tcp", layers.IPProtocolTCP, func() []gopacket.SerializableLayer {
			return []gopacket.SerializableLayer{&layers.TCP{SrcPort: 40000, DstPort: 40443, SYN: true, ACK: true, ECE: true, Window: 100}, ptPayload}
		}},
		{"tcp-opts", layers.IPProtocolTCP, func() []gopacket.SerializableLayer {
			return []gopacket.SerializableLayer{&layers.TCP{SrcPort: 1, DstPort: 40023, FIN: true, PSH: true, URG: true, CWR: true, RST: true,
				Options: []layers.TCPOption{{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{5, 0xb4}},
					{OptionType: layers.TCPOptionKindWindowScale, OptionLength: 3, OptionData: []byte{7}}}}, ptPayload}
		}},
		{"udp", layers.IPProtocolUDP, func() []gopacket.SerializableLayer {
			return []gopacket.SerializableLayer{&layers.UDP{SrcPort: 40053, DstPort: 33333}, ptPayload}
		}},
		{"udp-empty", layers.IPProtocolUDP, func() []gopacket.SerializableLayer {
			return []gopacket.SerializableLayer{&layers.UDP{SrcPort: 40123, DstPort: 40124}}
		}},
		{"sctp", layers.IPProtocolSCTP, func() []gopacket.SerializableLayer {
			return []gopacket.SerializableLayer{&layers.SCTP{SrcPort: 2905, DstPort: 36412, VerificationTag: 7}}
		}},
	}
	if v6 {
		return append(vs,
			ptL4Variant{"icmp6-echo", layers.IPProtocolICMPv6, func() []gopacket.SerializableLayer {
				return []gopacket.SerializableLayer{&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoRequest, 0)},
					&layers.ICMPv6Echo{Identifier: 0x4242, SeqNumber: 9}, ptPayload}
			}},
			ptL4Variant{"icmp6-unreach", layers.IPProtocolICMPv6, func() []gopacket.SerializableLayer {
				return []gopacket.SerializableLayer{&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeDestinationUnreachable, 4)}, ptPayload}
			}})
	}
	return append(vs,
		ptL4Variant{"icmp-echo", layers.IPProtocolICMPv4, func() []gopacket.SerializableLayer {
			return []gopacket.SerializableLayer{&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoReply, 0), Id: 0x1234, Seq: 1}, ptPayload}
		}},
		ptL4Variant{"icmp-unreach", layers.IPProtocolICMPv4, func() []gopacket.SerializableLayer {
			return []gopacket.SerializableLayer{&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, layers.ICMPv4CodePort)}, ptPayload}
		}})
}

// ptRawExt is an IPv6 extension header (or AH) written by hand, since
// gopacket serializes neither AH nor option-less extension headers.
func ptRawExt(next layers.IPProtocol, kind layers.IPProtocol) gopacket.Payload {
	switch kind {
	case layers.IPProtocolIPv6HopByHop, layers.IPProtocolIPv6Destination:
		return gopacket.Payload{byte(next), 0, 1, 4, 0, 0, 0, 0} // one PadN option
	case layers.IPProtocolIPv6Routing:
		h := make([]byte, 24) // type 4 (SRH-like) with one 16-byte address
		h[0], h[1], h[2], h[3] = byte(next), 2, 4, 0
		return h
	case layers.IPProtocolAH:
		h := make([]byte, 24) // 12 fixed bytes + 12-byte ICV: length (24/4)-2
		h[0], h[1] = byte(next), 4
		h[7] = 0x99 // SPI
		return h
	}
	panic("ptRawExt: unknown kind")
}

// ptL3Variant is an IP header (and extension headers) in front of an L4 variant.
type ptL3Variant struct {
	name string
	v6   bool
	make func(l4 layers.IPProtocol) []gopacket.SerializableLayer
}

var ptL3Variants = []ptL3Variant{
	{"ipv4", false, func(p layers.IPProtocol) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&layers.IPv4{Version: 4, TTL: 64, Protocol: p, SrcIP: ptV4A, DstIP: ptV4B}}
	}},
	{"ipv4-opts", false, func(p layers.IPProtocol) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&layers.IPv4{Version: 4, TTL: 1, Protocol: p, SrcIP: ptV4A, DstIP: ptV4B,
			Options: []layers.IPv4Option{{OptionType: 0x94, OptionLength: 4, OptionData: []byte{0, 0}}}}}
	}},
	{"ipv4-firstfrag", false, func(p layers.IPProtocol) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&layers.IPv4{Version: 4, TTL: 2, Protocol: p, SrcIP: ptV4A, DstIP: ptV4B, Flags: layers.IPv4MoreFragments, Id: 5}}
	}},
	{"ipv4-laterfrag", false, func(p layers.IPProtocol) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&layers.IPv4{Version: 4, TTL: 3, Protocol: p, SrcIP: ptV4A, DstIP: ptV4B, FragOffset: 185, Id: 5}}
	}},
	{"ipv4-ah", false, func(p layers.IPProtocol) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolAH, SrcIP: ptV4A, DstIP: ptV4B}, ptRawExt(p, layers.IPProtocolAH)}
	}},
	{"ipv6", true, func(p layers.IPProtocol) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&layers.IPv6{Version: 6, HopLimit: 64, NextHeader: p, SrcIP: ptV6A, DstIP: ptV6B}}
	}},
	{"ipv6-hbh", true, func(p layers.IPProtocol) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&layers.IPv6{Version: 6, HopLimit: 1, NextHeader: layers.IPProtocolIPv6HopByHop, SrcIP: ptV6A, DstIP: ptV6B},
			ptRawExt(p, layers.IPProtocolIPv6HopByHop)}
	}},
	{"ipv6-rt-dst-ah", true, func(p layers.IPProtocol) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&layers.IPv6{Version: 6, HopLimit: 9, NextHeader: layers.IPProtocolIPv6Routing, SrcIP: ptV6A, DstIP: ptV6B},
			ptRawExt(layers.IPProtocolIPv6Destination, layers.IPProtocolIPv6Routing),
			ptRawExt(layers.IPProtocolAH, layers.IPProtocolIPv6Destination),
			ptRawExt(p, layers.IPProtocolAH)}
	}},
	{"ipv6-firstfrag", true, func(p layers.IPProtocol) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&layers.IPv6{Version: 6, HopLimit: 5, NextHeader: layers.IPProtocolIPv6HopByHop, SrcIP: ptV6A, DstIP: ptV6B},
			ptRawExt(layers.IPProtocolIPv6Fragment, layers.IPProtocolIPv6HopByHop),
			&layers.IPv6Fragment{NextHeader: p, MoreFragments: true, Identification: 77}}
	}},
	{"ipv6-laterfrag", true, func(p layers.IPProtocol) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&layers.IPv6{Version: 6, HopLimit: 5, NextHeader: layers.IPProtocolIPv6Fragment, SrcIP: ptV6A, DstIP: ptV6B},
			&layers.IPv6Fragment{NextHeader: p, FragmentOffset: 100, Identification: 77}}
	}},
	{"ipv6-atomicfrag", true, func(p layers.IPProtocol) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&layers.IPv6{Version: 6, HopLimit: 5, NextHeader: layers.IPProtocolIPv6Fragment, SrcIP: ptV6A, DstIP: ptV6B},
			&layers.IPv6Fragment{NextHeader: p, Identification: 78}}
	}},
}

// innerVariants are tunnel payloads: an inner frame or IP packet.
func ptInnerEth(vlan bool, v6 bool) []gopacket.SerializableLayer {
	ls := []gopacket.SerializableLayer{}
	et := layers.EthernetTypeIPv4
	if v6 {
		et = layers.EthernetTypeIPv6
	}
	if vlan {
		ls = append(ls, &layers.Ethernet{SrcMAC: ptMacB, DstMAC: ptMacA, EthernetType: layers.EthernetTypeDot1Q}, &layers.Dot1Q{VLANIdentifier: 33, Type: et})
	} else {
		ls = append(ls, &layers.Ethernet{SrcMAC: ptMacB, DstMAC: ptMacA, EthernetType: et})
	}
	return append(ls, ptInnerIP(v6)...)
}

func ptInnerIP(v6 bool) []gopacket.SerializableLayer {
	if v6 {
		return []gopacket.SerializableLayer{&layers.IPv6{Version: 6, HopLimit: 7, NextHeader: layers.IPProtocolUDP, SrcIP: ptV6B, DstIP: ptV6A},
			&layers.UDP{SrcPort: 45000, DstPort: 45001}, ptPayload}
	}
	return []gopacket.SerializableLayer{&layers.IPv4{Version: 4, TTL: 7, Protocol: layers.IPProtocolTCP, SrcIP: ptV4B, DstIP: ptV4A},
		&layers.TCP{SrcPort: 40080, DstPort: 48080, SYN: true}, ptPayload}
}

// ptTunnelVariants are the encapsulations, each as the layers following the
// outer IP header and the IP protocol that header must name.
var ptTunnelVariants = []struct {
	name  string
	proto layers.IPProtocol
	make  func() []gopacket.SerializableLayer
}{
	{"vxlan-eth-v4", layers.IPProtocolUDP, func() []gopacket.SerializableLayer {
		return append([]gopacket.SerializableLayer{&layers.UDP{SrcPort: 49152, DstPort: 4789}, &layers.VXLAN{ValidIDFlag: true, VNI: 42}}, ptInnerEth(false, false)...)
	}},
	{"vxlan-vlan-v6", layers.IPProtocolUDP, func() []gopacket.SerializableLayer {
		return append([]gopacket.SerializableLayer{&layers.UDP{SrcPort: 49153, DstPort: 4789}, &layers.VXLAN{ValidIDFlag: true, VNI: 43}}, ptInnerEth(true, true)...)
	}},
	{"geneve-opts-eth", layers.IPProtocolUDP, func() []gopacket.SerializableLayer {
		return append([]gopacket.SerializableLayer{&layers.UDP{SrcPort: 1000, DstPort: 6081},
			&layers.Geneve{Protocol: layers.EthernetTypeTransparentEthernetBridging, VNI: 7,
				Options: []*layers.GeneveOption{{Class: 0x0102, Type: 0x80, Length: 8, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8}}}}},
			ptInnerEth(false, true)...)
	}},
	{"geneve-ipv4", layers.IPProtocolUDP, func() []gopacket.SerializableLayer {
		return append([]gopacket.SerializableLayer{&layers.UDP{SrcPort: 1001, DstPort: 6081},
			&layers.Geneve{Protocol: layers.EthernetTypeIPv4, VNI: 8}}, ptInnerIP(false)...)
	}},
	{"gre-ipv4", layers.IPProtocolGRE, func() []gopacket.SerializableLayer {
		return append([]gopacket.SerializableLayer{&layers.GRE{Protocol: layers.EthernetTypeIPv4}}, ptInnerIP(false)...)
	}},
	{"gre-csum-key-seq-ipv6", layers.IPProtocolGRE, func() []gopacket.SerializableLayer {
		return append([]gopacket.SerializableLayer{&layers.GRE{ChecksumPresent: true, KeyPresent: true, SeqPresent: true, Key: 9, Seq: 10,
			Protocol: layers.EthernetTypeIPv6}}, ptInnerIP(true)...)
	}},
	{"gre-key-teb", layers.IPProtocolGRE, func() []gopacket.SerializableLayer {
		return append([]gopacket.SerializableLayer{&layers.GRE{KeyPresent: true, Key: 1, Protocol: layers.EthernetTypeTransparentEthernetBridging}},
			ptInnerEth(true, false)...)
	}},
	{"ipip-v4", layers.IPProtocolIPv4, func() []gopacket.SerializableLayer { return ptInnerIP(false) }},
	{"ipip-v6", layers.IPProtocolIPv6, func() []gopacket.SerializableLayer { return ptInnerIP(true) }},
	{"gre-pptp-ppp-v4", layers.IPProtocolGRE, func() []gopacket.SerializableLayer {
		// PPTP enhanced GRE: version 1, key (payload length, call ID),
		// sequence and acknowledgement; PPP with address and control.
		return append([]gopacket.SerializableLayer{&layers.GRE{Version: 1, KeyPresent: true, SeqPresent: true, AckPresent: true,
			Key: 0x00300001, Seq: 5, Ack: 4, Protocol: layers.EthernetTypePPP},
			&layers.PPP{PPPType: layers.PPPTypeIPv4, HasPPTPHeader: true}}, ptInnerIP(false)...)
	}},
	{"gre-pptp-ppp-acfc-v6", layers.IPProtocolGRE, func() []gopacket.SerializableLayer {
		return append([]gopacket.SerializableLayer{&layers.GRE{Version: 1, KeyPresent: true, Key: 0x00500002, Protocol: layers.EthernetTypePPP},
			&layers.PPP{PPPType: layers.PPPTypeIPv6}}, ptInnerIP(true)...)
	}},
	{"gre-erspan2", layers.IPProtocolGRE, func() []gopacket.SerializableLayer {
		return append([]gopacket.SerializableLayer{&layers.GRE{SeqPresent: true, Seq: 3, Protocol: layers.EthernetTypeERSPAN},
			&layers.ERSPANII{Version: layers.ERSPANIIVersion, SessionID: 5, Index: 6}}, ptInnerEth(false, false)...)
	}},
}

// ptCase is one generated packet.
type ptCase struct {
	name string
	pkt  []byte
}

// ptCases builds every L2 × L3 × L4 combination, every tunnel over
// every L2 and both outer IP versions, and ARP.
func ptCases(tb testing.TB) []ptCase {
	var cs []ptCase
	for _, l2 := range ptL2Variants {
		for _, l3 := range ptL3Variants {
			et := layers.EthernetTypeIPv4
			if l3.v6 {
				et = layers.EthernetTypeIPv6
			}
			for _, l4 := range ptL4Variants(l3.v6) {
				ls := append(append(l2.make(et), l3.make(l4.proto)...), l4.make()...)
				cs = append(cs, ptCase{fmt.Sprintf("%s/%s/%s", l2.name, l3.name, l4.name), ptSerialize(tb, ls...)})
			}
		}
		for _, tun := range ptTunnelVariants {
			for _, l3 := range []ptL3Variant{ptL3Variants[0], ptL3Variants[5]} {
				et := layers.EthernetTypeIPv4
				if l3.v6 {
					et = layers.EthernetTypeIPv6
				}
				ls := append(append(l2.make(et), l3.make(tun.proto)...), tun.make()...)
				cs = append(cs, ptCase{fmt.Sprintf("%s/%s/%s", l2.name, l3.name, tun.name), ptSerialize(tb, ls...)})
			}
		}
		if ptNoARP(l2.name) {
			continue
		}
		arp := &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: layers.ARPRequest, SourceHwAddress: ptMacA, SourceProtAddress: ptV4A, DstHwAddress: make([]byte, 6), DstProtAddress: ptV4B}
		cs = append(cs, ptCase{l2.name + "/arp", ptSerialize(tb, append(l2.make(layers.EthernetTypeARP), arp)...)})
	}
	return cs
}

func TestParseMatchesGopacket(t *testing.T) {
	cases := ptCases(t)
	if len(cases) < 200 {
		t.Fatalf("only %d generated cases", len(cases))
	}
	for _, tunnels := range []bool{true, false} {
		for _, c := range cases {
			pkt := gopacket.NewPacket(c.pkt, layers.LayerTypeEthernet, gopacket.Default)
			if el := pkt.ErrorLayer(); el != nil {
				t.Fatalf("%s: gopacket cannot decode the packet it built: %v", c.name, el.Error())
			}
			want := ptOracleMeta(pkt, tunnels)
			want.Class = rings.ClassOK
			// Guard against an oracle that agrees by seeing nothing.
			isTunnel := strings.Contains(c.name, "vxlan") || strings.Contains(c.name, "geneve") || strings.Contains(c.name, "gre") || strings.Contains(c.name, "ipip")
			switch {
			case strings.HasSuffix(c.name, "/arp"):
				if want.Flags&rings.FlagARP == 0 {
					t.Fatalf("%s: oracle saw no ARP", c.name)
				}
			case tunnels && isTunnel:
				if want.Flags&rings.FlagTunnel == 0 || want.InnerL3Off == 0 || want.InnerL4Off == 0 {
					t.Fatalf("%s: oracle saw no inner packet: %s", c.name, ptFmtMeta(want))
				}
			case !strings.Contains(c.name, "laterfrag") && !strings.Contains(c.name, "ipip"):
				if want.Flags&rings.FlagL4 == 0 || want.L4Off == 0 {
					t.Fatalf("%s: oracle saw no L4 header: %s", c.name, ptFmtMeta(want))
				}
			}
			got := ptParse(t, c.pkt, tunnels)
			got.Seq, got.Hash, got.SampleMask = 0, 0, 0 // not ours: kept as loaded
			if got != want {
				t.Errorf("%s (tunnels=%v):\n got %s\nwant %s\npacket % x", c.name, tunnels, ptFmtMeta(got), ptFmtMeta(want), c.pkt)
			}
		}
	}
	t.Logf("%d generated packets agree with gopacket", len(cases))
}

// ptFmtMeta renders the parse fields of m for failure messages.
func ptFmtMeta(m rings.Meta) string {
	return fmt.Sprintf("class=%s flags=%#x tun=%d et=%#04x vlans=%v/%d proto=%d ttl=%d tcpf=%#x l3=%d l4=%d in=%d/%d/%d src=%x dst=%x ports=%d/%d",
		m.Class, uint16(m.Flags), m.Tunnel, m.EtherType, m.VLANs, m.NumVLANs, m.IPProto, m.TTL, m.TCPFlags,
		m.L3Off, m.L4Off, m.InnerL2Off, m.InnerL3Off, m.InnerL4Off, m.SrcIP, m.DstIP, m.SrcPort, m.DstPort)
}

// TestParseTPID9100 checks the pre-standard 0x9100 TPID, which gopacket does
// not decode, against the same packet tagged 0x8100.
func TestParseTPID9100(t *testing.T) {
	pkt := ptSerialize(t, append(ptL2Variants[2].make(layers.EthernetTypeIPv4), ptL3Variants[0].make(layers.IPProtocolUDP)...)...)
	pkt = append(pkt, ptSerialize(t, &layers.UDP{SrcPort: 1, DstPort: 2})...)
	want := ptParse(t, pkt, true)
	pkt[12], pkt[13] = 0x91, 0x00
	got := ptParse(t, pkt, true)
	if got != want || got.NumVLANs != 2 || got.VLANs != [2]uint16{100, 4094} {
		t.Errorf("0x9100 tag:\n got %s\nwant %s", ptFmtMeta(got), ptFmtMeta(want))
	}
}

// TestParseConstantsMatchGopacket keeps the decoder's wire numbers honest.
func TestParseConstantsMatchGopacket(t *testing.T) {
	for _, c := range []struct {
		name      string
		ours, gop int
	}{
		{"ipv4", etIPv4, int(layers.EthernetTypeIPv4)},
		{"arp", etARP, int(layers.EthernetTypeARP)},
		{"dot1q", etDot1Q, int(layers.EthernetTypeDot1Q)},
		{"ipv6", etIPv6, int(layers.EthernetTypeIPv6)},
		{"qinq", etQinQ, int(layers.EthernetTypeQinQ)},
		{"teb", etTEB, int(layers.EthernetTypeTransparentEthernetBridging)},
		{"erspan", etERSPN2, int(layers.EthernetTypeERSPAN)},
		{"pppoe session", etPPPoES, int(layers.EthernetTypePPPoESession)},
		{"mpls", etMPLS, int(layers.EthernetTypeMPLSUnicast)},
		{"mpls multicast", etMPLSMc, int(layers.EthernetTypeMPLSMulticast)},
		{"ppp", etPPP, int(layers.EthernetTypePPP)},
		{"ppp ipv4", pppIPv4, int(layers.PPPTypeIPv4)},
		{"ppp ipv6", pppIPv6, int(layers.PPPTypeIPv6)},
		{"ipip", protoIPIP, int(layers.IPProtocolIPv4)},
		{"ipv6 in ip", protoIP6in, int(layers.IPProtocolIPv6)},
		{"hopbyhop", protoHopByHop, int(layers.IPProtocolIPv6HopByHop)},
		{"icmp", protoICMP, int(layers.IPProtocolICMPv4)},
		{"tcp", protoTCP, int(layers.IPProtocolTCP)},
		{"udp", protoUDP, int(layers.IPProtocolUDP)},
		{"routing", protoRouting, int(layers.IPProtocolIPv6Routing)},
		{"fragment", protoFragment, int(layers.IPProtocolIPv6Fragment)},
		{"gre", protoGRE, int(layers.IPProtocolGRE)},
		{"ah", protoAH, int(layers.IPProtocolAH)},
		{"icmpv6", protoICMPv6, int(layers.IPProtocolICMPv6)},
		{"dstopts", protoDstOpts, int(layers.IPProtocolIPv6Destination)},
		{"sctp", protoSCTP, int(layers.IPProtocolSCTP)},
	} {
		if c.ours != c.gop {
			t.Errorf("%s: ours %#x, gopacket %#x", c.name, c.ours, c.gop)
		}
	}
}
