package pipelines

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"

	"github.com/warpflow/warpflow/rings"
)

// The partition compiler: which part of a pipeline the XDP program runs.
//
// On an AF_XDP port the XDP program sees every frame before the workers
// do. It can decide the ones the pipeline's first rules decide, when
// those rules need only what it parses cheaply and end in drop or pass,
// so that a flood the first filter drops costs no UMEM frame, ring pass
// or worker time. Graph.Offload finds the longest prefix of the first
// filter's rules (the filter right after the entry parse stage) that can
// move: first match is kept exactly, so the first rule that cannot move
// ends the prefix, and the plan says which one and why. The prefix becomes
// KernelRules (tables from each match field's value to a bitmap of the
// rules it satisfies, built from the same parsed rules and the same key
// the workers' classifier uses: filterKey); xdp.Program.LoadRules loads
// them.
//
// Why this is exact. The kernel decides a frame only when its parser
// (xdp/xsk_redirect.c) would give the workers' parse stage class OK and
// the same fields; everything else goes to the workers. For a frame it
// decides, the lowest prefix rule i it matches is the workers' first
// match too: no rule before i matches (they are all in the prefix). A
// frame no prefix rule matches goes to the workers, which run the whole
// pipeline (the prefix included, harmlessly), so a rule set swap can never
// give a frame a verdict that neither the old nor the new pipeline gives.
//
// Class: the kernel decides only class-OK frames, so a rule's class list
// is settled when the plan is built: a rule that excludes ok matches no
// frame the kernel decides (it moves, as a rule the kernel never fires),
// and one that includes ok needs no check there.

// Balance in the kernel. The issue asked for a balance stage's choice to
// move into the XDP program too (steering each flow to a queue where the
// NIC cannot), and it cannot: Linux delivers an XDP redirect into an
// AF_XDP socket only when the socket is bound to the device and queue the
// frame arrived on (net/xdp/xsk.c, xsk_rcv_check: -EINVAL otherwise, and
// the driver drops the frame). Linux 6.9 let a redirect reach any socket
// sharing the UMEM (2863d665ea41); 6.10 reverted it (7fcf26b315bb) because
// NAPI instances of two queues then wrote one socket's RX ring at once.
// xdp's TestCrossQueueRedirectRefused holds the running kernel to this.
// So the split never goes past a filter into a balance stage, and says so.

// BalanceKernelReason says why a balance stage stays on the workers.
const BalanceKernelReason = "a balance stage's choice cannot run in the kernel: Linux delivers an XDP redirect only to an AF_XDP socket bound to the queue the frame arrived on (xsk_rcv_check), so the XDP program cannot steer a flow to another queue's socket; spread flows over queues with the NIC's RSS or ntuple rules, and the workers balance within a queue"

// Table sizes of KernelRules; equal to xdp's (a test in xdp checks).
const (
	KernelMaxRules    = 64
	KernelL3Len       = 2048
	KernelPortLen     = noPort + 1
	KernelVLANLen     = noVLAN + 1
	KernelTCPLen      = noTCP + 1
	KernelMaxPrefixes = 2047
)

// Kernel rule actions (KernelRules.Actions).
const (
	KernelDrop = 1
	KernelPass = 2
)

// KernelRules is the kernel's rule set: field-for-field the same struct
// as xdp.OffloadRules (so xdp.OffloadRules(k) converts it), which says
// what each table holds. Bit i of every bitmap is rule i of the filter.
type KernelRules struct {
	Actions  []uint8
	L3       []uint64
	SrcPort  []uint64
	DstPort  []uint64
	VLAN     []uint64
	TCP      []uint64
	Frag     [2]uint64
	Src, Dst map[netip.Prefix]uint64
}

// OffloadMode says whether a live port splits its pipeline.
type OffloadMode uint8

const (
	OffloadAuto OffloadMode = iota // move the longest prefix Graph.Offload finds
	OffloadNone                    // the kernel only steers; everything runs on the workers
)

func (m OffloadMode) String() string {
	if m == OffloadNone {
		return "none"
	}
	return "auto"
}

// ParseOffloadMode parses "auto" (or "") and "none".
func ParseOffloadMode(s string) (OffloadMode, error) {
	switch s {
	case "", "auto":
		return OffloadAuto, nil
	case "none":
		return OffloadNone, nil
	}
	return 0, fmt.Errorf("offload %q: want auto or none", s)
}

