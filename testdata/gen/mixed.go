package main

import (
	"fmt"
	"net"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// mixedBase is the timestamp of the first packet in mixed.pcap.
var mixedBase = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

// buildMixed returns mixed.pcap: every protocol the parse stage handles,
// grouped by kind, with flows in both directions. The manifest lists what
// each index holds.
func buildMixed() *capture {
	c := newCapture("mixed.pcap", layers.LinkTypeEthernet, mixedBase)
	c.pad = true
	mixedTCP(c)
	mixedTelnet(c)
	mixedDNS(c)
	mixedTunnels(c)
	mixedICMP(c)
	mixedARP(c)
	mixedVLAN(c)
	mixedIPOptions(c)
	mixedFragments(c)
	mixedIPv6Ext(c)
	mixedSCTP(c)
	mixedTTL1(c)
	mixedBulk(c)
	return c
}

var (
	cli4  = mkHost(0x01, "10.1.1.10")
	srv4  = mkHost(0x02, "10.2.0.80")
	lan4a = mkHost(0x03, "192.168.1.10")
	lan4b = mkHost(0x04, "192.168.2.20")
	gw4   = mkHost(0x05, "192.168.1.1")
	cli6  = mkHost(0x06, "2001:db8:1::10")
	srv6  = mkHost(0x07, "2001:db8:2::443")
	dns6  = mkHost(0x08, "2001:db8::53")
	scan4 = mkHost(0x09, "198.51.100.7")
	scan6 = mkHost(0x0a, "2001:db8:bad::7")
)

// conversation emits a whole TCP connection: handshake, request,
// response, ACK, FIN from each side and the last ACK (9 packets).
func conversation(c *capture, t *tcpConn, label string, req, resp []byte) {
	steps := []struct {
		fromA   bool
		flags   string
		payload []byte
	}{
		{true, "S", nil}, {false, "SA", nil}, {true, "A", nil},
		{true, "PA", req}, {false, "PA", resp}, {true, "A", nil},
		{true, "FA", nil}, {false, "FA", nil}, {true, "A", nil},
	}
	for _, s := range steps {
		dir := "a>b"
		if !s.fromA {
			dir = "b>a"
		}
		c.frame(fmt.Sprintf("%s %s %s len=%d", label, s.flags, dir, len(s.payload)), t.seg(c, s.fromA, s.flags, s.payload)...)
	}
}

func mixedTCP(c *capture) {
	req := []byte("GET / HTTP/1.1\r\nHost: example.test\r\n\r\n")
	for i := range 6 {
		t := &tcpConn{p: path{a: cli4, b: srv4}, aport: 40000 + uint16(i), bport: 80, aseq: 1000 * uint32(i+1), bseq: 7000 * uint32(i+1)}
		conversation(c, t, fmt.Sprintf("tcp4 10/8 conn %d 10.1.1.10:%d<>10.2.0.80:80", i, t.aport), req, fill(200+50*i, byte(i)))
	}
	for i := range 3 {
		t := &tcpConn{p: path{a: lan4a, b: lan4b}, aport: 50000 + uint16(i), bport: 443, aseq: 11 + uint32(i), bseq: 99 + uint32(i)}
		conversation(c, t, fmt.Sprintf("tcp4 192.168/16 conn %d :%d<>:443", i, t.aport), fill(120, 0x16), fill(900, 0x17))
	}
	for i := range 3 {
		t := &tcpConn{p: path{a: cli6, b: srv6}, aport: 41000 + uint16(i), bport: 443, aseq: 5 + uint32(i), bseq: 500 + uint32(i)}
		conversation(c, t, fmt.Sprintf("tcp6 2001:db8 conn %d :%d<>:443", i, t.aport), fill(100, 0x20), fill(600, 0x30))
	}
}

func mixedTelnet(c *capture) {
	for i := range 6 {
		victim := mkHost(0x20+byte(i), fmt.Sprintf("10.0.0.%d", i+1))
		t := &tcpConn{p: path{a: scan4, b: victim}, aport: 31337, bport: 23, aseq: 0x1000 + uint32(i)}
		c.frame(fmt.Sprintf("tcp4 SYN to telnet 198.51.100.7 > 10.0.0.%d:23", i+1), t.seg(c, true, "S", nil)...)
		c.frame(fmt.Sprintf("tcp4 RST/ACK from 10.0.0.%d:23", i+1), t.seg(c, false, "RA", nil)...)
	}
	t := &tcpConn{p: path{a: scan6, b: srv6}, aport: 31337, bport: 23, aseq: 0x2000}
	c.frame("tcp6 SYN to telnet", t.seg(c, true, "S", nil)...)
	c.frame("tcp6 RST/ACK from telnet", t.seg(c, false, "RA", nil)...)
}

func dnsMsg(id uint16, name string, qtype layers.DNSType, answer net.IP) *layers.DNS {
	d := &layers.DNS{ID: id, RD: true, Questions: []layers.DNSQuestion{{Name: []byte(name), Type: qtype, Class: layers.DNSClassIN}}}
	if answer != nil {
		d.QR, d.RA = true, true
		d.Answers = []layers.DNSResourceRecord{{Name: []byte(name), Type: qtype, Class: layers.DNSClassIN, TTL: 300, IP: answer}}
	}
	return d
}

func mixedDNS(c *capture) {
	p4 := path{a: lan4a, b: gw4}
	for i := range 5 {
		name := fmt.Sprintf("host%d.example.test", i)
		sport := 53000 + uint16(i)
		q := append(udpHdr(c, p4, true, sport, 53, 64), dnsMsg(uint16(0x100+i), name, layers.DNSTypeA, nil))
		c.frame(fmt.Sprintf("udp4 dns query A %s", name), q...)
		r := append(udpHdr(c, p4, false, 53, sport, 64), dnsMsg(uint16(0x100+i), name, layers.DNSTypeA, net.IPv4(198, 51, 100, byte(10+i)).To4()))
		c.frame(fmt.Sprintf("udp4 dns response A %s", name), r...)
	}
	p6 := path{a: cli6, b: dns6}
	for i := range 3 {
		name := fmt.Sprintf("v6host%d.example.test", i)
		sport := 54000 + uint16(i)
		q := append(udpHdr(c, p6, true, sport, 53, 64), dnsMsg(uint16(0x200+i), name, layers.DNSTypeAAAA, nil))
		c.frame(fmt.Sprintf("udp6 dns query AAAA %s", name), q...)
		r := append(udpHdr(c, p6, false, 53, sport, 64), dnsMsg(uint16(0x200+i), name, layers.DNSTypeAAAA, net.ParseIP(fmt.Sprintf("2001:db8:5::%d", i+1))))
		c.frame(fmt.Sprintf("udp6 dns response AAAA %s", name), r...)
	}
}

func mixedTunnels(c *capture) {
	// VXLAN: one inner TCP connection carried between two VTEPs.
	vteps := path{a: mkHost(0x30, "10.0.0.1"), b: mkHost(0x31, "10.0.0.2")}
	inner := &tcpConn{p: path{a: mkHost(0x40, "172.16.0.1"), b: mkHost(0x41, "172.16.0.2")}, aport: 5000, bport: 80, aseq: 1, bseq: 1}
	steps := []struct {
		fromA bool
		flags string
		n     int
	}{{true, "S", 0}, {false, "SA", 0}, {true, "A", 0}, {true, "PA", 64}, {false, "PA", 300}, {true, "A", 0}, {true, "FA", 0}, {false, "FA", 0}, {true, "A", 0}}
	for _, s := range steps {
		// 49321 stands for the source port a VTEP derives from the inner flow hash.
		ls := append(udpHdr(c, vteps, s.fromA, 49321, 4789, 64), &layers.VXLAN{ValidIDFlag: true, VNI: 4242})
		ls = append(ls, inner.seg(c, s.fromA, s.flags, fill(s.n, 0x50))...)
		c.frame(fmt.Sprintf("vxlan vni 4242 inner tcp4 %s len=%d fromA=%v", s.flags, s.n, s.fromA), ls...)
	}

	// GENEVE: inner UDP both ways, one 4-byte option.
	gvteps := path{a: mkHost(0x32, "10.0.0.3"), b: mkHost(0x33, "10.0.0.4")}
	gin := path{a: mkHost(0x42, "172.16.1.1"), b: mkHost(0x43, "172.16.1.2")}
	for i := range 8 {
		fromA := i%2 == 0
		gen := &layers.Geneve{Protocol: layers.EthernetTypeTransparentEthernetBridging, VNI: 77,
			Options: []*layers.GeneveOption{{Class: 0x0102, Type: 0x80, Data: []byte{1, 2, 3, 4}}}}
		ls := append(udpHdr(c, gvteps, fromA, 50000+uint16(i/2), 6081, 64), gen)
		ls = append(ls, udp(c, gin, fromA, 6000, 7000, 64, fill(40+i, 0x60))...)
		c.frame(fmt.Sprintf("geneve vni 77 inner udp4 fromA=%v", fromA), ls...)
	}

	// GRE with key carrying IPv4 directly (no inner Ethernet).
	gre := path{a: mkHost(0x34, "10.0.0.1"), b: mkHost(0x35, "10.0.0.254")}
	gin4 := path{a: mkHost(0x44, "192.168.50.1"), b: mkHost(0x45, "192.168.60.1")}
	for i := range 8 {
		fromA := i%2 == 0
		typ := uint8(layers.ICMPv4TypeEchoRequest)
		if !fromA {
			typ = layers.ICMPv4TypeEchoReply
		}
		ls := append(gre.l23(c, fromA, layers.IPProtocolGRE, 64),
			&layers.GRE{KeyPresent: true, Key: 0xbeef, Protocol: layers.EthernetTypeIPv4},
			gin4.ip(c, fromA, layers.IPProtocolICMPv4, 63),
			&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, 0), Id: 0x77, Seq: uint16(i / 2)},
			gopacket.Payload(fill(32, 0x70)))
		c.frame(fmt.Sprintf("gre key 0xbeef inner icmp4 type %d", typ), ls...)
	}
}

