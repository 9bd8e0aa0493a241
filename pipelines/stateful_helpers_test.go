package pipelines

import (
	"net"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/warpflow/warpflow/rings"
)

// Helpers for the stateful stages' tests: whole pipelines compiled from
// YAML and run batch by batch on packets built with gopacket, with the
// packets' times set, so state carries across batches as on a worker.

// sfRig runs one compiled pipeline on one runner.
type sfRig struct {
	t   testing.TB
	g   *Graph
	r   *Runner
	a   *rings.Arena
	b   *rings.Batch
	seq uint64
	now uint32 // ms, Meta.Time of the next packets
	// at, when set, gives each packet of the next batch its own time:
	// now plus at[k] (a replay's packets of one vector can be seconds
	// apart).
	at []uint32
	// epoch: stamp batches as the engine stamps a live port's
	// (SetTime64: Batch.Epoch set), not as a replay's (SetTime).
	epoch bool
}

func newSFRig(t testing.TB, yml string) *sfRig {
	t.Helper()
	g, err := Load("test.yaml", []byte(yml))
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	a := stArena(t)
	return &sfRig{t: t, g: g, r: g.NewRunner(RunnerOptions{}), a: a, b: rings.NewBatch(rings.MaxBatch, a), now: 1_000_000}
}

// sfOut is what became of one packet.
type sfOut struct {
	m      rings.Meta
	pkt    []byte // the packet as the pipeline left it
	reason string // drop reason, port name or "pass"
}

// send runs pkts as one batch at the rig's time and returns each packet's
// metadata and fate.
func (s *sfRig) send(pkts ...[]byte) []sfOut {
	s.t.Helper()
	b := s.b
	b.Clear()
	if s.epoch {
		b.SetTime64(uint64(s.now))
	} else {
		b.SetTime(s.now)
	}
	for k, p := range pkts {
		if k < len(s.at) {
			b.SetTime(s.now + s.at[k])
		}
		addr, ok := s.a.Alloc()
		if !ok {
			s.t.Fatal("arena exhausted")
		}
		f := s.a.Frame(addr)
		off := int(addr) & (s.a.FrameSize() - 1)
		copy(f[off:], p)
		b.Append(rings.Desc{Addr: addr, Len: uint32(len(p))}, s.seq, 0)
		s.seq++
	}
	s.r.Process(b)
	out := make([]sfOut, b.Len())
	for i := range out {
		m := b.Meta[i]
		o := sfOut{m: m, pkt: append([]byte(nil), b.Packet(i)...)}
		switch m.Verdict {
		case rings.VerdictTX:
			o.reason = "tx:" + s.g.Ports()[m.Target]
		case rings.VerdictDrop:
			o.reason = "drop:" + s.g.Reasons()[m.Target]
		case rings.VerdictPass:
			o.reason = "pass"
		}
		out[i] = o
		s.a.Free(b.Descs[i].Addr)
	}
	return out
}

// one sends a single packet.
func (s *sfRig) one(p []byte) sfOut { return s.send(p)[0] }

// advance moves the rig's clock on by ms.
func (s *sfRig) advance(ms uint32) { s.now += ms }

// stage returns the rig runner's instance of stage name.
func (s *sfRig) stage(name string) Stage { return s.r.Stage(name) }

// ctClass renders a Meta.CT value.
func ctClass(v uint8) string {
	n := ctStateNames[v&rings.CTStateMask]
	if v&rings.CTReply != 0 {
		n += "/reply"
	}
	return n
}

var sfMACs = [2]net.HardwareAddr{{2, 0, 0, 0, 0, 1}, {2, 0, 0, 0, 0, 2}}

func ipLayers(src, dst string, proto layers.IPProtocol) (gopacket.SerializableLayer, gopacket.SerializableLayer) {
	s, d := net.ParseIP(src), net.ParseIP(dst)
	if s.To4() != nil {
		return &layers.Ethernet{SrcMAC: sfMACs[0], DstMAC: sfMACs[1], EthernetType: layers.EthernetTypeIPv4},
			&layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, SrcIP: s.To4(), DstIP: d.To4(), Id: 1}
	}
	return &layers.Ethernet{SrcMAC: sfMACs[0], DstMAC: sfMACs[1], EthernetType: layers.EthernetTypeIPv6},
		&layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: s, DstIP: d}
}

