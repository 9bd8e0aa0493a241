package main

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

var malformedBase = time.Date(2024, 1, 3, 0, 0, 0, 0, time.UTC)

// Offsets inside an untagged Ethernet/IPv4 frame.
const (
	ethLen = 14
	ip4Off = ethLen
	l4Off4 = ethLen + 20
	l4Off6 = ethLen + 40
)

// buildMalformed returns malformed.pcap: each record is a well-formed
// packet with exactly one defect, so a parser that reports the wrong class
// is caught. Checksums are recomputed after each edit. Frames are not
// padded: padding would hide truncation.
func buildMalformed() *capture {
	c := newCapture("malformed.pcap", layers.LinkTypeEthernet, malformedBase)
	a4, b4 := mkHost(0x01, "10.1.1.10"), mkHost(0x02, "10.2.0.80")
	a6, b6 := mkHost(0x06, "2001:db8:1::10"), mkHost(0x07, "2001:db8:2::443")
	p4, p6 := path{a: a4, b: b4}, path{a: a6, b: b6}
	clone := func(b []byte) []byte { return append([]byte(nil), b...) }

	udp4 := c.serialize(udp(c, p4, true, 1234, 5678, 64, fill(18, 0))...) // 60 bytes
	tcp4 := c.serialize((&tcpConn{p: p4, aport: 1234, bport: 80, aseq: 1}).seg(c, true, "PA", fill(6, 0))...)
	if c.err != nil {
		return c
	}

	c.raw("truncated ethernet: 10 of 14 header bytes", clone(udp4[:10]))
	c.raw("truncated ethernet: 13 of 14 header bytes (ethertype cut)", clone(udp4[:13]))

	tag := c.serialize(&layers.Ethernet{SrcMAC: a4.mac, DstMAC: b4.mac, EthernetType: layers.EthernetTypeDot1Q},
		&layers.Dot1Q{VLANIdentifier: 10, Type: layers.EthernetTypeIPv4})
	c.raw("truncated vlan tag: 0x8100 with 2 of 4 tag bytes", clone(tag[:16]))
	qinq := c.serialize(path{a: a4, b: b4, tags: []vlanTag{{layers.EthernetTypeQinQ, 100}, {layers.EthernetTypeDot1Q, 10}}}.l2(true, layers.EthernetTypeIPv4)...)
	c.raw("truncated vlan tag: 0x88a8 tag complete, inner 0x8100 tag has 3 of 4 bytes", clone(qinq[:21]))

	c.raw("truncated ipv4 header: 12 of 20 bytes", clone(udp4[:ip4Off+12]))

	b := clone(udp4)
	b[ip4Off] = 0x44
	ipv4Checksum(b[ip4Off:])
	c.raw("ipv4 bad header length: ihl 4 (< 5)", b)
	b = clone(udp4)
	b[ip4Off] = 0x40
	ipv4Checksum(b[ip4Off:])
	c.raw("ipv4 bad header length: ihl 0", b)

	b = clone(udp4)
	b[ip4Off] = 0x65
	ipv4Checksum(b[ip4Off:])
	c.raw("ipv4 bad version: version nibble 6 under ethertype 0x0800", b)

	b = clone(udp4)
	binary.BigEndian.PutUint16(b[ip4Off+2:], 1500)
	ipv4Checksum(b[ip4Off:])
	c.raw("ipv4 bad total length: 1500 > 46 bytes present", b)
	b = clone(udp4)
	binary.BigEndian.PutUint16(b[ip4Off+2:], 16)
	ipv4Checksum(b[ip4Off:])
	c.raw("ipv4 bad total length: 16 < 20-byte header", b)

	udp6 := c.serialize(udp(c, p6, true, 1234, 5678, 64, fill(8, 0))...)
	if c.err != nil {
		return c
	}
	c.raw("truncated ipv6 header: 20 of 40 bytes", clone(udp6[:ethLen+20]))

	ext := func(nh layers.IPProtocol, body []byte) []byte {
		ip := p6.ip(c, true, nh, 64)
		return c.serialize(append(p6.l2(true, layers.EthernetTypeIPv6), ip, gopacket.Payload(body))...)
	}
	c.raw("ipv6 extension chain past end: hop-by-hop says 88 bytes, 8 present",
		ext(layers.IPProtocolIPv6HopByHop, []byte{byte(layers.IPProtocolUDP), 10, 1, 4, 0, 0, 0, 0}))
	c.raw("ipv6 extension chain past end: next header destination options, payload length 0 (frame padded to 60)",
		ext(layers.IPProtocolIPv6Destination, nil))
	c.raw("ipv6 extension chain past end: hop-by-hop ok, fragment header has 4 of 8 bytes",
		ext(layers.IPProtocolIPv6HopByHop, []byte{byte(layers.IPProtocolIPv6Fragment), 0, 1, 4, 0, 0, 0, 0, byte(layers.IPProtocolUDP), 0, 0, 0}))

	deep := path{a: a4, b: b4, tags: []vlanTag{{layers.EthernetTypeQinQ, 100}, {layers.EthernetTypeDot1Q, 10}, {layers.EthernetTypeDot1Q, 20}}}
	c.raw("vlan too deep: 3 tags (0x88a8/100, 0x8100/10, 0x8100/20), then valid ipv4 udp",
		c.serialize(udp(c, deep, true, 1234, 5678, 64, fill(18, 0))...))
	deep = path{a: a4, b: b4, tags: []vlanTag{{layers.EthernetTypeDot1Q, 1}, {layers.EthernetTypeDot1Q, 2}, {layers.EthernetTypeDot1Q, 3}, {layers.EthernetTypeDot1Q, 4}}}
	c.raw("vlan too deep: 4 tags of 0x8100, then valid ipv4 udp",
		c.serialize(udp(c, deep, true, 1234, 5678, 64, fill(18, 0))...))

	for _, off := range []byte{4, 0} {
		b = clone(tcp4)
		b[l4Off4+12] = off<<4 | b[l4Off4+12]&0x0f
		l4Checksum(b[ip4Off+12:ip4Off+20], byte(layers.IPProtocolTCP), b[l4Off4:], 16)
		c.raw(fmt.Sprintf("tcp bad data offset: %d (< 5)", off), b)
	}

	c.raw("truncated tcp header: 10 of 20 bytes (ipv4, ip length consistent)",
		c.serialize(append(p4.l23(c, true, layers.IPProtocolTCP, 64), gopacket.Payload(clone(tcp4[l4Off4:l4Off4+10])))...))
	b = clone(tcp4[l4Off4 : l4Off4+26])
	b[12] = 15<<4 | b[12]&0x0f
	c.raw("truncated tcp header: data offset 15 (60 bytes) but 26 bytes in the ipv4 payload",
		c.serialize(append(p4.l23(c, true, layers.IPProtocolTCP, 64), gopacket.Payload(b))...))
	c.raw("truncated tcp header: 12 of 20 bytes (ipv6)",
		c.serialize(append(p6.l23(c, true, layers.IPProtocolTCP, 64), gopacket.Payload(clone(tcp4[l4Off4:l4Off4+12])))...))

	c.raw("truncated udp header: 4 of 8 bytes (ipv4)",
		c.serialize(append(p4.l23(c, true, layers.IPProtocolUDP, 64), gopacket.Payload(clone(udp4[l4Off4:l4Off4+4])))...))
	c.raw("truncated udp header: 6 of 8 bytes (ipv6)",
		c.serialize(append(p6.l23(c, true, layers.IPProtocolUDP, 64), gopacket.Payload(clone(udp6[l4Off6:l4Off6+6])))...))

	c.raw("unknown ethertype 0x88b5 (local experimental), 46-byte payload",
		c.serialize(&layers.Ethernet{SrcMAC: a4.mac, DstMAC: b4.mac, EthernetType: 0x88b5}, gopacket.Payload(fill(46, 0))))
	c.raw("unknown ethertype 0x88b5 inside vlan 10",
		c.serialize(append(path{a: a4, b: b4, tags: []vlanTag{{layers.EthernetTypeDot1Q, 10}}}.l2(true, 0x88b5), gopacket.Payload(fill(42, 0)))...))
	return c
}

// l4Checksum recomputes a TCP/UDP checksum over an IPv4 pseudo-header
// (addrs is source then destination) after a deliberate edit to seg.
func l4Checksum(addrs []byte, proto byte, seg []byte, csumOff int) {
	seg[csumOff], seg[csumOff+1] = 0, 0
	var sum uint32
	add := func(b []byte) {
		for i := 0; i < len(b); i += 2 {
			v := uint32(b[i]) << 8
			if i+1 < len(b) {
				v |= uint32(b[i+1])
			}
			sum += v
		}
	}
	add(addrs)
	sum += uint32(proto) + uint32(len(seg))
	add(seg)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(seg[csumOff:], ^uint16(sum))
}
