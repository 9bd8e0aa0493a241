package pipelines

import (
	"encoding/binary"

	"github.com/warpflow/warpflow/rings"
)

// The rewrite stage's per-packet path. Every write is bounds-checked
// against the packet's length: Meta comes from the parse stage, but a
// malformed or truncated packet must never be written past its end.

const (
	rwTagLen       = 4
	rwIpProtoTCP   = 6
	rwIpProtoUDP   = 17
	rwTcpCsumOff   = 16
	rwUdpCsumOff   = 6
	rwL2Ops        = rwPopVLAN | rwPushVLAN | rwSrcMAC | rwDstMAC | rwSwapMACs
	rwMACOps       = rwSrcMAC | rwDstMAC | rwSwapMACs
	rwL3Ops        = rwTTL | rwSNAT | rwDNAT
	rwNATOps       = rwSNAT | rwDNAT
	rwIpv4MinHdr   = 20
	rwIpv6HdrLen   = 40
	rwIpv4TTLOff   = 8
	rwIpv6HopOff   = 7
	rwIpv4CsumOff  = 10
	rwIpv4SrcOff   = 12
	rwIpv4DstOff   = 16
	rwIpv4FragOff  = 6
	rwIpv4ProtoOff = 9
)

// one rewrites packet i and returns its edge.
func (s *rewriteStage) one(b *rings.Batch, i int) Edge {
	cfg := &s.cfg
	p := b.Packet(i)
	m := &b.Meta[i]
	if len(p) < rwEthLen {
		s.runt.add(b.Descs[i].Len)
		return 0
	}
	// Drop decisions first, so a dropped packet leaves untouched.
	if cfg.ops&rwTTL != 0 && rwTtlExpired(p, m) {
		return cfg.ttlEdge
	}
	tagged := cfg.ops&(rwPopVLAN|rwPushVLAN) != 0 && rwHasVLANTag(p)
	if cfg.ops&rwPushVLAN != 0 && b.Headroom(i) < rwTagLen && (cfg.ops&rwPopVLAN == 0 || !tagged) {
		return cfg.headroomEdge
	}

	if cfg.ops&rwL2Ops != 0 {
		if cfg.ops&rwPopVLAN != 0 && tagged {
			copy(p[rwTagLen:12+rwTagLen], p[:12])
			b.AdjustHead(i, rwTagLen) // cannot fail: len(p) >= 18
			p = b.Packet(i)
			rwShiftOffsets(m, -rwTagLen)
			if m.NumVLANs > 0 {
				m.VLANs[0], m.VLANs[1] = m.VLANs[1], 0
				m.NumVLANs--
			}
		}
		if cfg.ops&rwPushVLAN != 0 {
			if !b.AdjustHead(i, -rwTagLen) {
				return cfg.headroomEdge // unreachable: headroom checked above
			}
			p = b.Packet(i)
			copy(p[:12], p[rwTagLen:12+rwTagLen])
			binary.BigEndian.PutUint16(p[12:], cfg.pushTPID)
			binary.BigEndian.PutUint16(p[14:], cfg.pushTCI)
			rwShiftOffsets(m, rwTagLen)
			// Meta holds two tags; a third pushed tag keeps the outer two.
			m.VLANs[0], m.VLANs[1] = cfg.pushTCI&0xfff, m.VLANs[0]
			if m.NumVLANs < 2 {
				m.NumVLANs++
			}
		}
		if cfg.ops&rwMACOps != 0 {
			rwMACs((*[12]byte)(p), cfg)
		}
	}

	if cfg.ops&rwL3Ops == 0 {
		return 0
	}
	l3 := int(m.L3Off)
	switch {
	case m.Flags&rings.FlagIPv4 != 0 && l3 != 0 && l3+rwIpv4MinHdr <= len(p) && p[l3]>>4 == 4:
		s.ipv4(p, m, l3)
		return 0
	case m.Flags&rings.FlagIPv6 != 0 && l3 != 0 && l3+rwIpv6HdrLen <= len(p) && p[l3]>>4 == 6:
		if cfg.ops&rwTTL != 0 {
			p[l3+rwIpv6HopOff]-- // > 1: checked by rwTtlExpired
			m.TTL = p[l3+rwIpv6HopOff]
		}
	case m.Flags&rings.FlagIPv4 != 0:
		// Flagged IPv4 but the header is cut or not IPv4 after all.
		if cfg.ops&rwNATOps != 0 {
			s.truncated.add(b.Descs[i].Len)
		}
		return 0
	}
	if cfg.ops&rwNATOps != 0 {
		s.skipped.add(b.Descs[i].Len)
	}
	return 0
}

