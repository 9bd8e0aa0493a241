package pipelines

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
	"strings"

	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/rings"
	"go.yaml.in/yaml/v3"
)

// natKind is the built-in "nat" stage: NAT44 with sessions, after Linux's
// nf_nat. A flow's translation is decided on its first packet and kept in
// its conntrack entry (the sessions share the conntrack stage's table),
// so every later packet of the flow, both directions, is translated the
// same way, replies back to the original addresses and ports.
//
//	type: nat
//	conntrack: ct             # the conntrack stage whose entries hold the sessions
//	dnat:                     # destination NAT (port forwarding), first match wins
//	  - {match: {proto: tcp, dst: 198.51.100.1, dst_port: 80}, to: 10.0.0.5, port: 8080}
//	snat:                     # source NAT (masquerade), first match wins,
//	  - match: {src: 10.0.0.0/8}            # matched after DNAT, as Linux's POSTROUTING
//	    to: [192.0.2.1, 192.0.2.2]          # an address, a list, or a range a-b
//	    ports: 1024-65535                   # optional; Linux's default otherwise
//
// Match fields (all optional; a rule without any matches every flow):
// proto (tcp, udp, icmp or a number), src, dst (addresses or prefixes,
// one or a list), src_port, dst_port (N or LO-HI, one or a list; only TCP
// and UDP have ports). Only IPv4 flows are translated.
//
// The translation is decided when the conntrack stage makes the flow's
// entry (it asks this stage, which links itself to it), so replies that
// come in the same vector already find it; a flow whose first packet is
// dropped later in the batch leaves neither entry nor mapping. One nat
// stage per conntrack stage.
//
// Choosing the translation. A flow no rule translates keeps its tuple
// unless its reply tuple is already another flow's (Linux's null
// binding: a server's answer to a client's own address after that
// client's flow was translated makes such a flow); then its source port
// is remapped as SNAT to its own address would (Linux does the same;
// the port may differ from the kernel's choice), and a flow without
// ports is dropped as nat_ports_exhausted. DNAT sets the destination
// (and the port when port is given). SNAT keeps the source port when the translated tuple
// is unique and the port is in range (as Linux does); otherwise it tries
// up to 128 ports in a row from a hash-derived start and takes the first
// whose reply tuple no flow uses (endpoint-dependent: one port can serve
// flows to different destinations), and where none is free, rounds of
// 64, 32, 16 and 8 from other hash-derived starts (Linux's
// nf_nat_l4proto_unique_tuple: a run of used ports must not refuse a
// flow while the range has room). The pool address is chosen by a hash of
// the flow's source address, so a host keeps its address. Without ports:
// Linux's default ranges (source port below 512: 1-511; 512-1023:
// 600-1023; else 1024-65535); ICMP queries translate their identifier
// over 0-65535. With more than one worker the port is also one the
// engine steers back to the flow's worker (port % workers = worker: see
// Graph.Steering). When no port is free the packet is dropped as
// nat_ports_exhausted (Linux drops it too, at confirmation), never a
// silent reuse; a DNAT whose reply tuple is taken goes the same way.
//
// Translating. Addresses, TCP/UDP ports and ICMP identifiers are
// rewritten in place, the IPv4 header checksum and the TCP, UDP (a zero
// UDP checksum stays zero) or ICMP checksum updated incrementally (RFC
// 1624). Later fragments get their addresses only. An ICMP error related
// to a translated flow gets its quoted packet translated back (addresses,
// ports, the quoted IP header's checksum and the quoted UDP checksum or a
// wholly quoted TCP header's), its outer address as Linux's
// nf_nat_icmp_reply_translation sets it, and its ICMP checksum
// recomputed. Packets conntrack did not track (invalid, untracked) pass
// untouched, as in Linux.
//
// Edges: 0 next, 1 drop:nat_ports_exhausted.
//
// Counters: snat and dnat (sessions made), translated (packets),
// icmp_errors (related errors translated), untracked (passed untouched,
// conntrack had no flow for them), not_ipv4, ports_exhausted.
var natKind = Kind{Name: "nat", Build: buildNAT, Counters: natDecls[:]}

// natDecls are the nat stage's counters, in the order of the counter
// indices below.
var natDecls = [natNumCounters]counters.Decl{
	{Name: "snat", Unit: "sessions", Help: "SNAT sessions a nat stage made (one per flow)."},
	{Name: "dnat", Unit: "sessions", Help: "DNAT sessions a nat stage made (one per flow)."},
	{Name: "translated", Unit: "packets", Bytes: true, Help: "Packets a nat stage translated."},
	{Name: "icmp_errors", Help: "ICMP errors about a translated flow that a nat stage translated back."},
	{Name: "untracked", Unit: "packets", Bytes: true, Help: "Packets a nat stage passed untouched: conntrack had no flow for them."},
	{Name: "not_ipv4", Unit: "packets", Bytes: true, Help: "Packets a nat stage passed untouched: not IPv4."},
	{Name: "ports_exhausted", Unit: "packets", Bytes: true, Help: "New flows a nat stage had no free port for (dropped: nat_ports_exhausted)."},
}

// natLayout is every nat stage's counter layout.
var natLayout = func() *counters.Layout {
	fams := make([]counters.Family, len(natDecls))
	for i, d := range natDecls {
		fams[i] = counters.Single(d)
	}
	return counters.NewLayout(fams...)
}()

type natOptions4 struct {
	Conntrack string    `yaml:"conntrack"`
	SNAT      yaml.Node `yaml:"snat"`
	DNAT      yaml.Node `yaml:"dnat"`
}

