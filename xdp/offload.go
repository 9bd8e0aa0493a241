package xdp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
)

// The kernel half of a split pipeline: rule tables the program
// (xsk_redirect.c, "The kernel half") reads before steering a frame. The
// program is verified once, at LoadProgram; LoadRules only rewrites maps.

// Table sizes, as in xsk_redirect.c.
const (
	MaxOffloadRules = 64    // rules one set may hold: one bit each in a u64
	OffloadL3Len    = 2048  // OffloadRules.L3: family<<9 | IP protocol (family 1 IPv4, 2 IPv6)
	OffloadPortLen  = 65537 // SrcPort, DstPort: the port, 65536 for a packet without ports
	OffloadVLANLen  = 4097  // VLAN: the outer VLAN id, 4096 untagged
	OffloadTCPLen   = 257   // TCP: the flags byte, 256 for a packet that is not TCP
	// MaxOffloadPrefixes bounds each of the four address tables (IPv4 and
	// IPv6, source and destination) of one set.
	MaxOffloadPrefixes = offLPMMax/2 - 1
	offLPMMax          = 4096
)

// Rule actions in OffloadRules.Actions.
const (
	OffloadDrop = 1 // XDP_DROP
	OffloadPass = 2 // XDP_PASS: to the kernel's stack
)

// OffloadRules is one rule set for the kernel: the first rules of a
// pipeline's filter, as tables from each match field's value to the
// bitmap of rules (bit i = rule i) that value satisfies. A frame the
// kernel parses matches the lowest rule whose bit survives the AND of its
// fields' bitmaps; it takes that rule's action. Built by
// pipelines.KernelRules (the struct has the same fields, so the daemon
// converts one to the other); plain data, validated by LoadRules.
type OffloadRules struct {
	// Actions holds each rule's action, OffloadDrop or OffloadPass; its
	// length is the number of rules (0: the kernel decides nothing).
	Actions []uint8
	L3      []uint64 // OffloadL3Len entries
	SrcPort []uint64 // OffloadPortLen entries
	DstPort []uint64
	VLAN    []uint64 // OffloadVLANLen entries
	TCP     []uint64 // OffloadTCPLen entries
	Frag    [2]uint64
	// Src and Dst map masked prefixes of either family to the bitmap of a
	// frame whose address has that prefix as its longest match in the
	// map. A family without a /0 entry matches no rule.
	Src, Dst map[netip.Prefix]uint64
}

// RuleCount is one kernel rule's hits, summed over CPUs.
type RuleCount struct{ Packets, Bytes uint64 }

// offloadHit is struct off_hit.
type offloadHit struct{ Packets, Bytes uint64 }

// off_ctl slots, as in xsk_redirect.c.
const (
	ctlActive  = 0
	ctlSeq0    = 1
	ctlNRules0 = 3
)

// offloadState is the loader's view of the two slots.
type offloadState struct {
	mu   sync.Mutex
	gen  uint64    // generation of the active set; 0: none loaded yet (slot 0 empty)
	seq  [2]uint64 // each slot's sequence number (even when idle)
	base [2][]RuleCount
	n    [2]int // each slot's number of rules
	// shadow is what each slot's array tables hold, so a load writes only
	// the entries that changed; prefixes likewise, to delete the old ones.
	shadow [2]offloadShadow
	// staged is the set StageRules wrote into the idle slot, until it is
	// discarded or, activated, settled into gen, base and n (settleLocked).
	staged *StagedRules
}

type offloadShadow struct {
	valid    bool
	arrays   [7][]uint64 // L3, SrcPort, DstPort, VLAN, TCP, Frag, Actions
	src, dst map[netip.Prefix]uint64
}

var errRuleSet = errors.New("invalid offload rule set")