// processMACs is Process for a stage whose options are only src_mac,
// dst_mac and swap_macs: every packet goes to edge 0, and only a runt
// frame needs a look at anything but its first 12 bytes.
func (s *rewriteStage) processMACs(b *rings.Batch, idx []uint16, next []Edge) {
	cfg := &s.cfg
	swapOnly := cfg.ops == rwSwapMACs
	for k, i := range idx {
		next[k] = 0
		p := b.Packet(int(i))
		if len(p) < rwEthLen {
			s.runt.add(uint32(len(p)))
			continue
		}
		if swapOnly {
			rwSwapMACs12((*[12]byte)(p))
		} else {
			rwMACs((*[12]byte)(p), cfg)
		}
	}
}

// rwMACs applies the MAC options to the destination and source addresses
// h[0:6] and h[6:12], in option order.
func rwMACs(h *[12]byte, cfg *rewriteConfig) {
	if cfg.ops&rwSrcMAC != 0 {
		*(*[6]byte)(h[6:12]) = cfg.srcMAC
	}
	if cfg.ops&rwDstMAC != 0 {
		*(*[6]byte)(h[0:6]) = cfg.dstMAC
	}
	if cfg.ops&rwSwapMACs != 0 {
		rwSwapMACs12(h)
	}
}

// rwSwapMACs12 exchanges the two 6-byte halves of h with one 8-byte and one
// 4-byte load and store: little-endian, bytes 0-7 are a and 8-11 are c, so
// the new bytes 0-7 are 6,7 (a>>48), 8-11 (c<<16) and 0,1 (a<<48), and the
// new bytes 8-11 are 2-5 (a>>16).
func rwSwapMACs12(h *[12]byte) {
	le := binary.LittleEndian
	a, c := le.Uint64(h[0:8]), le.Uint32(h[8:12])
	le.PutUint64(h[0:8], a>>48|uint64(c)<<16|a<<48)
	le.PutUint32(h[8:12], uint32(a>>16))
}

// ipv4 applies the TTL decrement and NAT to the IPv4 header at l3, whose
// first 20 bytes are inside p. Fields are read and written through h, a
// 20-byte view, so constant offsets need no bounds checks.
func (s *rewriteStage) ipv4(p []byte, m *rings.Meta, l3 int) {
	be := binary.BigEndian
	ops := s.cfg.ops
	h := (*[rwIpv4MinHdr]byte)(p[l3:])
	var ipAcc uint32
	if ops&rwTTL != 0 {
		old := be.Uint16(h[rwIpv4TTLOff:])
		h[rwIpv4TTLOff]-- // > 1: checked by rwTtlExpired
		ipAcc = csumWord(ipAcc, old, old-0x100)
		m.TTL = h[rwIpv4TTLOff]
	}
	if ops&rwNATOps != 0 {
		ihl := int(h[0]&0xf) * 4
		if ihl < rwIpv4MinHdr || l3+ihl > len(p) {
			s.truncated.add(uint32(len(p)))
		} else {
			var cut bool
			if ipAcc, cut = s.nat4(h, p[l3+ihl:], m, ipAcc); cut {
				s.truncated.add(uint32(len(p)))
			}
		}
	}
	csum := h[rwIpv4CsumOff : rwIpv4CsumOff+2]
	be.PutUint16(csum, csumApply(be.Uint16(csum), ipAcc))
}

