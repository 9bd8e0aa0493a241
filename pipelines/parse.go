package pipelines

import (
	"encoding/binary"
	"math/bits"

	"github.com/warpflow/warpflow/rings"
	"go.yaml.in/yaml/v3"
)

// parseKind is the built-in "parse" stage: it decodes every packet's headers
// into its rings.Meta (class, flags, VLANs, L3/L4 offsets, outer 5-tuple,
// tunnel and inner offsets) and sends every packet, malformed or not, down
// its single "next" edge. Routing by class is the filter's job.
//
// Options:
//
//	tunnels: true   # recognise VXLAN, GENEVE, GRE and IP in IP and record inner offsets (default true)
//
// How malformed packets are classed (the first problem found wins, except
// that a cut L4 header beats a short IP total length):
//
//	frame < 14 bytes, VLAN tag cut, IPv4 header (20 or IHL*4) cut,
//	IPv6 header (40) or extension header cut, ARP header cut,
//	TCP (20, then doff*4) / UDP (8) / SCTP (12) / ICMP (8) /
//	ICMPv6 (4, 8 for echo) / GRE (4) header past the IP packet's end
//	(so also a first fragment too short for its L4 header, RFC 1858)    → ClassTruncated
//	IPv4 IHL < 5, TCP data offset < 5, IPsec AH shorter than 12 bytes    → ClassBadHeaderLen
//	IPv4 version nibble != 4, IPv6 version nibble != 6                   → ClassBadVersion
//	IPv4 total length < IHL*4 or longer than the frame,
//	IPv6 payload length longer than the frame                            → ClassBadTotalLen
//	PPPoE header (8) or MPLS label cut, nothing below an MPLS stack      → ClassTruncated
//	more than 2 VLAN tags, more than 8 IPv6 extension headers or MPLS
//	labels                                                               → ClassTooDeep
//	an ethertype other than IPv4, IPv6, ARP, PPPoE session, MPLS (after
//	VLAN tags); PPPoE not carrying IP; MPLS carrying neither IP version  → ClassUnknownL3
//
// A packet the capture cut short (rings.FlagCut, set by the receiving port
// when the capture record is shorter than the original packet, as with
// tcpdump -s 96) is decoded as far as its bytes go: an IP length past the
// frame's end is then expected, not ClassBadTotalLen, and only a header that
// is itself cut is ClassTruncated. FlagCut is kept.
//
// A frame longer than the IP packet (Ethernet padding) is fine: L4 headers
// are bounded by the IP packet's end, not the frame's. With ClassBadTotalLen
// the L4 header is still decoded within the frame, so the 5-tuple is there
// for filters. Fragments set FlagFragment (and FlagFirstFrag at offset 0);
// the L4 header is decoded only in a first fragment. An IPv6 atomic
// fragment (offset 0, M clear, RFC 6946) is a whole packet, not flagged.
// Meta.IPProto is the protocol after IPv6 extension headers and IPsec AH
// (IPv4 or IPv6); FlagIPOptions says such headers or IPv4 options were
// skipped. An IP protocol we do not decode (ESP, OSPF, ...) leaves
// FlagL4 clear and the class OK. For ClassUnknownL3, L3Off is still where
// the L3 header starts. VLANs holds the 12-bit VLAN IDs.
//
// Between Ethernet (and VLAN tags) and IP: PPPoE sessions (0x8864, PPP
// protocol IPv4 or IPv6) and MPLS label stacks (0x8847, 0x8848; up to 8
// labels, IPv4 or IPv6 below told by the version nibble). The IP header
// below them is the L3 header: EtherType and L3Off name it. Another PPP
// protocol or MPLS payload is ClassUnknownL3 at the PPPoE or MPLS header; a
// cut header ClassTruncated; a stack without a bottom ClassTooDeep.
//
// Tunnels: VXLAN (UDP 4789), GENEVE (UDP 6081, version 0, options skipped;
// Ethernet, IPv4 or IPv6 payload), GRE version 0 (checksum, key and
// sequence words; IPv4, IPv6, transparent Ethernet bridging, ERSPAN I, II
// and III, PPP payloads), GRE version 1 (PPTP: PPP carrying IPv4 or IPv6)
// and IP in IP (protocols 4 and 41, rings.TunnelIPIP: the inner IP header
// follows the outer one, and FlagL4 stays clear). They never make the outer packet malformed: a
// recognised tunnel sets FlagTunnel and Meta.Tunnel, and each inner offset that could be decoded
// (InnerL2Off, InnerL3Off, InnerL4Off with FlagInnerL4); what could not be
// decoded stays 0. One tunnel level is decoded; a tunnel inside a tunnel is
// only visible as its inner L4 header (UDP or GRE).
var parseKind = Kind{Name: "parse", Build: buildParse}

