package convgen

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Endpoint is an address and port.
type Endpoint struct {
	Addr netip.Addr
	Port uint16
}

// EP parses "addr:port" ("[v6]:port" for IPv6) or panics: for literals in
// tests.
func EP(s string) Endpoint {
	ap := netip.MustParseAddrPort(s)
	return Endpoint{Addr: ap.Addr(), Port: ap.Port()}
}

// Packet is one frame and when it is sent, from the capture's start.
type Packet struct {
	Data []byte
	At   time.Duration
	// Dir is 0 for the client's packets, 1 for the server's.
	Dir int
}

var macs = [2]net.HardwareAddr{{0x02, 0, 0, 0, 0, 1}, {0x02, 0, 0, 0, 0, 2}}

// MACs sets the source and destination MAC addresses of the client's
// frames (the server's are the other way round).
func MACs(client, server net.HardwareAddr) { macs = [2]net.HardwareAddr{client, server} }

// Frame builds an Ethernet frame of src > dst carrying l4 (a gopacket
// layer for proto) and payload, checksums computed.
func Frame(src, dst netip.Addr, dir int, proto layers.IPProtocol, l4 gopacket.SerializableLayer, payload []byte) []byte {
	eth := &layers.Ethernet{SrcMAC: macs[dir], DstMAC: macs[1-dir], EthernetType: layers.EthernetTypeIPv4}
	var ip gopacket.SerializableLayer
	var nl gopacket.NetworkLayer
	if src.Is4() {
		v4 := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, SrcIP: src.AsSlice(), DstIP: dst.AsSlice(), Flags: layers.IPv4DontFragment}
		ip, nl = v4, v4
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		v6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		ip, nl = v6, v6
	}
	switch l := l4.(type) {
	case *layers.TCP:
		l.SetNetworkLayerForChecksum(nl)
	case *layers.UDP:
		l.SetNetworkLayerForChecksum(nl)
	case *layers.ICMPv6:
		l.SetNetworkLayerForChecksum(nl)
	}
	buf := gopacket.NewSerializeBuffer()
	ls := []gopacket.SerializableLayer{eth, ip, l4}
	if payload != nil {
		ls = append(ls, gopacket.Payload(payload))
	}
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		panic(fmt.Sprintf("convgen: serialize: %v", err)) // a bug in the caller's layers
	}
	return append([]byte(nil), buf.Bytes()...)
}

// Conv builds one conversation's packets in order. The client sends from
// Client to Server; the server sees the client as Seen (Client, unless a
// NAT translates it) and answers there. Every packet is Step after the
// one before.
type Conv struct {
	// Real, when set, is where the server's packets come from when that
	// is not Server (a DNAT sends the client's packets for Server on to
	// Real).
	Client, Server, Seen, Real Endpoint
	Start, Step                time.Duration
	Pkts                       []Packet

	cseq, sseq uint32
	win        uint16
	now        time.Duration
}

// NewConv starts a conversation; isn are the client's and server's
// initial sequence numbers.
func NewConv(client, server, seen Endpoint, start, step time.Duration, cisn, sisn uint32) *Conv {
	if !seen.Addr.IsValid() {
		seen = client
	}
	return &Conv{Client: client, Server: server, Seen: seen, Start: start, Step: step, cseq: cisn, sseq: sisn, win: 29200, now: start}
}

func (c *Conv) add(dir int, data []byte) {
	c.Pkts = append(c.Pkts, Packet{Data: data, At: c.now, Dir: dir})
	c.now += c.Step
}

// Wait lets d pass before the next packet.
func (c *Conv) Wait(d time.Duration) { c.now += d }

// serverSide is where the server's packets come from.
func (c *Conv) serverSide() Endpoint {
	if c.Real.Addr.IsValid() {
		return c.Real
	}
	return c.Server
}

func (c *Conv) tcp(dir int, flags string, seq, ack uint32, payload int) []byte {
	src, dst := c.Client, c.Server
	if dir == 1 {
		src, dst = c.serverSide(), c.Seen
	}
	t := &layers.TCP{SrcPort: layers.TCPPort(src.Port), DstPort: layers.TCPPort(dst.Port), Seq: seq, Ack: ack, Window: c.win}
	for _, f := range flags {
		switch f {
		case 'S':
			t.SYN = true
		case 'A':
			t.ACK = true
		case 'F':
			t.FIN = true
		case 'R':
			t.RST = true
		case 'P':
			t.PSH = true
		}
	}
	var pl []byte
	if payload > 0 {
		pl = make([]byte, payload)
		for i := range pl {
			pl[i] = byte(seq) + byte(i)
		}
	}
	return Frame(src.Addr, dst.Addr, dir, layers.IPProtocolTCP, t, pl)
}

// Handshake adds SYN, SYN/ACK and ACK.
func (c *Conv) Handshake() *Conv {
	c.add(0, c.tcp(0, "S", c.cseq, 0, 0))
	c.cseq++
	c.add(1, c.tcp(1, "SA", c.sseq, c.cseq, 0))
	c.sseq++
	c.add(0, c.tcp(0, "A", c.cseq, c.sseq, 0))
	return c
}

// Data adds n bytes from dir (0 client, 1 server) and the other side's ACK.
func (c *Conv) Data(dir, n int) *Conv {
	if dir == 0 {
		c.add(0, c.tcp(0, "PA", c.cseq, c.sseq, n))
		c.cseq += uint32(n)
		c.add(1, c.tcp(1, "A", c.sseq, c.cseq, 0))
	} else {
		c.add(1, c.tcp(1, "PA", c.sseq, c.cseq, n))
		c.sseq += uint32(n)
		c.add(0, c.tcp(0, "A", c.cseq, c.sseq, 0))
	}
	return c
}

