package pipelines

import (
	"encoding/binary"

	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/rings"
)

// reassembleKind is the built-in "reassemble" stage: IPv4 and IPv6
// fragment reassembly, in one of two modes.
//
//	type: reassemble
//	mode: shallow          # shallow (virtual) or full
//	max_datagrams: 4096    # datagrams in reassembly at once, per worker
//	max_fragments: 64      # per datagram (2..255)
//	max_bytes: 9216        # full mode: the largest datagram (IP payload)
//	timeout: 30            # seconds a datagram may take (Linux ipfrag_time)
//
// Shallow mode is VPP's shallow virtual reassembly: fragments are
// forwarded as they are, and each later fragment gets its datagram's
// ports (TCP/UDP/SCTP ports; ICMP type, code and identifier as the parse
// stage writes them) in Meta.SrcPort/DstPort with rings.FlagVirtualL4,
// and its upper-layer protocol in Meta.IPProto (an IPv6 later fragment's
// fragment header may name an extension header), from the first
// fragment, so that ACL, conntrack, NAT, balance and count
// treat every fragment of a datagram alike. A stage cannot hold a frame
// across batches, so a later fragment that arrives before its datagram's
// first is dropped (drop:frag_no_first); use full mode on paths that
// reorder fragments. NAT rewrites a later fragment's addresses only.
//
// Full mode copies every fragment's bytes into a per-datagram buffer and
// drops the fragment's frame (drop:frag_merged counts them: not lost,
// merged), and the fragment that completes the datagram carries the
// whole datagram on, rewritten in its frame: the first fragment's link
// and IP headers (IPv4: offset and MF cleared, length and checksum set;
// IPv6: the fragment header removed), then the payload, in order however
// the fragments arrived. Its metadata is parsed again (without tunnel
// decoding). A datagram that does not fit its frame or max_bytes goes to
// drop:frag_too_big.
//
// Both modes track each datagram (by addresses, protocol and
// identification) with its fragments' byte ranges, bounded by
// max_datagrams, max_fragments and timeout, and drop, with the whole
// datagram's later fragments (RFC 5722), on:
//
//   - overlap: a fragment overlapping one already seen (RFC 5722 for
//     IPv6; Linux drops overlapping IPv4 datagrams too since
//     FragmentSmack): drop:frag_overlap (an exact duplicate of a
//     fragment is dropped alone, the datagram kept, as Linux does);
//   - inconsistency: a non-last fragment whose payload is not a multiple
//     of 8, a fragment past the datagram's end, two different ends, a
//     datagram over 65535 bytes with its unfragmentable header (IPv4's
//     total length, IPv6's payload length), or a fragment the parse stage
//     reads otherwise (a fragment header inside a fragment):
//     drop:frag_inconsistent;
//   - more than max_fragments fragments: drop:frag_too_many;
//   - a first fragment that does not hold the whole header chain through
//     the L4 header (extension headers and AH included: RFC 1858, RFC 7112,
//     RFC 8200 4.5) or an IPv4 fragment at offset 8 (the TCP flags
//     overwrite of RFC 1858): drop:frag_tiny.
//
// A datagram whose first fragment came more than timeout ago is
// forgotten (its later fragments are then fragments with no first) and
// counted under expiries, as Linux counts ReasmTimeout when its timer
// fires: promptly, whether or not another fragment comes (the bound:
// raExpireMax).
// The clock is the packets' Meta.Time, kept in 64 bits (see advance):
// the fragments' and once a vector its last packet's (so non-fragments
// move it too), and on an idle live worker the engine's ticks (Tick);
// time going back by less than timeout is ignored, by more (or a 32-bit
// wrap after 24.9 days without fragments) expires every datagram. A
// full table frees the datagram that has waited longest (take): an
// expiry if its timeout has passed, else an eviction. Non-fragments
// pass untouched, at no cost per packet.
//
// Edges: 0 next, then drop:frag_overlap, drop:frag_inconsistent,
// drop:frag_too_many, drop:frag_tiny, drop:frag_no_first,
// drop:frag_too_big, drop:frag_merged.
//
// Counters: fragments, datagrams (completed), virtual (later fragments
// given ports), evictions, expiries, pending (a gauge: datagrams in
// reassembly, summed over workers; honest across swaps, see settle), and
// one per drop reason.
var reassembleKind = Kind{Name: "reassemble", Build: buildReassemble, Counters: raDecls[:]}