// nat4 rewrites addresses and ports of the IPv4 packet whose first 20
// header bytes are h and whose L4 part (up to the frame's end) is l, fixes
// the TCP/UDP checksum, and returns ipAcc plus the IP header changes and
// whether the L4 checksum lay past the frame's end.
func (s *rewriteStage) nat4(h *[rwIpv4MinHdr]byte, l []byte, m *rings.Meta, ipAcc uint32) (uint32, bool) {
	be := binary.BigEndian
	cfg := &s.cfg
	proto := h[rwIpv4ProtoOff]
	// Only TCP and UDP carry ports and a pseudo-header checksum, and only
	// in an unfragmented packet or a first fragment.
	csumOff := -1
	if be.Uint16(h[rwIpv4FragOff:])&0x1fff == 0 {
		switch proto {
		case rwIpProtoTCP:
			csumOff = rwTcpCsumOff
		case rwIpProtoUDP:
			csumOff = rwUdpCsumOff
		}
	}
	hasL4 := csumOff >= 0
	var l4Acc uint32
	if cfg.ops&rwSNAT != 0 {
		d := csumAddrDelta(be.Uint32(h[rwIpv4SrcOff:]), cfg.snat.addrSum)
		ipAcc += d
		l4Acc += d
		*(*[4]byte)(h[rwIpv4SrcOff : rwIpv4SrcOff+4]) = cfg.snat.addr
		*(*[4]byte)(m.SrcIP[:4]) = cfg.snat.addr
		if cfg.snat.hasPort && hasL4 && len(l) >= 2 {
			l4Acc = csumWord(l4Acc, be.Uint16(l), cfg.snat.port)
			be.PutUint16(l, cfg.snat.port)
			m.SrcPort = cfg.snat.port
		}
	}
	if cfg.ops&rwDNAT != 0 {
		d := csumAddrDelta(be.Uint32(h[rwIpv4DstOff:]), cfg.dnat.addrSum)
		ipAcc += d
		l4Acc += d
		*(*[4]byte)(h[rwIpv4DstOff : rwIpv4DstOff+4]) = cfg.dnat.addr
		*(*[4]byte)(m.DstIP[:4]) = cfg.dnat.addr
		if cfg.dnat.hasPort && hasL4 && len(l) >= 4 {
			l4Acc = csumWord(l4Acc, be.Uint16(l[2:]), cfg.dnat.port)
			be.PutUint16(l[2:], cfg.dnat.port)
			m.DstPort = cfg.dnat.port
		}
	}
	if hasL4 {
		if csumOff+2 > len(l) {
			return ipAcc, true
		}
		csum := l[csumOff : csumOff+2]
		hc := be.Uint16(csum)
		if proto == rwIpProtoUDP && hc == 0 {
			return ipAcc, false // UDP without a checksum stays without one
		}
		n := csumApply(hc, l4Acc)
		if proto == rwIpProtoUDP && n == 0 {
			n = 0xffff // RFC 768: a computed zero is sent as all ones
		}
		be.PutUint16(csum, n)
	}
	return ipAcc, false
}

// rwTtlExpired reports whether p is an IP packet whose TTL or hop limit is 0
// or 1, so that decrementing it would reach 0.
func rwTtlExpired(p []byte, m *rings.Meta) bool {
	l3 := int(m.L3Off)
	if l3 == 0 {
		return false
	}
	switch {
	case m.Flags&rings.FlagIPv4 != 0 && l3+rwIpv4MinHdr <= len(p) && p[l3]>>4 == 4:
		return p[l3+rwIpv4TTLOff] <= 1
	case m.Flags&rings.FlagIPv6 != 0 && l3+rwIpv6HdrLen <= len(p) && p[l3]>>4 == 6:
		return p[l3+rwIpv6HopOff] <= 1
	}
	return false
}

// rwHasVLANTag reports whether p's Ethernet header is followed by an
// 802.1Q/802.1ad tag and the ethertype after it.
func rwHasVLANTag(p []byte) bool {
	if len(p) < rwEthLen+rwTagLen {
		return false
	}
	switch binary.BigEndian.Uint16(p[12:]) {
	case 0x8100, 0x88a8, 0x9100:
		return true
	}
	return false
}

// rwShiftOffsets moves every header offset in m that is set by d bytes, after
// a tag was pushed (d > 0) or popped (d < 0) in front of them.
func rwShiftOffsets(m *rings.Meta, d int) {
	for _, off := range [...]*uint16{&m.L3Off, &m.L4Off, &m.InnerL2Off, &m.InnerL3Off, &m.InnerL4Off} {
		if *off != 0 && int(*off)+d >= 0 {
			*off = uint16(int(*off) + d)
		}
	}
}
