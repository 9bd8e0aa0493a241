package main

import (
	"encoding/binary"
	"hash/crc32"
	"net"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// host is one end of a conversation.
type host struct {
	mac net.HardwareAddr
	ip  net.IP
}

func mkHost(macLast byte, ip string) host {
	addr := net.ParseIP(ip)
	if v4 := addr.To4(); v4 != nil {
		addr = v4
	}
	return host{mac: net.HardwareAddr{0x02, 0x00, 0x5e, 0x10, 0x00, macLast}, ip: addr}
}

// vlanTag is one 802.1Q/802.1ad tag, outermost first in path.tags.
type vlanTag struct {
	tpid layers.EthernetType
	vid  uint16
}

// path is a pair of hosts and the VLAN tags between them; a and b swap
// roles with the direction of each packet.
type path struct {
	a, b host
	tags []vlanTag
}

func (p path) ends(fromA bool) (src, dst host) {
	if fromA {
		return p.a, p.b
	}
	return p.b, p.a
}

func (p path) v6() bool { return p.a.ip.To4() == nil }

// l2 returns the Ethernet header and tags for a packet carrying etype.
func (p path) l2(fromA bool, etype layers.EthernetType) []gopacket.SerializableLayer {
	src, dst := p.ends(fromA)
	eth := &layers.Ethernet{SrcMAC: src.mac, DstMAC: dst.mac, EthernetType: etype}
	out := []gopacket.SerializableLayer{eth}
	for i, t := range p.tags {
		if i == 0 {
			eth.EthernetType = t.tpid
		}
		inner := etype
		if i+1 < len(p.tags) {
			inner = p.tags[i+1].tpid
		}
		out = append(out, &layers.Dot1Q{VLANIdentifier: t.vid, Type: inner})
	}
	return out
}

// ip returns the IPv4 or IPv6 header (the hosts' address family decides).
func (p path) ip(c *capture, fromA bool, proto layers.IPProtocol, ttl uint8) gopacket.SerializableLayer {
	src, dst := p.ends(fromA)
	if p.v6() {
		return &layers.IPv6{Version: 6, NextHeader: proto, HopLimit: ttl, SrcIP: src.ip, DstIP: dst.ip}
	}
	return &layers.IPv4{Version: 4, TTL: ttl, Protocol: proto, Id: c.nextID(), Flags: layers.IPv4DontFragment, SrcIP: src.ip, DstIP: dst.ip}
}

func (p path) etype() layers.EthernetType {
	if p.v6() {
		return layers.EthernetTypeIPv6
	}
	return layers.EthernetTypeIPv4
}

// l23 is l2 followed by the IP header.
func (p path) l23(c *capture, fromA bool, proto layers.IPProtocol, ttl uint8) []gopacket.SerializableLayer {
	return append(p.l2(fromA, p.etype()), p.ip(c, fromA, proto, ttl))
}

// tcpConn tracks sequence numbers of one TCP connection so segments in both
// directions acknowledge each other consistently.
type tcpConn struct {
	p            path
	aport, bport uint16
	aseq, bseq   uint32
	ttl          uint8
}

// tcpFlags maps a compact flag string ("S", "SA", "PA", "FA", "R", "RA") to
// a TCP header.
func tcpFlags(t *layers.TCP, flags string) {
	for _, f := range flags {
		switch f {
		case 'S':
			t.SYN = true
		case 'A':
			t.ACK = true
		case 'P':
			t.PSH = true
		case 'F':
			t.FIN = true
		case 'R':
			t.RST = true
		}
	}
}

// synOptions are the options Linux puts on a SYN.
func synOptions() []layers.TCPOption {
	return []layers.TCPOption{
		{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{0x05, 0xb4}},
		{OptionType: layers.TCPOptionKindSACKPermitted, OptionLength: 2},
		{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: []byte{0, 0, 0x10, 0, 0, 0, 0, 0}},
		{OptionType: layers.TCPOptionKindNop},
		{OptionType: layers.TCPOptionKindWindowScale, OptionLength: 3, OptionData: []byte{7}},
	}
}

// seg returns the layers of one segment and advances the sender's sequence.
func (t *tcpConn) seg(c *capture, fromA bool, flags string, payload []byte) []gopacket.SerializableLayer {
	tcp := &layers.TCP{Window: 64240}
	tcpFlags(tcp, flags)
	seq, ack := &t.aseq, &t.bseq
	tcp.SrcPort, tcp.DstPort = layers.TCPPort(t.aport), layers.TCPPort(t.bport)
	if !fromA {
		seq, ack = ack, seq
		tcp.SrcPort, tcp.DstPort = tcp.DstPort, tcp.SrcPort
	}
	tcp.Seq = *seq
	if tcp.ACK {
		tcp.Ack = *ack
	}
	if tcp.SYN {
		tcp.Options = synOptions()
	}
	*seq += uint32(len(payload))
	if tcp.SYN || tcp.FIN {
		*seq++
	}
	ttl := t.ttl
	if ttl == 0 {
		ttl = 64
	}
	ls := append(t.p.l23(c, fromA, layers.IPProtocolTCP, ttl), tcp)
	if len(payload) > 0 {
		ls = append(ls, gopacket.Payload(payload))
	}
	return ls
}

// udp returns the layers of one UDP datagram on p; sport and dport are a's
// ports and swap with the direction.
func udp(c *capture, p path, fromA bool, sport, dport uint16, ttl uint8, payload []byte) []gopacket.SerializableLayer {
	if !fromA {
		sport, dport = dport, sport
	}
	return append(udpHdr(c, p, fromA, sport, dport, ttl), gopacket.Payload(payload))
}

// udpHdr returns the headers of a UDP datagram with the ports as given in
// either direction (tunnel endpoints always send to the well-known port).
func udpHdr(c *capture, p path, fromA bool, sport, dport uint16, ttl uint8) []gopacket.SerializableLayer {
	u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	return append(p.l23(c, fromA, layers.IPProtocolUDP, ttl), u)
}

// fill returns n deterministic payload bytes.
func fill(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i)
	}
	return b
}

// sctpPacket builds an SCTP common header plus chunks with a valid CRC32c
// (RFC 9260 appendix A: computed with the checksum field zero, stored
// little-endian as Linux does).
func sctpPacket(sport, dport uint16, vtag uint32, chunks ...[]byte) []byte {
	b := make([]byte, 12)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint32(b[4:], vtag)
	for _, ch := range chunks {
		b = append(b, ch...)
	}
	sum := crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
	binary.LittleEndian.PutUint32(b[8:], sum)
	return b
}

// sctpChunk builds one chunk: type, flags, length, value, padded to 4 bytes.
func sctpChunk(typ, flags byte, value []byte) []byte {
	b := []byte{typ, flags, 0, 0}
	binary.BigEndian.PutUint16(b[2:], uint16(4+len(value)))
	b = append(b, value...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func be32(vs ...uint32) []byte {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.BigEndian.PutUint32(b[4*i:], v)
	}
	return b
}

// ipv4Checksum recomputes the header checksum of the IPv4 header at h,
// using the IHL in h (clamped to the bytes present), after a deliberate
// corruption so that only the intended field is wrong.
func ipv4Checksum(h []byte) {
	n := int(h[0]&0x0f) * 4
	if n < 20 {
		n = 20
	}
	if n > len(h) {
		n = len(h)
	}
	h[10], h[11] = 0, 0
	var sum uint32
	for i := 0; i+1 < n; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
}