// OffloadRule is one rule of the planned filter.
type OffloadRule struct {
	Index  int
	Pos    Pos    // the rule's mapping in the config
	Action string // as the pipeline names it: "drop:<reason>", "pass", "accept", a stage
	Kernel bool   // in the kernel's prefix
	// Verdict and Label for a kernel rule: rings.VerdictDrop with the drop
	// reason, or rings.VerdictPass.
	Verdict rings.Verdict
	Label   string
	// Idle says, for a kernel rule no frame the kernel decides can match
	// (one for malformed or ARP frames), that it fires only on the workers.
	Idle bool
}

// OffloadPlan is the split of one pipeline.
type OffloadPlan struct {
	Pipeline string
	Mode     OffloadMode
	Filter   string // the filter stage planned; "" when the pipeline has none to split
	// Why is set when nothing could be planned at all (no parse → filter
	// start, offload none).
	Why   string
	Rules []OffloadRule // every rule of the filter, in order
	Moved int           // Rules[:Moved] run in the kernel
	// StopReason says why Rules[Moved] cannot move ("" when every rule moved).
	StopReason string
	// After says, when every rule moved and the filter's default leads to
	// a balance stage, why that stage stays on the workers
	// (BalanceKernelReason).
	After  string
	Kernel KernelRules // Actions is empty when Moved == 0
}

// kernelInput is what a filter keeps for the kernel half, so that
// Graph.Offload plans the split from the compiled graph alone: the YAML is
// parsed once, at compile, and a swap plans nothing. head holds the first
// KernelMaxRules rules as parsed (no rule past them can move: the kernel's
// table holds that many), pos every rule's position and whether its
// action is accept (the zero Target, which shares edge 0 with a rule that
// names the next stage: the plan prints the two differently).
type kernelInput struct {
	head []filterRule
	pos  []rulePos
}

// rulePos is one rule's mapping in the config, without the file name
// (the graph's).
type rulePos struct {
	line, col int32
	accept    bool
}

// keepForKernel records the kernel half's input of a filter built from
// rules (positions pos).
func (t *filterTemplate) keepForKernel(rules []filterRule, pos []rulePos) {
	t.kernel = kernelInput{head: rules[:min(len(rules), KernelMaxRules)], pos: pos}
}

// offloadMemo holds the graph's plans, one per mode, made at the first
// Offload call.
type offloadMemo struct {
	once [2]sync.Once
	plan [2]*OffloadPlan
}

// LoadOffload parses and compiles the pipeline config data (as Load does)
// and plans its split under mode (Graph.Offload).
func LoadOffload(file string, data []byte, mode OffloadMode) (*Graph, *OffloadPlan, error) {
	g, err := Load(file, data)
	if err != nil {
		return nil, nil, err
	}
	return g, g.Offload(mode), nil
}

// LoadOffloadFile is LoadOffload of the config at path.
func LoadOffloadFile(path string, mode OffloadMode) (*Graph, *OffloadPlan, error) {
	data, err := ReadConfigFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read pipeline config: %w", err)
	}
	return LoadOffload(path, data, mode)
}

// Offload returns the split of g under mode: which of its first filter's
// rules the XDP program runs, and their kernel tables. It is planned from
// what the compile kept (no YAML is read), once per mode, at the first
// call; later calls return the same plan, which callers must not modify.
// Safe for concurrent use. A daemon plans when it loads a pipeline, so a
// swap to it has both halves ready.
func (g *Graph) Offload(mode OffloadMode) *OffloadPlan {
	m := min(int(mode), 1)
	g.offload.once[m].Do(func() { g.offload.plan[m] = g.planOffload(mode) })
	return g.offload.plan[m]
}