func icmp4Echo(c *capture, p path, fromA bool, ttl uint8, id, seq uint16) []gopacket.SerializableLayer {
	typ := uint8(layers.ICMPv4TypeEchoRequest)
	if !fromA {
		typ = layers.ICMPv4TypeEchoReply
	}
	return append(p.l23(c, fromA, layers.IPProtocolICMPv4, ttl),
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, 0), Id: id, Seq: seq},
		gopacket.Payload(fill(56, byte(seq))))
}

func icmp6Echo(c *capture, p path, fromA bool, hop uint8, id, seq uint16) []gopacket.SerializableLayer {
	typ := uint8(layers.ICMPv6TypeEchoRequest)
	if !fromA {
		typ = layers.ICMPv6TypeEchoReply
	}
	return append(p.l23(c, fromA, layers.IPProtocolICMPv6, hop),
		&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)},
		&layers.ICMPv6Echo{Identifier: id, SeqNumber: seq},
		gopacket.Payload(fill(56, byte(seq))))
}

func mixedICMP(c *capture) {
	for i := range 5 {
		c.frame("icmp4 echo request 10/8", icmp4Echo(c, path{a: cli4, b: srv4}, true, 64, 0x10, uint16(i))...)
		c.frame("icmp4 echo reply 10/8", icmp4Echo(c, path{a: cli4, b: srv4}, false, 64, 0x10, uint16(i))...)
	}
	for i := range 3 {
		c.frame("icmp4 echo request 192.168/16", icmp4Echo(c, path{a: lan4a, b: lan4b}, true, 64, 0x11, uint16(i))...)
		c.frame("icmp4 echo reply 192.168/16", icmp4Echo(c, path{a: lan4a, b: lan4b}, false, 64, 0x11, uint16(i))...)
	}
	p6 := path{a: cli6, b: mkHost(0x0b, "2001:db8:2::1")}
	for i := range 4 {
		c.frame("icmp6 echo request", icmp6Echo(c, p6, true, 64, 0x12, uint16(i))...)
		c.frame("icmp6 echo reply", icmp6Echo(c, p6, false, 64, 0x12, uint16(i))...)
	}
	for i := range 3 {
		src := mkHost(0x50+byte(i), fmt.Sprintf("fe80::%d", i+1))
		target := net.ParseIP(fmt.Sprintf("fe80::%d", i+0x10))
		// Solicited-node multicast ff02::1:ffXX:XXXX and its MAC 33:33:ff:XX:XX:XX.
		snm := net.ParseIP("ff02::1:ff00:0")
		copy(snm[13:], target[13:])
		dst := host{mac: net.HardwareAddr{0x33, 0x33, 0xff, target[13], target[14], target[15]}, ip: snm}
		ns := path{a: src, b: dst}
		c.frame("icmp6 neighbour solicitation", append(ns.l23(c, true, layers.IPProtocolICMPv6, 255),
			&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborSolicitation, 0)},
			&layers.ICMPv6NeighborSolicitation{TargetAddress: target, Options: layers.ICMPv6Options{
				{Type: layers.ICMPv6OptSourceAddress, Data: src.mac}}})...)
		tgt := mkHost(0x60+byte(i), target.String())
		na := path{a: tgt, b: src}
		c.frame("icmp6 neighbour advertisement", append(na.l23(c, true, layers.IPProtocolICMPv6, 255),
			&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborAdvertisement, 0)},
			&layers.ICMPv6NeighborAdvertisement{TargetAddress: target, Flags: 0x60, Options: layers.ICMPv6Options{
				{Type: layers.ICMPv6OptTargetAddress, Data: tgt.mac}}})...)
	}
}