// Close adds the client's FIN, the server's FIN/ACK and the last ACK.
func (c *Conv) Close() *Conv {
	c.add(0, c.tcp(0, "FA", c.cseq, c.sseq, 0))
	c.cseq++
	c.add(1, c.tcp(1, "FA", c.sseq, c.cseq, 0))
	c.sseq++
	c.add(0, c.tcp(0, "A", c.cseq, c.sseq, 0))
	return c
}

// Reset adds an RST from dir at the current sequence number.
func (c *Conv) Reset(dir int) *Conv {
	if dir == 0 {
		c.add(0, c.tcp(0, "RA", c.cseq, c.sseq, 0))
	} else {
		c.add(1, c.tcp(1, "RA", c.sseq, c.cseq, 0))
	}
	return c
}

// OutOfWindow adds a client data segment far beyond the server's window.
func (c *Conv) OutOfWindow() *Conv {
	c.add(0, c.tcp(0, "PA", c.cseq+10_000_000, c.sseq, 10))
	return c
}

// Segment adds a raw TCP segment from dir with the given flags and
// offsets from the current sequence numbers.
func (c *Conv) Segment(dir int, flags string, seqOff, ackOff int32, payload int) *Conv {
	seq, ack := c.cseq, c.sseq
	if dir == 1 {
		seq, ack = c.sseq, c.cseq
	}
	c.add(dir, c.tcp(dir, flags, seq+uint32(seqOff), ack+uint32(ackOff), payload))
	return c
}

// UDP adds a datagram of n bytes from dir.
func (c *Conv) UDP(dir, n int) *Conv {
	src, dst := c.Client, c.Server
	if dir == 1 {
		src, dst = c.serverSide(), c.Seen
	}
	u := &layers.UDP{SrcPort: layers.UDPPort(src.Port), DstPort: layers.UDPPort(dst.Port)}
	c.add(dir, Frame(src.Addr, dst.Addr, dir, layers.IPProtocolUDP, u, make([]byte, n)))
	return c
}

// Ping adds an echo request (dir 0) or reply (dir 1) with identifier
// Client.Port (Seen.Port in the reply).
func (c *Conv) Ping(dir int, seq uint16) *Conv {
	src, dst, id := c.Client.Addr, c.Server.Addr, c.Client.Port
	typ := uint8(layers.ICMPv4TypeEchoRequest)
	if dir == 1 {
		src, dst, id, typ = c.serverSide().Addr, c.Seen.Addr, c.Seen.Port, layers.ICMPv4TypeEchoReply
	}
	ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, 0), Id: id, Seq: seq}
	c.add(dir, Frame(src, dst, dir, layers.IPProtocolICMPv4, ic, make([]byte, 16)))
	return c
}

// Unreachable adds an ICMPv4 destination unreachable (type 3, code) that
// the server's side sends about the conversation's last TCP or UDP client
// packet as the server saw it (to Seen, quoting the translated packet's
// first 28 bytes of IP).
func (c *Conv) Unreachable(code uint8, from netip.Addr) *Conv {
	var last []byte
	for i := len(c.Pkts) - 1; i >= 0; i-- {
		if d := c.Pkts[i].Data; c.Pkts[i].Dir == 0 && len(d) > 34 && (d[23] == 6 || d[23] == 17) {
			last = d
			break
		}
	}
	if last == nil || !from.Is4() {
		return c
	}
	q := append([]byte(nil), last[14:min(len(last), 14+28)]...)
	if c.Seen != c.Client {
		// The server saw the translated source: quote that.
		copy(q[12:16], c.Seen.Addr.AsSlice())
		q[20], q[21] = byte(c.Seen.Port>>8), byte(c.Seen.Port)
		q[10], q[11] = 0, 0
		var s uint32
		for i := 0; i < 20; i += 2 {
			s += uint32(q[i])<<8 | uint32(q[i+1])
		}
		for s>>16 != 0 {
			s = s&0xffff + s>>16
		}
		q[10], q[11] = byte(^s>>8), byte(^s)
	}
	ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, code)}
	c.add(1, Frame(from, c.Seen.Addr, 1, layers.IPProtocolICMPv4, ic, q))
	return c
}

// Merge interleaves conversations by packet time (stable for equal
// times, in the order given).
func Merge(convs ...*Conv) []Packet {
	var all []Packet
	idx := make([]int, len(convs))
	for {
		best := -1
		for i, c := range convs {
			if idx[i] < len(c.Pkts) && (best < 0 || c.Pkts[idx[i]].At < convs[best].Pkts[idx[best]].At) {
				best = i
			}
		}
		if best < 0 {
			return all
		}
		all = append(all, convs[best].Pkts[idx[best]])
		idx[best]++
	}
}

// Pcap writes pkts as a nanosecond pcap capture starting at start.
func Pcap(pkts []Packet, start time.Time) []byte {
	var buf bytes.Buffer
	w := pcapgo.NewWriterNanos(&buf)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		panic(err) // a bytes.Buffer does not fail
	}
	for _, p := range pkts {
		ci := gopacket.CaptureInfo{Timestamp: start.Add(p.At), CaptureLength: len(p.Data), Length: len(p.Data)}
		if err := w.WritePacket(ci, p.Data); err != nil {
			panic(err)
		}
	}
	return buf.Bytes()
}
