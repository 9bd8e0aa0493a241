package pipelines

import (
	"encoding/binary"

	"github.com/warpflow/warpflow/rings"
)

// Wire numbers the decoder switches on. They equal gopacket's
// layers.EthernetType* and layers.IPProtocol* constants (a test checks it);
// the hot path keeps its own untyped copies so the dataplane does not pull
// in gopacket's decoder registry.
const (
	etIPv4   = 0x0800
	etARP    = 0x0806
	etDot1Q  = 0x8100
	etIPv6   = 0x86dd
	etQinQ   = 0x88a8
	etQinQ91 = 0x9100 // pre-standard QinQ TPID, still seen in the wild
	etTEB    = 0x6558 // transparent Ethernet bridging (GRE, GENEVE)
	etERSPN2 = 0x88be // ERSPAN type I/II over GRE
	etERSPN3 = 0x22eb // ERSPAN type III over GRE
	etPPPoES = 0x8864 // PPPoE session stage
	etMPLS   = 0x8847 // MPLS unicast
	etMPLSMc = 0x8848 // MPLS multicast
	etPPP    = 0x880b // PPP (GRE, PPTP)

	pppIPv4 = 0x0021 // PPP protocol numbers
	pppIPv6 = 0x0057

	protoHopByHop = 0
	protoICMP     = 1
	protoIPIP     = 4 // IPv4 in IP
	protoTCP      = 6
	protoUDP      = 17
	protoRouting  = 43
	protoIP6in    = 41 // IPv6 in IP
	protoFragment = 44
	protoGRE      = 47
	protoAH       = 51
	protoICMPv6   = 58
	protoDstOpts  = 60
	protoSCTP     = 132

	portVXLAN  = 4789
	portGENEVE = 6081
)

// Decoder limits.
const (
	ethHdrLen    = 14
	maxVLANTags  = len(rings.Meta{}.VLANs) // a tag beyond these is ClassTooDeep
	maxIPv6Ext   = 8                       // extension headers walked before ClassTooDeep
	ipv4MinHdr   = 20
	ipv6HdrLen   = 40
	arpFixedLen  = 8
	tcpMinHdr    = 20
	udpHdrLen    = 8
	sctpHdrLen   = 12
	icmpHdrLen   = 8
	icmp6HdrLen  = 4
	greMinHdr    = 4
	vxlanHdrLen  = 8
	geneveMinHdr = 8
	pppoeHdrLen  = 8 // PPPoE header (6) and PPP protocol (2)
	mplsLabelLen = 4
	maxMPLS      = 8 // label stack entries walked before ClassTooDeep
)

// fragment states returned by the IP decoders.
const (
	fragNone     = iota // not a fragment
	fragFirst           // fragment at offset 0: the L4 header may follow
	fragNonFirst        // later fragment: no L4 header
)

func be16(p []byte, o int) uint16 { return binary.BigEndian.Uint16(p[o:]) }

func isVLANTPID(et uint16) bool { return et == etDot1Q || et == etQinQ || et == etQinQ91 }

// decodeEthernet decodes packet p into m (whose parse fields are zero) and
// returns its class. It reads nothing outside p and writes only offsets
// that lie within p.
func decodeEthernet(p []byte, m *rings.Meta, tunnels bool) rings.Class {
	n := len(p)
	if n < ethHdrLen {
		return rings.ClassTruncated
	}
	et := be16(p, 12)
	off := ethHdrLen
	for isVLANTPID(et) {
		m.EtherType = et
		if int(m.NumVLANs) == maxVLANTags {
			return rings.ClassTooDeep
		}
		if off+4 > n {
			return rings.ClassTruncated
		}
		m.VLANs[m.NumVLANs] = be16(p, off) & 0x0fff
		m.NumVLANs++
		et = be16(p, off+2)
		off += 4
	}
	m.EtherType = et
	m.L3Off = uint16(off)
	switch et {
	case etIPv4:
		return decodeIPv4(p, off, m, tunnels)
	case etIPv6:
		return decodeIPv6(p, off, m, tunnels)
	case etPPPoES:
		return decodePPPoE(p, off, m, tunnels)
	case etMPLS, etMPLSMc:
		return decodeMPLS(p, off, m, tunnels)
	case etARP:
		m.Flags |= rings.FlagARP
		if off+arpFixedLen > n {
			return rings.ClassTruncated
		}
		// Fixed part, then sender and target hardware and protocol addresses.
		if off+arpFixedLen+2*int(p[off+4])+2*int(p[off+5]) > n {
			return rings.ClassTruncated
		}
		return rings.ClassOK
	}
	return rings.ClassUnknownL3
}

