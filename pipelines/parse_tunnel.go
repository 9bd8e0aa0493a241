package pipelines

import "github.com/warpflow/warpflow/rings"

// Tunnel decoding. Every function here records the tunnel kind first and
// then fills in the inner offsets it can: a malformed inner packet leaves
// the outer packet's class alone (see parseKind).

// setTunnel marks m as carrying tunnel t.
func setTunnel(m *rings.Meta, t rings.Tunnel) {
	m.Tunnel = t
	m.Flags |= rings.FlagTunnel
}

// decodeVXLAN decodes the VXLAN header at o (RFC 7348): 8 bytes, then an
// Ethernet frame.
func decodeVXLAN(p []byte, o, end int, m *rings.Meta) {
	setTunnel(m, rings.TunnelVXLAN)
	if o+vxlanHdrLen <= end {
		innerEthernet(p, o+vxlanHdrLen, end, m)
	}
}

// decodeGENEVE decodes the GENEVE header at o (RFC 8926): 8 bytes plus
// options of 4*OptLen bytes, then a payload named by an ethertype.
func decodeGENEVE(p []byte, o, end int, m *rings.Meta) {
	setTunnel(m, rings.TunnelGENEVE)
	if o+geneveMinHdr > end || p[o]>>6 != 0 { // only version 0 is defined
		return
	}
	hl := geneveMinHdr + int(p[o]&0x3f)*4
	if o+hl > end {
		return
	}
	innerByEtherType(p, o+hl, end, be16(p, o+2), m)
}

// decodeGRE decodes the GRE header at o (RFC 2784, 2890; caller checked 4
// bytes): optional checksum, key and sequence words, then a payload named
// by an ethertype. Version 1 is PPTP's enhanced GRE (RFC 2637: key always
// present, optional sequence and acknowledgement words) carrying PPP.
// RFC 1701 source routing carries no payload we decode.
func decodeGRE(p []byte, o, end int, m *rings.Meta) {
	setTunnel(m, rings.TunnelGRE)
	flags := be16(p, o)
	ver := flags & 0x0007
	if ver > 1 || flags&0x4000 != 0 {
		return
	}
	hl := greMinHdr
	for _, bit := range [3]uint16{0x8000, 0x2000, 0x1000} { // checksum, key, sequence
		if flags&bit != 0 {
			hl += 4
		}
	}
	if ver == 1 {
		if flags&0x2000 == 0 || flags&0x8000 != 0 {
			return // PPTP GRE always has the key and never the checksum
		}
		if flags&0x0080 != 0 { // acknowledgement
			hl += 4
		}
	}
	if o+hl > end {
		return
	}
	in := o + hl
	switch et := be16(p, o+2); et {
	case etERSPN2:
		// Type II has an 8-byte header and sets the GRE sequence bit;
		// type I has neither.
		if flags&0x1000 != 0 {
			in += 8
		}
		innerEthernet(p, in, end, m)
	case etERSPN3:
		// 12-byte header, plus an 8-byte platform sub-header when O is set.
		if in+12 > end {
			return
		}
		if p[in+11]&1 != 0 {
			in += 8
		}
		innerEthernet(p, in+12, end, m)
	case etPPP:
		innerPPP(p, in, end, m)
	default:
		innerByEtherType(p, in, end, et, m)
	}
}

// innerPPP decodes a PPP frame at o as PPTP carries it: the ff 03 address
// and control bytes unless compressed away (ACFC), a one- or two-byte
// protocol (PFC: an odd first byte is the whole protocol), then IPv4 or
// IPv6.
func innerPPP(p []byte, o, end int, m *rings.Meta) {
	if o+2 <= end && p[o] == 0xff && p[o+1] == 0x03 {
		o += 2
	}
	if o >= end {
		return
	}
	proto := uint16(p[o])
	if proto&1 != 0 {
		o++
	} else {
		if o+2 > end {
			return
		}
		proto = be16(p, o)
		o += 2
	}
	switch proto {
	case pppIPv4:
		innerIPv4(p, o, end, m)
	case pppIPv6:
		innerIPv6(p, o, end, m)
	}
}

// innerByEtherType decodes an inner payload at o named by ethertype et.
func innerByEtherType(p []byte, o, end int, et uint16, m *rings.Meta) {
	switch et {
	case etTEB:
		innerEthernet(p, o, end, m)
	case etIPv4:
		innerIPv4(p, o, end, m)
	case etIPv6:
		innerIPv6(p, o, end, m)
	}
}

// innerEthernet decodes an inner Ethernet header (with up to two VLAN tags).
func innerEthernet(p []byte, o, end int, m *rings.Meta) {
	if o+ethHdrLen > end {
		return
	}
	m.InnerL2Off = uint16(o)
	et := be16(p, o+12)
	o += ethHdrLen
	for tags := 0; isVLANTPID(et); tags++ {
		if tags == maxVLANTags || o+4 > end {
			return
		}
		et = be16(p, o+2)
		o += 4
	}
	switch et {
	case etIPv4:
		innerIPv4(p, o, end, m)
	case etIPv6:
		innerIPv6(p, o, end, m)
	}
}

// innerIPv4 records a well-formed inner IPv4 header at o and its L4 header.
func innerIPv4(p []byte, o, end int, m *rings.Meta) {
	if o+ipv4MinHdr > end || p[o]>>4 != 4 {
		return
	}
	ihl := int(p[o]&0x0f) * 4
	if ihl < ipv4MinHdr || o+ihl > end {
		return
	}
	m.InnerL3Off = uint16(o)
	if be16(p, o+6)&0x1fff != 0 {
		return // later fragment: no L4 header
	}
	if tot := int(be16(p, o+2)); tot >= ihl && o+tot < end {
		end = o + tot
	}
	innerL4(p, o+ihl, end, p[o+9], m)
}

// innerIPv6 records a well-formed inner IPv6 header at o and its L4 header.
func innerIPv6(p []byte, o, end int, m *rings.Meta) {
	if o+ipv6HdrLen > end || p[o]>>4 != 6 {
		return
	}
	m.InnerL3Off = uint16(o)
	if e := o + ipv6HdrLen + int(be16(p, o+4)); e < end {
		end = e
	}
	l4, nh, frag, c := walkIPv6Ext(p, o+ipv6HdrLen, end, p[o+6])
	if c != rings.ClassOK || frag == fragNonFirst {
		return
	}
	innerL4(p, l4, end, nh, m)
}

// innerL4 records the inner L4 header at o when it is complete.
func innerL4(p []byte, o, end int, proto uint8, m *rings.Meta) {
	var hl int
	switch proto {
	case protoTCP:
		if o+tcpMinHdr > end {
			return
		}
		hl = int(p[o+12]>>4) * 4
		if hl < tcpMinHdr {
			return
		}
	case protoUDP:
		hl = udpHdrLen
	case protoSCTP:
		hl = sctpHdrLen
	case protoICMP:
		hl = icmpHdrLen
	case protoICMPv6:
		hl = icmp6HdrLen
	case protoGRE:
		hl = greMinHdr
	default:
		return
	}
	if o+hl > end {
		return
	}
	m.InnerL4Off = uint16(o)
	m.Flags |= rings.FlagInnerL4
}
