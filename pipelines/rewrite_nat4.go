package pipelines

import (
	"encoding/binary"

	"github.com/warpflow/warpflow/rings"
)

// rwNAT4Ops are the options processNAT4 handles: NAT plus MAC rewrites,
// no TTL and no VLAN tag changes, so no packet is dropped or resized.
const rwNAT4Ops = rwNATOps | rwMACOps

// rwNAT4Min is the shortest frame processNAT4 takes: an untagged Ethernet
// header, a 20-byte IPv4 header and a UDP header.
const rwNAT4Min = rwEthLen + rwIpv4MinHdr + 8

// processNAT4 is Process for a stage whose options are snat and/or dnat
// plus any MAC options. The common packet, untagged IPv4 with a 20-byte
// header, not a fragment, TCP or UDP with its checksum inside the frame,
// takes a straight-line path (one and ipv4/nat4 test the same conditions
// one by one, and apply the same changes in the same checksum terms);
// anything else goes through one, untouched until then.
func (s *rewriteStage) processNAT4(b *rings.Batch, idx []uint16, next []Edge) {
	be := binary.BigEndian
	cfg := &s.cfg
	ops := cfg.ops
	snat, dnat := cfg.snat, cfg.dnat
	for k, i := range idx {
		next[k] = 0
		p := b.Packet(int(i))
		m := &b.Meta[i]
		if len(p) < rwNAT4Min || m.Flags&rings.FlagIPv4 == 0 || m.L3Off != rwEthLen {
			next[k] = s.one(b, int(i))
			continue
		}
		f := (*[rwNAT4Min]byte)(p)
		h := (*[rwIpv4MinHdr]byte)(f[rwEthLen:])
		proto := h[rwIpv4ProtoOff]
		csumOff := rwEthLen + rwIpv4MinHdr + rwUdpCsumOff
		if proto == rwIpProtoTCP {
			csumOff = rwEthLen + rwIpv4MinHdr + rwTcpCsumOff
		}
		if h[0] != 0x45 || be.Uint16(h[rwIpv4FragOff:])&0x1fff != 0 ||
			proto != rwIpProtoUDP && proto != rwIpProtoTCP || csumOff+2 > len(p) {
			next[k] = s.one(b, int(i))
			continue
		}
		if ops&rwMACOps == rwSwapMACs {
			rwSwapMACs12((*[12]byte)(p))
		} else if ops&rwMACOps != 0 {
			rwMACs((*[12]byte)(p), cfg)
		}
		l := f[rwEthLen+rwIpv4MinHdr:]
		var acc, l4Acc uint32 // IP header terms; the L4 checksum's extra ones
		if ops&rwSNAT != 0 {
			acc += csumAddrDelta(be.Uint32(h[rwIpv4SrcOff:]), snat.addrSum)
			*(*[4]byte)(h[rwIpv4SrcOff:]) = snat.addr
			*(*[4]byte)(m.SrcIP[:4]) = snat.addr
			if snat.hasPort {
				l4Acc = csumWord(l4Acc, be.Uint16(l[0:]), snat.port)
				be.PutUint16(l[0:], snat.port)
				m.SrcPort = snat.port
			}
		}
		if ops&rwDNAT != 0 {
			acc += csumAddrDelta(be.Uint32(h[rwIpv4DstOff:]), dnat.addrSum)
			*(*[4]byte)(h[rwIpv4DstOff:]) = dnat.addr
			*(*[4]byte)(m.DstIP[:4]) = dnat.addr
			if dnat.hasPort {
				l4Acc = csumWord(l4Acc, be.Uint16(l[2:]), dnat.port)
				be.PutUint16(l[2:], dnat.port)
				m.DstPort = dnat.port
			}
		}
		be.PutUint16(h[rwIpv4CsumOff:], csumApply(be.Uint16(h[rwIpv4CsumOff:]), acc))
		csum := p[csumOff : csumOff+2]
		hc := be.Uint16(csum)
		if proto == rwIpProtoUDP && hc == 0 {
			continue // UDP without a checksum stays without one
		}
		n := csumApply(hc, acc+l4Acc)
		if proto == rwIpProtoUDP && n == 0 {
			n = 0xffff // RFC 768: a computed zero is sent as all ones
		}
		be.PutUint16(csum, n)
	}
}