func mixedARP(c *capture) {
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	for i := range 4 {
		a, b := lan4a, mkHost(0x70+byte(i), fmt.Sprintf("192.168.1.%d", 100+i))
		c.frame(fmt.Sprintf("arp request who-has %v", b.ip),
			&layers.Ethernet{SrcMAC: a.mac, DstMAC: bcast, EthernetType: layers.EthernetTypeARP},
			&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
				Operation: layers.ARPRequest, SourceHwAddress: a.mac, SourceProtAddress: a.ip, DstHwAddress: make(net.HardwareAddr, 6), DstProtAddress: b.ip})
		c.frame(fmt.Sprintf("arp reply %v is-at", b.ip),
			&layers.Ethernet{SrcMAC: b.mac, DstMAC: a.mac, EthernetType: layers.EthernetTypeARP},
			&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
				Operation: layers.ARPReply, SourceHwAddress: b.mac, SourceProtAddress: b.ip, DstHwAddress: a.mac, DstProtAddress: a.ip})
	}
}

func mixedVLAN(c *capture) {
	v10 := path{a: mkHost(0x80, "10.10.0.5"), b: mkHost(0x81, "10.10.0.6"), tags: []vlanTag{{layers.EthernetTypeDot1Q, 10}}}
	for i := range 6 {
		c.frame("vlan 10 udp4 sip", udp(c, v10, i%2 == 0, 5060, 5060, 64, fill(80+i, 0x80))...)
	}
	v20 := path{a: mkHost(0x82, "10.20.0.5"), b: mkHost(0x83, "10.20.0.6"), tags: []vlanTag{{layers.EthernetTypeDot1Q, 20}}}
	conversation(c, &tcpConn{p: v20, aport: 45000, bport: 22, aseq: 77, bseq: 88}, "vlan 20 tcp4 ssh", fill(40, 0x90), fill(60, 0xa0))
	c.frame("vlan 20 icmp4 echo request", icmp4Echo(c, v20, true, 64, 0x20, 1)...)
	c.frame("vlan 20 icmp4 echo reply", icmp4Echo(c, v20, false, 64, 0x20, 1)...)

	qinq := path{a: mkHost(0x84, "10.100.0.1"), b: mkHost(0x85, "10.100.0.2"),
		tags: []vlanTag{{layers.EthernetTypeQinQ, 100}, {layers.EthernetTypeDot1Q, 10}}}
	for i := range 6 {
		c.frame("qinq 0x88a8/100 + 0x8100/10 udp4", udp(c, qinq, i%2 == 0, 4000, 4001, 64, fill(30+i, 0xb0))...)
	}
	c.frame("qinq icmp4 echo request", icmp4Echo(c, qinq, true, 64, 0x21, 1)...)
	c.frame("qinq icmp4 echo reply", icmp4Echo(c, qinq, false, 64, 0x21, 1)...)
}

