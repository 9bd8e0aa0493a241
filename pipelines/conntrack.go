package pipelines

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/rings"
	"go.yaml.in/yaml/v3"
)

// conntrackKind is the built-in "conntrack" stage: connection tracking
// after Linux's nf_conntrack. It keeps a flow table per worker (the engine
// steers both directions of a flow to one worker, see Graph.Steering),
// and writes every packet's state class into Meta.CT for filter rules
// (ct: new|established|related|invalid|untracked, ct_dir:
// original|reply) and for the nat stage. It never drops a packet for its
// state (the rules decide, as in Linux); it drops only what it cannot
// track: a new flow when the table is full and nothing can be evicted
// (drop:ct_table_full).
//
//	type: conntrack
//	size: 262144          # flows per worker (1..67108864); ~125 bytes each
//	zone: none            # none, or vlan: the outer VLAN id keys flows apart
//	loose: false          # pick up mid-stream TCP flows (Linux: nf_conntrack_tcp_loose)
//	checksum: true        # verify IPv4 header and L4 checksums (nf_conntrack_checksum)
//	timeouts:             # seconds; each optional (Linux's defaults)
//	  tcp_syn_sent: 120
//	  tcp_syn_recv: 60
//	  tcp_established: 432000
//	  tcp_fin_wait: 120
//	  tcp_close_wait: 60
//	  tcp_last_ack: 30
//	  tcp_time_wait: 120
//	  tcp_close: 10
//	  tcp_retrans: 300
//	  tcp_unacknowledged: 300
//	  udp: 30             # until a reply, and for a flow younger than 2 s
//	  udp_stream: 120     # once replied and older than 2 s
//	  icmp: 30
//	  generic: 600        # other protocols
//
// Edges: 0 next, 1 drop:ct_table_full.
//
// What is tracked: IPv4 and IPv6 packets the parse stage classed ok. TCP
// runs Linux's state machine and window tracking (conntrack_tcp.go); UDP
// and UDP-Lite flows are new until a reply, then established; ICMP and
// ICMPv6 queries (echo, timestamp, information, address mask; ICMPv6
// echo and node information) are flows of their identifier; ICMP errors
// (destination unreachable, source quench, redirect, time exceeded,
// parameter problem; ICMPv6 1-4) are related to the flow of the packet
// they quote, in that flow's reply or original direction, and invalid
// when it is not tracked; ICMPv6 neighbour discovery and MLD are
// untracked, as in Linux. Other protocols are tracked by addresses (and
// ports for SCTP and DCCP) with the generic timeout. Non-IP packets are
// untracked. A later IP fragment carries no ports: it is invalid
// (fragment) unless a reassemble stage before this one gave it its
// datagram's ports (rings.FlagVirtualL4), and then it takes its flow's
// class without changing the flow's state. First fragments are tracked on
// the L4 header they carry, their checksum unchecked.
//
// When an entry is made: a packet that starts a flow creates its entry
// at once (later packets of the same batch see it), but the entry is
// confirmed only at the end of the batch, if the packet was not dropped
// by then (Linux confirms at POSTROUTING): a SYN that a rule drops leaves
// no state behind that could admit a forged reply.
//
// Counters (ctDecls; also live): entries (a gauge: flows in the tables,
// summed over workers and carried across swaps it is the occupancy),
// inserts, evictions, expiries, deletes (closed by RST, reopened,
// flushed), table_full, ct=<class> (packets by the class they got), and
// invalid=<reason> for each reason below.
var conntrackKind = Kind{Name: "conntrack", Build: buildConntrack, Counters: ctDecls[:]}

// ctDecls are the conntrack stage's families, in the order of the
// counter indices below (the layout is the stage's counters as they are).
var ctDecls = [...]counters.Decl{
	{Name: "entries", Kind: counters.Gauge, Help: "Flows in a conntrack stage's tables (summed over its workers: the occupancy)."},
	{Name: "inserts", Help: "Flows a conntrack stage made an entry for."},
	{Name: "evictions", Help: "Unassured flows a full conntrack table evicted to make room."},
	{Name: "expiries", Help: "Conntrack entries that timed out."},
	{Name: "deletes", Help: "Conntrack entries deleted: closed by an RST, reopened, flushed."},
	{Name: "table_full", Help: "New flows a full conntrack table had no room for (not tracked)."},
	{Name: "ct", Unit: "packets", Bytes: true, Label: "state", Help: "Packets a conntrack stage tracked, by the state they got (untracked, new, established, related, invalid)."},
	{Name: "invalid", Unit: "packets", Bytes: true, Label: "reason", Help: "Packets a conntrack stage classed invalid, by why."},
}

// ctLayout is every conntrack stage's counter layout: ctDecls, the state
// and reason families keyed by ctClassNames and ctReasonNames.
var ctLayout = func() *counters.Layout {
	var fams []counters.Family
	for _, d := range ctDecls[:6] {
		fams = append(fams, counters.Single(d))
	}
	return counters.NewLayout(append(fams, counters.Keyed(ctDecls[6], ctClassNames[:]), counters.Keyed(ctDecls[7], ctReasonNames[:]))...)
}()

// Table size bounds: the index packs entry+1 in 31 bits; 2^26 flows is
// some 8 GB per worker already.
const (
	ctDefaultSize = 262144
	ctMaxSize     = 1 << 26
)

// ctTimeouts are a stage's timeouts in milliseconds.
type ctTimeouts struct {
	tcp                           [tcpTimeouts]uint32
	udp, udpStream, icmp, generic uint32
}

// ctTimeoutKeys are the timeouts option's keys, Linux's defaults in
// seconds, and where each goes.
var ctTimeoutKeys = []struct {
	key string
	def uint32
	at  func(t *ctTimeouts) *uint32
}{
	{"tcp_syn_sent", 120, func(t *ctTimeouts) *uint32 { return &t.tcp[tcpSynSent] }},
	{"tcp_syn_recv", 60, func(t *ctTimeouts) *uint32 { return &t.tcp[tcpSynRecv] }},
	{"tcp_established", 432000, func(t *ctTimeouts) *uint32 { return &t.tcp[tcpEstablished] }},
	{"tcp_fin_wait", 120, func(t *ctTimeouts) *uint32 { return &t.tcp[tcpFinWait] }},
	{"tcp_close_wait", 60, func(t *ctTimeouts) *uint32 { return &t.tcp[tcpCloseWait] }},
	{"tcp_last_ack", 30, func(t *ctTimeouts) *uint32 { return &t.tcp[tcpLastAck] }},
	{"tcp_time_wait", 120, func(t *ctTimeouts) *uint32 { return &t.tcp[tcpTimeWait] }},
	{"tcp_close", 10, func(t *ctTimeouts) *uint32 { return &t.tcp[tcpClose] }},
	{"tcp_retrans", 300, func(t *ctTimeouts) *uint32 { return &t.tcp[tcpRetrans] }},
	{"tcp_unacknowledged", 300, func(t *ctTimeouts) *uint32 { return &t.tcp[tcpUnack] }},
	{"udp", 30, func(t *ctTimeouts) *uint32 { return &t.udp }},
	{"udp_stream", 120, func(t *ctTimeouts) *uint32 { return &t.udpStream }},
	{"icmp", 30, func(t *ctTimeouts) *uint32 { return &t.icmp }},
	{"generic", 600, func(t *ctTimeouts) *uint32 { return &t.generic }},
}

