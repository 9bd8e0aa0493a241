package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// Real-world capture shapes, under realworld/: the file variants, record
// quirks and frame sizes that real captures bring (see testdata/README.md).
// Each is a few packets; the replay tests assert what happens to every one.

var realBase = time.Date(2024, 1, 7, 0, 0, 0, 0, time.UTC)

// rawRec is one record with the original length its header claims.
type rawRec struct {
	data []byte
	orig int
}

// pcapVariantFile writes a classic pcap file of the given byte order, magic
// and version: record lengths in the pre-2.3 order (original length first)
// for versions before 2.3, 8 more record header bytes for the modified
// magic (0xa1b2cd34), as libpcap's sf-pcap.c reads them.
func pcapVariantFile(o binary.ByteOrder, magic uint32, major, minor uint16, snaplen uint32, recs []rawRec) []byte {
	var b bytes.Buffer
	h := make([]byte, 24)
	o.PutUint32(h[0:], magic)
	o.PutUint16(h[4:], major)
	o.PutUint16(h[6:], minor)
	o.PutUint32(h[16:], snaplen)
	o.PutUint32(h[20:], uint32(layers.LinkTypeEthernet))
	b.Write(h)
	for i, r := range recs {
		ts := realBase.Add(time.Duration(i) * time.Millisecond)
		rh := make([]byte, 16)
		o.PutUint32(rh[0:], uint32(ts.Unix()))
		o.PutUint32(rh[4:], uint32(ts.Nanosecond()/1000))
		incl, orig := uint32(len(r.data)), uint32(r.orig)
		if major == 2 && minor < 3 {
			incl, orig = orig, incl
		}
		o.PutUint32(rh[8:], incl)
		o.PutUint32(rh[12:], orig)
		b.Write(rh)
		if magic == 0xa1b2cd34 {
			// ifindex 2, protocol 0x0800, packet type 0 (to us), pad
			b.Write([]byte{0, 0, 0, 2, 0x08, 0x00, 0, 0})
		}
		b.Write(r.data)
	}
	return b.Bytes()
}

// realTraffic is a small two-way conversation: a TCP connection, DNS over
// UDP, ICMP echo and IPv6 UDP, with payloads of the given size.
func realTraffic(c *capture, payload int) {
	conn := &tcpConn{p: path{a: mkHost(0x70, "10.7.0.10"), b: mkHost(0x71, "10.7.0.80")}, aport: 41000, bport: 80, aseq: 100, bseq: 900, ttl: 64}
	for _, s := range []struct {
		fromA bool
		flags string
		n     int
	}{{true, "S", 0}, {false, "SA", 0}, {true, "A", 0}, {true, "PA", payload}, {false, "PA", payload}, {true, "FA", 0}, {false, "FA", 0}, {true, "A", 0}} {
		c.frame(fmt.Sprintf("tcp4 %s len=%d fromA=%v", s.flags, s.n, s.fromA), conn.seg(c, s.fromA, s.flags, fill(s.n, 0x11))...)
	}
	dns := path{a: mkHost(0x72, "10.7.0.10"), b: mkHost(0x73, "10.7.0.53")}
	for i := range 4 {
		c.frame(fmt.Sprintf("udp4 dns fromA=%v", i%2 == 0), udp(c, dns, i%2 == 0, 53001, 53, 64, fill(payload/4+i, 0x22))...)
	}
	v6 := path{a: mkHost(0x74, "2001:db8:7::10"), b: mkHost(0x75, "2001:db8:7::20")}
	for i := range 4 {
		c.frame(fmt.Sprintf("udp6 fromA=%v", i%2 == 0), udp(c, v6, i%2 == 0, 6000, 6001, 64, fill(payload, 0x33))...)
	}
	ping := path{a: mkHost(0x76, "10.7.0.10"), b: mkHost(0x77, "10.7.0.1")}
	for i := range 2 {
		c.frame("icmp4 echo", icmp4Echo(c, ping, i == 0, 64, 9, 1)...)
	}
}

// realRecords returns the records of a fresh realTraffic capture.
func realRecords(payload int) ([]record, error) {
	c := newCapture("tmp", layers.LinkTypeEthernet, realBase)
	realTraffic(c, payload)
	return c.recs, c.err
}