// tcpSpec describes a TCP segment for sfTCP.
type tcpSpec struct {
	src, dst     string
	sport, dport uint16
	flags        string // "S", "SA", "A", "PA", "FA", "R", "RA", ...
	seq, ack     uint32
	win          uint16
	payload      int
	wscale       int // > 0 adds a window scale option (SYNs)
	sackPerm     bool
	reply        bool // for tests that fill in the addresses: the reply direction
}

func sfTCP(t testing.TB, s tcpSpec) []byte {
	t.Helper()
	eth, ip := ipLayers(s.src, s.dst, layers.IPProtocolTCP)
	tcp := &layers.TCP{SrcPort: layers.TCPPort(s.sport), DstPort: layers.TCPPort(s.dport), Seq: s.seq, Ack: s.ack, Window: s.win}
	if s.win == 0 {
		tcp.Window = 29200
	}
	for _, c := range s.flags {
		switch c {
		case 'S':
			tcp.SYN = true
		case 'A':
			tcp.ACK = true
		case 'F':
			tcp.FIN = true
		case 'R':
			tcp.RST = true
		case 'P':
			tcp.PSH = true
		case 'U':
			tcp.URG = true
		}
	}
	if s.wscale > 0 {
		tcp.Options = append(tcp.Options, layers.TCPOption{OptionType: layers.TCPOptionKindWindowScale, OptionLength: 3, OptionData: []byte{byte(s.wscale)}})
	}
	if s.sackPerm {
		tcp.Options = append(tcp.Options, layers.TCPOption{OptionType: layers.TCPOptionKindSACKPermitted, OptionLength: 2})
	}
	return stSerialize(t, eth, ip, tcp, gopacket.Payload(make([]byte, s.payload)))
}

func sfUDP(t testing.TB, src, dst string, sport, dport uint16, n int) []byte {
	t.Helper()
	eth, ip := ipLayers(src, dst, layers.IPProtocolUDP)
	return stSerialize(t, eth, ip, &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}, gopacket.Payload(make([]byte, n)))
}

// sfICMP4 builds an ICMPv4 packet of type/code with id/seq (queries) or
// quoting inner (errors: the inner IP packet's first bytes).
func sfICMP4(t testing.TB, src, dst string, typ, code uint8, id uint16, inner []byte) []byte {
	t.Helper()
	eth, ip := ipLayers(src, dst, layers.IPProtocolICMPv4)
	ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, code), Id: id, Seq: 1}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, ic, gopacket.Payload(inner)); err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

func sfICMP6(t testing.TB, src, dst string, typ, code uint8, id uint16, inner []byte) []byte {
	t.Helper()
	eth, ip := ipLayers(src, dst, layers.IPProtocolICMPv6)
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, code)}
	ic.SetNetworkLayerForChecksum(ip.(*layers.IPv6))
	var body gopacket.SerializableLayer = gopacket.Payload(append([]byte{0, 0, 0, 0}, inner...))
	if typ == 128 || typ == 129 {
		body = &layers.ICMPv6Echo{Identifier: id, SeqNumber: 1}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, ic, body); err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

// ipPart returns p without its Ethernet header: what an ICMP error quotes.
func ipPart(p []byte, n int) []byte {
	q := p[14:]
	if n > 0 && n < len(q) {
		q = q[:n]
	}
	return append([]byte(nil), q...)
}

// ctYAML is a pipeline of parse, a conntrack stage with extra options, a
// filter with rules, and tx.
func ctYAML(ctOpts, rules string) string {
	y := "name: ct-test\nsettings: {batch_size: 256}\nstages:\n  - {name: parse, type: parse}\n  - {name: ct, type: conntrack" + ctOpts + "}\n"
	if rules != "" {
		y += "  - name: acl\n    type: filter\n    default: accept\n    rules:\n" + rules
	}
	return y + "  - {name: out, type: tx, port: out}\n"
}

// indent indents every line of s by n spaces.
func indent(s string, n int) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+pad) + "\n"
}