// ctMaxTimeout bounds a timeout: the clock compares by a signed 32-bit
// difference of milliseconds.
const ctMaxTimeout = 1 << 31 / 1000 / 2 // about 12 days

// defaultCTTimeouts returns Linux's default timeouts.
func defaultCTTimeouts() ctTimeouts {
	var t ctTimeouts
	for _, k := range ctTimeoutKeys {
		*k.at(&t) = k.def * 1000
	}
	t.tcp[tcpSynSent2] = t.tcp[tcpSynSent]
	return t
}

type conntrackOptions struct {
	Size     *int      `yaml:"size"`
	Zone     string    `yaml:"zone"`
	Loose    bool      `yaml:"loose"`
	Checksum *bool     `yaml:"checksum"`
	Timeouts yaml.Node `yaml:"timeouts"`
}

// conntrackTemplate is a compiled conntrack stage.
type conntrackTemplate struct {
	name     string
	size     int
	zoneVLAN bool
	loose    bool
	checksum bool
	to       ctTimeouts
	config   string // configPrint of the stage: equal configs carry counters
	edges    []Target
}

func buildConntrack(c *BuildContext) Template {
	var o conntrackOptions
	if !c.Decode(&o) {
		return nil
	}
	t := &conntrackTemplate{name: c.Name, size: ctDefaultSize, loose: o.Loose, checksum: true, to: defaultCTTimeouts()}
	ok := true
	if o.Size != nil {
		if *o.Size < 1 || *o.Size > ctMaxSize {
			c.Errorf(c.Option("size"), "size %d: want 1 to %d flows per worker", *o.Size, ctMaxSize)
			ok = false
		} else {
			t.size = *o.Size
		}
	}
	switch o.Zone {
	case "", "none":
	case "vlan":
		t.zoneVLAN = true
	default:
		c.Errorf(c.Option("zone"), "zone %q: want none or vlan", o.Zone)
		ok = false
	}
	if o.Checksum != nil {
		t.checksum = *o.Checksum
	}
	if o.Timeouts.Kind != 0 {
		ok = parseCTTimeouts(c, &o.Timeouts, &t.to) && ok
	}
	next, hasNext := c.Next()
	if !ok || !hasNext {
		return nil
	}
	t.edges = []Target{next, {Drop: "ct_table_full", Pos: c.Pos(nil)}}
	t.config = configPrint(c.Node)
	return t
}

func parseCTTimeouts(c *BuildContext, n *yaml.Node, to *ctTimeouts) bool {
	if n.Kind != yaml.MappingNode {
		c.Errorf(n, "timeouts: want a mapping of timeout names to seconds")
		return false
	}
	ok := true
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		found := false
		for _, k := range ctTimeoutKeys {
			if k.key != kn.Value {
				continue
			}
			found = true
			var secs int64
			if vn.Kind != yaml.ScalarNode || vn.Decode(&secs) != nil || secs < 1 || secs > ctMaxTimeout {
				c.Errorf(vn, "timeouts: %s %q: want whole seconds from 1 to %d", kn.Value, vn.Value, ctMaxTimeout)
				ok = false
				break
			}
			*k.at(to) = uint32(secs) * 1000
		}
		if !found {
			names := make([]string, len(ctTimeoutKeys))
			for j, k := range ctTimeoutKeys {
				names[j] = k.key
			}
			c.Errorf(kn, "timeouts: unknown %q (known: %v)", kn.Value, names)
			ok = false
		}
	}
	to.tcp[tcpSynSent2] = to.tcp[tcpSynSent]
	return ok
}

func (t *conntrackTemplate) Edges() []Target { return t.edges }

// Counters implements CountedTemplate.
func (t *conntrackTemplate) Counters() *counters.Layout { return ctLayout }

func (t *conntrackTemplate) NewInstance() Stage {
	s := &ctStage{t: t, live: newLiveTable(ctNumCounters)}
	s.fresh = make([]ctFresh, 0, rings.MaxBatch)
	s.held = make([]uint32, 0, rings.MaxBatch)
	return s
}

// Counter indices.
const (
	ctcEntries = iota
	ctcInserts
	ctcEvictions
	ctcExpiries
	ctcDeletes
	ctcTableFull
	ctcClass                                            // + CTUntracked .. CTInvalid
	ctcInvalid    = ctcClass + int(rings.CTInvalid) + 1 // + ctr* reason
	ctNumCounters = ctcInvalid + ctrNum
)

// Invalid reasons.
const (
	ctrMalformed       = iota // the parse stage did not class the packet ok
	ctrChecksum               // bad IPv4 header or L4 checksum
	ctrTCPFlags               // an invalid TCP flag combination
	ctrTCPNew                 // a TCP segment that cannot start a flow (not a SYN; loose off)
	ctrTCPState               // an invalid transition for the flow's state
	ctrTCPWindow              // out of the window
	ctrTCPRST                 // an RST below the other side's highest ack
	ctrICMPType               // an unknown ICMP type
	ctrICMPNew                // an ICMP packet that cannot start a flow (a reply with no request)
	ctrICMPErrorBad           // an ICMP error whose quoted packet cannot be read
	ctrICMPErrorNoFlow        // an ICMP error about no tracked flow
	ctrFragment               // a later fragment without ports
	ctrFragmentNoFlow         // a later fragment (ports from reassembly) of no tracked flow
	ctrNum
)

var ctReasonNames = [ctrNum]string{
	"malformed", "bad_checksum", "tcp_flags", "tcp_new", "tcp_state", "tcp_window", "tcp_rst",
	"icmp_type", "icmp_new", "icmp_error_bad", "icmp_error_no_flow", "fragment", "fragment_no_flow",
}

var ctClassNames = [...]string{"untracked", "new", "established", "related", "invalid"}

// ctFresh is a flow created in the current batch: batch packet i made
// entry e (dead when the entry went away in the same batch).
type ctFresh struct {
	i uint16
	e uint32
}

const ctFreshDead = ^uint32(0)