// buildRealworld returns the realworld/ files.
func buildRealworld() (map[string][]byte, error) {
	files := map[string][]byte{}
	recs, err := realRecords(200)
	if err != nil {
		return nil, err
	}
	whole := make([]rawRec, len(recs))
	for i, r := range recs {
		whole[i] = rawRec{r.data, len(r.data)}
	}
	be, le := binary.BigEndian, binary.LittleEndian
	// Old NFS/SMB captures: big-endian version 2.1.
	files["realworld/v21-be.pcap"] = pcapVariantFile(be, 0xa1b2c3d4, 2, 1, 65535, whole)
	// Red Hat's tcpdump (Kuznetzov's patched libpcap).
	files["realworld/modified-redhat.pcap"] = pcapVariantFile(le, 0xa1b2cd34, 2, 4, 65535, whole)
	// A headers-only capture: tcpdump -s 96 of larger packets.
	big, err := realRecords(1200)
	if err != nil {
		return nil, err
	}
	var cut []rawRec
	for _, r := range big {
		cut = append(cut, rawRec{r.data[:min(96, len(r.data))], len(r.data)})
	}
	files["realworld/snaplen-96.pcap"] = pcapVariantFile(le, 0xa1b2c3d4, 2, 4, 96, cut)
	// Zero-length records among good ones.
	var zero []rawRec
	for i, r := range whole {
		zero = append(zero, r)
		if i%5 == 2 {
			zero = append(zero, rawRec{nil, 0})
		}
	}
	files["realworld/zero-length.pcap"] = pcapVariantFile(le, 0xa1b2c3d4, 2, 4, 65535, zero)
	// A capture whose last record header is garbage (claims 4 GiB).
	tail := pcapVariantFile(le, 0xa1b2c3d4, 2, 4, 65535, whole)
	tail = append(tail, recordHeader(realBase, 0xfffffff0, 0xfffffff0)...)
	tail = append(tail, fill(40, 0x44)...)
	files["realworld/corrupt-tail.pcap"] = tail

	// Jumbo frames (9,000-byte IP packets) and GRO/TSO host captures (TCP
	// segments of 45 MSS, IPv6 up to 64 KiB), among small ones.
	jumbo := newCapture("realworld/jumbo-9000.pcap", layers.LinkTypeEthernet, realBase)
	realTraffic(jumbo, 9000-20-20)
	gro := newCapture("realworld/gro-64k.pcap", layers.LinkTypeEthernet, realBase)
	realTraffic(gro, 45*1448)
	for _, c := range []*capture{jumbo, gro} {
		data, err := c.encode()
		if err != nil {
			return nil, err
		}
		files[c.name] = data
		files[c.name+".txt"] = c.manifest()
	}
	return files, nil
}

// buildEncap returns encap.pcap: the encapsulations between Ethernet and IP
// (PPPoE sessions, MPLS stacks) and the tunnels (GRE carrying PPP, IP in
// IP) that the parse stage decodes, each carrying TCP, UDP or ICMP.
func buildEncap() *capture {
	c := newCapture("encap.pcap", layers.LinkTypeEthernet, realBase)
	c.pad = true
	a4, b4 := mkHost(0x80, "10.8.0.1"), mkHost(0x81, "10.8.0.2")
	a6, b6 := mkHost(0x82, "2001:db8:8::1"), mkHost(0x83, "2001:db8:8::2")
	inner := func(v6 bool, fromA bool, i int) []gopacket.SerializableLayer {
		p := path{a: a4, b: b4}
		if v6 {
			p = path{a: a6, b: b6}
		}
		if i%2 == 0 {
			return udp(c, p, fromA, 7000+uint16(i), 9000, 64, fill(30+i, 0x55))[1:]
		}
		conn := &tcpConn{p: p, aport: 42000 + uint16(i), bport: 443, aseq: 1, bseq: 1, ttl: 64}
		return conn.seg(c, fromA, "PA", fill(40, 0x66))[1:]
	}
	eth := func(fromA bool, et layers.EthernetType) *layers.Ethernet {
		src, dst := mkHost(0x90, "0.0.0.0"), mkHost(0x91, "0.0.0.0")
		if !fromA {
			src, dst = dst, src
		}
		return &layers.Ethernet{SrcMAC: src.mac, DstMAC: dst.mac, EthernetType: et}
	}
	pppType := map[bool]layers.PPPType{false: layers.PPPTypeIPv4, true: layers.PPPTypeIPv6}
	for i := range 8 {
		v6, fromA := i%4 >= 2, i%2 == 0
		ls := []gopacket.SerializableLayer{eth(fromA, layers.EthernetTypePPPoESession),
			&layers.PPPoE{Version: 1, Type: 1, Code: layers.PPPoECodeSession, SessionId: 0x2a},
			&layers.PPP{PPPType: pppType[v6]}}
		c.frame(fmt.Sprintf("pppoe session 0x2a ipv6=%v", v6), append(ls, inner(v6, fromA, i)...)...)
	}
	for i := range 8 {
		v6, fromA := i%4 >= 2, i%2 == 0
		et := layers.EthernetTypeMPLSUnicast
		if i >= 6 {
			et = layers.EthernetTypeMPLSMulticast
		}
		ls := []gopacket.SerializableLayer{eth(fromA, et)}
		for k := 0; k <= i%3; k++ {
			ls = append(ls, &layers.MPLS{Label: uint32(100*(k+1) + i), TTL: 64, StackBottom: k == i%3})
		}
		c.frame(fmt.Sprintf("mpls %d labels ipv6=%v", i%3+1, v6), append(ls, inner(v6, fromA, i)...)...)
	}
	outer := path{a: mkHost(0x84, "192.168.8.1"), b: mkHost(0x85, "192.168.8.254")}
	for i := range 6 {
		v6, fromA := i%4 >= 2, i%2 == 0
		gre := &layers.GRE{Version: 1, KeyPresent: true, Key: 0x00000007, SeqPresent: true, Seq: uint32(i), Protocol: layers.EthernetTypePPP}
		if i%3 == 1 {
			gre.AckPresent, gre.Ack = true, uint32(i)
		}
		ls := append(outer.l23(c, fromA, layers.IPProtocolGRE, 64), gre, &layers.PPP{PPPType: pppType[v6], HasPPTPHeader: i%2 == 0})
		c.frame(fmt.Sprintf("gre v1 (pptp) ppp ipv6=%v", v6), append(ls, inner(v6, fromA, i)...)...)
	}
	for i := range 6 {
		v6, fromA := i%2 == 1, i%4 < 2
		proto := layers.IPProtocolIPv4
		if v6 {
			proto = layers.IPProtocolIPv6
		}
		ls := outer.l23(c, fromA, proto, 64)
		c.frame(fmt.Sprintf("ip in ip (protocol %d)", proto), append(ls, inner(v6, fromA, i)...)...)
	}
	return c
}
