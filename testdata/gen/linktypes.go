package main

import (
	"encoding/binary"
	"time"

	"github.com/gopacket/gopacket/layers"
)

// Link types by number, as in the tcpdump.org LINKTYPE_ registry.
const (
	linkNull    layers.LinkType = 0   // BSD loopback, host byte order family
	linkPPP     layers.LinkType = 9   // PPP, ff 03 framing optional
	linkPPPHDLC layers.LinkType = 50  // PPP in HDLC-like framing
	linkRaw     layers.LinkType = 101 // raw IP, version from the first nibble
	linkCHDLC   layers.LinkType = 104 // Cisco HDLC
	link80211   layers.LinkType = 105 // IEEE 802.11 (unsupported by warpflow)
	linkLoop    layers.LinkType = 108 // OpenBSD loopback, network byte order family
	linkSLL     layers.LinkType = 113 // Linux cooked v1
	linkPPPPPPD layers.LinkType = 166 // PPP as pppd saves it, direction first
	linkIPv4    layers.LinkType = 228 // raw IPv4 only
	linkIPv6    layers.LinkType = 229 // raw IPv6 only
	linkSLL2    layers.LinkType = 276 // Linux cooked v2
	ethLinkID   layers.LinkType = 1
)

var linkBase = time.Date(2024, 1, 5, 0, 0, 0, 0, time.UTC)

// linkPacket is one of the ten packets shared by all linktypes/ files.
type linkPacket struct {
	frame []byte // Ethernet frame
	note  string
	fromA bool
}

func (l linkPacket) ip() []byte { return l.frame[ethLen:] }
func (l linkPacket) v6() bool   { return l.frame[ethLen]>>4 == 6 }

// linkPackets builds the ten packets: six IPv4, then four IPv6.
func linkPackets(c *capture) []linkPacket {
	p4, l4 := path{a: cli4, b: srv4}, path{a: lan4a, b: gw4}
	p6, d6 := path{a: cli6, b: srv6}, path{a: cli6, b: dns6}
	t4 := &tcpConn{p: p4, aport: 40000, bport: 80, aseq: 1, bseq: 2}
	t6 := &tcpConn{p: p6, aport: 41000, bport: 443, aseq: 3, bseq: 4}
	pk := []linkPacket{
		{c.serialize(t4.seg(c, true, "S", nil)...), "tcp4 SYN 10.1.1.10:40000 > 10.2.0.80:80", true},
		{c.serialize(t4.seg(c, false, "SA", nil)...), "tcp4 SYN/ACK 10.2.0.80:80 > 10.1.1.10:40000", false},
		{c.serialize(udp(c, l4, true, 53000, 53, 64, fill(29, 0))...), "udp4 192.168.1.10:53000 > 192.168.1.1:53", true},
		{c.serialize(icmp4Echo(c, p4, true, 64, 1, 1)...), "icmp4 echo request 10.1.1.10 > 10.2.0.80", true},
		{c.serialize(icmp4Echo(c, p4, false, 64, 1, 1)...), "icmp4 echo reply 10.2.0.80 > 10.1.1.10", false},
		{c.serialize(udp(c, l4, false, 53000, 53, 64, fill(45, 0))...), "udp4 192.168.1.1:53 > 192.168.1.10:53000", false},
		{c.serialize(t6.seg(c, true, "S", nil)...), "tcp6 SYN [2001:db8:1::10]:41000 > [2001:db8:2::443]:443", true},
		{c.serialize(udp(c, d6, true, 54000, 53, 64, fill(37, 0))...), "udp6 [2001:db8:1::10]:54000 > [2001:db8::53]:53", true},
		{c.serialize(icmp6Echo(c, p6, true, 64, 2, 1)...), "icmp6 echo request 2001:db8:1::10 > 2001:db8:2::443", true},
		{c.serialize(icmp6Echo(c, p6, false, 64, 2, 1)...), "icmp6 echo reply 2001:db8:2::443 > 2001:db8:1::10", false},
	}
	return pk
}