// ctStage is one worker's conntrack: its table and counters.
type ctStage struct {
	t   *conntrackTemplate
	tab *ctTable
	// carry, until the first Process, is the state to take over (a swap,
	// see TakeState).
	carry *ctCarry

	// cur[i] is entry+1 of batch packet i as of this batch (0: none), and
	// curSeq[i] the packet's Seq when it was set, so that a stage reading
	// it (nat) can tell a stale value from another batch. The entry stays
	// the packet's flow's until the vector is through (ctTable.pin): no
	// later packet of the vector evicts it, and a drop holds it off the
	// free list.
	cur    [rings.MaxBatch]uint32
	curSeq [rings.MaxBatch]uint64
	fresh  []ctFresh
	// held are the entries dropped in this vector that a packet of it
	// was tracked to (pinned): out of the index, off the free list until
	// the vector is through (the next Process, or Commit), so that no new
	// flow of the vector takes them before nat has read them.
	held []uint32

	c     [ctNumCounters]uint64
	bytes [ctNumCounters]uint64
	live  liveTable

	// hint[k] is packet idx[k]'s tuple hash as the warm pass computed it,
	// with bit 32 set (TCP and UDP only; 0: none), and sink what its
	// loads read, so that the compiler keeps them.
	hint [rings.MaxBatch]uint64
	// cand[k] is the index slot the warm pass found for packet idx[k]
	// (the first of its probe with the packet's hash: (entry+1)<<1|dir,
	// the slot's low half; 0: none), which find tries before probing.
	cand [rings.MaxBatch]uint32
	sink uint64
	// h and slot are the current packet's hint and candidate while track
	// runs (see find).
	h    uint64
	slot uint32

	req atomic.Pointer[FlowRequest] // a control request to serve (conntrack.go's service)

	// nat is the runner's nat stage that keeps its sessions in this
	// table (it links itself): a new flow's translation is decided when
	// its entry is made, so that the later packets of the same vector,
	// which this stage tracks before the nat stage runs, already see it.
	nat *natStage
}

// ctCarry is a table handover arranged by TakeState.
type ctCarry struct {
	olds []*ctStage
	own  func(k *ctTuple) bool
	// inherit: the counters of the olds are not carried (another
	// configuration), so this instance counts the entries it takes over
	// as its own.
	inherit bool
}

func (s *ctStage) KeepsLength() bool { return true }

// table returns the instance's table, making it (or taking over the
// state a swap handed it) on first use.
func (s *ctStage) table() *ctTable {
	if s.tab == nil {
		s.setup()
	}
	return s.tab
}

func (s *ctStage) count(k int, bytes uint32) {
	s.c[k]++
	s.bytes[k] += uint64(bytes)
	s.live.mark(k)
}

// Process tracks every packet of the vector.
func (s *ctStage) Process(b *rings.Batch, idx []uint16, next []Edge) {
	t := s.table()
	// A new vector: the last one's pins lapse, and what it held goes
	// free (its packets are through nat).
	t.gen++
	if len(s.held) > 0 {
		s.releaseHeld()
	}
	t.vec, t.cur, t.begun, t.stamped = idx, &s.cur, 0, 0
	if !t.nowSet && len(idx) > 0 {
		t.start(b.Meta[idx[0]].Time) // track's advance needs a clock
	}
	if e := b.Epoch(); e != 0 {
		t.clock64(e)
	}
	if r := s.req.Load(); r != nil {
		s.serve(r)
	}
	if !havePrefetch {
		s.warm(b, idx)
		for k, i := range idx {
			s.h, s.slot = s.hint[k], s.cand[k]
			t.begun++
			next[k] = s.track(b, int(i))
		}
	} else {
		// Three passes over each chunk of the vector: hash every TCP
		// and UDP packet and prefetch its index line; read each
		// packet's slot from its line and prefetch the entry it names;
		// then track. A lookup in a table of a million flows is two
		// dependent misses: here the misses of the whole chunk are in
		// flight together, and the tracking loop finds the entries
		// in the cache. (Spreading the prefetches over the tracking loop, the
		// index line 16 packets and the entry 8 ahead of the packet
		// tracked, was slower in 8 of 8 alternated runs of the
		// stateful row: BENCHMARKS.md, "A fourth pass".)
		for len(idx) > 0 {
			c := min(len(idx), ctChunk)
			s.hashes(b, idx[:c]) // and prefetches each index line
			s.candidates(c)
			for k, i := range idx[:c] {
				if r := k + ctRetouch; k%ctRetouchRun == 0 && r < c {
					prefetchEntries(&t.ent[0], &s.cand[r], min(ctRetouchRun, c-r))
				}
				s.h, s.slot = s.hint[k], s.cand[k]
				t.begun++ // one add to memory: cheaper than the position's store
				next[k] = s.track(b, int(i))
			}
			idx, next = idx[c:], next[c:]
		}
	}
	// classify's counters, marked once here instead of for every packet
	// (marking one that did not move publishes the same value).
	s.live.mark(ctcClass + int(rings.CTNew))
	s.live.mark(ctcClass + int(rings.CTEstablished))
	t.begun = len(t.vec) + 1 // every packet tracked: all pinned
	if n := t.sweep(t.sweepDue()); n > 0 {
		s.c[ctcExpiries] += uint64(n)
		s.c[ctcEntries] -= uint64(n)
		s.live.mark(ctcExpiries)
		s.live.mark(ctcEntries)
	}
}

// Tick implements Ticker: the engine's clock reads now on a worker that
// got no packet (an idle link, or a steered round that sent all its
// packets to other workers). The table's clock moves to it (a gap past
// ctClockBack is a discontinuity, as a batch's Epoch is: clock64) and
// the sweep takes what is due, so flows expire on an idle worker as they
// do on a busy one, and the entries gauge and the expiries counter say
// so. A stage that has seen no packet has no clock and no flows: nothing
// to do (and no table made for it).
//
// Before its first packet a stage ticks only if a swap hands it flows
// with a clock: it takes them over then, as its first packet would (a
// table handed over whole moves as a pointer; a re-steered or resized one
// is copied into a new table, the one time a tick allocates). The copy
// reads the old plan's tables: of this worker (resized), whose batches
// are done before this plan's run on it, or of every worker (re-steered),
// which comes with a pool change, the old workers stopped first.
func (s *ctStage) Tick(now uint64) {
	if s.tab == nil {
		if s.carry == nil {
			return
		}
		if !s.carry.hasClock() {
			// No old table has seen a packet: nothing to take over.
			// The old instances never run again: let them go, or a
			// chain of swaps on a link whose packets never reach this
			// stage would keep every plan's runners alive.
			s.carry = nil
			return
		}
	}
	t := s.table()
	if !t.nowSet {
		return
	}
	// No vector is in flight between batches: the last one's pins lapse
	// and what it held goes free, as at a new vector.
	t.gen++
	if len(s.held) > 0 {
		s.releaseHeld()
	}
	t.vec, t.begun, t.stamped = nil, 0, 0
	t.clock64(now)
	t.advance(uint32(now))
	if n := t.sweep(t.sweepDueUpTo(ctTickSweepMax)); n > 0 {
		s.c[ctcExpiries] += uint64(n)
		s.c[ctcEntries] -= uint64(n)
		s.live.mark(ctcExpiries)
		s.live.mark(ctcEntries)
	}
}

