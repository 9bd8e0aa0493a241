package pipelines

import (
	"github.com/warpflow/warpflow/rings"
	"go.yaml.in/yaml/v3"
)

// parseKind is the built-in "parse" stage: it decodes every packet's headers
// into its rings.Meta (class, flags, VLANs, L3/L4 offsets, outer 5-tuple,
// tunnel and inner offsets) and sends every packet, malformed or not, down
// its single "next" edge. Routing by class is the filter's job.
//
// Options:
//
//	tunnels: true   # recognise VXLAN, GENEVE and GRE and record inner offsets (default true)
//
// How malformed packets are classed (the first problem found wins, except
// that a cut L4 header beats a short IP total length):
//
//	frame < 14 bytes, VLAN tag cut, IPv4 header (20 or IHL*4) cut,
//	IPv6 header (40) or extension header cut, ARP header cut,
//	TCP (20, then doff*4) / UDP (8) / SCTP (12) / ICMP (8) /
//	ICMPv6 (4, 8 for echo) / GRE (4) header past the IP packet's end
//	(so also a first fragment too short for its L4 header, RFC 1858)    → ClassTruncated
//	IPv4 IHL < 5, TCP data offset < 5, IPsec AH shorter than 12 bytes    → ClassBadHeaderLen
//	IPv4 version nibble != 4, IPv6 version nibble != 6                   → ClassBadVersion
//	IPv4 total length < IHL*4 or longer than the frame,
//	IPv6 payload length longer than the frame                            → ClassBadTotalLen
//	more than 2 VLAN tags, more than 8 IPv6 extension headers            → ClassTooDeep
//	an ethertype other than IPv4, IPv6, ARP (after VLAN tags)            → ClassUnknownL3
//
// A frame longer than the IP packet (Ethernet padding) is fine: L4 headers
// are bounded by the IP packet's end, not the frame's. With ClassBadTotalLen
// the L4 header is still decoded within the frame, so the 5-tuple is there
// for filters. Fragments set FlagFragment (and FlagFirstFrag at offset 0);
// the L4 header is decoded only in a first fragment. An IPv6 atomic
// fragment (offset 0, M clear, RFC 6946) is a whole packet, not flagged.
// Meta.IPProto is the protocol after IPv6 extension headers and IPsec AH
// (IPv4 or IPv6); FlagIPOptions says such headers or IPv4 options were
// skipped. An IP protocol we do not decode (ESP, IP-in-IP, ...) leaves
// FlagL4 clear and the class OK. For ClassUnknownL3, L3Off is still where
// the L3 header starts. VLANs holds the 12-bit VLAN IDs.
//
// Tunnels: VXLAN (UDP 4789), GENEVE (UDP 6081, version 0, options skipped;
// Ethernet, IPv4 or IPv6 payload) and GRE version 0 (checksum, key and
// sequence words; IPv4, IPv6, transparent Ethernet bridging, ERSPAN I, II
// and III payloads). They never make the outer packet malformed: a
// recognised tunnel sets FlagTunnel and Meta.Tunnel, and each inner offset that could be decoded
// (InnerL2Off, InnerL3Off, InnerL4Off with FlagInnerL4); what could not be
// decoded stays 0. One tunnel level is decoded; a tunnel inside a tunnel is
// only visible as its inner L4 header (UDP or GRE).
var parseKind = Kind{Name: "parse", Build: buildParse}

// parseOptions are the parse stage's config options. Tunnels is kept as a
// node so that a bad value is reported at its own position.
type parseOptions struct {
	Tunnels yaml.Node `yaml:"tunnels"`
}

func buildParse(c *BuildContext) Template {
	var opts parseOptions
	if !c.Decode(&opts) {
		return nil
	}
	tunnels := true
	if n := c.Option("tunnels"); n != nil {
		if n.Kind != yaml.ScalarNode || n.Decode(&tunnels) != nil {
			c.Errorf(n, "tunnels: want true or false, got %q", n.Value)
			return nil
		}
	}
	next, ok := c.Next()
	if !ok {
		c.Errorf(nil, "last stage has no next edge")
		return nil
	}
	return &parseTemplate{edges: []Target{next}, tunnels: tunnels}
}

// parseTemplate is the compiled parse stage.
type parseTemplate struct {
	edges   []Target
	tunnels bool
}

func (t *parseTemplate) Edges() []Target { return t.edges }

func (t *parseTemplate) NewInstance() Stage { return &parseStage{tunnels: t.tunnels} }

// parseStage is one worker's parse stage. It keeps no state besides its
// options, so instances are interchangeable.
type parseStage struct {
	tunnels bool
}

// Process decodes every packet of the vector and sends it to edge 0.
func (s *parseStage) Process(b *rings.Batch, idx []uint16, next []Edge) {
	next = next[:len(idx)]
	for k, i := range idx {
		m := &b.Meta[i]
		resetParsed(m)
		m.Class = decodeEthernet(b.Packet(int(i)), m, s.tunnels)
		next[k] = 0
	}
}

// resetParsed clears the fields the parse stage owns, leaving the rest of
// the metadata (sequence, port, hash, verdict, samples) to their owners.
func resetParsed(m *rings.Meta) {
	m.Class = rings.ClassUnparsed
	m.Tunnel = rings.TunnelNone
	m.Flags = 0
	m.EtherType = 0
	m.VLANs = [2]uint16{}
	m.NumVLANs = 0
	m.IPProto = 0
	m.TTL = 0
	m.TCPFlags = 0
	m.L3Off, m.L4Off = 0, 0
	m.InnerL2Off, m.InnerL3Off, m.InnerL4Off = 0, 0, 0
	m.SrcIP = [16]byte{}
	m.DstIP = [16]byte{}
	m.SrcPort, m.DstPort = 0, 0
}