// buildLinktypes returns the linktypes/ captures and the manifest of the
// shared packets.
func buildLinktypes() ([]*capture, *capture) {
	src := newCapture("linktypes/packets", ethLinkID, linkBase)
	pk := linkPackets(src)
	for _, p := range pk {
		src.raw(p.note, p.frame)
	}
	if src.err != nil {
		return nil, src
	}
	mk := func(name string, lt layers.LinkType, keep func(linkPacket) bool, hdr func(i int, p linkPacket) []byte) *capture {
		c := newCapture("linktypes/"+name, lt, linkBase)
		for i, p := range pk {
			if keep != nil && !keep(p) {
				continue
			}
			c.raw(p.note, append(hdr(i, p), p.ip()...))
		}
		return c
	}
	v4only := func(p linkPacket) bool { return !p.v6() }
	v6only := func(p linkPacket) bool { return p.v6() }
	none := func(int, linkPacket) []byte { return nil }
	// BSD AF_INET6 differs by OS (24 NetBSD/OpenBSD, 28 FreeBSD, 30
	// Darwin); readers must take all three, so the v6 packets rotate.
	bsdINET6 := []uint32{24, 28, 30}
	out := []*capture{
		mk("ethernet.pcap", ethLinkID, nil, func(_ int, p linkPacket) []byte { return p.frame[:ethLen] }),
		mk("raw-101.pcap", linkRaw, nil, none),
		mk("ipv4-228.pcap", linkIPv4, v4only, none),
		mk("ipv6-229.pcap", linkIPv6, v6only, none),
		mk("sll-113.pcap", linkSLL, nil, sllHeader),
		mk("sll2-276.pcap", linkSLL2, nil, sll2Header),
		mk("null-0.pcap", linkNull, nil, func(i int, p linkPacket) []byte {
			fam := uint32(2)
			if p.v6() {
				fam = bsdINET6[i%3]
			}
			return binary.LittleEndian.AppendUint32(nil, fam)
		}),
		mk("loop-108.pcap", linkLoop, nil, func(_ int, p linkPacket) []byte {
			fam := uint32(2)
			if p.v6() {
				fam = 24
			}
			return binary.BigEndian.AppendUint32(nil, fam)
		}),
	}
	ng := mk("ethernet.pcapng", ethLinkID, nil, func(_ int, p linkPacket) []byte { return p.frame[:ethLen] })
	ng.ng = true
	out = append(out, ng)
	out = append(out,
		mk("ppp-9.pcap", linkPPP, nil, pppHeader),
		mk("ppp_hdlc-50.pcap", linkPPPHDLC, nil, func(_ int, p linkPacket) []byte {
			return append([]byte{0xff, 0x03}, pppProto(p)...)
		}),
		mk("ppp_pppd-166.pcap", linkPPPPPPD, nil, func(_ int, p linkPacket) []byte {
			dir := byte(0) // received
			if p.fromA {
				dir = 1 // sent
			}
			return append([]byte{dir, 0x03}, pppProto(p)...)
		}),
		mk("c_hdlc-104.pcap", linkCHDLC, nil, func(_ int, p linkPacket) []byte {
			return append([]byte{0x0f, 0x00}, p.frame[12:14]...) // unicast, ethertype
		}),
	)
	// An 802.11 data frame (to DS, 24-byte header) with LLC/SNAP carrying
	// the first IPv4 packet: a link type Warpflow does not normalise.
	wlan := newCapture("linktypes/unsupported-ieee802_11-105.pcap", link80211, linkBase)
	wlanHdr := []byte{0x08, 0x01, 0, 0}             // frame control: data, to DS; duration
	wlanHdr = append(wlanHdr, pk[0].frame[0:6]...)  // addr1: BSSID (the gateway's MAC)
	wlanHdr = append(wlanHdr, pk[0].frame[6:12]...) // addr2: source
	wlanHdr = append(wlanHdr, pk[0].frame[0:6]...)  // addr3: destination
	wlanHdr = append(wlanHdr, 0x10, 0x00)           // sequence control
	wlanHdr = append(wlanHdr, 0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00)
	wlan.raw(pk[0].note+" in 802.11 with LLC/SNAP", append(wlanHdr, pk[0].ip()...))
	out = append(out, wlan)
	return out, src
}

// pppProto is the uncompressed 2-byte PPP protocol field: 0x0021 IPv4,
// 0x0057 IPv6.
func pppProto(p linkPacket) []byte {
	if p.v6() {
		return []byte{0x00, 0x57}
	}
	return []byte{0x00, 0x21}
}

// pppHeader is a LINKTYPE_PPP header; the packets rotate through the three
// shapes readers must take: HDLC-like framing (ff 03, 2-byte protocol), no
// framing (2-byte protocol) and no framing with protocol-field compression
// (1-byte protocol, RFC 1661 section 6.5).
func pppHeader(i int, p linkPacket) []byte {
	switch i % 3 {
	case 0:
		return append([]byte{0xff, 0x03}, pppProto(p)...)
	case 1:
		return pppProto(p)
	}
	return pppProto(p)[1:]
}

// sllPktType is the Linux packet type: 0 to us, 4 outgoing; a sends.
func sllPktType(p linkPacket) byte {
	if p.fromA {
		return 4
	}
	return 0
}

// sllHeader is the 16-byte LINKTYPE_LINUX_SLL header.
func sllHeader(_ int, p linkPacket) []byte {
	h := make([]byte, 16)
	h[1] = sllPktType(p)
	binary.BigEndian.PutUint16(h[2:], 1) // ARPHRD_ETHER
	binary.BigEndian.PutUint16(h[4:], 6)
	copy(h[6:], p.frame[6:12]) // source MAC
	copy(h[14:], p.frame[12:14])
	return h
}

// sll2Header is the 20-byte LINKTYPE_LINUX_SLL2 header.
func sll2Header(_ int, p linkPacket) []byte {
	h := make([]byte, 20)
	copy(h[0:], p.frame[12:14])
	binary.BigEndian.PutUint32(h[4:], 2) // ifindex
	binary.BigEndian.PutUint16(h[8:], 1) // ARPHRD_ETHER
	h[10] = sllPktType(p)
	h[11] = 6
	copy(h[12:], p.frame[6:12])
	return h
}