// raDecls are the reassemble stage's families: its drops by reason (the
// drop edges' counters), then the rest, in counter index order.
var raDecls = [...]counters.Decl{
	{Name: "dropped", Unit: "packets", Bytes: true, Label: "reason", Help: "Fragments a reassemble stage dropped, by reason (its drop edges)."},
	{Name: "fragments", Unit: "packets", Bytes: true, Help: "Fragments that reached a reassemble stage."},
	{Name: "datagrams", Unit: "packets", Bytes: true, Help: "Datagrams a reassemble stage completed."},
	{Name: "virtual", Unit: "packets", Bytes: true, Help: "Later fragments a reassemble stage gave their datagram's ports (virtual reassembly)."},
	{Name: "evictions", Help: "Datagrams a full reassembly table evicted to make room."},
	{Name: "expiries", Help: "Datagrams a reassemble stage forgot at their timeout, never completed (a fragment lost, or its fragments dropped)."},
	{Name: "pending", Kind: counters.Gauge, Help: "Datagrams in a reassemble stage's tables (summed over its workers: the occupancy)."},
}

// raLayout is every reassemble stage's counter layout: the drops keyed by
// raReasons (but next's, edge 0), then one counter each.
var raLayout = func() *counters.Layout {
	fams := []counters.Family{counters.Keyed(raDecls[0], raReasons[1:])}
	for _, d := range raDecls[1:] {
		fams = append(fams, counters.Single(d))
	}
	return counters.NewLayout(fams...)
}()

type reassembleOptions struct {
	Mode         string `yaml:"mode"`
	MaxDatagrams *int   `yaml:"max_datagrams"`
	MaxFragments *int   `yaml:"max_fragments"`
	MaxBytes     *int   `yaml:"max_bytes"`
	Timeout      *int   `yaml:"timeout"`
}

// Edges.
const (
	raNext Edge = iota
	raOverlap
	raInconsistent
	raTooMany
	raTiny
	raNoFirst
	raTooBig
	raMerged
	raEdges
)

var raReasons = [raEdges]string{"", "frag_overlap", "frag_inconsistent", "frag_too_many", "frag_tiny", "frag_no_first", "frag_too_big", "frag_merged"}

// raHdrMax bounds the headers (link and IP, IPv6 extension headers before
// the fragment header included) a full-mode datagram keeps.
const raHdrMax = 256

type reassembleTemplate struct {
	full     bool
	maxDg    int
	maxFrag  int
	maxBytes int
	timeout  uint32 // ms
	edges    []Target
}

func buildReassemble(c *BuildContext) Template {
	var o reassembleOptions
	if !c.Decode(&o) {
		return nil
	}
	t := &reassembleTemplate{maxDg: 4096, maxFrag: 64, maxBytes: 9216, timeout: 30_000}
	ok := true
	switch o.Mode {
	case "", "shallow":
	case "full":
		t.full = true
		t.maxDg = 1024
	default:
		c.Errorf(c.Option("mode"), "mode %q: want shallow or full", o.Mode)
		ok = false
	}
	intOpt := func(v *int, key string, lo, hi int, dst *int) {
		if v == nil {
			return
		}
		if *v < lo || *v > hi {
			c.Errorf(c.Option(key), "%s %d: want %d to %d", key, *v, lo, hi)
			ok = false
			return
		}
		*dst = *v
	}
	intOpt(o.MaxDatagrams, "max_datagrams", 1, 1<<20, &t.maxDg)
	intOpt(o.MaxFragments, "max_fragments", 2, 255, &t.maxFrag)
	intOpt(o.MaxBytes, "max_bytes", 576, 65535, &t.maxBytes)
	var secs int
	intOpt(o.Timeout, "timeout", 1, 3600, &secs)
	if secs > 0 {
		t.timeout = uint32(secs) * 1000
	}
	if o.MaxBytes != nil && !t.full {
		c.Errorf(c.Option("max_bytes"), "max_bytes applies to mode: full only")
		ok = false
	}
	next, hasNext := c.Next()
	if !ok || !hasNext {
		return nil
	}
	t.edges = []Target{next}
	for _, r := range raReasons[1:] {
		t.edges = append(t.edges, Target{Drop: r, Pos: c.Pos(nil)})
	}
	return t
}

func (t *reassembleTemplate) Edges() []Target { return t.edges }