type natSessionRuleYAML struct {
	Match yaml.Node `yaml:"match"`
	To    yaml.Node `yaml:"to"`
	Ports string    `yaml:"ports"`
	Port  *int      `yaml:"port"`
}

type natSessionMatchYAML struct {
	Proto   yaml.Node `yaml:"proto"`
	Src     yaml.Node `yaml:"src"`
	Dst     yaml.Node `yaml:"dst"`
	SrcPort yaml.Node `yaml:"src_port"`
	DstPort yaml.Node `yaml:"dst_port"`
}

// natSessionMatch is a compiled match: nil lists match everything.
type natSessionMatch struct {
	proto            []uint8
	src, dst         []netip.Prefix
	srcPort, dstPort []portRange
}

type natSessionRule struct {
	m      natSessionMatch
	addrs  [][4]byte // SNAT pool, DNAT target (one)
	lo, hi uint16    // SNAT port range (hasPorts), DNAT port (lo, when hasPorts)
	ports  bool
}

type natTemplate struct {
	conntrack  string
	snat, dnat []natSessionRule
	edges      []Target
}

func buildNAT(c *BuildContext) Template {
	var o natOptions4
	if !c.Decode(&o) {
		return nil
	}
	t := &natTemplate{conntrack: o.Conntrack}
	ok := true
	if o.Conntrack == "" {
		c.Errorf(nil, "nat needs conntrack: <the conntrack stage whose entries keep the sessions>")
		ok = false
	}
	rules := func(n *yaml.Node, what string, dnat bool) []natSessionRule {
		if n.Kind == 0 {
			return nil
		}
		if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
			c.Errorf(n, "%s: want a list of rules", what)
			ok = false
			return nil
		}
		var out []natSessionRule
		for _, rn := range n.Content {
			r, good := parseNATRule(c, rn, what, dnat)
			ok = ok && good
			out = append(out, r)
		}
		return out
	}
	t.dnat = rules(&o.DNAT, "dnat", true)
	t.snat = rules(&o.SNAT, "snat", false)
	if ok && t.dnat == nil && t.snat == nil {
		c.Errorf(nil, "nat needs snat or dnat rules")
		ok = false
	}
	next, hasNext := c.Next()
	if !ok || !hasNext {
		return nil
	}
	t.edges = []Target{next, {Drop: "nat_ports_exhausted", Pos: c.Pos(nil)}}
	return t
}

func parseNATRule(c *BuildContext, n *yaml.Node, what string, dnat bool) (natSessionRule, bool) {
	var r natSessionRule
	var y natSessionRuleYAML
	if n.Kind != yaml.MappingNode {
		c.Errorf(n, "%s rule: want a mapping with match and to", what)
		return r, false
	}
	skip := []string{"port"}
	if dnat {
		skip = []string{"ports"}
	}
	for _, k := range skip {
		if v := mappingValue(n, k); v != nil {
			c.Errorf(v, "%s rule: %s is not a %s option", what, k, what)
			return r, false
		}
	}
	if !c.DecodeNode(n, &y) {
		return r, false
	}
	ok := true
	if y.Match.Kind != 0 {
		r.m, ok = parseNATMatch(c, &y.Match, what)
	}
	if y.To.Kind == 0 {
		c.Errorf(n, "%s rule: missing to: (an address%s)", what, map[bool]string{false: ", a list or a range a-b", true: ""}[dnat])
		return r, false
	}
	items := []*yaml.Node{&y.To}
	if y.To.Kind == yaml.SequenceNode {
		items = y.To.Content
	}
	for _, it := range items {
		if it.Kind != yaml.ScalarNode {
			c.Errorf(it, "%s to: want IPv4 addresses", what)
			ok = false
			continue
		}
		lo, hi, isRange := strings.Cut(it.Value, "-")
		a, err1 := netip.ParseAddr(strings.TrimSpace(lo))
		b := a
		var err2 error
		if isRange {
			b, err2 = netip.ParseAddr(strings.TrimSpace(hi))
		}
		switch {
		case err1 != nil || err2 != nil || !a.Is4() || !b.Is4():
			c.Errorf(it, "%s to %q: want an IPv4 address or range a-b (NAT is IPv4 only)", what, it.Value)
			ok = false
			continue
		case b.Less(a):
			c.Errorf(it, "%s to %q: range low end is above its high end", what, it.Value)
			ok = false
			continue
		}
		if bad := natReservedIn(a, b); bad.IsValid() {
			c.Errorf(it, "%s to %q: %s is not an address a host can use (0.0.0.0/8, loopback, multicast or reserved)", what, it.Value, bad)
			ok = false
			continue
		}
		for x := a; ; x = x.Next() {
			if len(r.addrs) >= 65536 {
				c.Errorf(it, "%s to: more than 65536 addresses", what)
				return r, false
			}
			r.addrs = append(r.addrs, x.As4())
			if x == b {
				break
			}
		}
	}
	if len(r.addrs) > 1 {
		seen := make(map[[4]byte]bool, len(r.addrs))
		for _, a := range r.addrs {
			if seen[a] {
				c.Errorf(&y.To, "%s to: %s is in the pool twice", what, netip.AddrFrom4(a))
				ok = false
				break
			}
			seen[a] = true
		}
	}
	if dnat && len(r.addrs) != 1 {
		c.Errorf(&y.To, "dnat to: want one address")
		ok = false
	}
	if y.Ports != "" {
		pr, msg := parseRange(y.Ports, 65535)
		if msg != "" || pr.lo == 0 {
			if msg == "" {
				msg = "port 0 is not a port"
			}
			c.Errorf(mappingValue(n, "ports"), "snat ports %q: %s", y.Ports, msg)
			ok = false
		}
		r.lo, r.hi, r.ports = pr.lo, pr.hi, true
	}
	if y.Port != nil {
		if *y.Port < 1 || *y.Port > 65535 {
			c.Errorf(mappingValue(n, "port"), "dnat port %d: want 1 to 65535", *y.Port)
			ok = false
		}
		r.lo, r.hi, r.ports = uint16(*y.Port), uint16(*y.Port), true
	}
	return r, ok
}