// decodePPPoE decodes a PPPoE session header at off (RFC 2516: version and
// type, code, session, length, then the PPP protocol) and the IPv4 or IPv6
// packet it carries, which becomes the L3 header: EtherType and L3Off name
// it as if it followed the Ethernet header. Any other PPP protocol (LCP,
// IPCP, ...) is ClassUnknownL3 with EtherType 0x8864.
func decodePPPoE(p []byte, off int, m *rings.Meta, tunnels bool) rings.Class {
	if off+pppoeHdrLen > len(p) {
		return rings.ClassTruncated
	}
	l3 := off + pppoeHdrLen
	switch be16(p, off+6) {
	case pppIPv4:
		m.EtherType, m.L3Off = etIPv4, uint16(l3)
		return decodeIPv4(p, l3, m, tunnels)
	case pppIPv6:
		m.EtherType, m.L3Off = etIPv6, uint16(l3)
		return decodeIPv6(p, l3, m, tunnels)
	}
	return rings.ClassUnknownL3
}

// decodeMPLS walks an MPLS label stack at off (RFC 3032) to its bottom
// entry and decodes what lies below by its version nibble, as routers do:
// IPv4 or IPv6 becomes the L3 header (EtherType and L3Off name it); anything
// else (a pseudowire control word, Ethernet over MPLS) is ClassUnknownL3
// with the MPLS EtherType. A stack deeper than maxMPLS is ClassTooDeep.
func decodeMPLS(p []byte, off int, m *rings.Meta, tunnels bool) rings.Class {
	o := off
	for i := 0; ; i++ {
		if i == maxMPLS {
			return rings.ClassTooDeep
		}
		if o+mplsLabelLen > len(p) {
			return rings.ClassTruncated
		}
		bottom := p[o+2]&1 != 0
		o += mplsLabelLen
		if bottom {
			break
		}
	}
	if o >= len(p) {
		return rings.ClassTruncated
	}
	switch p[o] >> 4 {
	case 4:
		m.EtherType, m.L3Off = etIPv4, uint16(o)
		return decodeIPv4(p, o, m, tunnels)
	case 6:
		m.EtherType, m.L3Off = etIPv6, uint16(o)
		return decodeIPv6(p, o, m, tunnels)
	}
	return rings.ClassUnknownL3
}

