package pipelines

import (
	"net"
	"net/netip"
	"sync/atomic"

	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/rings"
)

// rewriteKind is the built-in "rewrite" stage: in-place header rewrites.
//
// Options (all optional, at least one required), applied to every packet
// that reaches the stage in this fixed order:
//
//  1. pop_vlan: true         remove the outer 802.1Q/802.1ad tag, if any
//  2. push_vlan: ID          push a tag (ID 0..4095) into the frame headroom;
//     push_vlan_tpid: 0x8100 (default) or 0x88a8; push_vlan_pcp: 0..7
//  3. src_mac / dst_mac: MAC set the Ethernet source / destination
//  4. swap_macs: true        exchange source and destination MACs
//  5. ttl_decrement: true    IPv4 TTL (header checksum updated) or IPv6 hop limit
//  6. snat: {addr, port}     IPv4 source address (and TCP/UDP source port)
//  7. dnat: {addr, port}     IPv4 destination address (and TCP/UDP destination port)
//
// A packet that would be dropped is dropped before any rewrite touches it:
// a packet whose TTL or hop limit is 0 or 1 (it would reach 0) goes to
// drop:ttl_exceeded, and a packet that needs a pushed tag but whose frame
// has fewer than 4 bytes of headroom goes to drop:no_headroom.
//
// Edges: 0 next; then drop:ttl_exceeded when ttl_decrement is set; then
// drop:no_headroom when push_vlan is set.
//
// Checksums are updated incrementally (RFC 1624); the result equals a full
// recompute. NAT touches only IPv4 packets (others pass unchanged and count
// as "skipped"); it rewrites TCP/UDP ports and fixes the TCP/UDP checksum
// including the pseudo-header (a zero UDP checksum means "none" and stays
// zero). Non-first fragments get their addresses rewritten, never their
// ports: they carry no L4 header. A field is written only when it lies
// wholly inside the packet: a packet whose L4 header is cut gets what is
// there rewritten and counts as "truncated". Source-routed packets
// (LSRR/SSRR options) are not special-cased: their L4 pseudo-header holds
// the route's final hop, so a DNAT of them leaves a wrong L4 checksum. Frames shorter than an
// Ethernet header pass unchanged and count as "runt". The three are the
// stage's one family of counters, exception.
var rewriteKind = Kind{Name: "rewrite", Build: buildRewrite, Counters: []counters.Decl{rewriteExceptionDecl}}

// rewriteExceptionDecl is the rewrite stage's counters: the packets it
// passed on without doing all it was asked, by why.
var rewriteExceptionDecl = counters.Decl{Name: "exception", Kind: counters.Counter, Unit: "packets", Bytes: true, Label: "exception",
	Help: "Packets a rewrite stage passed on without all it was asked (skipped: NAT on a packet that is not IPv4; truncated: a header cut short; runt: shorter than an Ethernet header)."}

// rewriteLayout is every rewrite stage's: the exceptions, in rwCounter
// order.
var rewriteLayout = counters.NewLayout(counters.Keyed(rewriteExceptionDecl, rewriteKeys[:]))

// rewriteKeys are the exceptions' keys, in rwCounter order (the device
// program keeps as many counters: REWRITE_COUNTERS).
var rewriteKeys = [3]string{"skipped", "truncated", "runt"}

// rewriteOptions is the rewrite stage's config, decoded strictly.
type rewriteOptions struct {
	PopVLAN      bool        `yaml:"pop_vlan"`
	PushVLAN     *int        `yaml:"push_vlan"`
	PushVLANTPID *int        `yaml:"push_vlan_tpid"`
	PushVLANPCP  *int        `yaml:"push_vlan_pcp"`
	SrcMAC       string      `yaml:"src_mac"`
	DstMAC       string      `yaml:"dst_mac"`
	SwapMACs     bool        `yaml:"swap_macs"`
	TTLDecrement bool        `yaml:"ttl_decrement"`
	SNAT         *natOptions `yaml:"snat"`
	DNAT         *natOptions `yaml:"dnat"`
}

type natOptions struct {
	Addr string `yaml:"addr"`
	Port *int   `yaml:"port"`
}