// ctChunk is how many packets the prefetching passes take at a time:
// the lines of a chunk (an index line and an entry's two per packet, 12
// KB) stay in the L1 cache until the tracking loop reads them, and the
// misses in flight stay within what the core queues, at any batch size.
// A pipeline over chunks of 8 instead (index lines two chunks ahead of
// the tracking loop, entries one) was 6 - 15% faster at 1M flows on the
// AMD dev VM and slower on the Intel second machine, where the target is
// met: tried and reverted (BENCHMARKS.md, "A tenth pass").
const ctChunk = 64

// ctRetouch is how many packets ahead of the one being tracked the
// tracking loop prefetches entries a second time, ctRetouchRun of them
// in one call every ctRetouchRun packets. The first prefetch (in
// candidates, up to a chunk earlier) brings the lines in; on a guest
// whose memory the host maps in 4 KiB pages, the entry's translation is
// gone again by the time the loop reaches it (64 packets' table pages
// later), and the second prefetch starts that walk early. On the AMD dev
// VM at 1M flows: 122.9 ns a packet against 131.9 (median of 6
// alternated rounds), for 21 instructions a packet; where the
// translation is still there it finds the lines in the cache and costs
// only those instructions: on the Intel second machine 109.1 ns with
// it against 108.7 without (medians of the fast rounds of 34 alternated;
// BENCHMARKS.md, "A tenth pass" and "An eleventh pass").
const ctRetouch, ctRetouchRun = 8, 4

// hashes computes the TCP and UDP packets' tuple hashes into hint (0:
// none) and, where the CPU has prefetches, prefetches the index line
// each one's probe starts at as soon as its hash is known (in this loop:
// a pass of its own cost some 20 instructions a packet). One call a
// packet: prefetching runs of 8 (and the entries once a chunk, in
// candidates) saved 14 instructions a packet but made the row some 25%
// slower on the dev VM at 1M flows (BENCHMARKS.md, "A ninth pass"): a
// miss started later is waited for longer.
func (s *ctStage) hashes(b *rings.Batch, idx []uint16) {
	t := s.tab
	meta := b.Meta             // in a register: the stores to hint could alias b's
	hints := s.hint[:len(idx)] // no bounds checks in the loop
	seed := t.seed
	for j, i := range idx {
		m := &meta[i]
		hints[j] = 0
		if f := m.Flags; f&(rings.FlagIPv4|rings.FlagIPv6) == 0 || f&rings.FlagL4 == 0 || m.IPProto != 6 && m.IPProto != 17 {
			continue
		}
		var h uint32
		if m.Flags&rings.FlagIPv6 == 0 {
			h = ctHash4(seed, ctAddrWord(&m.SrcIP, &m.DstIP), ctPortWord(m.SrcPort, m.DstPort, m.IPProto, s.zone(m)))
		} else {
			h = s.hash6(m)
		}
		hints[j] = 1<<32 | uint64(h)
		if havePrefetch {
			prefetchSlot(&t.idx[t.home(h)])
		}
	}
}

// hash6 is IPv6 TCP or UDP packet m's tuple hash: a function of its own
// (too big to inline), as the tuple it builds, and the call of
// ctTuple.hash, in hashes' loop cost that loop's IPv4 packets registers
// saved and reloaded every packet.
func (s *ctStage) hash6(m *rings.Meta) uint32 {
	var k ctTuple
	ctAddrs(m, &k)
	k.proto, k.zone, k.sport, k.dport = m.IPProto, s.zone(m), m.SrcPort, m.DstPort
	return k.hash(s.tab.seed)
}

// candidates finds each of the chunk's first n packets' slot in the
// index (its line prefetched by the pass before) as the warm pass does,
// keeps it in cand, and prefetches the entry it names right away, so
// that its miss overlaps the next packets' slot reads. One loop, not a
// call a packet: the call cost some ten instructions a packet.
func (s *ctStage) candidates(n int) {
	t := s.tab
	cand := s.cand[:n]
	for j, h := range s.hint[:n] {
		cand[j] = 0
		if h == 0 {
			continue
		}
		if v := t.slotOf(uint32(h)); v != 0 {
			cand[j] = v
			prefetchEntry(&t.ent[v>>1-1])
		}
	}
}

// slotOf returns the low half of the first of the first ctWarmProbe
// index slots of hash h's probe that holds h (entry+1<<1 | dir), or 0.
// A candidate only: the tracking loop checks the entry's tuple.
func (t *ctTable) slotOf(h uint32) uint32 {
	// The index and its size in registers: the compiler loads a field
	// inside a loop again every turn.
	idx, slots := t.idx, t.slots
	i := probeHome(h, slots)
	for range ctWarmProbe {
		v := idx[i]
		if v == 0 {
			return 0
		}
		if uint32(v>>32) == h {
			return uint32(v)
		}
		if i++; i == slots {
			i = 0
		}
	}
	return 0
}

// warm is the first pass over a vector: it computes the TCP and UDP
// packets' tuple hashes and loads their index slots, then the entries
// those slots name, in two loops of independent loads. A table of a
// million flows lives in DRAM, and a lookup is two dependent misses;
// issued packet after packet they overlap (the CPU keeps a dozen misses
// in flight), where the tracking loop, one packet's dependent chain after
// another's, would wait for each in turn. Plain loads whose results feed
// a sink do the fetching: this is the pass for CPUs without the
// prefetches of prefetch_*.s, which Process otherwise spreads over the
// tracking loop (see prefetch.go).
func (s *ctStage) warm(b *rings.Batch, idx []uint16) {
	t := s.tab
	var sink uint64
	s.hashes(b, idx)
	// The loads, in loops of their own: a loop this short keeps many
	// misses in flight (the hashing above, in the same loop, would hold
	// the reorder window to a few).
	hints := s.hint[:len(idx)]
	for _, h := range hints {
		if h != 0 {
			sink += t.idx[t.home(uint32(h))]
		}
	}
	for j := range idx {
		s.cand[j] = 0
		if s.hint[j] == 0 {
			continue
		}
		// The slot whose hash is the packet's: the probe's first few
		// slots, in the line the first loop loaded (linear probing at
		// the index's load factor finds most keys within two or three).
		if v := t.slotOf(uint32(s.hint[j])); v != 0 {
			// Both cache lines the entry spans (96 bytes at a 32-byte
			// offset).
			s.cand[j] = v
			en := &t.ent[v>>1-1]
			sink += uint64(en.src[0]) + uint64(en.status) + uint64(en.seen[1].maxack)
		}
	}
	s.sink += sink
}