// natReservedIn returns the first address of the range a-b that no
// translation may use (this network 0.0.0.0/8, loopback 127.0.0.0/8,
// multicast 224.0.0.0/4, reserved 240.0.0.0/4 with the broadcast
// address), or the zero Addr when there is none.
func natReservedIn(a, b netip.Addr) netip.Addr {
	for _, p := range natReserved {
		// The ranges are prefixes: the first address of a-b in p.
		switch {
		case p.Contains(a):
			return a
		case a.Less(p.Addr()) && !b.Less(p.Addr()):
			return p.Addr()
		}
	}
	return netip.Addr{}
}

var natReserved = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

func parseNATMatch(c *BuildContext, n *yaml.Node, what string) (natSessionMatch, bool) {
	var m natSessionMatch
	var y natSessionMatchYAML
	if n.Kind != yaml.MappingNode {
		c.Errorf(n, "%s match: want a mapping of proto, src, dst, src_port, dst_port", what)
		return m, false
	}
	if !c.DecodeNode(n, &y) {
		return m, false
	}
	ok := true
	each := func(v *yaml.Node, field string, f func(s string, at *yaml.Node) bool) {
		if v.Kind == 0 {
			return
		}
		items := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			items = v.Content
		}
		if len(items) == 0 {
			c.Errorf(v, "%s match %s: empty list", what, field)
			ok = false
		}
		for _, it := range items {
			if it.Kind != yaml.ScalarNode || !f(it.Value, it) {
				if it.Kind != yaml.ScalarNode {
					c.Errorf(it, "%s match %s: want a value or a list", what, field)
				}
				ok = false
			}
		}
	}
	each(&y.Proto, "proto", func(s string, at *yaml.Node) bool {
		switch s {
		case "tcp":
			m.proto = append(m.proto, 6)
		case "udp":
			m.proto = append(m.proto, 17)
		case "icmp":
			m.proto = append(m.proto, 1)
		default:
			v, found := protoNames[s]
			if !found || v > 255 {
				var num int
				if err := at.Decode(&num); err != nil || num < 0 || num > 255 {
					c.Errorf(at, "%s match proto %q: want tcp, udp, icmp or a number 0-255", what, s)
					return false
				}
				v = uint16(num)
			}
			m.proto = append(m.proto, uint8(v))
		}
		return true
	})
	for _, a := range []struct {
		n    *yaml.Node
		name string
		dst  *[]netip.Prefix
	}{{&y.Src, "src", &m.src}, {&y.Dst, "dst", &m.dst}} {
		each(a.n, a.name, func(s string, at *yaml.Node) bool {
			p, err := parsePrefixOrAddr(s)
			if err != nil || !p.Addr().Is4() {
				c.Errorf(at, "%s match %s %q: want an IPv4 address or prefix", what, a.name, s)
				return false
			}
			*a.dst = append(*a.dst, p)
			return true
		})
	}
	for _, a := range []struct {
		n    *yaml.Node
		name string
		dst  *[]portRange
	}{{&y.SrcPort, "src_port", &m.srcPort}, {&y.DstPort, "dst_port", &m.dstPort}} {
		each(a.n, a.name, func(s string, at *yaml.Node) bool {
			pr, msg := parseRange(s, 65535)
			if msg != "" {
				c.Errorf(at, "%s match %s %q: %s", what, a.name, s, msg)
				return false
			}
			*a.dst = append(*a.dst, pr)
			return true
		})
	}
	return m, ok
}

func (t *natTemplate) Edges() []Target { return t.edges }

// Counters implements CountedTemplate.
func (t *natTemplate) Counters() *counters.Layout { return natLayout }

// stateful is false: the sessions live in the conntrack stage's entries,
// which that stage keeps and hands over.
func (t *natTemplate) stateful() bool { return false }

// stageRefs implements stageReferrer: the conntrack stage must exist.
func (t *natTemplate) stageRefs() []stageRef {
	return []stageRef{{name: t.conntrack, kind: conntrackKind.Name, option: "conntrack", unique: true}}
}

func (t *natTemplate) NewInstance() Stage {
	return &natStage{t: t, workers: 1, live: newLiveTable(natNumCounters)}
}

// Counter indices.
const (
	natcSNAT = iota
	natcDNAT
	natcTranslated
	natcICMPErrors
	natcUntracked
	natcNotIPv4
	natcExhausted
	natNumCounters
)

// natStage is one worker's NAT: the shared rules, and the worker's
// conntrack instance, whose entries hold the sessions.
type natStage struct {
	t               *natTemplate
	ct              *ctStage
	worker, workers int
	c, bytes        [natNumCounters]uint64
	live            liveTable
}

func (s *natStage) KeepsLength() bool { return true }

// Link implements Linker: the conntrack instance of the same runner,
// which asks this stage for a new flow's translation as it makes the
// entry (decide).
func (s *natStage) Link(find func(string) Stage) {
	s.ct, _ = find(s.t.conntrack).(*ctStage)
	if s.ct != nil {
		s.ct.nat = s
	}
}

// SetWorker implements WorkerAware.
func (s *natStage) SetWorker(w, n int) { s.worker, s.workers = w, max(n, 1) }

func (s *natStage) count(k int, n uint32) {
	s.c[k]++
	s.bytes[k] += uint64(n)
	s.live.mark(k)
}