func mixedIPOptions(c *capture) {
	p := path{a: lan4a, b: lan4b}
	for i := range 2 {
		ls := udp(c, p, true, 6000, 6001, 1, fill(20, 0xc0))
		ls[1].(*layers.IPv4).Options = []layers.IPv4Option{{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}}}
		c.frame(fmt.Sprintf("ipv4 options: router alert, ttl 1, udp (%d)", i), ls...)
	}
	for i := range 2 {
		ls := icmp4Echo(c, p, i == 0, 64, 0x30, 9)
		// Record route with room for two addresses (RFC 791 3.1), then EOL.
		ls[1].(*layers.IPv4).Options = []layers.IPv4Option{{OptionType: 7, OptionLength: 11, OptionData: []byte{4, 0, 0, 0, 0, 0, 0, 0, 0}}, {OptionType: 0}}
		c.frame("ipv4 options: record route + eol, icmp echo", ls...)
	}
}

// udpDatagram returns a whole UDP header and payload with a checksum over
// the pseudo-header of ip, for splitting into fragments by hand.
func udpDatagram(c *capture, ip gopacket.NetworkLayer, sport, dport uint16, payload []byte) []byte {
	u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	c.setNet(u.SetNetworkLayerForChecksum, ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, serializeOpts, u, gopacket.Payload(payload)); err != nil {
		c.fail(fmt.Errorf("udp datagram: %w", err))
		return nil
	}
	return buf.Bytes()
}