// ctWarmProbe is how many index slots the warm pass looks at for a
// packet's.
const ctWarmProbe = 8

// zone returns packet m's zone.
func (s *ctStage) zone(m *rings.Meta) uint16 {
	if m.NumVLANs > 0 && s.t.zoneVLAN { // the packet first: most have no tag
		return m.VLANs[0]&0xfff | 0x1000
	}
	return 0
}

// classify sets packet i's class (in m, its metadata) from its entry e
// (en) in direction dir and notes the entry for later stages; a reply marks
// the entry seen-reply. Small enough to inline: its two counters (new,
// established) are marked moved for the live counters once a vector, by
// Process, whence alone classify is called, not for every packet.
func (s *ctStage) classify(b *rings.Batch, i int, m *rings.Meta, en *ctEntry, e uint32, dir uint8) {
	en.status |= dir * ctStSeenReply // dir is 0 or 1: a reply sets it
	// New, or established (rings.CTNew+1) once the flow has seen a
	// reply: no branch.
	ct := rings.CTNew + (en.status&ctStSeenReply)/ctStSeenReply
	m.CT = ct | dir*rings.CTReply
	s.cur[i], s.curSeq[i] = e+1, m.Seq
	s.c[ctcClass+int(ct)]++
	s.bytes[ctcClass+int(ct)] += uint64(b.Descs[i].Len)
}

// invalid, untracked and tableFull give packet i no entry (cur[i] 0):
// every packet track takes ends in one of them, classify or related,
// which set cur[i] for it.
func (s *ctStage) invalid(b *rings.Batch, i int, reason int) Edge {
	s.cur[i] = 0
	b.Meta[i].CT = rings.CTInvalid
	n := b.Descs[i].Len
	s.count(ctcClass+int(rings.CTInvalid), n)
	s.count(ctcInvalid+reason, n)
	return 0
}

func (s *ctStage) untracked(b *rings.Batch, i int) Edge {
	s.cur[i] = 0
	b.Meta[i].CT = rings.CTUntracked
	s.count(ctcClass+int(rings.CTUntracked), b.Descs[i].Len)
	return 0
}

// track gives packet i its class, creating or updating its flow.
func (s *ctStage) track(b *rings.Batch, i int) Edge {
	m := &b.Meta[i]
	f := m.Flags
	if f&(rings.FlagIPv4|rings.FlagIPv6) == 0 {
		return s.untracked(b, i)
	}
	t := s.tab
	t.advance(m.Time)
	if m.Class != rings.ClassOK {
		return s.invalid(b, i, ctrMalformed)
	}
	p := b.Packet(i)
	proto := m.IPProto
	// A TCP or UDP packet that is not a fragment goes to tcp or udp
	// first: over IPv4 they check its header's checksum with its L4
	// checksum, in one call (and check the header first on every path
	// that ends before that: malformed). Any other IPv4 packet has its
	// header checked here. The tuple is built where it is
	// needed: TCP and UDP packets of a flow the prefetching passes found
	// are matched against their entry from the metadata (findPacket) and
	// need none.
	if f&rings.FlagFragment == 0 {
		switch proto {
		case 6:
			return s.tcp(b, i, m, p)
		case 17:
			return s.udp(b, i, m, p)
		}
	}
	v6 := f&rings.FlagIPv6 != 0
	if s.t.checksum && !v6 && !ipv4HeaderOK(p, int(m.L3Off)) {
		return s.invalid(b, i, ctrChecksum)
	}
	if f&rings.FlagFragment != 0 && f&rings.FlagFirstFrag == 0 {
		var k ctTuple
		s.keyAddrs(m, &k)
		return s.laterFragment(b, i, m, &k)
	}
	switch {
	case proto == 6:
		return s.tcp(b, i, m, p)
	case proto == 17 || proto == 136:
		return s.udp(b, i, m, p)
	}
	var k ctTuple
	s.keyAddrs(m, &k)
	if proto == 1 && !v6 || proto == 58 && v6 {
		return s.icmp(b, i, m, p, &k)
	}
	return s.generic(b, i, m, &k)
}

// keyAddrs fills k's addresses, family, protocol and zone from packet m.
func (s *ctStage) keyAddrs(m *rings.Meta, k *ctTuple) {
	ctAddrs(m, k)
	k.proto = m.IPProto
	k.zone = s.zone(m)
}

// portKey fills k with TCP or UDP packet m's tuple.
func (s *ctStage) portKey(m *rings.Meta, k *ctTuple) {
	s.keyAddrs(m, k)
	k.sport, k.dport = m.SrcPort, m.DstPort
}

// findPacket looks up the flow of TCP or UDP packet m (its entry, en, is
// entry e of the table): first the entry
// the prefetching passes named for it, matched against the metadata (an
// IPv4 entry's original tuple, or its reply tuple with the translation),
// then find with its tuple (portKey; the caller builds it again for a
// flow not found, which is rare, rather than every packet zeroing one).
// What it finds is what find would.
func (s *ctStage) findPacket(m *rings.Meta) (en *ctEntry, e uint32, dir uint8, ok bool) {
	// A candidate is only ever named for a packet the passes hashed
	// (s.h is not 0).
	if c := s.slot; c != 0 && m.Flags&rings.FlagIPv6 == 0 {
		t := s.tab
		e, dir = c>>1-1, uint8(c&1)
		en = &t.ent[e]
		// tuple4Eq, spelled out (TestFindPacketMatch): its call cost a
		// dozen instructions a packet of registers saved and reloaded
		// around it. An IPv4 address field holds the address in its low
		// half and the translated one in its high half, whence a
		// translated entry's reply tuple takes it.
		le := binary.LittleEndian
		a, b := le.Uint64(en.src[:8]), le.Uint64(en.dst[:8])
		ap, bp := en.sport, en.dport
		if dir != 0 {
			if en.status&ctStDNAT != 0 {
				b, bp = b>>32, en.natDport()
			}
			if en.status&ctStSNAT != 0 {
				a, ap = a>>32, en.natSport()
			}
			a, b, ap, bp = b, a, bp, ap
		}
		if en.status&(ctStUsed|ctStV6) == ctStUsed && en.proto == m.IPProto && en.zone == s.zone(m) &&
			uint32(a) == le.Uint32(m.SrcIP[:4]) && uint32(b) == le.Uint32(m.DstIP[:4]) && ap == m.SrcPort && bp == m.DstPort {
			if en.status&ctStTentative != 0 || !t.expired(en) {
				return en, e, dir, true
			}
			s.drop(e, ctcExpiries) // and find, below, finds nothing
		}
	}
	var k ctTuple
	s.portKey(m, &k)
	if e, dir, ok = s.find(&k, -1); !ok {
		return nil, 0, 0, false
	}
	return &s.tab.ent[e], e, dir, true
}