// Counters implements CountedTemplate.
func (t *reassembleTemplate) Counters() *counters.Layout { return raLayout }
func (t *reassembleTemplate) stateful() bool             { return true }

func (t *reassembleTemplate) NewInstance() Stage {
	return &raStage{t: t, live: newLiveTable(raNumCounters), acct: new(raAcct)}
}

// Counter indices: the drop edges' own, then these.
const (
	racFragments = int(raEdges) + iota
	racDatagrams
	racVirtual
	racEvictions
	racExpiries
	racPending // a gauge
	raNumCounters
)

// raKey identifies a datagram.
type raKey struct {
	src, dst [16]byte
	id       uint32
	proto    uint8
	v6       bool
}

// hash is the key's index hash under the stage's seed (random per stage
// instance: every field of a key is the sender's to choose, so a hash
// anyone can compute from the source would let a sender pick keys that
// all probe one cluster of the index).
func (k *raKey) hash(seed uint64) uint32 {
	h := seed ^ uint64(k.id)<<8 ^ uint64(k.proto)
	h = balanceMix(h, binary.LittleEndian.Uint64(k.src[0:8]))
	h = balanceMix(h, binary.LittleEndian.Uint64(k.dst[0:8]))
	if k.v6 {
		h = balanceMix(h, binary.LittleEndian.Uint64(k.src[8:16]))
		h = balanceMix(h, binary.LittleEndian.Uint64(k.dst[8:16]))
	}
	return balanceFinal(h)
}

// raRec is one datagram in reassembly.
type raRec struct {
	key     raKey
	expires uint64 // on the stage's clock (raStage.now)
	total   uint32 // payload length, known from the last fragment (haveLast)
	got     uint32 // payload bytes received
	sport   uint16 // the first fragment's ports (Meta's values)
	dport   uint16
	uhl     uint16 // the first fragment's unfragmentable header length (IPv4 header; IPv6 extension headers before the fragment header)
	l4proto uint8  // the first fragment's upper-layer protocol (Meta.IPProto)
	hdrLen  uint16 // full mode: the kept headers' length
	l3Off   uint16 // full mode: where the IP header starts in them
	nhOff   uint16 // full mode, IPv6: the byte that names the fragment header
	nfrag   uint8
	flags   uint8 // raF*
	poison  Edge  // the drop edge of a poisoned datagram's later fragments
	nextHdr uint8 // IPv6: the fragment header's next header
	// older and newer link the records in use in the order they were
	// taken (rec+1; 0: none), which is the order of their expiries: see
	// expire.
	older, newer uint32
}

const (
	raFUsed = 1 << iota
	raFFirst
	raFLast
	raFPoisoned
)

// raStage is one worker's reassembly state.
type raStage struct {
	t      *reassembleTemplate
	recs   []raRec
	ranges []uint32 // per record, maxFrag ranges: lo<<16 | end-1
	buf    []byte   // full mode: per record raHdrMax + maxBytes
	idx    []uint64 // hash<<32 | rec+1; 0 empty (open addressing, 2 per record)
	slots  uint64
	free   []uint32
	// oldest and newest are the ends of the records' list in the order
	// they were taken (rec+1; 0: none): oldest expires first.
	oldest, newest uint32
	seed           uint64 // raKey.hash's seed
	// now is the stage's clock in ms: 64 bits, so that it never wraps,
	// moved on by the packets' 32-bit times (last is the latest seen;
	// see advance).
	now    uint64
	last   uint32
	nowSet bool
	c      [raNumCounters]uint64
	bytes  [raNumCounters]uint64
	live   liveTable
	acct   *raAcct // the pending gauge's part in swaps (settle)
}