func (r *OffloadRules) check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", errRuleSet, fmt.Sprintf(format, a...))
	}
	if len(r.Actions) > MaxOffloadRules {
		return bad("%d rules (at most %d)", len(r.Actions), MaxOffloadRules)
	}
	for i, a := range r.Actions {
		if a != OffloadDrop && a != OffloadPass {
			return bad("rule %d: action %d (want drop %d or pass %d)", i, a, OffloadDrop, OffloadPass)
		}
	}
	for _, t := range []struct {
		name string
		got  int
		want int
	}{{"l3", len(r.L3), OffloadL3Len}, {"src_port", len(r.SrcPort), OffloadPortLen}, {"dst_port", len(r.DstPort), OffloadPortLen},
		{"vlan", len(r.VLAN), OffloadVLANLen}, {"tcp", len(r.TCP), OffloadTCPLen}} {
		if t.got != t.want && !(t.got == 0 && len(r.Actions) == 0) {
			return bad("%s table has %d entries (want %d)", t.name, t.got, t.want)
		}
	}
	for _, m := range []struct {
		name string
		m    map[netip.Prefix]uint64
	}{{"src", r.Src}, {"dst", r.Dst}} {
		var n4, n6 int
		for p := range m.m {
			if !p.IsValid() || p != p.Masked() || p.Addr().Zone() != "" {
				return bad("%s prefix %s: not a masked prefix", m.name, p)
			}
			if p.Addr().Is4() {
				n4++
			} else {
				n6++
			}
		}
		if n4 > MaxOffloadPrefixes || n6 > MaxOffloadPrefixes {
			return bad("%s: %d IPv4 and %d IPv6 prefixes (at most %d each)", m.name, n4, n6, MaxOffloadPrefixes)
		}
	}
	return nil
}

// lpm4Key and lpm6Key are struct off_lpm4 and off_lpm6.
type lpm4Key struct {
	PrefixLen, Slot uint32
	Addr            [4]byte
}

type lpm6Key struct {
	PrefixLen, Slot uint32
	Addr            [16]byte
}

func lpmKey(slot uint32, p netip.Prefix) any {
	if p.Addr().Is4() {
		return lpm4Key{PrefixLen: 32 + uint32(p.Bits()), Slot: slot, Addr: p.Addr().As4()}
	}
	return lpm6Key{PrefixLen: 32 + uint32(p.Bits()), Slot: slot, Addr: p.Addr().As16()}
}

// LoadRules makes r the kernel's rule set, atomically for every frame: a
// frame sees the previous set or r, never a mix (the seqlock described in
// xsk_redirect.c; a frame that sees a slot being written is steered to the
// workers, which run the whole pipeline). r == nil or a set of no rules
// leaves every frame to the workers. It returns r's generation (1, 2, ...),
// the key of RuleCounters. On error the active set is unchanged.
//
// LoadRules is StageRules and Activate at once; a caller that must put the
// set in force at a moment of its own (a pipeline swap, at the workers'
// batch boundary) stages it first.
func (p *Program) LoadRules(r *OffloadRules) (uint64, error) {
	s, err := p.StageRules(r)
	if err != nil {
		return 0, err
	}
	if err := s.Activate(); err != nil {
		s.Discard()
		return 0, err
	}
	return s.gen, nil
}

// StagedRules is a rule set written into a program's idle slot by
// StageRules and not yet in force: Activate puts it in force, Discard
// gives the slot back. At most one set is staged per program at a time.
type StagedRules struct {
	p    *Program
	gen  uint64
	slot uint32
	base []RuleCount // the slot's hit counters when it was staged
	n    int
	// state moves staged -> activating -> active (or back to staged when
	// the write fails), or staged -> discarded; Activate and Discard race
	// through it, so exactly one of them wins.
	state atomic.Int32
}

const (
	stagedIdle int32 = iota
	stagedActivating
	stagedActive
	stagedDiscarded
)

// ErrStaged is returned by StageRules while another staged set is neither
// activated nor discarded, and by Activate of a discarded set.
var ErrStaged = errors.New("staged kernel rule set")