// Operation bits, one per rewrite, in application order.
const (
	rwPopVLAN uint16 = 1 << iota
	rwPushVLAN
	rwSrcMAC
	rwDstMAC
	rwSwapMACs
	rwTTL
	rwSNAT
	rwDNAT
)

// rewriteConfig is the compiled, immutable form of rewriteOptions.
type rewriteConfig struct {
	ops          uint16
	pushTPID     uint16
	pushTCI      uint16
	srcMAC       [6]byte
	dstMAC       [6]byte
	snat, dnat   natRule
	ttlEdge      Edge
	headroomEdge Edge
}

// natRule is one compiled snat or dnat.
type natRule struct {
	addr    [4]byte
	addrSum uint32 // csumAddrSum(addr), for the incremental checksums
	port    uint16
	hasPort bool
}

func buildRewrite(c *BuildContext) Template {
	var o rewriteOptions
	if !c.Decode(&o) {
		return nil
	}
	var cfg rewriteConfig
	ok := true
	if o.PopVLAN {
		cfg.ops |= rwPopVLAN
	}
	if o.PushVLAN != nil {
		cfg.ops |= rwPushVLAN
		id := *o.PushVLAN
		if id < 0 || id > 4095 {
			c.Errorf(c.Option("push_vlan"), "push_vlan %d: want a VLAN ID in 0..4095", id)
			ok = false
		}
		tpid := 0x8100
		if o.PushVLANTPID != nil {
			tpid = *o.PushVLANTPID
			if tpid != 0x8100 && tpid != 0x88a8 {
				c.Errorf(c.Option("push_vlan_tpid"), "push_vlan_tpid %#x: want 0x8100 or 0x88a8", tpid)
				ok = false
			}
		}
		pcp := 0
		if o.PushVLANPCP != nil {
			pcp = *o.PushVLANPCP
			if pcp < 0 || pcp > 7 {
				c.Errorf(c.Option("push_vlan_pcp"), "push_vlan_pcp %d: want 0..7", pcp)
				ok = false
			}
		}
		cfg.pushTPID = uint16(tpid)
		cfg.pushTCI = uint16(pcp&7)<<13 | uint16(id&0xfff)
	} else {
		for _, k := range []string{"push_vlan_tpid", "push_vlan_pcp"} {
			if n := c.Option(k); n != nil {
				c.Errorf(n, "%s needs push_vlan", k)
				ok = false
			}
		}
	}
	if o.SrcMAC != "" {
		cfg.ops |= rwSrcMAC
		ok = parseMAC(c, "src_mac", o.SrcMAC, &cfg.srcMAC) && ok
	}
	if o.DstMAC != "" {
		cfg.ops |= rwDstMAC
		ok = parseMAC(c, "dst_mac", o.DstMAC, &cfg.dstMAC) && ok
	}
	if o.SwapMACs {
		cfg.ops |= rwSwapMACs
	}
	if o.TTLDecrement {
		cfg.ops |= rwTTL
	}
	if o.SNAT != nil {
		cfg.ops |= rwSNAT
		ok = parseNAT(c, "snat", o.SNAT, &cfg.snat) && ok
	}
	if o.DNAT != nil {
		cfg.ops |= rwDNAT
		ok = parseNAT(c, "dnat", o.DNAT, &cfg.dnat) && ok
	}
	if cfg.ops == 0 {
		c.Errorf(nil, "rewrite stage has no operations (want one of pop_vlan, push_vlan, src_mac, dst_mac, swap_macs, ttl_decrement, snat, dnat)")
		ok = false
	}
	next, hasNext := rwNextTarget(c)
	if !ok || !hasNext {
		return nil
	}
	edges := []Target{next}
	if cfg.ops&rwTTL != 0 {
		cfg.ttlEdge = Edge(len(edges))
		edges = append(edges, Target{Drop: "ttl_exceeded", Pos: c.Pos(c.Option("ttl_decrement"))})
	}
	if cfg.ops&rwPushVLAN != 0 {
		cfg.headroomEdge = Edge(len(edges))
		edges = append(edges, Target{Drop: "no_headroom", Pos: c.Pos(c.Option("push_vlan"))})
	}
	return &rewriteTemplate{cfg: cfg, edges: edges}
}