// Expiry. The timeout is one per stage and the stage's 64-bit clock
// never goes back (advance), so records expire in the order they were
// taken: the list from oldest is the exact expiry order, kept at O(1) a
// record (take links, release unlinks), and expire releases from its
// head what is due; no scan, and nothing per packet. Once a vector
// (after its packets: Process) and at every tick (Tick) the clock moves
// and expire runs, at most raExpireMax records a vector and
// raTickExpireMax a tick; when nothing is due that is one comparison.
//
// The bound: a datagram is counted under expiries at the first vector
// (one that reaches the stage on the datagram's worker; its time is its
// last packet's) or tick whose time is at or past its timeout, unless
// more datagrams than the cap fall due at once (a burst taken together,
// or a jump of the clock): then the oldest go first, and a datagram is
// counted within ceil(max_datagrams/raExpireMax) vectors, or
// ceil(max_datagrams/raTickExpireMax) ticks, from that first one on, it
// included (the default 4096: 16 vectors or one tick; 1<<20: 4096
// vectors or 128 ticks, 12.8 s at IdleTickMS). On an idle live link a
// tick comes every IdleTickMS, so the count is that late at most. The
// caps bound a vector's extra work (a release is a hash, an index
// deletion and a record cleared; conntrack's sweep looks at up to 256
// entries a batch) and an idle worker's per tick (as ctTickSweepMax).
const (
	raExpireMax     = 256
	raTickExpireMax = 8192
)

// expire releases the records whose timeout has passed, oldest first, at
// most most of them, counting each under expiries.
func (s *raStage) expire(most int) {
	n := 0
	for s.oldest != 0 && n < most {
		r := int(s.oldest - 1)
		if s.now < s.recs[r].expires {
			break
		}
		s.release(r)
		n++
	}
	if n > 0 {
		s.c[racExpiries] += uint64(n)
		s.live.mark(racExpiries)
	}
}

// Tick implements Ticker: the engine's clock reads now on a live worker
// that got no packet. The stage's clock moves to it (advance: the low 32
// bits are a live packet's Meta.Time) and expire takes what is due, so a
// datagram on an idle link is counted at its timeout as on a busy one. A
// stage with no datagram has nothing to expire and no clock to keep (its
// next fragment moves the clock): a tick then only settles the gauge
// after a swap, and makes no table. It allocates nothing.
func (s *raStage) Tick(now uint64) {
	if !s.acct.ran {
		s.settle()
	}
	if s.oldest == 0 {
		return
	}
	s.advance(uint32(now))
	s.expire(raTickExpireMax)
}

// TakeState implements StateCarrier: datagrams in reassembly are not
// carried (they are milliseconds long); a swap starts empty and says so.
// Only the pending gauge looks back: when the stage's counters carry on
// (carried), the old instances' pending datagrams are still counted in
// them, and this instance owes their removal (settle). Each old instance
// is owed by one new one, the first that is handed it: a swap that hands
// every new instance all the old ones (another worker count, a table
// re-steered) is a pool change (StateCarrier).
// Control goroutine; claimed is the only field of the old instances it
// writes, which their workers never touch.
func (s *raStage) TakeState(olds []Stage, _ func(src, dst *[16]byte, sport, dport uint16, proto uint8, v6 bool) bool, carried bool) bool {
	if !carried {
		return false // the counters start from zero: nothing owed
	}
	for _, o := range olds {
		if os, ok := o.(*raStage); ok && !os.acct.claimed {
			os.acct.claimed = true
			s.acct.olds = append(s.acct.olds, os.acct)
		}
	}
	return false
}

// raAcct is what the pending gauge needs of an instance across swaps,
// apart from the instance, so that a new instance that has not run yet
// keeps the old ones' accounts alive, not their tables.
//
// A swap whose stage counters carry on adds the old instances' final
// counters, pending among them, to the new ones', but their datagrams
// are gone: the new instance subtracts them (settle) at its first vector
// or tick, when the old instances no longer run on its worker (the
// engine's per-worker order; a swap that hands a new instance other
// workers' old ones is a pool change, which stops the old workers
// first). An old instance that never ran (swaps faster
// than its worker's batches) counts none of its own but never settled
// its debt either: what is owed for it is what it owed (owed).
type raAcct struct {
	held    uint64    // records in use: the worker's
	ran     bool      // the instance ran (settled): held is all its counters still count
	claimed bool      // a new instance owes this one's pending (TakeState: the control goroutine)
	olds    []*raAcct // until it runs: the old instances it owes
}

// owed is the pending the stage's carried counters hold for a quiescent
// instance's datagrams: its own, once it has run (its settle took its
// olds' away), else its olds' (a tree: each instance is claimed once).
func (a *raAcct) owed() uint64 {
	if a.ran {
		return a.held
	}
	var n uint64
	for _, o := range a.olds {
		n += o.owed()
	}
	return n
}