// StageRules writes r into the program's idle slot (the one the set
// before the active one held) without putting it in force: frames go on
// using the active set until Activate. Everything that can fail or take
// time (checking r, every table write) happens here, so that Activate is
// one map write. It returns the staged set, generation the active one's
// plus one. On error nothing changed for any frame; the slot is left
// marked as being written, and the next load rewrites it whole.
//
// The tables of the slot are rewritten where they differ from what it
// held, so a load that changes little writes little. The set the slot
// held (the previous generation) is no longer in the kernel once staging
// began, but its counters stay readable (RuleCounters) until Activate:
// no frame reads that slot, so they are final.
func (p *Program) StageRules(r *OffloadRules) (*StagedRules, error) {
	if r == nil {
		r = &OffloadRules{}
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("load rules on %s: %w", p.iface, net.ErrClosed)
	}
	o := &p.off
	o.mu.Lock()
	defer o.mu.Unlock()
	o.settleLocked()
	if o.staged != nil {
		return nil, fmt.Errorf("load rules on %s: %w (generation %d) is neither activated nor discarded", p.iface, ErrStaged, o.staged.gen)
	}
	gen := o.gen + 1
	slot := uint32(gen & 1)
	ctx := fmt.Sprintf("load kernel rules on %s (generation %d)", p.iface, gen)
	m := &p.objs

	base, err := p.readHits(slot, len(r.Actions))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ctx, err)
	}
	// Odd: frames reading this slot from now on leave it to the workers.
	// Only frames of a set two generations old can still be reading it.
	if err := m.OffCtl.Put(uint32(ctlSeq0+slot), o.seq[slot]+1); err != nil {
		return nil, fmt.Errorf("%s: begin: %w", ctx, err)
	}
	o.seq[slot]++
	sh := &o.shadow[slot]
	werr := p.writeSlot(slot, r, sh)
	if werr == nil {
		werr = m.OffCtl.Put(uint32(ctlNRules0+slot), uint64(len(r.Actions)))
	}
	if werr != nil {
		// The slot is inactive and stays odd: no frame uses it. The next
		// load rewrites it in full.
		sh.valid = false
		return nil, fmt.Errorf("%s: %w", ctx, werr)
	}
	if err := m.OffCtl.Put(uint32(ctlSeq0+slot), o.seq[slot]+1); err != nil {
		sh.valid = false
		return nil, fmt.Errorf("%s: end: %w", ctx, err)
	}
	o.seq[slot]++
	s := &StagedRules{p: p, gen: gen, slot: slot, base: base, n: len(r.Actions)}
	o.staged = s
	return s, nil
}

// Generation is the staged set's generation: RuleCounters' key once it
// is active.
func (s *StagedRules) Generation() uint64 { return s.gen }

// Activate puts the staged set in force: one write of the program's
// active-slot word, which every frame reads once as it enters the program.
// A frame that entered before finishes on the set it read; every later
// frame uses this one. It takes no lock and does no other work, so that a
// caller can flip the kernel at a moment of its choosing (the engine's I/O
// loop at a batch boundary); it is safe from any goroutine, and a second
// call after success does nothing. RuleGeneration and RuleCounters follow
// the new generation from the next call on. An error leaves the previous
// set in force and this one staged.
func (s *StagedRules) Activate() error {
	for {
		switch s.state.Load() {
		case stagedActive:
			return nil
		case stagedDiscarded:
			return fmt.Errorf("activate kernel rules on %s (generation %d): %w: discarded", s.p.iface, s.gen, ErrStaged)
		case stagedActivating:
			// Another goroutine is writing the word: wait for its result.
			runtime.Gosched()
			continue
		}
		if s.state.CompareAndSwap(stagedIdle, stagedActivating) {
			break
		}
	}
	if err := s.p.objs.OffCtl.Put(uint32(ctlActive), uint64(s.slot)); err != nil {
		s.state.Store(stagedIdle)
		return fmt.Errorf("activate kernel rules on %s (generation %d): %w", s.p.iface, s.gen, err)
	}
	s.state.Store(stagedActive)
	return nil
}