func parseMAC(c *BuildContext, key, s string, dst *[6]byte) bool {
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 6 {
		c.Errorf(c.Option(key), "%s %q: want a 6-byte MAC address like 02:00:00:00:00:01", key, s)
		return false
	}
	copy(dst[:], hw)
	return true
}

func parseNAT(c *BuildContext, key string, o *natOptions, dst *natRule) bool {
	n := c.Option(key)
	if addrNode := mappingValue(n, "addr"); addrNode != nil {
		n = addrNode
	}
	a, err := netip.ParseAddr(o.Addr)
	if err != nil || !a.Is4() {
		c.Errorf(n, "%s addr %q: want an IPv4 address", key, o.Addr)
		return false
	}
	dst.addr = a.As4()
	dst.addrSum = csumAddrSum(dst.addr)
	if o.Port != nil {
		p := *o.Port
		if p < 1 || p > 65535 {
			c.Errorf(mappingValue(c.Option(key), "port"), "%s port %d: want 1..65535", key, p)
			return false
		}
		dst.port, dst.hasPort = uint16(p), true
	}
	return true
}

// rewriteTemplate is the compiled rewrite stage, shared by all workers.
type rewriteTemplate struct {
	cfg   rewriteConfig
	edges []Target
}

func (t *rewriteTemplate) Edges() []Target { return t.edges }

// Counters implements CountedTemplate.
func (t *rewriteTemplate) Counters() *counters.Layout { return rewriteLayout }

func (t *rewriteTemplate) NewInstance() Stage { return &rewriteStage{cfg: t.cfg} }

// rewriteStage is one worker's rewrite instance. Its counters are plain:
// an instance belongs to one worker.
type rewriteStage struct {
	cfg       rewriteConfig
	skipped   rwCounter // NAT configured, packet not IPv4
	truncated rwCounter // NAT on a packet whose IPv4 or L4 header is cut
	runt      rwCounter // frame shorter than an Ethernet header
	// pub is the three counters as published (PublishCounters).
	pub [3]struct{ packets, bytes atomic.Uint64 }
}

// Report implements Reporter: skipped, truncated and runt.
func (s *rewriteStage) Report(dst []counters.Value) {
	for i, c := range [...]rwCounter{s.skipped, s.truncated, s.runt} {
		dst[i].Value += c.packets
		dst[i].Bytes += c.bytes
	}
}

// PublishCounters implements LiveReporter: three counters, stored when
// they moved.
func (s *rewriteStage) PublishCounters() {
	for i, c := range [...]rwCounter{s.skipped, s.truncated, s.runt} {
		storeIfChanged(&s.pub[i].packets, c.packets)
		storeIfChanged(&s.pub[i].bytes, c.bytes)
	}
}

// LiveReport implements LiveReporter: Report's counters as published.
func (s *rewriteStage) LiveReport(dst []counters.Value) {
	for i := range s.pub {
		dst[i].Value += s.pub[i].packets.Load()
		dst[i].Bytes += s.pub[i].bytes.Load()
	}
}

var _ LiveReporter = (*rewriteStage)(nil)

// Process implements Stage. A stage that only sets or swaps MAC addresses
// (the packet never moves, no L3 work, no drop edge) runs a loop of its own;
// every other option set runs the general per-packet path.
func (s *rewriteStage) Process(b *rings.Batch, idx []uint16, next []Edge) {
	next = next[:len(idx)]
	if s.cfg.ops&^rwMACOps == 0 {
		s.processMACs(b, idx, next)
		return
	}
	if s.cfg.ops&^rwNAT4Ops == 0 {
		s.processNAT4(b, idx, next)
		return
	}
	for k, i := range idx {
		next[k] = s.one(b, int(i))
	}
}

// KeepsLength implements LengthKeeper: only popping or pushing a VLAN tag changes a length.
func (s *rewriteStage) KeepsLength() bool { return s.cfg.ops&(rwPopVLAN|rwPushVLAN) == 0 }