// find looks k up, removing the entry it finds when it has expired. The
// warm pass's hash is used when it has one for the packet's tuple (TCP
// and UDP: the tuple find is given is the one warm hashed).
func (s *ctStage) find(k *ctTuple, want int8) (e uint32, dir uint8, ok bool) {
	t := s.tab
	var h uint32
	if s.h != 0 && (k.proto == 6 || k.proto == 17) {
		h = uint32(s.h)
		// The warm pass's slot, when it still names a live entry of
		// this tuple: the one a lookup would find (a tuple is in at
		// most one direction of one entry; an entry made, freed or
		// reused since warm fails the test or is probed for).
		if c := s.slot; c != 0 {
			e, dir = c>>1-1, uint8(c&1)
			if en := &t.ent[e]; en.status&ctStUsed != 0 && (want < 0 || uint8(want) == dir) && t.tupleIs(en, dir, k) {
				ok = true
			}
		}
	} else {
		h = k.hash(t.seed)
	}
	if !ok {
		e, dir, ok = t.lookup(k, h, want)
	}
	if ok && t.ent[e].status&ctStTentative == 0 && t.expired(&t.ent[e]) {
		s.drop(e, ctcExpiries)
		return 0, 0, false
	}
	return e, dir, ok
}

// drop removes entry e, counting it under counter k (expiries,
// evictions, deletes); a tentative entry was never counted in. An entry
// a packet of the vector was tracked to (pinned) goes out of the index
// now but is held off the free list until the vector is through: a new
// flow of the same vector must not take it before nat has read it for
// that packet.
func (s *ctStage) drop(e uint32, k int) {
	t := s.tab
	if t.ent[e].status&ctStTentative != 0 {
		for j := range s.fresh {
			if s.fresh[j].e == e {
				s.fresh[j].e = ctFreshDead
			}
		}
	} else {
		s.c[k]++
		s.c[ctcEntries]--
		s.live.mark(k)
		s.live.mark(ctcEntries)
	}
	if t.pinned(e) {
		t.unlink(e)
		s.held = append(s.held, e)
		return
	}
	t.remove(e)
}

// releaseHeld puts the entries drop held on the free list.
func (s *ctStage) releaseHeld() {
	for _, e := range s.held {
		s.tab.release(e)
	}
	s.held = s.held[:0]
}

// create takes an entry for a new flow with tuple k (evicting one when
// the table is full) and fills in its tuple. ok is false when the table
// is full of assured flows: the packet is to be dropped.
func (s *ctStage) create(k *ctTuple, expires uint32) (e uint32, ok bool) {
	t := s.tab
	e, ok = t.alloc()
	if !ok {
		v, expired, found := t.victim()
		if !found {
			return 0, false
		}
		if expired {
			s.drop(v, ctcExpiries)
		} else {
			s.drop(v, ctcEvictions)
		}
		e, _ = t.alloc()
	}
	en := &t.ent[e]
	*en = ctEntry{src: k.src, dst: k.dst, sport: k.sport, dport: k.dport, zone: k.zone, proto: k.proto,
		status: ctStUsed | ctStTentative, expires: expires}
	if k.v6 {
		en.status |= ctStV6
	}
	return e, true
}

// commitNew makes a created entry live and notes it for confirmation.
func (s *ctStage) commitNew(b *rings.Batch, i int, e uint32) Edge {
	s.tab.add(e)
	if s.nat != nil {
		s.nat.decide(e, &s.tab.ent[e])
	}
	s.fresh = append(s.fresh, ctFresh{i: uint16(i), e: e})
	s.classify(b, i, &b.Meta[i], &s.tab.ent[e], e, 0)
	return 0
}

// malformed drops packet i as malformed, or for its IPv4 header's
// checksum when hdr says tcp or udp has that still to check (track
// checks it before everything else for every other packet, so a bad
// header is a bad checksum whatever else is wrong).
func (s *ctStage) malformed(b *rings.Batch, i int, p []byte, l3 int, hdr bool) Edge {
	if hdr && !ipv4HeaderOK(p, l3) {
		return s.invalid(b, i, ctrChecksum)
	}
	return s.invalid(b, i, ctrMalformed)
}

// tableFull drops packet i: its flow cannot get an entry.
func (s *ctStage) tableFull(b *rings.Batch, i int) Edge {
	s.cur[i] = 0
	b.Meta[i].CT = rings.CTInvalid
	s.count(ctcTableFull, b.Descs[i].Len)
	return 1
}