// Process translates every tracked IPv4 packet of the vector. The
// common packet (a tracked flow's with one translation, SNAT or DNAT,
// decided and counted; TCP or UDP with 20 bytes from its L4 header on in
// the frame; not an ICMP error) is translated here in the loop, its count
// summed over the vector: one address and its port change, picked by the
// translation and the direction, so it takes no call and no test per
// field (natPacket's call and tests cost some 60 instructions a packet
// more in the stateful row). Any other packet takes oneGeneral, which
// TestNATProcessPaths holds this path to.
func (s *natStage) Process(b *rings.Batch, idx []uint16, next []Edge) {
	next = next[:len(idx)]
	ct := s.ct
	if ct == nil || ct.tab == nil {
		for k, i := range idx {
			next[k] = s.oneGeneral(b, int(i))
		}
		return
	}
	le := binary.LittleEndian
	// tally counts the packets translated here (bits 32 up) and their
	// bytes (a vector's are fewer than 2^26): one register, one add.
	var tally uint64
	for k, i := range idx {
		m := &b.Meta[i]
		proto := m.IPProto
		// Not an ICMP error: conntrack gives the related state to those
		// alone (ctStage.icmp), so a TCP or UDP packet needs no test of
		// it.
		if m.Flags&(rings.FlagIPv4|rings.FlagL4) == rings.FlagIPv4|rings.FlagL4 && (proto == 6 || proto == 17) && int(i) < len(ct.cur) {
			// e wraps for cur 0 (no entry): one test for both it and the
			// bounds of ent.
			if e := ct.cur[i] - 1; uint(e) < uint(len(ct.tab.ent)) && ct.curSeq[i] == m.Seq {
				en := &ct.tab.ent[e]
				st := en.status & (ctStNATDone | ctStSNAT | ctStDNAT)
				if (st == ctStNATDone|ctStSNAT || st == ctStNATDone|ctStDNAT) && en.natFlags()&(natFExhausted|natFCounted) == natFCounted {
					p := b.Packet(int(i))
					l3, l4 := int(m.L3Off), int(m.L4Off)
					// A header of 20 bytes from l4 is whole in the frame (a
					// TCP header, or a UDP one with 12 bytes of payload):
					// a shorter datagram takes oneGeneral.
					if l3+ipv4MinHdr <= l4 && l4 <= len(p)-20 {
						tally += 1<<32 | uint64(len(p))
						// Through fixed-size views: no bounds checks.
						ip := (*[ipv4MinHdr]byte)(p[l3 : l3+ipv4MinHdr])
						l4h := (*[20]byte)(p[l4:])
						// One address and its port change: the new ones
						// (the address's bytes as a little-endian word, as
						// natPacket), on the side the translation and the
						// direction pick.
						var acc, l4Acc uint32
						switch snat, reply := st&ctStSNAT != 0, m.CT&rings.CTReply != 0; {
						case snat && !reply: // out: the source, translated
							acc, l4Acc = natSet((*[4]byte)(ip[12:16]), (*[2]byte)(l4h[0:2]), (*[4]byte)(m.SrcIP[:4]), &m.SrcPort, le.Uint32(en.src[4:8]), en.natSport())
						case snat: // back: the destination, to the original source
							acc, l4Acc = natSet((*[4]byte)(ip[16:20]), (*[2]byte)(l4h[2:4]), (*[4]byte)(m.DstIP[:4]), &m.DstPort, le.Uint32(en.src[0:4]), en.sport)
						case !reply: // DNAT out: the destination, translated
							acc, l4Acc = natSet((*[4]byte)(ip[16:20]), (*[2]byte)(l4h[2:4]), (*[4]byte)(m.DstIP[:4]), &m.DstPort, le.Uint32(en.dst[4:8]), en.natDport())
						default: // DNAT back: the source, to the original destination
							acc, l4Acc = natSet((*[4]byte)(ip[12:16]), (*[2]byte)(l4h[0:2]), (*[4]byte)(m.SrcIP[:4]), &m.SrcPort, le.Uint32(en.dst[0:4]), en.dport)
						}
						le.PutUint16(ip[10:], csumApply(le.Uint16(ip[10:]), acc))
						if m.IPProto == 6 { // read again, after the stores: no register kept for it
							le.PutUint16(l4h[16:], csumApply(le.Uint16(l4h[16:]), l4Acc))
						} else if hc := le.Uint16(l4h[6:]); hc != 0 { // UDP: no checksum stays none
							nc := csumApply(hc, l4Acc)
							if nc == 0 {
								nc = 0xffff
							}
							le.PutUint16(l4h[6:], nc)
						}
						next[k] = 0
						continue
					}
				}
			}
		}
		next[k] = s.oneGeneral(b, int(i))
	}
	pkts := tally >> 32
	if pkts != 0 {
		s.c[natcTranslated] += pkts
		s.bytes[natcTranslated] += uint64(uint32(tally))
		s.live.mark(natcTranslated)
	}
}

// natSet writes address na (its bytes as a little-endian word) and port
// to a packet, its IPv4 header's address field addr and its L4 header's
// port field pw, and to the same fields of its metadata, mAddr and mPort,
// and returns the change to the IP header's checksum and that plus the
// port's, the L4 checksum's (Process's common packet: the source or the
// destination, the address and the port).
func natSet(addr *[4]byte, pw *[2]byte, mAddr *[4]byte, mPort *uint16, na uint32, port uint16) (acc, l4Acc uint32) {
	le := binary.LittleEndian
	wport := port<<8 | port>>8 // as on the wire, read little-endian (bits.ReverseBytes16's rotation, cheaper to inline)
	acc = csumAddrDelta(le.Uint32(addr[:]), na>>16+na&0xffff)
	l4Acc = acc + 0xffff - uint32(le.Uint16(pw[:])) + uint32(wport) // csumWord
	le.PutUint32(addr[:], na)
	le.PutUint16(pw[:], wport)
	*mAddr, *mPort = *addr, port
	return acc, l4Acc
}