// planOffload plans the split of g under mode.
func (g *Graph) planOffload(mode OffloadMode) *OffloadPlan {
	p := &OffloadPlan{Pipeline: g.name, Mode: mode}
	if mode == OffloadNone {
		p.Why = "offload: none: the XDP program only steers frames to the workers"
		return p
	}
	if len(g.topo) == 0 {
		p.Why = "the pipeline has no stages"
		return p
	}
	entry := &g.nodes[g.topo[0]]
	if _, ok := entry.tmpl.(*parseTemplate); !ok || entry.terminal || len(entry.edges) != 1 {
		p.Why = fmt.Sprintf("the pipeline starts with stage %q (%s), not parse: the kernel parses only for a filter right after parse", entry.name, entry.kind)
		return p
	}
	fn := &g.nodes[entry.edges[0]]
	ft, ok := fn.tmpl.(*filterTemplate)
	if !ok || fn.terminal {
		p.Why = fmt.Sprintf("stage %q after parse is a %s, not a filter: nothing to move", fn.name, fn.kind)
		if isBalance(fn) {
			p.Why = fmt.Sprintf("stage %q after parse is a balance: %s", fn.name, BalanceKernelReason)
		}
		return p
	}
	p.Filter = fn.name
	in := &ft.kernel
	if len(in.pos) != len(ft.ruleEdge)-1 {
		// A filter template not built from a config (only tests make
		// those): nothing is known of its rules' positions.
		p.Why = fmt.Sprintf("filter %q was not compiled from a config: nothing to move", fn.name)
		return p
	}
	p.Rules = make([]OffloadRule, len(in.pos))
	stopped := false
	var src, dst [2]int // prefixes per family in the kernel's tables so far
	for i := range in.pos {
		rp := in.pos[i]
		e := ft.ruleEdge[i]
		to := &g.nodes[fn.edges[e]]
		action := ft.edges[e]
		if rp.accept {
			action = Target{}
		}
		or := OffloadRule{Index: i, Pos: Pos{File: g.file, Line: int(rp.line), Col: int(rp.col)}, Action: actionName(action, to)}
		if !stopped {
			why := ""
			switch {
			case !to.terminal && isBalance(to):
				why = fmt.Sprintf("its action %s leads to balance stage %q: %s", or.Action, to.name, BalanceKernelReason)
			case !to.terminal:
				why = fmt.Sprintf("its action %s leads to stage %q, which runs on the workers", or.Action, to.name)
			case to.verdict == rings.VerdictTX:
				why = fmt.Sprintf("its action transmits on port %q: the kernel half only drops and passes", to.label)
			case to.verdict != rings.VerdictDrop && to.verdict != rings.VerdictPass:
				why = fmt.Sprintf("its action %s is not drop or pass", or.Action)
			case i >= KernelMaxRules || i >= len(in.head):
				why = fmt.Sprintf("the kernel's table holds %d rules", KernelMaxRules)
			case in.head[i].hasCT():
				why = "it matches ct state, which only the workers' conntrack stage knows"
			}
			if why == "" {
				r := &in.head[i]
				ns, nd := countFamilies(r.src), countFamilies(r.dst)
				for f := range 2 {
					if src[f]+ns[f] > KernelMaxPrefixes-1 || dst[f]+nd[f] > KernelMaxPrefixes-1 {
						why = fmt.Sprintf("the kernel's address tables hold %d prefixes per family and direction", KernelMaxPrefixes)
					}
				}
				for f := range 2 {
					src[f] += ns[f]
					dst[f] += nd[f]
				}
			}
			if why != "" {
				stopped = true
				p.StopReason = why
			} else {
				or.Kernel, or.Verdict, or.Label = true, to.verdict, to.label
				p.Moved = i + 1
			}
		}
		p.Rules[i] = or
	}
	if def := &g.nodes[fn.edges[ft.ruleEdge[len(in.pos)]]]; !stopped && !def.terminal && isBalance(def) {
		p.After = fmt.Sprintf("the filter's default leads to balance stage %q: %s", def.name, BalanceKernelReason)
	}
	if p.Moved > 0 {
		p.Kernel = buildKernelRules(in.head[:p.Moved], p.Rules[:p.Moved])
		var any uint64
		for _, v := range p.Kernel.L3 {
			any |= v
		}
		for i := range p.Moved {
			p.Rules[i].Idle = any&(1<<i) == 0
		}
	}
	return p
}

func isBalance(n *gnode) bool { return n.kind == balanceKind.Name }

// countFamilies counts IPv4 and IPv6 prefixes.
func countFamilies(ps []netip.Prefix) (n [2]int) {
	for _, p := range ps {
		if p.Addr().Is4() {
			n[0]++
		} else {
			n[1]++
		}
	}
	return n
}

func actionName(t Target, to *gnode) string {
	switch {
	case t.Drop != "":
		return "drop:" + t.Drop
	case t.Stage != "":
		return t.Stage
	case to.terminal && to.verdict == rings.VerdictPass:
		return "accept (to " + to.name + ", pass)"
	}
	return "accept (to " + to.name + ")"
}