// settle takes the old instances' datagrams off the pending gauge (see
// raAcct), once, on the worker before the instance's first vector or
// tick does anything. The old accounts go with it.
func (s *raStage) settle() {
	a := s.acct
	var n uint64
	for _, o := range a.olds {
		n += o.owed()
	}
	a.ran, a.olds = true, nil
	if n > 0 {
		s.c[racPending] -= n // wraps below zero: the carried counters hold n more
		s.live.mark(racPending)
	}
}

func (s *raStage) setup() {
	if !s.acct.ran {
		s.settle()
	}
	t := s.t
	s.recs = make([]raRec, t.maxDg)
	s.ranges = make([]uint32, t.maxDg*t.maxFrag)
	if t.full {
		s.buf = make([]byte, t.maxDg*(raHdrMax+t.maxBytes))
	}
	s.idx = make([]uint64, 2*t.maxDg+1)
	s.slots = uint64(len(s.idx))
	s.free = make([]uint32, t.maxDg)
	for i := range s.free {
		s.free[i] = uint32(t.maxDg - 1 - i)
	}
	s.seed = indexSeed()
}

// advance moves the clock by packet time ms (Meta.Time: ms, wrapping
// every 49.7 days). Time that goes back by less than the timeout (packets
// of one vector out of order, a short replay loop) leaves the clock as it
// is. Time that is more than the timeout behind the latest seen is taken
// as the 32-bit clock's wrap (ms is more than 2^31 ms, 24.9 days, ahead:
// no fragment came for that long) or a clock that started over (a replay
// begun again): the clock moves on by the forward distance, past every
// datagram's timeout, so none outlives it.
func (s *raStage) advance(ms uint32) {
	if !s.nowSet {
		s.now, s.last, s.nowSet = uint64(ms), ms, true
		return
	}
	if d := ms - s.last; int32(d) > 0 || int32(d) < -int32(s.t.timeout) {
		s.now += uint64(d)
		s.last = ms
	}
}

func (s *raStage) KeepsLength() bool { return !s.t.full }

func (s *raStage) count(k int, n uint32) {
	s.c[k]++
	s.bytes[k] += uint64(n)
	s.live.mark(k)
}

// Process handles the vector's fragments, then expires what is due.
func (s *raStage) Process(b *rings.Batch, idx []uint16, next []Edge) {
	if s.recs == nil {
		s.setup()
	}
	for k, i := range idx {
		m := &b.Meta[i]
		if m.Flags&rings.FlagFragment == 0 {
			next[k] = raNext
			continue
		}
		s.advance(m.Time)
		e := s.fragment(b, int(i), m)
		if e != raNext {
			s.count(int(e), b.Descs[i].Len)
		}
		next[k] = e
	}
	// Once a vector, not per packet: the vector's last packet moves the
	// clock (a vector of non-fragments too: a lost fragment's datagram
	// expires while other traffic flows), and expire takes what is due.
	// With no datagram in reassembly there is nothing to do.
	if s.oldest != 0 && len(idx) > 0 {
		s.advance(b.Meta[idx[len(idx)-1]].Time)
		s.expire(raExpireMax)
	}
}

// raFrag is what one fragment says about its datagram.
type raFrag struct {
	key        raKey
	off, end   uint32 // payload byte range
	more       bool
	payload    int // offset of the fragment's payload in the packet
	hdrEnd     int // IPv6: the fragment header's offset (end of the unfragmentable part)
	uhl        int // the unfragmentable header's length: IPv4's header, IPv6's extension headers before the fragment header
	nhOff      int // IPv6: the byte that names the fragment header
	nextHeader uint8
}