// oneGeneral translates packet i, whatever it is.
func (s *natStage) oneGeneral(b *rings.Batch, i int) Edge {
	m := &b.Meta[i]
	n := b.Descs[i].Len
	if m.Flags&rings.FlagIPv4 == 0 {
		s.count(natcNotIPv4, n)
		return 0
	}
	var e uint32
	ok := false
	if s.ct != nil {
		e, ok = s.ct.entryOf(i, m.Seq)
	}
	if !ok {
		s.count(natcUntracked, n)
		return 0
	}
	t := s.ct.tab
	en := &t.ent[e]
	dir := uint8(0)
	if m.CT&rings.CTReply != 0 {
		dir = 1
	}
	if en.status&ctStNATDone == 0 {
		// An entry made before this stage was there (a swap added it):
		// the flow stays as it was set up.
		en.status |= ctStNATDone
	}
	if en.natFlags()&natFExhausted != 0 {
		s.count(natcExhausted, n)
		return 1
	}
	if en.status&(ctStSNAT|ctStDNAT) == 0 {
		return 0
	}
	if en.natFlags()&natFCounted == 0 {
		// The session's first packet through this stage: count it (a
		// flow whose first packet was dropped before it never is).
		en.setNatFlags(en.natFlags() | natFCounted)
		if en.status&ctStSNAT != 0 {
			s.count(natcSNAT, 0)
		}
		if en.status&ctStDNAT != 0 {
			s.count(natcDNAT, 0)
		}
	}
	p := b.Packet(i)
	if m.CT&rings.CTStateMask == rings.CTRelated {
		if natICMPError(p, m, en, dir) {
			s.count(natcICMPErrors, n)
		}
		return 0
	}
	natPacket(p, m, en, dir)
	s.count(natcTranslated, n)
	return 0
}

// ctStNATDone marks an entry whose translation was decided.
const ctStNATDone = 0x80

// Entry natFlags.
const (
	natFExhausted = 1 << iota // no unique translation: the flow's packets are dropped
	natFCounted               // counted under snat/dnat (its first packet got through)
)

// decide is called by the conntrack stage when it makes a new flow's
// entry (a tentative one: dropped with its packet, translation and all,
// if the packet does not get through the batch): it decides the
// translation now, so that the flow's replies later in the same vector
// find it. A flow none could be found for is marked, and the nat stage
// drops its packets as nat_ports_exhausted.
func (s *natStage) decide(e uint32, en *ctEntry) {
	if !s.setup(e, en) {
		en.setNatFlags(en.natFlags() | natFExhausted)
	}
}

// matches reports whether the flow (its tuple after any DNAT) passes m.
func (m *natSessionMatch) matches(proto uint8, src, dst [4]byte, sport, dport uint16) bool {
	if m.proto != nil && !containsU8(m.proto, proto) {
		return false
	}
	if m.src != nil && !inPrefixes4(m.src, src) || m.dst != nil && !inPrefixes4(m.dst, dst) {
		return false
	}
	ported := proto == 6 || proto == 17
	if m.srcPort != nil && (!ported || !inRanges(m.srcPort, sport)) {
		return false
	}
	if m.dstPort != nil && (!ported || !inRanges(m.dstPort, dport)) {
		return false
	}
	return true
}