func mixedFragments(c *capture) {
	p := path{a: cli4, b: srv4}
	sizes := [][]int{{400, 200}, {504, 96}, {296, 296, 208}} // cut points: multiples of 8
	for d, parts := range sizes {
		total := 0
		for _, n := range parts {
			total += n
		}
		pseudo := &layers.IPv4{Version: 4, Protocol: layers.IPProtocolUDP, SrcIP: p.a.ip, DstIP: p.b.ip}
		dgram := udpDatagram(c, pseudo, 7000+uint16(d), 7001, fill(total-8, byte(d)))
		id := c.nextID()
		off := 0
		for k, n := range parts {
			ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, Id: id, SrcIP: p.a.ip, DstIP: p.b.ip, FragOffset: uint16(off / 8)}
			if k+1 < len(parts) {
				ip.Flags = layers.IPv4MoreFragments
			}
			what := "first"
			if k > 0 {
				what = "non-first"
			}
			c.frame(fmt.Sprintf("ipv4 fragment %s (datagram %d, offset %d, len %d, MF=%v) udp", what, d, off, n, k+1 < len(parts)),
				append(p.l2(true, layers.EthernetTypeIPv4), ip, gopacket.Payload(dgram[off:off+n]))...)
			off += n
		}
	}
	p6 := path{a: cli6, b: srv6}
	for d := range 2 {
		pseudo := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolUDP, SrcIP: p6.a.ip, DstIP: p6.b.ip}
		dgram := udpDatagram(c, pseudo, 7100+uint16(d), 7101, fill(1192, byte(d)))
		cut := 808
		for k, seg := range [][]byte{dgram[:cut], dgram[cut:]} {
			off := 0
			if k == 1 {
				off = cut
			}
			fh := make([]byte, 8)
			fh[0] = byte(layers.IPProtocolUDP)
			fh[2], fh[3] = byte(off>>8), byte(off)
			if k == 0 {
				fh[3] |= 1 // more fragments
			}
			copy(fh[4:], be32(0xf00d0000+uint32(d)))
			ip := p6.ip(c, true, layers.IPProtocolIPv6Fragment, 64)
			c.frame(fmt.Sprintf("ipv6 fragment header (datagram %d, offset %d, M=%v) udp", d, off, k == 0),
				append(p6.l2(true, layers.EthernetTypeIPv6), ip, gopacket.Payload(append(fh, seg...)))...)
		}
	}
}