// buildKernelRules lays the prefix rules out as the kernel's tables.
func buildKernelRules(rules []filterRule, planned []OffloadRule) KernelRules {
	k := KernelRules{
		Actions: make([]uint8, len(rules)),
		L3:      make([]uint64, KernelL3Len),
		SrcPort: make([]uint64, KernelPortLen),
		DstPort: make([]uint64, KernelPortLen),
		VLAN:    make([]uint64, KernelVLANLen),
		TCP:     make([]uint64, KernelTCPLen),
	}
	okBit := uint(rings.ClassOK)
	for i := range rules {
		r := &rules[i]
		bit := uint64(1) << i
		k.Actions[i] = KernelDrop
		if planned[i].Verdict == rings.VerdictPass {
			k.Actions[i] = KernelPass
		}
		if r.hasClass && r.class[okBit/64]&(1<<(okBit%64)) == 0 {
			continue // matches no class-OK frame: never fires in the kernel
		}
		if r.hasCT() && !r.ctMatch(rings.CTUntracked) {
			continue // the kernel's frames are untracked (the planner moves no ct rule anyway)
		}
		for _, fam := range []uint64{famV4, famV6} {
			for proto := range uint64(256) {
				if protoAccepts(r, fam, proto) {
					k.L3[fam<<9|proto] |= bit
				}
			}
		}
		portBits(k.SrcPort, r.srcPort, bit)
		portBits(k.DstPort, r.dstPort, bit)
		for v := range KernelVLANLen {
			if !r.hasVLAN || v == noVLAN && r.vlanNone || v < noVLAN && inRanges(r.vlan, uint16(v)) {
				k.VLAN[v] |= bit
			}
		}
		for f := range KernelTCPLen {
			if !r.hasTCP || f < noTCP && uint8(f)&r.tcpSet == r.tcpSet && uint8(f)&r.tcpClear == 0 {
				k.TCP[f] |= bit
			}
		}
		for f := range 2 {
			if !r.hasFrag || r.frag == (f == 1) {
				k.Frag[f] |= bit
			}
		}
	}
	k.Src = prefixTable(rules, func(r *filterRule) []netip.Prefix { return r.src })
	k.Dst = prefixTable(rules, func(r *filterRule) []netip.Prefix { return r.dst })
	return k
}

func protoAccepts(r *filterRule, fam, proto uint64) bool {
	if r.proto == nil {
		return true
	}
	for _, p := range r.proto {
		switch p {
		case protoIPv4:
			if fam == famV4 {
				return true
			}
		case protoIPv6:
			if fam == famV6 {
				return true
			}
		case protoARP:
		default:
			if uint64(p) == proto {
				return true
			}
		}
	}
	return false
}

func portBits(t []uint64, rs []portRange, bit uint64) {
	if rs == nil {
		for i := range t {
			t[i] |= bit
		}
		return
	}
	for _, pr := range rs {
		for p := int(pr.lo); p <= int(pr.hi); p++ {
			t[p] |= bit
		}
	}
}

func inRanges(rs []portRange, v uint16) bool {
	for _, pr := range rs {
		if pr.lo <= v && v <= pr.hi {
			return true
		}
	}
	return false
}

// prefixTable builds one direction's LPM entries: every prefix some rule
// lists, and /0 of both families; each entry's bitmap holds the rules
// without an address constraint here and those with a prefix of the
// entry's family covering it. The longest entry matching an address is
// then covered by exactly the listed prefixes that contain the address.
func prefixTable(rules []filterRule, field func(*filterRule) []netip.Prefix) map[netip.Prefix]uint64 {
	t := map[netip.Prefix]uint64{
		netip.PrefixFrom(netip.IPv4Unspecified(), 0): 0,
		netip.PrefixFrom(netip.IPv6Unspecified(), 0): 0,
	}
	for i := range rules {
		for _, p := range field(&rules[i]) {
			t[p] = 0
		}
	}
	okBit := uint(rings.ClassOK)
	for e := range t {
		for i := range rules {
			r := &rules[i]
			if r.hasClass && r.class[okBit/64]&(1<<(okBit%64)) == 0 {
				continue
			}
			ps := field(r)
			hit := ps == nil
			for _, q := range ps {
				if q.Addr().Is4() == e.Addr().Is4() && q.Bits() <= e.Bits() && q.Contains(e.Addr()) {
					hit = true
					break
				}
			}
			if hit {
				t[e] |= 1 << i
			}
		}
	}
	return t
}