func containsU8(s []uint8, v uint8) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func inPrefixes4(ps []netip.Prefix, a [4]byte) bool {
	addr := netip.AddrFrom4(a)
	for _, p := range ps {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// setup decides a new flow's translation and records it in its entry;
// it reports false when no unique translation could be found (the entry
// keeps none, and the packet is to be dropped).
func (s *natStage) setup(e uint32, en *ctEntry) bool {
	t := s.ct.tab
	en.status |= ctStNATDone
	if en.status&ctStV6 != 0 {
		return true
	}
	src, dst := [4]byte(en.src[:4]), [4]byte(en.dst[:4])
	sport, dport := en.sport, en.dport
	var rk ctTuple
	t.tupleOf(en, 1, &rk)
	oldHash := rk.hash(t.seed)
	changed := false
	for ri := range s.t.dnat {
		r := &s.t.dnat[ri]
		if !r.m.matches(en.proto, src, dst, sport, dport) {
			continue
		}
		port := dport
		if r.ports && (en.proto == 6 || en.proto == 17) {
			port = r.lo
		}
		en.setDNAT(r.addrs[0], port)
		dst, dport = r.addrs[0], port
		changed = true
		break
	}
	for ri := range s.t.snat {
		r := &s.t.snat[ri]
		if !r.m.matches(en.proto, src, dst, sport, dport) {
			continue
		}
		if !s.snat(e, en, r) {
			en.status &^= ctStSNAT | ctStDNAT
			return false
		}
		changed = true
		break
	}
	if !changed {
		// Linux's null binding: a flow no rule translates keeps its
		// tuple, unless its reply tuple is another flow's (a reply
		// that missed its translated flow, say: the server answers
		// the client's own address). Then the source port is remapped
		// as an SNAT to the flow's own address would, so that every
		// tuple stays one flow's.
		if !s.replyUsed(e, en) {
			return true
		}
		if !s.snat(e, en, &natSessionRule{addrs: [][4]byte{src}}) {
			en.status &^= ctStSNAT
			return false
		}
		t.rekeyReply(e, oldHash)
		return true
	}
	if en.status&ctStSNAT == 0 {
		// DNAT alone: the reply tuple must still be unique (another
		// flow's: a DNAT to where the flow already goes leaves the reply
		// tuple as it was, its own slot).
		if s.replyUsed(e, en) {
			en.status &^= ctStDNAT
			return false
		}
	}
	t.rekeyReply(e, oldHash)
	return true
}

// natMaxAttempts is Linux's NF_NAT_MAX_ATTEMPTS.
const natMaxAttempts = 128

// snat picks the source address and port of rule r for entry en and sets
// them; it reports false when every port tried is taken.
func (s *natStage) snat(e uint32, en *ctEntry, r *natSessionRule) bool {
	t := s.ct.tab
	src := [4]byte(en.src[:4])
	addr := r.addrs[0]
	if len(r.addrs) > 1 {
		h := binary.BigEndian.Uint32(src[:]) * 0x9e3779b1
		addr = r.addrs[(uint64(h)*uint64(len(r.addrs)))>>32]
	}
	// The "port": TCP/UDP source port; an ICMP query's identifier
	// (kept in sport); other protocols have none.
	ported := en.proto == 6 || en.proto == 17 || en.proto == 1
	orig := en.sport
	if !ported {
		en.setSNAT(addr, orig)
		return !s.replyUsed(e, en)
	}
	lo, hi := r.lo, r.hi
	if !r.ports {
		lo, hi = natDefaultRange(en.proto, orig)
	}
	span := uint32(hi) - uint32(lo) + 1
	w, n := uint32(s.worker), uint32(s.workers)
	steered := func(p uint16) bool { return n == 1 || uint32(p)%n == w }
	// Keep the original port when it fits (Linux tries the tuple as it
	// is first).
	if orig >= lo && orig <= hi && steered(orig) {
		en.setSNAT(addr, orig)
		if !s.replyUsed(e, en) {
			return true
		}
	}
	// The ports this worker may use form the arithmetic sequence lo+k
	// with (lo+k) % n == w; start at a hash of the flow.
	first := (w + n - uint32(lo)%n) % n // smallest k with (lo+k)%n == w
	if first >= span {
		return false
	}
	count := (span - first + n - 1) / n
	var k ctTuple
	t.tupleOf(en, 0, &k)
	h := k.hash(ctSeed) // not the table's: the same port in every run (ctSeed)
	off := h % count
	// Like Linux (nf_nat_l4proto_unique_tuple): up to 128 ports in a row;
	// if none is free, again from another start with half as many while
	// the last round had 16 or more (128, 64, 32, 16, 8: at most 248
	// tries), so that a run of used ports (a client's
	// consecutive ports kept as they were) cannot refuse a flow while
	// the range has room. The other starts come from the flow's hash, not
	// a random number: a replay allocates the same ports.
	attempts := min(count, natMaxAttempts)
	for round := uint32(1); ; round++ {
		for range attempts {
			p := uint16(uint32(lo) + first + off*n)
			en.setSNAT(addr, p)
			if !s.replyUsed(e, en) {
				return true
			}
			if off++; off == count {
				off = 0
			}
		}
		if attempts >= count || attempts < natMinAttempts {
			return false
		}
		attempts /= 2
		off = natMix(h+round*0x9e3779b9) % count
	}
}

// natMinAttempts: a search round of fewer ports is the last (Linux's 16).
const natMinAttempts = 16

// natMix scrambles x (the murmur3 finaliser): a search round's start.
func natMix(x uint32) uint32 {
	x ^= x >> 16
	x *= 0x85ebca6b
	x ^= x >> 13
	x *= 0xc2b2ae35
	return x ^ x>>16
}

// natDefaultRange is Linux's port range when a rule gives none.
func natDefaultRange(proto uint8, orig uint16) (lo, hi uint16) {
	switch {
	case proto == 1:
		return 0, 65535
	case orig < 512:
		return 1, 511
	case orig < 1024:
		return 600, 1023
	}
	return 1024, 65535
}

// replyUsed reports whether en's reply tuple, as its NAT fields now
// stand, belongs to another flow already.
func (s *natStage) replyUsed(e uint32, en *ctEntry) bool {
	t := s.ct.tab
	var rk ctTuple
	t.tupleOf(en, 1, &rk)
	f, _, ok := t.lookup(&rk, rk.hash(t.seed), -1)
	return ok && f != e
}

// natRewrite4 rewrites the IPv4 address at p[off:off+4] to a, adding the
// change to *acc (for the IP and any pseudo-header checksum).
func natRewrite4(p []byte, off int, a [4]byte, acc *uint32) {
	old := binary.BigEndian.Uint32(p[off:])
	*acc += csumAddrDelta(old, csumAddrSum(a))
	copy(p[off:off+4], a[:])
}

// natPacket translates a packet of entry en's flow in direction dir
// (for oneGeneral: Process translates the common packet itself).
//
// A TCP or UDP header whole in the frame takes the straight-line path
// below: the addresses as words, the headers through fixed-size array
// views (one bounds check each), no [4]byte temporaries through the
// stack. It executed some 210 instructions a packet as natPacketGeneral
// alone; anything else (a later fragment, ICMP, a header cut short) goes
// to natPacketGeneral, which TestNATPacketPaths holds this path to.
func natPacket(p []byte, m *rings.Meta, en *ctEntry, dir uint8) {
	l3, l4 := int(m.L3Off), int(m.L4Off)
	proto := m.IPProto
	csumOff := 16 // TCP
	if proto == 17 {
		csumOff = 6
	}
	if m.Flags&rings.FlagL4 == 0 || proto != 6 && proto != 17 || l3+ipv4MinHdr > len(p) || l3+ipv4MinHdr > l4 || l4+csumOff+2 > len(p) {
		natPacketGeneral(p, m, en, dir)
		return
	}
	// In little-endian words: the ones' complement sum does not depend on
	// the byte order (RFC 1071, 2.B), so the update of each checksum read
	// and written little-endian is the big-endian one's bytes, and the
	// addresses go from the entry to the packet as their bytes, with no
	// byte swaps (only the ports, which the entry keeps as numbers).
	le := binary.LittleEndian
	st := en.status
	var doSrc, doDst bool
	var nSrc, nDst uint32 // the addresses' bytes as little-endian words
	var nSport, nDport uint16
	if dir == 0 {
		doSrc, doDst = st&ctStSNAT != 0, st&ctStDNAT != 0
		nSrc, nSport = le.Uint32(en.src[4:8]), en.natSport()
		nDst, nDport = le.Uint32(en.dst[4:8]), en.natDport()
	} else {
		doSrc, doDst = st&ctStDNAT != 0, st&ctStSNAT != 0
		nSrc, nSport = le.Uint32(en.dst[0:4]), en.dport
		nDst, nDport = le.Uint32(en.src[0:4]), en.sport
	}
	ip := (*[ipv4MinHdr]byte)(p[l3 : l3+ipv4MinHdr])
	var acc uint32
	if doSrc {
		acc += csumAddrDelta(le.Uint32(ip[12:]), nSrc>>16+nSrc&0xffff)
		le.PutUint32(ip[12:], nSrc)
		le.PutUint32(m.SrcIP[:4], nSrc)
	}
	if doDst {
		acc += csumAddrDelta(le.Uint32(ip[16:]), nDst>>16+nDst&0xffff)
		le.PutUint32(ip[16:], nDst)
		le.PutUint32(m.DstIP[:4], nDst)
	}
	le.PutUint16(ip[10:], csumApply(le.Uint16(ip[10:]), acc))
	ports := (*[4]byte)(p[l4 : l4+4])
	l4Acc := acc
	if doSrc {
		// The port on the wire is big-endian: as a little-endian word,
		// its bytes swapped.
		l4Acc = csumWord(l4Acc, le.Uint16(ports[0:]), bits.ReverseBytes16(nSport))
		binary.BigEndian.PutUint16(ports[0:], nSport)
		m.SrcPort = nSport
	}
	if doDst {
		l4Acc = csumWord(l4Acc, le.Uint16(ports[2:]), bits.ReverseBytes16(nDport))
		binary.BigEndian.PutUint16(ports[2:], nDport)
		m.DstPort = nDport
	}
	c := (*[2]byte)(p[l4+csumOff : l4+csumOff+2])
	hc := le.Uint16(c[:])
	if proto == 17 && hc == 0 {
		return // no UDP checksum stays none
	}
	nc := csumApply(hc, l4Acc)
	if proto == 17 && nc == 0 {
		nc = 0xffff
	}
	le.PutUint16(c[:], nc)
}

// natPacketGeneral translates any packet of entry en's flow in direction
// dir (natPacket's path for all but the common TCP and UDP packet).
func natPacketGeneral(p []byte, m *rings.Meta, en *ctEntry, dir uint8) {
	l3 := int(m.L3Off)
	if l3+ipv4MinHdr > len(p) {
		return
	}
	var newSrc, newDst [4]byte
	var newSport, newDport uint16
	doSrc, doDst := false, false
	if dir == 0 {
		if en.status&ctStSNAT != 0 {
			newSrc, newSport, doSrc = en.natSrc(), en.natSport(), true
		}
		if en.status&ctStDNAT != 0 {
			newDst, newDport, doDst = en.natDst(), en.natDport(), true
		}
	} else {
		if en.status&ctStDNAT != 0 {
			newSrc, newSport, doSrc = [4]byte(en.dst[:4]), en.dport, true
		}
		if en.status&ctStSNAT != 0 {
			newDst, newDport, doDst = [4]byte(en.src[:4]), en.sport, true
		}
	}
	var acc uint32 // IP header terms: the addresses (also in the pseudo-header)
	if doSrc {
		natRewrite4(p, l3+12, newSrc, &acc)
		*(*[4]byte)(m.SrcIP[:4]) = newSrc
	}
	if doDst {
		natRewrite4(p, l3+16, newDst, &acc)
		*(*[4]byte)(m.DstIP[:4]) = newDst
	}
	be := binary.BigEndian
	be.PutUint16(p[l3+10:], csumApply(be.Uint16(p[l3+10:]), acc))
	if m.Flags&rings.FlagL4 == 0 {
		return // a later fragment: no L4 header here
	}
	l4 := int(m.L4Off)
	switch m.IPProto {
	case 6, 17:
		csumOff := l4 + 16
		if m.IPProto == 17 {
			csumOff = l4 + 6
		}
		l4Acc := acc
		if doSrc && l4+2 <= len(p) {
			l4Acc = csumWord(l4Acc, be.Uint16(p[l4:]), newSport)
			be.PutUint16(p[l4:], newSport)
			m.SrcPort = newSport
		}
		if doDst && l4+4 <= len(p) {
			l4Acc = csumWord(l4Acc, be.Uint16(p[l4+2:]), newDport)
			be.PutUint16(p[l4+2:], newDport)
			m.DstPort = newDport
		}
		if csumOff+2 > len(p) {
			return
		}
		hc := be.Uint16(p[csumOff:])
		if m.IPProto == 17 && hc == 0 {
			return // no UDP checksum stays none
		}
		nc := csumApply(hc, l4Acc)
		if m.IPProto == 17 && nc == 0 {
			nc = 0xffff
		}
		be.PutUint16(p[csumOff:], nc)
	case 1:
		// An ICMP query: its identifier is the flow's "port" (the
		// request's, in the original direction; the reply carries the
		// same identifier). ICMP has no pseudo-header.
		if l4+8 > len(p) {
			return
		}
		var id uint16
		switch {
		case dir == 0 && doSrc:
			id = newSport
		case dir == 1 && doDst:
			id = newDport
		default:
			return
		}
		old := be.Uint16(p[l4+4:])
		be.PutUint16(p[l4+4:], id)
		be.PutUint16(p[l4+2:], csumApply(be.Uint16(p[l4+2:]), csumWord(0, old, id)))
		if m.DstPort == old {
			m.DstPort = id
		}
	}
}

// natICMPError translates an ICMP error related to entry en's flow that
// travels in direction dir: the quoted packet back to how it looked
// before this box translated it (it left in direction dir^1), the outer
// address as Linux sets it, and the ICMP checksum recomputed. It reports
// whether it changed the packet.
func natICMPError(p []byte, m *rings.Meta, en *ctEntry, dir uint8) bool {
	l3, l4 := int(m.L3Off), int(m.L4Off)
	end := ctIPEnd(p, l3, false)
	o := l4 + 8 // the quoted IP header
	if m.Flags&rings.FlagL4 == 0 || o+ipv4MinHdr > end || p[o]>>4 != 4 {
		return false
	}
	ihl := int(p[o]&0x0f) * 4
	if ihl < ipv4MinHdr || o+ihl > end {
		return false
	}
	be := binary.BigEndian
	proto := p[o+9]
	il4 := o + ihl
	snat, dnat := en.status&ctStSNAT != 0, en.status&ctStDNAT != 0
	// The quoted packet went out in direction dir^1 translated; its
	// addresses go back: for a quoted original-direction packet, its
	// source from the SNAT address to the original, its destination from
	// the DNAT one; for a quoted reply, the other way round.
	var innerAcc, innerL4 uint32
	setInner := func(addrOff, portOff int, a [4]byte, port uint16) {
		natRewrite4(p, o+addrOff, a, &innerAcc)
		if (proto == 6 || proto == 17) && il4+portOff+2 <= end {
			innerL4 = csumWord(innerL4, be.Uint16(p[il4+portOff:]), port)
			be.PutUint16(p[il4+portOff:], port)
		} else if proto == 1 && il4+8 <= end && portOff == 0 {
			// The quoted query's identifier, and its checksum (no
			// pseudo-header) incrementally.
			old := be.Uint16(p[il4+4:])
			be.PutUint16(p[il4+4:], port)
			be.PutUint16(p[il4+2:], csumApply(be.Uint16(p[il4+2:]), csumWord(0, old, port)))
		}
	}
	if dir == 1 { // the quoted packet was of the original direction
		if snat {
			setInner(12, 0, [4]byte(en.src[:4]), en.sport)
		}
		if dnat {
			setInner(16, 2, [4]byte(en.dst[:4]), en.dport)
		}
	} else { // it was a reply, as this box had rewritten it
		if dnat {
			setInner(12, 0, en.natDst(), en.natDport())
		}
		if snat {
			setInner(16, 2, en.natSrc(), en.natSport())
		}
	}
	be.PutUint16(p[o+10:], csumApply(be.Uint16(p[o+10:]), innerAcc))
	switch proto {
	case 17:
		if il4+8 <= end {
			if hc := be.Uint16(p[il4+6:]); hc != 0 {
				nc := csumApply(hc, innerAcc+innerL4)
				if nc == 0 {
					nc = 0xffff
				}
				be.PutUint16(p[il4+6:], nc)
			}
		}
	case 6:
		if il4+20 <= end { // only a wholly quoted TCP header has its checksum
			be.PutUint16(p[il4+16:], csumApply(be.Uint16(p[il4+16:]), innerAcc+innerL4))
		}
	}
	// The outer header (nf_nat_icmp_reply_translation's manips).
	var acc uint32
	switch {
	case dir == 1 && snat:
		natRewrite4(p, l3+16, [4]byte(en.src[:4]), &acc)
		*(*[4]byte)(m.DstIP[:4]) = [4]byte(en.src[:4])
	case dir == 0 && snat:
		natRewrite4(p, l3+12, en.natSrc(), &acc)
		*(*[4]byte)(m.SrcIP[:4]) = en.natSrc()
	}
	switch {
	case dir == 0 && dnat:
		natRewrite4(p, l3+16, en.natDst(), &acc)
		*(*[4]byte)(m.DstIP[:4]) = en.natDst()
	case dir == 1 && dnat:
		natRewrite4(p, l3+12, [4]byte(en.dst[:4]), &acc)
		*(*[4]byte)(m.SrcIP[:4]) = [4]byte(en.dst[:4])
	}
	be.PutUint16(p[l3+10:], csumApply(be.Uint16(p[l3+10:]), acc))
	// The ICMP checksum covers the quoted bytes: recompute it.
	be.PutUint16(p[l4+2:], 0)
	be.PutUint16(p[l4+2:], ^inetFold(inetSum(p[l4:end], 0)))
	return true
}

// Report implements Reporter: the counters are in the layout's order.
func (s *natStage) Report(dst []counters.Value) { addPairs(dst, s.c[:], s.bytes[:]) }

// PublishCounters implements LiveReporter.
func (s *natStage) PublishCounters() { s.live.publishPairs(s.c[:], s.bytes[:]) }

// LiveReport implements LiveReporter.
func (s *natStage) LiveReport(dst []counters.Value) { s.live.addTo(dst, 0) }

var (
	_ LiveReporter = (*natStage)(nil)
	_ Linker       = (*natStage)(nil)
	_ WorkerAware  = (*natStage)(nil)
)