// readFrag reads packet p's fragment fields (m says it is one). ok is
// false for a packet whose IP header the parse stage could not read.
func readFrag(p []byte, m *rings.Meta, f *raFrag) bool {
	l3 := int(m.L3Off)
	f.key.src, f.key.dst = m.SrcIP, m.DstIP
	if m.Flags&rings.FlagIPv4 != 0 {
		if l3+ipv4MinHdr > len(p) {
			return false
		}
		ihl := int(p[l3]&0x0f) * 4
		tot := int(binary.BigEndian.Uint16(p[l3+2:]))
		fo := binary.BigEndian.Uint16(p[l3+6:])
		if ihl < ipv4MinHdr || tot < ihl || l3+tot > len(p) {
			return false
		}
		clear(f.key.src[4:])
		clear(f.key.dst[4:])
		f.key.v6 = false
		f.key.id = uint32(binary.BigEndian.Uint16(p[l3+4:]))
		f.key.proto = p[l3+9]
		f.off = uint32(fo&0x1fff) * 8
		f.end = f.off + uint32(tot-ihl)
		f.more = fo&0x2000 != 0
		f.payload = l3 + ihl
		f.uhl = ihl
		return true
	}
	// IPv6: find the fragment header.
	if l3+ipv6HdrLen > len(p) {
		return false
	}
	end := l3 + ipv6HdrLen + int(binary.BigEndian.Uint16(p[l3+4:]))
	if end > len(p) {
		return false
	}
	o, nh, nhOff := l3+ipv6HdrLen, p[l3+6], l3+6
	for range maxIPv6Ext + 1 {
		switch nh {
		case protoHopByHop, protoRouting, protoDstOpts:
			if o+8 > end {
				return false
			}
			hl := (int(p[o+1]) + 1) * 8
			nh, nhOff, o = p[o], o, o+hl
			continue
		case protoFragment:
			if o+8 > end {
				return false
			}
			fo := binary.BigEndian.Uint16(p[o+2:])
			f.key.v6 = true
			f.key.id = binary.BigEndian.Uint32(p[o+4:])
			f.key.proto = p[o]
			f.nextHeader = p[o]
			f.off = uint32(fo>>3) * 8
			f.end = f.off + uint32(end-(o+8))
			f.more = fo&1 != 0
			f.payload = o + 8
			f.hdrEnd = o
			f.nhOff = nhOff
			f.uhl = o - (l3 + ipv6HdrLen)
			return true
		}
		return false
	}
	return false
}

// lookup finds the record of key k, or returns -1.
func (s *raStage) lookup(k *raKey, h uint32) int {
	i := probeHome(h, s.slots)
	for {
		v := s.idx[i]
		if v == 0 {
			return -1
		}
		if uint32(v>>32) == h {
			if r := int(uint32(v) - 1); s.recs[r].key == *k {
				return r
			}
		}
		if i++; i == s.slots {
			i = 0
		}
	}
}

func (s *raStage) insert(r int, h uint32) {
	i := probeHome(h, s.slots)
	for s.idx[i] != 0 {
		if i++; i == s.slots {
			i = 0
		}
	}
	s.idx[i] = uint64(h)<<32 | uint64(r+1)
}

// release forgets record r (backward-shift deletion from the index).
func (s *raStage) release(r int) {
	rec := &s.recs[r]
	h := rec.key.hash(s.seed)
	want := uint64(h)<<32 | uint64(r+1)
	i := probeHome(h, s.slots)
	for s.idx[i] != want {
		if s.idx[i] == 0 {
			break
		}
		if i++; i == s.slots {
			i = 0
		}
	}
	if s.idx[i] == want {
		probeDelete(s.idx, s.slots, i)
	}
	if rec.older != 0 {
		s.recs[rec.older-1].newer = rec.newer
	} else {
		s.oldest = rec.newer
	}
	if rec.newer != 0 {
		s.recs[rec.newer-1].older = rec.older
	} else {
		s.newest = rec.older
	}
	*rec = raRec{}
	s.free = append(s.free, uint32(r))
	s.acct.held--
	s.c[racPending]--
	s.live.mark(racPending)
}

// take returns a fresh record for k, evicting one when the table is full:
// the oldest, which is the nearest to its timeout (one timeout per stage):
// an expiry when that has passed, else an eviction. Linux evicts the
// oldest fragment queues too (its LRU list); a scan of 8 records at a hand
// did before, and after records had been reused it saw the newest.
func (s *raStage) take(k *raKey, h uint32) int {
	if len(s.free) == 0 {
		r := int(s.oldest - 1)
		if s.now >= s.recs[r].expires {
			s.c[racExpiries]++
			s.live.mark(racExpiries)
		} else {
			s.c[racEvictions]++
			s.live.mark(racEvictions)
		}
		s.release(r)
	}
	r := int(s.free[len(s.free)-1])
	s.free = s.free[:len(s.free)-1]
	// The newest, expiring last: the clock never goes back.
	s.recs[r] = raRec{key: *k, flags: raFUsed, expires: s.now + uint64(s.t.timeout), older: s.newest}
	if s.newest != 0 {
		s.recs[s.newest-1].newer = uint32(r + 1)
	} else {
		s.oldest = uint32(r + 1)
	}
	s.newest = uint32(r + 1)
	s.insert(r, h)
	s.acct.held++
	s.c[racPending]++
	s.live.mark(racPending)
	return r
}