func (s *ctStage) tcp(b *rings.Batch, i int, m *rings.Meta, p []byte) Edge {
	l3, l4 := int(m.L3Off), int(m.L4Off)
	v6 := m.Flags&rings.FlagIPv6 != 0
	// The IPv4 header is ours to check, track says, unless the packet
	// is a fragment (UDP-Lite's too, in udp).
	hdr := s.t.checksum && m.Flags&(rings.FlagIPv6|rings.FlagFragment) == 0
	if m.Flags&rings.FlagL4 == 0 || l4+tcpMinHdr > len(p) {
		return s.malformed(b, i, p, l3, hdr)
	}
	th := (*[tcpMinHdr]byte)(p[l4 : l4+tcpMinHdr]) // the fixed header: one bounds check
	doff := int(th[12]>>4) * 4
	end := ctIPEnd(p, l3, v6)
	if doff < tcpMinHdr || l4+doff > end {
		return s.malformed(b, i, p, l3, hdr)
	}
	if hdr {
		if !ipv4ChecksumsOK(p, l3, l4, end, 6) {
			return s.invalid(b, i, ctrChecksum)
		}
	} else if s.t.checksum && m.Flags&rings.FlagFragment == 0 && !l4ChecksumOK(p, l3, l4, end, v6, 6) {
		return s.invalid(b, i, ctrChecksum)
	}
	flags := th[13]
	if !tcpValidFlags[flags&^(thECE|thCWR|thPSH)&0x3f] {
		return s.invalid(b, i, ctrTCPFlags)
	}
	// Field by field, not a composite literal: the compiler builds a
	// literal in a temporary with narrow stores and copies it over in
	// 16-byte loads, which cannot be forwarded from those stores (a
	// stall of a dozen cycles or more on every TCP packet: 44% of this
	// function's samples in a profile of the stateful row).
	var seg tcpSeg
	seg.hdr, seg.flags = p[l4:l4+doff], flags
	seg.seq, seg.ack = binary.BigEndian.Uint32(th[4:]), binary.BigEndian.Uint32(th[8:])
	seg.win, seg.payload = binary.BigEndian.Uint16(th[14:]), uint32(end-l4-doff)
	t := s.tab
	for range 2 { // a reopened flow is looked up again, once
		en, e, dir, ok := s.findPacket(m)
		if !ok {
			var k ctTuple
			s.portKey(m, &k)
			return s.newTCP(b, i, &k, &seg)
		}
		// The common segment (an in-window ACK of an established flow)
		// by tcpEstablishedAck, any other by the general path.
		v, to := tcpAccept, uint32(0)
		if ackTo, ok := tcpEstablishedAck(en, dir, &seg, &s.t.to); ok {
			to = ackTo
		} else {
			v, to = tcpPacketGeneral(en, dir, &seg, &s.t.to)
		}
		switch v {
		case tcpReopen:
			s.drop(e, ctcDeletes)
			continue
		case tcpInvalidState:
			return s.invalid(b, i, ctrTCPState)
		case tcpInvalidRST:
			return s.invalid(b, i, ctrTCPRST)
		case tcpOutOfWindow:
			if left := en.expires - t.now; to != 0 && int32(left) >= 120000 && left > to {
				en.expires = t.now + to
			}
			return s.invalid(b, i, ctrTCPWindow)
		case tcpAccept:
			en.expires = t.now + to
		case tcpKill:
			// The entry goes now (no lookup finds it), but it stays
			// this packet's, and any earlier one's of the vector, until
			// the vector is through (drop holds it): nat translates
			// them as the flow did, as Linux does a killed entry's
			// packets.
			s.classify(b, i, m, en, e, dir)
			t.pin[e] = t.gen // this packet's (pinned only counts those before it)
			s.drop(e, ctcDeletes)
			return 0
		}
		s.classify(b, i, m, en, e, dir)
		return 0
	}
	return s.invalid(b, i, ctrTCPState) // reopened twice: cannot happen
}

func (s *ctStage) newTCP(b *rings.Batch, i int, k *ctTuple, seg *tcpSeg) Edge {
	// Whether the segment can start a flow decides before any entry is
	// taken (or evicted) for it.
	var probe ctEntry
	if !tcpNew(&probe, seg, s.t.loose) {
		return s.invalid(b, i, ctrTCPNew)
	}
	e, ok := s.create(k, 0)
	if !ok {
		return s.tableFull(b, i)
	}
	t := s.tab
	en := &t.ent[e]
	tcpNew(en, seg, s.t.loose)
	v, to := tcpPacketGeneral(en, 0, seg, &s.t.to) // a new entry: never an established one's ACK
	if v != tcpAccept && v != tcpIgnored {
		t.free, en.status, en.expires = e+1, 0, t.free // never added: straight back
		return s.invalid(b, i, ctrTCPState)
	}
	en.expires = t.now + to
	return s.commitNew(b, i, e)
}

func (s *ctStage) udp(b *rings.Batch, i int, m *rings.Meta, p []byte) Edge {
	l3, l4 := int(m.L3Off), int(m.L4Off)
	v6 := m.Flags&rings.FlagIPv6 != 0
	hdr := s.t.checksum && m.Flags&(rings.FlagIPv6|rings.FlagFragment) == 0 && m.IPProto == 17 // as in tcp
	if m.Flags&rings.FlagL4 == 0 {
		return s.malformed(b, i, p, l3, hdr)
	}
	if hdr {
		if !ipv4ChecksumsOK(p, l3, l4, ctIPEnd(p, l3, false), 17) {
			return s.invalid(b, i, ctrChecksum)
		}
	} else if s.t.checksum && m.IPProto == 17 && m.Flags&rings.FlagFragment == 0 &&
		!l4ChecksumOK(p, l3, l4, ctIPEnd(p, l3, v6), v6, 17) {
		return s.invalid(b, i, ctrChecksum)
	}
	t := s.tab
	en, e, dir, ok := s.findPacket(m)
	if !ok {
		var k ctTuple
		s.portKey(m, &k)
		e, ok = s.create(&k, t.now+s.t.to.udp)
		if !ok {
			return s.tableFull(b, i)
		}
		t.ent[e].seen[0].end = t.now + 2000 // Linux's stream_ts: two seconds on
		return s.commitNew(b, i, e)
	}
	if en.status&ctStSeenReply != 0 {
		extra := s.t.to.udp
		if after(t.now, en.seen[0].end) {
			extra = s.t.to.udpStream
			en.status |= ctStAssured
		}
		en.expires = t.now + extra
	} else {
		en.expires = t.now + s.t.to.udp
	}
	s.classify(b, i, m, en, e, dir)
	return 0
}

func (s *ctStage) icmp(b *rings.Batch, i int, m *rings.Meta, p []byte, k *ctTuple) Edge {
	l3, l4 := int(m.L3Off), int(m.L4Off)
	v6 := k.v6
	if m.Flags&rings.FlagL4 == 0 || l4+8 > len(p) {
		return s.invalid(b, i, ctrMalformed)
	}
	end := ctIPEnd(p, l3, v6)
	if s.t.checksum && m.Flags&rings.FlagFragment == 0 && !l4ChecksumOK(p, l3, l4, end, v6, k.proto) {
		return s.invalid(b, i, ctrChecksum)
	}
	typ, code := p[l4], p[l4+1]
	if v6 {
		switch {
		case typ >= 1 && typ <= 4:
			return s.related(b, i, p, l4+8, end, k)
		case typ < 128:
			return s.invalid(b, i, ctrICMPType)
		case icmp6Untracked(typ):
			return s.untracked(b, i)
		}
	} else {
		switch {
		case typ > 18:
			return s.invalid(b, i, ctrICMPType)
		case icmp4Error(typ):
			return s.related(b, i, p, l4+8, end, k)
		}
	}
	isReply, good := icmpKey(typ, code, binary.BigEndian.Uint16(p[l4+4:]), v6, k)
	if !good {
		return s.invalid(b, i, ctrICMPNew)
	}
	want := int8(0)
	if isReply {
		want = 1
	}
	t := s.tab
	e, dir, ok := s.find(k, want)
	if !ok {
		if isReply {
			return s.invalid(b, i, ctrICMPNew)
		}
		e, ok = s.create(k, t.now+s.t.to.icmp)
		if !ok {
			return s.tableFull(b, i)
		}
		t.ent[e].state = typ
		return s.commitNew(b, i, e)
	}
	en := &t.ent[e]
	en.expires = t.now + s.t.to.icmp
	s.classify(b, i, m, en, e, dir)
	return 0
}