func mixedIPv6Ext(c *capture) {
	p := path{a: cli6, b: srv6}
	// Hop-by-hop (router alert + PadN) then destination options (an
	// experimental skippable option, RFC 4727), 8 bytes each.
	ext := func(last layers.IPProtocol) []byte {
		hbh := []byte{byte(layers.IPProtocolIPv6Destination), 0, 5, 2, 0, 0, 1, 0}
		dst := []byte{byte(last), 0, 0x1e, 4, 0xde, 0xad, 0xbe, 0xef}
		return append(hbh, dst...)
	}
	for i := range 2 {
		ip := p.ip(c, i == 0, layers.IPProtocolIPv6HopByHop, 64).(*layers.IPv6)
		src, dst := p.ends(i == 0)
		pseudo := &layers.IPv6{Version: 6, SrcIP: src.ip, DstIP: dst.ip}
		l4 := udpDatagram(c, pseudo, 8000, 8001, fill(24, 0xd0))
		if i == 1 {
			l4 = udpDatagram(c, pseudo, 8001, 8000, fill(24, 0xd0))
		}
		c.frame("ipv6 hop-by-hop + destination options, udp", append(p.l2(i == 0, layers.EthernetTypeIPv6), ip, gopacket.Payload(append(ext(layers.IPProtocolUDP), l4...)))...)
	}
	t := &tcpConn{p: p, aport: 8443, bport: 443, aseq: 42, bseq: 4242}
	for i, f := range []string{"S", "SA"} {
		ls := t.seg(c, i == 0, f, nil)
		seg := ls[len(ls)-1].(*layers.TCP)
		ip := ls[1].(*layers.IPv6)
		c.setNet(seg.SetNetworkLayerForChecksum, ip)
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, serializeOpts, seg); err != nil {
			c.fail(err)
			return
		}
		ip.NextHeader = layers.IPProtocolIPv6HopByHop
		c.frame("ipv6 hop-by-hop + destination options, tcp "+f, ls[0], ip, gopacket.Payload(append(ext(layers.IPProtocolTCP), buf.Bytes()...)))
	}
}

func mixedSCTP(c *capture) {
	p := path{a: mkHost(0x90, "10.5.0.1"), b: mkHost(0x91, "10.5.0.2")}
	const ca, cb = 0x11111111, 0x22222222                // verification tags of a and b
	cookie := append([]byte{0, 7, 0, 12}, "cookie!!"...) // state cookie parameter
	steps := []struct {
		fromA bool
		vtag  uint32
		note  string
		chunk []byte
	}{
		{true, 0, "INIT", sctpChunk(1, 0, be32(ca, 65536, 0x000a000a, 100))},
		{false, ca, "INIT-ACK", sctpChunk(2, 0, append(be32(cb, 65536, 0x000a000a, 500), cookie...))},
		{true, cb, "COOKIE-ECHO", sctpChunk(10, 0, []byte("cookie!!"))},
		{false, ca, "COOKIE-ACK", sctpChunk(11, 0, nil)},
		{true, cb, "DATA", sctpChunk(0, 3, append(be32(100, 0, 0), fill(48, 0xe0)...))},
		{false, ca, "SACK", sctpChunk(3, 0, be32(100, 65536, 0))},
		{false, ca, "DATA", sctpChunk(0, 3, append(be32(500, 0, 0), fill(64, 0xe8)...))},
		{true, cb, "SACK", sctpChunk(3, 0, be32(500, 65536, 0))},
	}
	for _, s := range steps {
		sport, dport := uint16(36412), uint16(2905)
		if !s.fromA {
			sport, dport = dport, sport
		}
		c.frame("sctp4 "+s.note, append(p.l23(c, s.fromA, layers.IPProtocolSCTP, 64), gopacket.Payload(sctpPacket(sport, dport, s.vtag, s.chunk)))...)
	}
}

func mixedTTL1(c *capture) {
	p := path{a: lan4a, b: mkHost(0x92, "198.51.100.1")}
	for i := range 3 {
		c.frame("udp4 traceroute ttl 1", udp(c, p, true, 44444, 33434+uint16(i), 1, fill(32, 0))...)
	}
	c.frame("icmp4 echo request ttl 1", icmp4Echo(c, p, true, 1, 0x40, 1)...)
	p6 := path{a: cli6, b: mkHost(0x93, "2001:db8:ffff::1")}
	for i := range 2 {
		c.frame("udp6 traceroute hop limit 1", udp(c, p6, true, 44445, 33434+uint16(i), 1, fill(32, 0))...)
	}
}

func mixedBulk(c *capture) {
	dst := mkHost(0xa0, "10.4.0.1")
	for f := range 4 {
		p := path{a: mkHost(0xa1+byte(f), fmt.Sprintf("10.3.0.%d", f+1)), b: dst}
		for i := range 6 {
			c.frame(fmt.Sprintf("udp4 rtp flow %d", f), udp(c, p, i != 5, 5004+uint16(f), 5004, 64, fill(172, byte(i)))...)
		}
	}
	p6 := path{a: cli6, b: mkHost(0xb0, "2001:db8:3::1")}
	for i := range 17 {
		c.frame("udp6 quic 443", udp(c, p6, i%2 == 0, 50000, 443, 64, fill(100+i*10, byte(i)))...)
	}
}