// parseOptions are the parse stage's config options. Tunnels is kept as a
// node so that a bad value is reported at its own position.
type parseOptions struct {
	Tunnels yaml.Node `yaml:"tunnels"`
}

func buildParse(c *BuildContext) Template {
	var opts parseOptions
	if !c.Decode(&opts) {
		return nil
	}
	tunnels := true
	if n := c.Option("tunnels"); n != nil {
		if n.Kind != yaml.ScalarNode || n.Decode(&tunnels) != nil {
			c.Errorf(n, "tunnels: want true or false, got %q", n.Value)
			return nil
		}
	}
	next, ok := c.Next()
	if !ok {
		c.Errorf(nil, "last stage has no next edge")
		return nil
	}
	return &parseTemplate{edges: []Target{next}, tunnels: tunnels}
}

// parseTemplate is the compiled parse stage.
type parseTemplate struct {
	edges   []Target
	tunnels bool
}

func (t *parseTemplate) Edges() []Target { return t.edges }

func (t *parseTemplate) NewInstance() Stage { return &parseStage{tunnels: t.tunnels} }

// parseStage is one worker's parse stage. It keeps no state besides its
// options, so instances are interchangeable.
type parseStage struct {
	tunnels bool
}

// Process decodes every packet of the vector and sends it to edge 0: the
// common packets in one pass (decodeInline), then any it left one by one
// (decodeOther).
func (s *parseStage) Process(b *rings.Batch, idx []uint16, next []Edge) {
	clear(next[:len(idx)])
	if decodeInline(b, idx, s.tunnels) == 0 {
		return
	}
	for _, i := range idx {
		if b.Meta[i].Class == rings.ClassUnparsed {
			decodeOther(b, int(i), s.tunnels)
		}
	}
}

// v4FastLen is the shortest frame decodeInline takes: Ethernet, an IPv4
// header without options and a 20-byte TCP header (or a UDP header and 12
// bytes of payload).
const v4FastLen = ethHdrLen + ipv4MinHdr + tcpMinHdr