// poison marks record r bad: its later fragments go to edge e.
func (s *raStage) poison(r int, e Edge) Edge {
	rec := &s.recs[r]
	rec.flags |= raFPoisoned
	rec.poison = e
	return e
}

// fragment handles one fragment.
func (s *raStage) fragment(b *rings.Batch, i int, m *rings.Meta) Edge {
	p := b.Packet(i)
	s.count(racFragments, uint32(len(p)))
	var f raFrag
	if !readFrag(p, m, &f) {
		return raInconsistent
	}
	h := f.key.hash(s.seed)
	r := s.lookup(&f.key, h)
	if r >= 0 && s.now >= s.recs[r].expires {
		s.c[racExpiries]++
		s.live.mark(racExpiries)
		s.release(r)
		r = -1
	}
	first := f.off == 0
	if !f.key.v6 && f.off == 8 && f.key.proto == 6 {
		// RFC 1858: a TCP fragment at offset 8 could rewrite the flags.
		if r >= 0 {
			return s.poison(r, raTiny)
		}
		return raTiny
	}
	if r < 0 {
		if !first && !s.t.full {
			return raNoFirst
		}
		r = s.take(&f.key, h)
	}
	rec := &s.recs[r]
	if rec.flags&raFPoisoned != 0 {
		return rec.poison
	}
	// The parse stage must read the fragment as this does: a first
	// fragment by its first fragment header is a later one by a second
	// fragment header inside it (or an atomic fragment's), which RFC 8200
	// does not allow and which would hide the header chain.
	if first != (m.Flags&rings.FlagFirstFrag != 0) {
		return s.poison(r, raInconsistent)
	}
	// Tiny fragments (RFC 1858, RFC 7112, RFC 8200 4.5): a first fragment
	// must hold its whole header chain through the L4 header: the parse
	// stage reached an upper-layer header (m.IPProto is not an extension
	// header or AH where it stopped) and read all of it. (An IPv4
	// fragment at offset 8 could rewrite TCP's flags: above.)
	if first && m.Flags&rings.FlagL4 == 0 && (l4HasHeader(m.IPProto) || isIPv6Ext(m.IPProto)) {
		return s.poison(r, raTiny)
	}
	// The datagram, its unfragmentable header included (the first
	// fragment's where known), may not pass 65535 bytes: IPv4's total
	// length, IPv6's payload length (RFC 791, RFC 8200 4.5).
	uhl := uint32(max(f.uhl, int(rec.uhl)))
	switch {
	case uhl+f.end > 65535, rec.flags&raFLast != 0 && uhl+rec.total > 65535,
		f.end <= f.off && f.more,
		f.more && (f.end-f.off)%8 != 0,
		rec.flags&raFLast != 0 && (f.end > rec.total || !f.more && f.end != rec.total):
		return s.poison(r, raInconsistent)
	}
	rs := s.ranges[r*s.t.maxFrag : r*s.t.maxFrag+int(rec.nfrag)]
	if first && rec.got > 0 {
		// The first fragment's header with the bytes already seen.
		for _, rg := range rs {
			if uhl+rg&0xffff+1 > 65535 {
				return s.poison(r, raInconsistent)
			}
		}
	}
	if !f.more && rec.got > 0 {
		// The end must lie past every byte seen so far.
		for _, rg := range rs {
			if rg&0xffff >= f.end {
				return s.poison(r, raInconsistent)
			}
		}
	}
	for _, rg := range rs {
		lo, last := rg>>16, rg&0xffff
		if f.off == lo && f.end == last+1 {
			return raOverlap // an exact duplicate: dropped alone (Linux's IPFRAG_DUP)
		}
		if f.off <= last && f.end > lo && f.end > f.off {
			return s.poison(r, raOverlap)
		}
	}
	if f.end > f.off && int(rec.nfrag) >= s.t.maxFrag {
		return s.poison(r, raTooMany)
	}
	if f.end > f.off {
		s.ranges[r*s.t.maxFrag+int(rec.nfrag)] = f.off<<16 | (f.end - 1)
		rec.nfrag++
		rec.got += f.end - f.off
	}
	if !f.more {
		rec.flags |= raFLast
		rec.total = f.end
	}
	if first {
		rec.flags |= raFFirst
		rec.sport, rec.dport = m.SrcPort, m.DstPort
		rec.uhl, rec.l4proto = uint16(f.uhl), m.IPProto
	}
	if s.t.full {
		return s.merge(b, i, m, p, &f, r)
	}
	// Shallow: ports for later fragments; forget a complete datagram.
	if !first {
		if rec.flags&raFFirst == 0 {
			return raNoFirst
		}
		m.SrcPort, m.DstPort = rec.sport, rec.dport
		m.IPProto = rec.l4proto // IPv6: not the fragment header's next header, which may be an extension header
		m.Flags |= rings.FlagVirtualL4
		s.count(racVirtual, uint32(len(p)))
	}
	if rec.flags&raFLast != 0 && rec.got == rec.total {
		s.count(racDatagrams, 0)
		s.release(r)
	}
	return raNext
}