// Active reports whether Activate succeeded.
func (s *StagedRules) Active() bool { return s.state.Load() == stagedActive }

// Discard gives the idle slot back without putting the set in force (a
// swap refused after its kernel half was staged): the active set and the
// previous one's counters are as they were. It reports false, doing
// nothing, when the set was activated first.
func (s *StagedRules) Discard() bool {
	for {
		switch st := s.state.Load(); st {
		case stagedActive:
			return false
		case stagedDiscarded:
			return true
		case stagedActivating:
			runtime.Gosched()
			continue
		}
		if s.state.CompareAndSwap(stagedIdle, stagedDiscarded) {
			break
		}
	}
	o := &s.p.off
	o.mu.Lock()
	if o.staged == s {
		o.staged = nil
	}
	o.mu.Unlock()
	return true
}

// settleLocked takes an activated staged set into the bookkeeping: it is
// now the active generation, its slot's counters count from its base.
// o.mu is held.
func (o *offloadState) settleLocked() {
	s := o.staged
	if s == nil || s.state.Load() != stagedActive {
		return
	}
	o.base[s.slot] = s.base
	o.n[s.slot] = s.n
	o.gen = s.gen
	o.staged = nil
}

// writeSlot writes r into slot's tables, entries that differ from sh.
func (p *Program) writeSlot(slot uint32, r *OffloadRules, sh *offloadShadow) error {
	m := &p.objs
	acts := make([]uint64, MaxOffloadRules)
	for i, a := range r.Actions {
		acts[i] = uint64(a)
	}
	tables := [7]struct {
		name string
		m    *ebpf.Map
		size int
		v    []uint64
	}{
		{"l3", m.OffL3, OffloadL3Len, r.L3},
		{"src_port", m.OffSport, OffloadPortLen, r.SrcPort},
		{"dst_port", m.OffDport, OffloadPortLen, r.DstPort},
		{"vlan", m.OffVlan, OffloadVLANLen, r.VLAN},
		{"tcp", m.OffTcp, OffloadTCPLen, r.TCP},
		{"frag", m.OffFrag, 2, r.Frag[:]},
		{"actions", m.OffAction, MaxOffloadRules, acts},
	}
	for i, t := range tables {
		v := t.v
		if len(v) == 0 {
			v = make([]uint64, t.size) // an empty set: all zero
		}
		old := sh.arrays[i]
		if !sh.valid || len(old) != t.size {
			old = nil
		}
		if err := putChanged(t.m, slot*uint32(t.size), old, v); err != nil {
			return fmt.Errorf("%s table: %w", t.name, err)
		}
		sh.arrays[i] = append(sh.arrays[i][:0], v...)
	}
	for _, t := range []struct {
		name     string
		v4, v6   *ebpf.Map
		old, new map[netip.Prefix]uint64
		save     *map[netip.Prefix]uint64
	}{{"src", m.OffSrc4, m.OffSrc6, sh.src, r.Src, &sh.src}, {"dst", m.OffDst4, m.OffDst6, sh.dst, r.Dst, &sh.dst}} {
		mapOf := func(pf netip.Prefix) *ebpf.Map {
			if pf.Addr().Is4() {
				return t.v4
			}
			return t.v6
		}
		if !sh.valid {
			// Unknown content (a failed load): clear the slot's entries.
			if err := clearLPM(t.v4, slot, func() any { return new(lpm4Key) }); err != nil {
				return fmt.Errorf("%s prefixes: %w", t.name, err)
			}
			if err := clearLPM(t.v6, slot, func() any { return new(lpm6Key) }); err != nil {
				return fmt.Errorf("%s prefixes: %w", t.name, err)
			}
			t.old = nil
		}
		for pf := range t.old {
			if _, keep := t.new[pf]; keep {
				continue
			}
			if err := mapOf(pf).Delete(lpmKey(slot, pf)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("%s prefix %s: delete: %w", t.name, pf, err)
			}
		}
		for pf, bm := range t.new {
			if ov, had := t.old[pf]; had && ov == bm {
				continue
			}
			if err := mapOf(pf).Put(lpmKey(slot, pf), bm); err != nil {
				return fmt.Errorf("%s prefix %s: %w", t.name, pf, err)
			}
		}
		saved := make(map[netip.Prefix]uint64, len(t.new))
		for pf, bm := range t.new {
			saved[pf] = bm
		}
		*t.save = saved
	}
	sh.valid = true
	return nil
}