// decodeInline decodes the row's packets among packets idx of b: untagged
// IPv4 without options, not fragmented, carrying TCP or UDP (not to a
// tunnel port) whose first 20 bytes lie in an IP packet that fits the
// frame. Its loop makes no call (a call costs a loop its registers) and
// its tests end in one goto to the stores. It gives every other packet
// ClassUnparsed, for Process to hand to decodeOther, and returns how many
// it left so. decodeOther gives what decodeInline would
// (TestParseInlinePathAgrees).
func decodeInline(b *rings.Batch, idx []uint16, tunnels bool) (left int) {
	for _, i := range idx {
		m := &b.Meta[i]
		p := b.Packet(int(i))
		var tcpFlags uint8
		// One load and test each: the ethertype 0x0800 with version 4 and
		// IHL 5 (bytes 12-14), and no fragment offset and MF clear
		// (bytes 20-21), read little-endian.
		if len(p) >= v4FastLen && m.Flags&rings.FlagCut == 0 &&
			binary.LittleEndian.Uint32(p[12:16])&0xffffff == 0x450008 && binary.LittleEndian.Uint16(p[20:22])&0xff3f == 0 {
			// 40 <= tot <= len(p)-14: the L4 header's first 20 bytes lie
			// in the IP packet, and the IP packet in the frame. (This
			// loop spells its big-endian reads out: be16's inlining
			// leaves a NOP in the code.)
			tot := int(p[16])<<8 | int(p[17])
			if uint(tot-ipv4MinHdr-tcpMinHdr) <= uint(len(p)-v4FastLen) {
				switch p[23] {
				case protoTCP:
					// 20 <= doff <= tot-20: the whole TCP header lies in
					// the IP packet.
					if doff := int(p[46]>>4) * 4; uint(doff-tcpMinHdr) <= uint(tot-ipv4MinHdr-tcpMinHdr) {
						tcpFlags = p[47]
						goto inline
					}
				case protoUDP:
					if dport := uint16(p[36])<<8 | uint16(p[37]); !tunnels || dport != portVXLAN && dport != portGENEVE {
						goto inline
					}
				}
			}
		}
		m.Class = rings.ClassUnparsed
		left++
		continue
	inline:
		m.Class, m.Tunnel = rings.ClassOK, rings.TunnelNone
		m.Flags, m.EtherType = rings.FlagIPv4|rings.FlagL4, etIPv4
		m.VLANs, m.NumVLANs = [2]uint16{}, 0
		m.IPProto, m.TTL, m.TCPFlags = p[23], p[22], tcpFlags
		m.L3Off, m.L4Off = ethHdrLen, ethHdrLen+ipv4MinHdr
		m.InnerL2Off, m.InnerL3Off, m.InnerL4Off = 0, 0, 0
		// Each address, then the 12 zero bytes after it (in two stores,
		// where clearing all 16 first costs three instructions).
		*(*[4]byte)(m.SrcIP[:4]) = [4]byte(p[26:30])
		*(*[12]byte)(m.SrcIP[4:]) = [12]byte{}
		*(*[4]byte)(m.DstIP[:4]) = [4]byte(p[30:34])
		*(*[12]byte)(m.DstIP[4:]) = [12]byte{}
		// Both ports in one 4-byte store: the big-endian pair rotated so
		// that SrcPort is the low half.
		ports := bits.RotateLeft32(binary.BigEndian.Uint32(p[34:38]), 16)
		m.SrcPort, m.DstPort = uint16(ports), uint16(ports>>16)
	}
	return left
}

// decodeOther decodes packet i of b, one decodeInline left: through
// decodeFast, or the general decoder where decodeFast declines or the
// capture cut the packet short (the general decoder bounds headers by the
// bytes there are instead of calling the short IP length malformed).
func decodeOther(b *rings.Batch, i int, tunnels bool) {
	m := &b.Meta[i]
	p := b.Packet(i)
	if m.Flags&rings.FlagCut != 0 || !decodeFast(p, m, tunnels) {
		resetParsed(m)
		m.Class = decodeEthernet(p, m, tunnels)
	}
}

// resetParsed clears the fields the parse stage owns, leaving the rest of
// the metadata (sequence, port, hash, verdict, samples, and the port's
// FlagCut) to their owners.
func resetParsed(m *rings.Meta) {
	m.Class = rings.ClassUnparsed
	m.Tunnel = rings.TunnelNone
	m.Flags &= rings.FlagCut
	m.EtherType = 0
	m.VLANs = [2]uint16{}
	m.NumVLANs = 0
	m.IPProto = 0
	m.TTL = 0
	m.TCPFlags = 0
	m.L3Off, m.L4Off = 0, 0
	m.InnerL2Off, m.InnerL3Off, m.InnerL4Off = 0, 0, 0
	m.SrcIP = [16]byte{}
	m.DstIP = [16]byte{}
	m.SrcPort, m.DstPort = 0, 0
}