// decodeIPv4 decodes the outer IPv4 header at off and what follows it.
func decodeIPv4(p []byte, off int, m *rings.Meta, tunnels bool) rings.Class {
	n := len(p)
	if off >= n {
		return rings.ClassTruncated
	}
	if p[off]>>4 != 4 {
		return rings.ClassBadVersion
	}
	ihl := int(p[off]&0x0f) * 4
	if ihl < ipv4MinHdr {
		return rings.ClassBadHeaderLen
	}
	if off+ihl > n {
		return rings.ClassTruncated
	}
	h := p[off : off+ihl]
	m.Flags |= rings.FlagIPv4
	if ihl > ipv4MinHdr {
		m.Flags |= rings.FlagIPOptions
	}
	m.TTL = h[8]
	m.IPProto = h[9]
	*(*[4]byte)(m.SrcIP[:4]) = [4]byte(h[12:16])
	*(*[4]byte)(m.DstIP[:4]) = [4]byte(h[16:20])

	soft := rings.ClassOK
	tot := int(be16(h, 2))
	end := off + tot
	switch {
	case tot < ihl:
		soft = rings.ClassBadTotalLen
		end = n
	case end > n:
		if m.Flags&rings.FlagCut == 0 {
			soft = rings.ClassBadTotalLen
		}
		end = n
	}
	switch frag := be16(h, 6); {
	case frag&0x1fff != 0:
		m.Flags |= rings.FlagFragment
		return soft
	case frag&0x2000 != 0:
		m.Flags |= rings.FlagFragment | rings.FlagFirstFrag
	}
	l4, proto := off+ihl, h[9]
	if proto == protoAH {
		// IPsec AH sits between IPv4 and L4 just as it does in IPv6.
		hl, c := ahLen(p, l4, end)
		if c == rings.ClassOK && l4+hl > end {
			c = rings.ClassTruncated
		}
		if c != rings.ClassOK {
			return c
		}
		proto = p[l4]
		l4 += hl
		m.IPProto = proto
		m.Flags |= rings.FlagIPOptions
	}
	if c := decodeL4(p, l4, end, proto, m, tunnels); c != rings.ClassOK {
		return c
	}
	return soft
}

// ahLen returns the length of the IPsec AH header at o (RFC 4302: 12 fixed
// bytes plus the ICV, in 4-byte units minus 2). The caller checks that the
// whole header fits.
func ahLen(p []byte, o, end int) (int, rings.Class) {
	if o+2 > end {
		return 0, rings.ClassTruncated
	}
	hl := (int(p[o+1]) + 2) * 4
	if hl < 12 {
		return 0, rings.ClassBadHeaderLen
	}
	return hl, rings.ClassOK
}

// decodeIPv6 decodes the outer IPv6 header at off, its extension headers
// and what follows them.
func decodeIPv6(p []byte, off int, m *rings.Meta, tunnels bool) rings.Class {
	n := len(p)
	if off >= n {
		return rings.ClassTruncated
	}
	if p[off]>>4 != 6 {
		return rings.ClassBadVersion
	}
	if off+ipv6HdrLen > n {
		return rings.ClassTruncated
	}
	h := p[off : off+ipv6HdrLen]
	m.Flags |= rings.FlagIPv6
	m.TTL = h[7]
	m.SrcIP = [16]byte(h[8:24])
	m.DstIP = [16]byte(h[24:40])

	soft := rings.ClassOK
	end := off + ipv6HdrLen + int(be16(h, 4))
	if end > n {
		if m.Flags&rings.FlagCut == 0 {
			soft = rings.ClassBadTotalLen
		}
		end = n
	}
	o, nh, frag, c := walkIPv6Ext(p, off+ipv6HdrLen, end, h[6])
	m.IPProto = nh
	if o != off+ipv6HdrLen {
		m.Flags |= rings.FlagIPOptions
	}
	switch frag {
	case fragFirst:
		m.Flags |= rings.FlagFragment | rings.FlagFirstFrag
	case fragNonFirst:
		m.Flags |= rings.FlagFragment
	}
	if c != rings.ClassOK {
		return c
	}
	if frag == fragNonFirst {
		return soft
	}
	if c := decodeL4(p, o, end, nh, m, tunnels); c != rings.ClassOK {
		return c
	}
	return soft
}