// KernelLookup is the kernel's lookup over k, in Go: the rule a frame
// whose parsed metadata is m matches in the kernel, or -1. It assumes the
// kernel parsed the frame (class OK, IPv4 or IPv6); tests hold it against
// the classifier and the BPF program against it.
func (k *KernelRules) KernelLookup(m *rings.Meta) int {
	if len(k.Actions) == 0 {
		return -1
	}
	var key [nDims]uint64
	filterKey(m, &key)
	bm := k.L3[key[dL3]&(KernelL3Len-1)] & k.SrcPort[key[dSport]] & k.DstPort[key[dDport]] &
		k.VLAN[key[dVLAN]] & k.TCP[key[dTCP]] & k.Frag[key[dFrag]]
	fam := key[dL3] >> 9
	var src, dst netip.Addr
	switch fam {
	case famV4:
		src, dst = netip.AddrFrom4([4]byte(m.SrcIP[:4])), netip.AddrFrom4([4]byte(m.DstIP[:4]))
	case famV6:
		src, dst = netip.AddrFrom16(m.SrcIP), netip.AddrFrom16(m.DstIP)
	default:
		return -1
	}
	bm &= longestMatch(k.Src, src) & longestMatch(k.Dst, dst)
	if bm == 0 {
		return -1
	}
	for i := range k.Actions {
		if bm&(1<<i) != 0 {
			return i
		}
	}
	return -1
}

func longestMatch(t map[netip.Prefix]uint64, a netip.Addr) uint64 {
	for bits := a.BitLen(); bits >= 0; bits-- {
		p, _ := a.Prefix(bits)
		if v, ok := t[p]; ok {
			return v
		}
	}
	return 0
}

// Explain describes the split as text: what runs in the kernel, the rule
// that stopped the prefix and why, and what the kernel parses.
func (p *OffloadPlan) Explain() string {
	var b strings.Builder
	fmt.Fprintf(&b, "offload %s, pipeline %q\n", p.Mode, p.Pipeline)
	if p.Why != "" {
		fmt.Fprintf(&b, "  nothing runs in the kernel: %s\n", p.Why)
		return b.String()
	}
	switch {
	case len(p.Rules) == 0:
		fmt.Fprintf(&b, "  filter %q has no rules: nothing runs in the kernel\n", p.Filter)
	case p.Moved == 0:
		fmt.Fprintf(&b, "  filter %q: no rule runs in the kernel\n", p.Filter)
	case p.Moved == len(p.Rules):
		fmt.Fprintf(&b, "  filter %q: all %d rules run in the kernel (XDP); the default and the rest of the pipeline on the workers\n", p.Filter, p.Moved)
	case p.Moved == 1:
		fmt.Fprintf(&b, "  filter %q: rule 0 of %d runs in the kernel (XDP); rule 1 on, the default and the rest of the pipeline on the workers\n",
			p.Filter, len(p.Rules))
	default:
		fmt.Fprintf(&b, "  filter %q: rules 0-%d of %d run in the kernel (XDP); rule %d on, the default and the rest of the pipeline on the workers\n",
			p.Filter, p.Moved-1, len(p.Rules), p.Moved)
	}
	for _, r := range p.Rules {
		where := "workers"
		if r.Kernel {
			where = "kernel "
		}
		fmt.Fprintf(&b, "    %s rule[%d] (line %d): %s\n", where, r.Index, r.Pos.Line, r.Action)
		if r.Idle {
			b.WriteString("            matches no frame the kernel decides (class ok IPv4 or IPv6): it fires on the workers\n")
		}
		if r.Index == p.Moved && p.StopReason != "" {
			fmt.Fprintf(&b, "            stops the prefix: %s\n", p.StopReason)
		}
	}
	if p.After != "" {
		fmt.Fprintf(&b, "  the split ends there: %s\n", p.After)
	}
	if p.Moved > 0 {
		b.WriteString("  the kernel decides only frames it parses as the workers would class ok: Ethernet, up to 2 VLAN tags,\n" +
			"  IPv4 without AH, IPv6 without extension headers; any other frame, and any frame no kernel rule matches, goes to the workers\n")
	}
	return b.String()
}