// decodeFast decodes the common case in one pass: an untagged Ethernet
// frame carrying an IPv4 packet without options that is not fragmented, or
// an IPv6 packet without extension headers, whose length agrees with the
// frame. It checks that up front and then writes every field the parse
// stage owns with plain stores (no resetParsed, no read-modify-write of
// Flags); TCP and UDP without a tunnel port are decoded inline, any other
// L4 by decodeL4. It reports false, having written nothing, for any other
// packet, and the caller falls back to decodeEthernet, which would give the
// same result (TestParseFastPathAgrees checks both agree).
func decodeFast(p []byte, m *rings.Meta, tunnels bool) bool {
	const l3 = ethHdrLen
	if len(p) < l3+ipv4MinHdr {
		return false
	}
	var l4, end int
	var proto uint8
	switch be16(p, 12) {
	case etIPv4:
		h := p[l3 : l3+ipv4MinHdr : l3+ipv4MinHdr]
		tot := int(be16(h, 2))
		if h[0] != 0x45 || be16(h, 6)&0x3fff != 0 || tot < ipv4MinHdr || l3+tot > len(p) || h[9] == protoAH {
			return false
		}
		l4, end, proto = l3+ipv4MinHdr, l3+tot, h[9]
		m.Flags = rings.FlagIPv4
		m.EtherType = etIPv4
		m.TTL = h[8]
		m.SrcIP = [16]byte{}
		m.DstIP = [16]byte{}
		*(*[4]byte)(m.SrcIP[:4]) = [4]byte(h[12:16])
		*(*[4]byte)(m.DstIP[:4]) = [4]byte(h[16:20])
	case etIPv6:
		if len(p) < l3+ipv6HdrLen {
			return false
		}
		h := p[l3 : l3+ipv6HdrLen : l3+ipv6HdrLen]
		proto = h[6]
		end = l3 + ipv6HdrLen + int(be16(h, 4))
		if h[0]>>4 != 6 || end > len(p) || isIPv6Ext(proto) {
			return false
		}
		l4 = l3 + ipv6HdrLen
		m.Flags = rings.FlagIPv6
		m.EtherType = etIPv6
		m.TTL = h[7]
		m.SrcIP = [16]byte(h[8:24])
		m.DstIP = [16]byte(h[24:40])
	default:
		return false
	}
	m.Class = rings.ClassOK
	m.Tunnel = rings.TunnelNone
	m.VLANs = [2]uint16{}
	m.NumVLANs = 0
	m.IPProto = proto
	m.TCPFlags = 0
	m.L3Off, m.L4Off = l3, 0
	m.InnerL2Off, m.InnerL3Off, m.InnerL4Off = 0, 0, 0
	m.SrcPort, m.DstPort = 0, 0
	// TCP and UDP inline; every other case (short or bad headers, tunnels,
	// other protocols) through the general L4 decoder.
	if l4+tcpMinHdr <= end {
		l := p[l4 : l4+tcpMinHdr : l4+tcpMinHdr]
		switch sport, dport := be16(l, 0), be16(l, 2); proto {
		case protoUDP:
			if !tunnels || dport != portVXLAN && dport != portGENEVE {
				m.SrcPort, m.DstPort = sport, dport
				m.L4Off = uint16(l4)
				m.Flags |= rings.FlagL4
				return true
			}
		case protoTCP:
			if doff := int(l[12]>>4) * 4; doff >= tcpMinHdr && l4+doff <= end {
				m.SrcPort, m.DstPort = sport, dport
				m.TCPFlags = l[13]
				m.L4Off = uint16(l4)
				m.Flags |= rings.FlagL4
				return true
			}
		}
	}
	m.Class = decodeL4(p, l4, end, proto, m, tunnels)
	return true
}

// isIPv6Ext reports whether nh is an IPv6 extension header walkIPv6Ext
// walks.
func isIPv6Ext(nh uint8) bool {
	switch nh {
	case protoHopByHop, protoRouting, protoFragment, protoAH, protoDstOpts:
		return true
	}
	return false
}

// KeepsLength implements LengthKeeper: parse only reads packets.
func (s *parseStage) KeepsLength() bool { return true }