// walkIPv6Ext skips the IPv6 extension headers starting at o (next header
// nh) up to end. It returns the offset and protocol of the first header that
// is not an extension header (or of the one it stopped at), the fragment
// state, and ClassTruncated or ClassTooDeep if the walk could not finish.
func walkIPv6Ext(p []byte, o, end int, nh uint8) (int, uint8, int, rings.Class) {
	frag := fragNone
	for i := 0; ; i++ {
		var hl int
		switch nh {
		case protoHopByHop, protoRouting, protoDstOpts:
			if o+2 > end {
				return o, nh, frag, rings.ClassTruncated
			}
			hl = (int(p[o+1]) + 1) * 8
		case protoAH:
			var c rings.Class
			if hl, c = ahLen(p, o, end); c != rings.ClassOK {
				return o, nh, frag, c
			}
		case protoFragment:
			hl = 8
			if o+hl > end {
				return o, nh, frag, rings.ClassTruncated
			}
			fo := be16(p, o+2)
			if fo&1 != 0 {
				frag = fragFirst
			}
			// An atomic fragment (offset 0, M clear, RFC 6946) is a
			// whole packet: the header is walked, nothing flagged.
			if fo&0xfff8 != 0 {
				// A later fragment: its next header names the
				// fragmentable part, which does not start here.
				return o + hl, p[o], fragNonFirst, rings.ClassOK
			}
		default:
			return o, nh, frag, rings.ClassOK
		}
		if i == maxIPv6Ext {
			return o, nh, frag, rings.ClassTooDeep
		}
		if o+hl > end {
			return o, nh, frag, rings.ClassTruncated
		}
		nh = p[o]
		o += hl
	}
}

// decodeL4 decodes the outer L4 header of protocol proto at o, bounded by
// the IP packet's end, and any tunnel it carries.
func decodeL4(p []byte, o, end int, proto uint8, m *rings.Meta, tunnels bool) rings.Class {
	switch proto {
	case protoTCP:
		if o+tcpMinHdr > end {
			return rings.ClassTruncated
		}
		doff := int(p[o+12]>>4) * 4
		if doff < tcpMinHdr {
			return rings.ClassBadHeaderLen
		}
		if o+doff > end {
			return rings.ClassTruncated
		}
		m.SrcPort, m.DstPort = be16(p, o), be16(p, o+2)
		m.TCPFlags = p[o+13]
	case protoUDP:
		if o+udpHdrLen > end {
			return rings.ClassTruncated
		}
		m.SrcPort, m.DstPort = be16(p, o), be16(p, o+2)
		if tunnels {
			switch m.DstPort {
			case portVXLAN:
				decodeVXLAN(p, o+udpHdrLen, end, m)
			case portGENEVE:
				decodeGENEVE(p, o+udpHdrLen, end, m)
			}
		}
	case protoSCTP:
		if o+sctpHdrLen > end {
			return rings.ClassTruncated
		}
		m.SrcPort, m.DstPort = be16(p, o), be16(p, o+2)
	case protoICMP:
		if o+icmpHdrLen > end {
			return rings.ClassTruncated
		}
		m.SrcPort = be16(p, o) // type<<8 | code
		if t := p[o]; t == 0 || t == 8 {
			m.DstPort = be16(p, o+4) // echo identifier
		}
	case protoICMPv6:
		if o+icmp6HdrLen > end {
			return rings.ClassTruncated
		}
		m.SrcPort = be16(p, o)
		if t := p[o]; t == 128 || t == 129 {
			if o+8 > end {
				return rings.ClassTruncated
			}
			m.DstPort = be16(p, o+4)
		}
	case protoGRE:
		if o+greMinHdr > end {
			return rings.ClassTruncated
		}
		if tunnels {
			decodeGRE(p, o, end, m)
		}
	case protoIPIP, protoIP6in:
		// IP in IP has no L4 header of its own: the inner IP header
		// starts here. FlagL4 stays clear.
		if tunnels {
			setTunnel(m, rings.TunnelIPIP)
			if proto == protoIPIP {
				innerIPv4(p, o, end, m)
			} else {
				innerIPv6(p, o, end, m)
			}
		}
		return rings.ClassOK
	default:
		return rings.ClassOK
	}
	m.L4Off = uint16(o)
	m.Flags |= rings.FlagL4
	return rings.ClassOK
}