// related classes an ICMP error by the flow of the packet it quotes (its
// IP header at o): Linux looks up the quoted tuple inverted, which is the
// flow's tuple in the direction the error travels (NAT included).
func (s *ctStage) related(b *rings.Batch, i int, p []byte, o, end int, outer *ctTuple) Edge {
	var k ctTuple
	k.zone = outer.zone
	want, ok := ctInner(p, o, end, outer.v6, &k)
	if !ok {
		return s.invalid(b, i, ctrICMPErrorBad)
	}
	k.invert()
	if want >= 0 {
		want ^= 1
	}
	e, dir, ok := s.find(&k, want)
	if !ok {
		return s.invalid(b, i, ctrICMPErrorNoFlow)
	}
	m := &b.Meta[i]
	m.CT = rings.CTRelated
	if dir == 1 {
		m.CT |= rings.CTReply
	}
	s.cur[i], s.curSeq[i] = e+1, m.Seq
	s.count(ctcClass+int(rings.CTRelated), b.Descs[i].Len)
	return 0
}

func (s *ctStage) generic(b *rings.Batch, i int, m *rings.Meta, k *ctTuple) Edge {
	if m.Flags&rings.FlagL4 != 0 && portedProto(k.proto) {
		k.sport, k.dport = m.SrcPort, m.DstPort
	}
	t := s.tab
	e, dir, ok := s.find(k, -1)
	if !ok {
		e, ok = s.create(k, t.now+s.t.to.generic)
		if !ok {
			return s.tableFull(b, i)
		}
		return s.commitNew(b, i, e)
	}
	en := &t.ent[e]
	en.expires = t.now + s.t.to.generic
	s.classify(b, i, m, en, e, dir)
	return 0
}

// laterFragment classes a non-first fragment by its datagram's flow when
// a reassemble stage gave it the ports; it changes no state.
func (s *ctStage) laterFragment(b *rings.Batch, i int, m *rings.Meta, k *ctTuple) Edge {
	if m.Flags&rings.FlagVirtualL4 == 0 {
		return s.invalid(b, i, ctrFragment)
	}
	want := int8(-1)
	switch k.proto {
	case 6, 17, 136, 132, 33:
		k.sport, k.dport = m.SrcPort, m.DstPort
	case 1, 58:
		if isReply, ok := icmpKey(uint8(m.SrcPort>>8), uint8(m.SrcPort), m.DstPort, k.v6, k); ok {
			want = 0
			if isReply {
				want = 1
			}
		}
	}
	e, dir, ok := s.find(k, want)
	if !ok {
		return s.invalid(b, i, ctrFragmentNoFlow)
	}
	s.classify(b, i, m, &s.tab.ent[e], e, dir)
	return 0
}

// Commit implements Committer: flows created in this batch whose packet
// was dropped by the end of it go; the others are confirmed.
func (s *ctStage) Commit(b *rings.Batch) {
	t := s.tab
	for _, f := range s.fresh {
		if f.e != ctFreshDead && int(f.i) < len(b.Meta) && b.Meta[f.i].Verdict == rings.VerdictDrop {
			s.adopt(b)
			break
		}
	}
	for _, f := range s.fresh {
		if f.e == ctFreshDead {
			continue
		}
		en := &t.ent[f.e]
		if int(f.i) < len(b.Meta) && b.Meta[f.i].Verdict == rings.VerdictDrop {
			en.status &^= ctStTentative
			t.remove(f.e)
			continue
		}
		en.status &^= ctStTentative
		s.c[ctcInserts]++
		s.c[ctcEntries]++
	}
	if len(s.fresh) > 0 {
		s.live.mark(ctcInserts)
		s.live.mark(ctcEntries)
	}
	s.fresh = s.fresh[:0]
	if len(s.held) > 0 {
		s.releaseHeld()
	}
	if t != nil {
		t.vec, t.begun, t.stamped = nil, 0, 0 // the vectors are through: nothing pinned
	}
}

// adopt gives a flow created in this batch whose first packet was
// dropped the first later packet of the batch tracked to it that was not
// as its creator, if that packet is of the original direction and new
// (a reply, or an ICMP error related to the flow, does not count: a SYN
// a rule drops must leave no state that could admit a forged reply): that
// packet left (translated, with nat), so the flow is confirmed as if
// that packet had made it (Linux confirms the flow of the packet that
// got through). Commit calls it only when a creator was dropped. One
// pass over the batch: the pin stamps, free once the vectors are
// through, map a tentative entry to its place in fresh for the pass.
func (s *ctStage) adopt(b *rings.Batch) {
	t := s.tab
	for j, f := range s.fresh {
		if f.e != ctFreshDead {
			t.pin[f.e] = uint16(j)
		}
	}
	meta := b.Meta
	for i := range meta {
		m := &meta[i]
		if i >= len(s.cur) || m.Verdict == rings.VerdictDrop || s.cur[i] == 0 || s.curSeq[i] != m.Seq ||
			m.CT&(rings.CTStateMask|rings.CTReply) != rings.CTNew {
			continue
		}
		e := s.cur[i] - 1
		if t.ent[e].status&ctStTentative == 0 {
			continue
		}
		j := int(t.pin[e])
		if j < len(s.fresh) && s.fresh[j].e == e && int(s.fresh[j].i) < len(meta) && meta[s.fresh[j].i].Verdict == rings.VerdictDrop {
			s.fresh[j].i = uint16(i)
		}
	}
	for _, f := range s.fresh {
		if f.e != ctFreshDead {
			t.pin[f.e] = t.gen // this vector's: lapses with it
		}
	}
}

// entryOf returns batch packet i's entry as this instance left it in the
// current batch (seq must be the packet's Meta.Seq).
func (s *ctStage) entryOf(i int, seq uint64) (e uint32, ok bool) {
	if i >= len(s.cur) || s.cur[i] == 0 || s.curSeq[i] != seq {
		return 0, false
	}
	return s.cur[i] - 1, true
}

// Report implements Reporter: the counters are in the layout's order.
func (s *ctStage) Report(dst []counters.Value) { addPairs(dst, s.c[:], s.bytes[:]) }

// PublishCounters implements LiveReporter.
func (s *ctStage) PublishCounters() { s.live.publishPairs(s.c[:], s.bytes[:]) }

// LiveReport implements LiveReporter.
func (s *ctStage) LiveReport(dst []counters.Value) { s.live.addTo(dst, 0) }

var (
	_ LiveReporter = (*ctStage)(nil)
	_ Committer    = (*ctStage)(nil)
)

func (t *conntrackTemplate) String() string { return fmt.Sprintf("conntrack %s", t.name) }