// l4HasHeader reports whether protocol p's first fragment must carry an
// L4 header the parse stage reads (TCP, UDP, SCTP, ICMP, ICMPv6).
func l4HasHeader(p uint8) bool {
	switch p {
	case 6, 17, 132, 1, 58:
		return true
	}
	return false
}

// merge copies fragment i into record r's buffer and, when the datagram
// is complete, writes it whole into fragment i's frame.
func (s *raStage) merge(b *rings.Batch, i int, m *rings.Meta, p []byte, f *raFrag, r int) Edge {
	t := s.t
	rec := &s.recs[r]
	stride := raHdrMax + t.maxBytes
	buf := s.buf[r*stride : (r+1)*stride]
	if int(f.end) > t.maxBytes {
		return s.poison(r, raTooBig)
	}
	copy(buf[raHdrMax+int(f.off):], p[f.payload:f.payload+int(f.end-f.off)])
	if f.off == 0 {
		hdr := f.payload
		if f.key.v6 {
			hdr = f.hdrEnd // without the fragment header
		}
		if hdr > raHdrMax {
			return s.poison(r, raTooBig)
		}
		copy(buf, p[:hdr])
		rec.hdrLen, rec.l3Off = uint16(hdr), m.L3Off
		rec.nhOff, rec.nextHdr = uint16(f.nhOff), f.nextHeader
	}
	if rec.flags&raFLast == 0 || rec.got != rec.total || rec.flags&raFFirst == 0 {
		return raMerged
	}
	// Complete: headers then payload into this fragment's frame.
	hl, l3 := int(rec.hdrLen), int(rec.l3Off)
	n := hl + int(rec.total)
	if n > cap(p) {
		return s.poison(r, raTooBig)
	}
	out := p[:n]
	copy(out[hl:], buf[raHdrMax:raHdrMax+int(rec.total)])
	copy(out[:hl], buf[:hl])
	be := binary.BigEndian
	if !rec.key.v6 {
		ihl := hl - l3
		be.PutUint16(out[l3+2:], uint16(ihl+int(rec.total)))
		be.PutUint16(out[l3+6:], be.Uint16(out[l3+6:])&0x4000) // keep DF, clear MF and offset
		be.PutUint16(out[l3+10:], 0)
		be.PutUint16(out[l3+10:], ^inetFold(inetSum(out[l3:l3+ihl], 0)))
	} else {
		out[rec.nhOff] = rec.nextHdr
		be.PutUint16(out[l3+4:], uint16(n-l3-ipv6HdrLen))
	}
	b.Descs[i].Len = uint32(n)
	resetParsed(m)
	m.Class = decodeEthernet(out, m, false)
	s.count(racDatagrams, uint32(n))
	s.release(r)
	return raNext
}

// Report implements Reporter: the counters from index 1 on (index 0,
// next's edge, counts nothing) are in the layout's order.
func (s *raStage) Report(dst []counters.Value) { addPairs(dst, s.c[1:], s.bytes[1:]) }

// PublishCounters implements LiveReporter.
func (s *raStage) PublishCounters() { s.live.publishPairs(s.c[:], s.bytes[:]) }

// LiveReport implements LiveReporter.
func (s *raStage) LiveReport(dst []counters.Value) { s.live.addTo(dst, 1) }

var (
	_ LiveReporter = (*raStage)(nil)
	_ StateCarrier = (*raStage)(nil)
	_ Ticker       = (*raStage)(nil)
)