// putChanged writes v to array m at keys base.., skipping entries equal
// to old (nil: write all), in runs of batch updates.
func putChanged(m *ebpf.Map, base uint32, old, v []uint64) error {
	var keys []uint32
	var vals []uint64
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		_, err := m.BatchUpdate(keys, vals, nil)
		if errors.Is(err, ebpf.ErrNotSupported) {
			err = nil
			for i, k := range keys {
				if err = m.Put(k, vals[i]); err != nil {
					break
				}
			}
		}
		keys, vals = keys[:0], vals[:0]
		return err
	}
	for i, x := range v {
		if old != nil && old[i] == x {
			continue
		}
		keys = append(keys, base+uint32(i))
		vals = append(vals, x)
		if len(keys) == 4096 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// clearLPM deletes every entry of slot from trie m.
func clearLPM(m *ebpf.Map, slot uint32, newKey func() any) error {
	var del []any
	it := m.Iterate()
	k := newKey()
	var v uint64
	for it.Next(k, &v) {
		var s uint32
		switch kk := k.(type) {
		case *lpm4Key:
			s = kk.Slot
			c := *kk
			if s == slot {
				del = append(del, c)
			}
		case *lpm6Key:
			s = kk.Slot
			c := *kk
			if s == slot {
				del = append(del, c)
			}
		}
		k = newKey()
	}
	if err := it.Err(); err != nil {
		return err
	}
	for _, d := range del {
		if err := m.Delete(d); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// readHits returns the hit counters of slot's first n rules, summed over
// CPUs (one lookup per rule: a set's rules, not the table's 64).
func (p *Program) readHits(slot uint32, n int) ([]RuleCount, error) {
	out := make([]RuleCount, n)
	var per []offloadHit
	for i := range out {
		if err := p.objs.OffHits.Lookup(slot*MaxOffloadRules+uint32(i), &per); err != nil {
			return nil, fmt.Errorf("rule %d hits: %w", i, err)
		}
		for _, h := range per {
			out[i].Packets += h.Packets
			out[i].Bytes += h.Bytes
		}
	}
	return out, nil
}

// RuleGeneration returns the generation of the active rule set, 0 before
// the first LoadRules.
func (p *Program) RuleGeneration() uint64 {
	p.off.mu.Lock()
	defer p.off.mu.Unlock()
	p.off.settleLocked()
	return p.off.gen
}

// RuleCounters returns the per-rule hits of rule set gen since it was
// loaded, one entry per rule. gen must be the active generation or the
// one before it (whose counters are final once LoadRules returned: only a
// frame already inside the program can still add to them).
func (p *Program) RuleCounters(gen uint64) ([]RuleCount, error) {
	o := &p.off
	o.mu.Lock()
	defer o.mu.Unlock()
	o.settleLocked()
	if gen == 0 || gen > o.gen || gen+1 < o.gen {
		return nil, fmt.Errorf("rule counters of generation %d on %s: not held (active %d, previous kept)", gen, p.iface, o.gen)
	}
	slot := uint32(gen & 1)
	cur, err := p.readHits(slot, o.n[slot])
	if err != nil {
		return nil, fmt.Errorf("rule counters on %s: %w", p.iface, err)
	}
	out := cur[:o.n[slot]]
	for i := range out {
		if b := o.base[slot]; b != nil {
			out[i].Packets -= b[i].Packets
			out[i].Bytes -= b[i].Bytes
		}
	}
	return out, nil
}
