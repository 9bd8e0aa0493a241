package pipelines

import (
	"encoding/binary"
	"math/rand/v2"
	"unsafe"

	"github.com/warpflow/warpflow/internal/hugemem"
	"github.com/warpflow/warpflow/rings"
)

// The flow table of one conntrack instance (one worker).
//
// Layout. Entries live in one fixed array (ctEntry, ctEntryBytes each,
// allocated once at the configured size); entries freed are chained
// through their expires field, so the free list costs no memory, and
// entries never used are handed out in order once it is empty (a new
// table writes none of its memory: see newCTTable). An index of
// ctIndexSlots(size) 8-byte slots, open addressing with linear probing,
// holds two slots per live entry, one per direction (Linux's two
// tuplehash nodes): a slot is the direction tuple's 32-bit hash, the
// entry number and the direction. The slot's hash both places it (home =
// hash*slots>>32, no modulo) and filters probes without touching entries.
// Deleting shifts the following slots back (no tombstones), so a probe
// ends at the first empty slot and lookups never degrade with churn.
//
// Memory per flow: ctEntryBytes (96) + the entry's pin stamp (2, see
// ctTable.pin) + 8*ctIndexSlots(size)/size (26.7), about 125 bytes, at
// most 128 (TestConntrackBytesPerFlow): the index is
// sized for a load factor of 3/5 with the table full (two slots per
// entry). With a million flows in a table of 2^20 at 3/4 (117.3 bytes
// per flow), 12.7% of the keys sat beyond their home slot's cache line
// (the one line prefetched) and 3.8% beyond the 8 slots the prefetching
// pass reads, a miss in the passes or the tracking loop each; at 3/5,
// 7.9% and 1.2% (a simulation of the inserts), and the stateful row
// runs a few ns per packet faster (BENCHMARKS.md, "A fourth pass").
//
// Time. Every entry has an expiry on the packets' clock (Meta.Time, ms,
// wrapping: compared by signed difference). An expired entry is removed
// when a lookup meets it or when the sweep, which goes through the table
// in array order once per ctSweepPeriod of the packets' clock, passes it;
// so an idle table keeps its entries until traffic resumes, and no timer
// runs.
//
// Eviction when full: a new flow takes the first of up to
// ctEvictScan entries at the sweep hand that has expired or, failing
// that, the unassured one closest to its expiry (Linux's early_drop also
// sacrifices only unassured entries). If all of them are assured the new
// flow is refused (its packet goes to drop:ct_table_full): established
// flows are never evicted for new ones.

// ctEntry is one tracked flow, both directions. Field order packs it in
// ctEntryBytes with no padding; TestConntrackBytesPerFlow checks the size.
//
// The original direction's tuple is kept as it arrived, before any NAT.
// NAT is IPv4 only, and an IPv4 address uses 4 of its 16 bytes, so the
// translation lives in the address fields' spare bytes (natSrc, natDst):
// the original source becomes natSrc:natSport (SNAT) and its destination
// natDst:natDport (DNAT) when the status bits say so; the reply tuple is
// the translated original, reversed.
type ctEntry struct {
	src, dst     [16]byte // IPv6, or IPv4 in bytes 0-3 with the NAT address in 4-7, port in 8-9 (and src[10]: natFlags)
	sport, dport uint16   // ports; ICMP: see ctKey
	expires      uint32   // ms clock; for a free entry: the next free entry + 1
	zone         uint16
	proto        uint8
	state        uint8 // TCP: tcpState; ICMP: the request's type; else 0
	status       uint8 // ctSt* bits
	// tcpLast packs Linux's last_index (bits 0-2), last_dir (bit 3) and
	// retrans (bits 4-7, held at 15: only retrans >= tcpMaxRetrans is
	// ever asked).
	tcpLast uint8
	lastWin uint16
	// lastFlags is Linux's last_flags (tcpFl* of an ignored SYN,
	// tcpSimOpen, tcpChallenge: bits 0-1 and 6-7) with last_wscale (0-14)
	// in bits 2-5, where no last flag goes (tcpLastWscaleBits).
	lastFlags uint8
	// wscales is both directions' td_scale (0-14): direction d's in bits
	// 4d to 4d+3 (wscale, setWscale); dflags their td_flags.
	wscales uint8
	dflags  [2]uint8
	lastEnd uint32
	lastSeq uint32
	lastAck uint32
	// Per direction, Linux's ip_ct_tcp_state: the window (seen; for UDP
	// seen[0].end is the stream time); its scale and its flags are
	// wscales and dflags (kept apart from seen so that the entry has no
	// padding).
	seen [2]tcpDir
}

// The fields packed into spare bits, so that the entry is 96 bytes: at
// byte 0 or 32 of a line, every entry of the table (huge-page aligned)
// spans exactly two cache lines, which the pipelined loop
// prefetches (a 100-byte entry spanned three lines half the time).

func (en *ctEntry) wscale(d uint8) uint8 { return en.wscales >> (4 * d) & 15 }
func (en *ctEntry) setWscale(d, v uint8) {
	en.wscales = en.wscales&^(15<<(4*d)) | (v&15)<<(4*d)
}

// tcpLastWscaleBits are lastFlags' bits that hold last_wscale.
const tcpLastWscaleBits = 15 << 2

func (en *ctEntry) lastWscale() uint8 { return en.lastFlags >> 2 & 15 }
func (en *ctEntry) setLastWscale(v uint8) {
	en.lastFlags = en.lastFlags&^tcpLastWscaleBits | (v&15)<<2
}

func (en *ctEntry) retrans() uint8 { return en.tcpLast >> 4 }
func (en *ctEntry) setRetrans(v uint8) {
	en.tcpLast = en.tcpLast&15 | min(v, 15)<<4
}

// natFlags (natF*, nat.go) live in an IPv4 entry's spare src[10] (NAT is
// IPv4 only; the nat stage reads them for IPv4 packets only).
func (en *ctEntry) natFlags() uint8     { return en.src[10] }
func (en *ctEntry) setNatFlags(f uint8) { en.src[10] = f }

// tcpDir is one direction's TCP window (td_end, td_maxend, td_maxwin,
// td_maxack).
type tcpDir struct {
	end, maxend, maxwin, maxack uint32
}

// natSrc and friends read and write the NAT fields kept in the address
// fields' spare bytes (IPv4 entries only).
func (en *ctEntry) natSrc() [4]byte { return [4]byte(en.src[4:8]) }
func (en *ctEntry) natDst() [4]byte { return [4]byte(en.dst[4:8]) }
func (en *ctEntry) natSport() uint16 {
	return binary.LittleEndian.Uint16(en.src[8:10])
}
func (en *ctEntry) natDport() uint16 {
	return binary.LittleEndian.Uint16(en.dst[8:10])
}
func (en *ctEntry) setSNAT(a [4]byte, port uint16) {
	copy(en.src[4:8], a[:])
	binary.LittleEndian.PutUint16(en.src[8:10], port)
	en.status |= ctStSNAT
}
func (en *ctEntry) setDNAT(a [4]byte, port uint16) {
	copy(en.dst[4:8], a[:])
	binary.LittleEndian.PutUint16(en.dst[8:10], port)
	en.status |= ctStDNAT
}

// Entry status bits.
const (
	ctStUsed      = 1 << iota // live (in the index)
	ctStV6                    // addresses are IPv6
	ctStSeenReply             // a reply-direction packet was seen (IPS_SEEN_REPLY)
	ctStAssured               // assured: never evicted for a new flow (IPS_ASSURED)
	ctStSNAT                  // natSrc/natSport apply
	ctStDNAT                  // natDst/natDport apply
	ctStTentative             // created in the current batch, not yet confirmed
)

// ctEntryBytes is the size of one entry.
const ctEntryBytes = int(unsafe.Sizeof(ctEntry{}))

// ctEvictScan is how many entries a full table looks at for one to evict.
const ctEvictScan = 8

// The expiry sweep runs on the packets' clock: it looks at the whole
// table once every ctSweepPeriod ms of it (size*elapsed/ctSweepPeriod
// entries at a batch, the remainder carried), at most ctSweepMax at one
// batch. So it costs the same per second at any packet rate (at 10 Mpps
// in batches of 64 and a table of a million, under one entry a batch,
// where a fixed 16 a batch read 24 cold cache lines for every 64
// packets: some 3% of the stateful row), an expired entry that no
// lookup meets goes within about ctSweepPeriod once traffic flows (at a
// low rate the cap may stretch that), and in replay it is as
// deterministic as the clock. The sweep only returns memory of idle
// flows early: a lookup removes an expired entry it meets, and a full
// table takes expired entries first.
//
// A tick (ctStage.Tick: a live worker that got no packet) sweeps what
// is due the same way, at most ctTickSweepMax entries a tick: at
// IdleTickMS ticks, a table of up to 80k entries a whole pass each
// ctSweepPeriod, a million in about 12 s; some 100 us of an idle
// worker's time per tick.
const (
	ctSweepPeriod  = 10_000 // ms
	ctSweepMax     = 256
	ctTickSweepMax = 8192
)

// ctIndexSlots returns the index size for a table of size entries: two
// slots per entry at a load factor of at most 3/5 (any size works: a
// slot's home is hash*slots>>32, no power of two needed).
func ctIndexSlots(size int) int {
	if size == 1 {
		// Two slots and the empty one that ends a probe: the rule's 4
		// would put a table of one flow over 128 bytes per flow with the
		// pin stamps.
		return 3
	}
	return (size*10 + 2) / 3
}

// ctBytesPerFlow is the table memory per flow for a table of size
// entries: what CONFIG.md and the stats state.
func ctBytesPerFlow(size int) float64 {
	return float64(size*(ctEntryBytes+ctPinBytes)+8*ctIndexSlots(size)) / float64(size)
}

// ctPinBytes is an entry's pin stamp (ctTable.pin).
const ctPinBytes = 2

// pinned reports whether a packet of the current vector was tracked to
// entry e (one before the packet being tracked: see ctTable.pin).
func (t *ctTable) pinned(e uint32) bool {
	if t.stamped < t.begun-1 {
		t.stampTracked()
	}
	return t.pin[e] == t.gen
}

// stampTracked stamps the entries of the vector's packets tracked since
// it last ran.
func (t *ctTable) stampTracked() {
	n := t.begun - 1
	for _, i := range t.vec[t.stamped:n] {
		if c := t.cur[i]; c != 0 {
			t.pin[c-1] = t.gen
		}
	}
	t.stamped = n
}

// ctTuple is one direction's lookup key.
type ctTuple struct {
	src, dst     [16]byte
	sport, dport uint16
	zone         uint16
	proto        uint8
	v6           bool
}

// hash returns the tuple's directional 32-bit hash under seed (a table's
// is ctTable.seed). (An index slot is never 0 whatever the hash: its low
// half holds entry+1.)
func (t *ctTuple) hash(seed uint64) uint32 {
	ports := ctPortWord(t.sport, t.dport, t.proto, t.zone)
	if !t.v6 {
		return ctHash4(seed, ctAddrWord(&t.src, &t.dst), ports)
	}
	h := balanceMix(seed^1, binary.LittleEndian.Uint64(t.src[0:8]))
	h = balanceMix(h, binary.LittleEndian.Uint64(t.dst[0:8]))
	h = balanceMix(h, binary.LittleEndian.Uint64(t.src[8:16]))
	h = balanceMix(h, binary.LittleEndian.Uint64(t.dst[8:16]))
	return balanceFinal(balanceMix(h, ports))
}

// ctHash4 is an IPv4 tuple's hash from its two words: both addresses in
// one (ctAddrWord), the rest in the other (ctPortWord). The conntrack
// stage's hashing pass calls it on words built from the packet's
// metadata, without building the tuple; in three pieces each is small
// enough to inline there (one function of it was not, and its call cost
// the pass a dozen instructions a packet of registers saved around it).
func ctHash4(seed, addrs, ports uint64) uint32 {
	return balanceFinal(balanceMix(balanceMix(seed, addrs), ports))
}

// ctAddrWord is an IPv4 tuple's addresses (bytes 0-3 of src and dst) as
// one word.
func ctAddrWord(src, dst *[16]byte) uint64 {
	return uint64(binary.LittleEndian.Uint32(src[0:4])) | uint64(binary.LittleEndian.Uint32(dst[0:4]))<<32
}

// ctPortWord is a tuple's ports, protocol and zone as one word.
func ctPortWord(sport, dport uint16, proto uint8, zone uint16) uint64 {
	return uint64(sport)<<16 | uint64(dport) | uint64(proto)<<32 | uint64(zone)<<40
}

// indexSeed draws a seed for a stateful stage's index (a conntrack
// table's, a reassemble stage's): at random, as a sender must not know
// it. A variable so that a fuzz target can fix it: with a random seed
// the same input takes other probe paths on every run, every run looks
// like new coverage to the fuzzer, and it spends its time minimizing
// instead of fuzzing (FuzzStateful ran 17 inputs in 9 s).
var indexSeed = rand.Uint64

// ctSeed is the seed of the hashes that must be the same in every run:
// the nat stage's port choice (replay gives the same translations every
// run, and live the same as replay) and the engine's steering. A table's
// index hashes under a seed of its own (ctTable.seed).
const ctSeed = 0x3c6ef372fe94f82b

// ctTable is one worker's flow table.
type ctTable struct {
	// The arrays live in huge pages where the kernel gives them
	// (internal/hugemem: a lookup's misses are then not TLB misses too);
	// the holders keep the mappings alive as long as the table is.
	entMem *hugemem.Table[ctEntry]
	idxMem *hugemem.Table[uint64]
	ent    []ctEntry
	idx    []uint64 // hash<<32 | (entry+1)<<1 | dir; 0 is empty
	slots  uint64
	// seed is the index's hash seed, random per table (kept with the
	// table across swaps): every field of a tuple is the sender's to
	// choose, and with a hash anyone can compute from the source a sender
	// could pick tuples that all probe one cluster of the index, making
	// every lookup there a walk of it (Linux seeds its conntrack hash
	// at random for the same reason). Where entries sit in the index is
	// all it decides: what a lookup finds, and so every verdict, class
	// and translation, is the same under any seed.
	seed uint64
	free uint32 // first free entry + 1; 0: none
	// unused is the first entry never handed out: those from it on are
	// on no list, zero (not in use), and their pages untouched.
	unused uint32
	n      int    // live entries
	hand   uint32 // the sweep's next entry
	// sweptAt is the clock when the sweep last took its due, and owed
	// the entry-milliseconds (size times elapsed ms) not yet swept, below
	// one full pass (size*ctSweepPeriod) however far the clock jumps.
	sweptAt uint32
	owed    uint64
	now     uint32 // the table's clock: the latest packet time seen (never goes back)
	// pin[e] is the vector (gen) in which a packet was last tracked to
	// entry e: the nat stage reads the entry for that packet after the
	// conntrack stage has tracked the whole vector, so until then the
	// entry stays that flow's (pinned): the eviction scan and the sweep
	// pass it over, and a drop holds it off the free list until the
	// vector is through (ctStage.drop). Stamps, not marks: nothing to
	// clear at a vector's end (a stamp 65536 vectors old that comes
	// round again only spares an entry for one vector).
	//
	// The stamps are written lazily, off the tracking path: of the
	// current vector (the conntrack stage's idx), begun packets have
	// been taken by the tracking loop, so vec[:begun-1] are tracked,
	// their entries in cur (the stage's); those of vec[:stamped] are
	// stamped, and pinned stamps the rest first. So a vector with no
	// eviction or drop stamps nothing, one with many stamps each packet
	// once, and the tracking loop pays one add a packet (begun).
	// The packet being tracked is not counted: its cur is not set yet
	// (or is a stale one's) when its flow evicts or drops; where it is
	// set and its entry then goes (an RST's kill), tcp stamps it.
	pin     []uint16
	gen     uint16
	vec     []uint16
	cur     *[rings.MaxBatch]uint32
	begun   int
	stamped int
	// epoch is the whole time (ms since the Unix epoch) of the last batch
	// that had one (rings.Batch.Epoch: live ports, the engine's clock), 0
	// before any: see clock64.
	epoch uint64
	// nowSet says now holds a time: the first packet sets it outright
	// (start).
	nowSet bool
}

// newCTTable makes an empty table of size entries. Its memory comes
// zeroed (an empty index, entries not in use) and is not written here:
// entries are handed out from unused onwards as flows come, so a table
// costs memory as it fills, not when it is made (a table of 64M flows,
// 8 GB, chained onto a free list up front, took seconds of the worker's
// first batch and all its pages at once).
func newCTTable(size int) *ctTable {
	t := &ctTable{entMem: hugemem.Alloc[ctEntry](size), idxMem: hugemem.Alloc[uint64](ctIndexSlots(size))}
	t.ent, t.idx = t.entMem.S, t.idxMem.S
	t.pin = make([]uint16, size)
	t.slots = uint64(len(t.idx))
	t.seed = indexSeed()
	return t
}

// advance moves the clock to ms unless that is behind it (a looping
// replay goes back in time: the table keeps its clock), or more than
// ctClockBack behind it: that is no step back but a discontinuity, which
// jump takes. The clock must be set (start): Process starts it with its
// vector's first packet, so that this stays small enough to inline in
// track.
func (t *ctTable) advance(ms uint32) {
	// The difference spelled twice, not kept in a variable: that costs
	// the inliner one node more than its budget.
	if int32(ms-t.now) > 0 {
		t.now = ms
	} else if int32(ms-t.now) < -ctClockBack {
		t.jump(ms)
	}
}

// start sets the clock to ms if it has no time yet, else advances it.
func (t *ctTable) start(ms uint32) {
	if !t.nowSet {
		t.now, t.nowSet, t.sweptAt = ms, true, ms
		return
	}
	t.advance(ms)
}

// clock64 notes a batch's whole time e (rings.Batch.Epoch, not 0): a gap
// of more than ctClockBack since the last batch that had one, either way,
// is a discontinuity (jump). The 32-bit packet times alone cannot see a
// gap of 37.3 to 49.7 days, which looks like a short step back, or one of
// whole multiples of 49.7 days; the engine's clock can, and a worker
// whose link was idle that long then expires its flows as it should, not
// keeping its clock (and every entry) where the gap began for up to 12.4
// days more. Once a batch, before its packets are tracked.
func (t *ctTable) clock64(e uint64) {
	if t.epoch != 0 && t.nowSet && (e > t.epoch+ctClockBack || t.epoch > e+ctClockBack) {
		t.jump(uint32(e))
	}
	t.epoch = e
}

// ctClockBack is the largest step back (ms) the clock ignores: 2^30 ms,
// 12.4 days, the longest timeout (ctMaxTimeout). Expiries are compared
// by signed 32-bit difference, right while the clock is less than 2^31
// ms past them; an entry's expiry is at most ctClockBack ahead of the
// clock, so a forward step of up to 2^31 ms leaves every comparison
// right. A packet time more than ctClockBack behind the clock is most
// likely one 2^31 ms (24.9 days) or more ahead of it, its 32-bit
// difference wrapped (a worker that saw no packet for that long), or a
// clock that started over (a replay of another capture): either way
// the entries' expiries no longer compare right against it.
const ctClockBack = 1 << 30

// jump sets the clock to ms after a discontinuity (see advance) and
// expires every entry, as a gap that long would have: the sweep and the
// lookups that meet them remove them as they do expired ones (the
// tracked packets of the vector keep theirs: pinned). An entry made in
// this batch (tentative) keeps what was left of its timeout: its flow
// began after the gap. One pass over the entries ever used, at most once
// per such gap.
//
//go:noinline
func (t *ctTable) jump(ms uint32) {
	was := t.now
	t.now = ms
	for e := range t.ent[:t.unused] {
		en := &t.ent[e]
		switch {
		case en.status&ctStUsed == 0:
		case en.status&ctStTentative != 0:
			en.expires = ms + (en.expires - was) // wrapping: a timeout already past stays past
		default:
			en.expires = ms
		}
	}
}

// expired reports whether entry e's time has come.
func (t *ctTable) expired(e *ctEntry) bool { return int32(t.now-e.expires) >= 0 }

func (t *ctTable) home(h uint32) uint64 { return probeHome(h, t.slots) }

// lookup finds the entry whose direction tuple is k (hash h); with want
// 0 or 1 only as that direction (ICMP queries: a request's tuple and a
// reply's can coincide). It does not look at expiry.
func (t *ctTable) lookup(k *ctTuple, h uint32, want int8) (e uint32, dir uint8, ok bool) {
	i := t.home(h)
	for {
		v := t.idx[i]
		if v == 0 {
			return 0, 0, false
		}
		if uint32(v>>32) == h {
			e = uint32(v)>>1 - 1
			dir = uint8(v & 1)
			if (want < 0 || uint8(want) == dir) && t.tupleIs(&t.ent[e], dir, k) {
				return e, dir, true
			}
		}
		if i++; i == t.slots {
			i = 0
		}
	}
}

// tupleOf writes entry e's tuple for direction dir into k.
func (t *ctTable) tupleOf(en *ctEntry, dir uint8, k *ctTuple) {
	k.zone, k.proto, k.v6 = en.zone, en.proto, en.status&ctStV6 != 0
	k.src, k.dst = en.src, en.dst
	if !k.v6 {
		// The NAT bytes are not part of an IPv4 address.
		clear(k.src[4:])
		clear(k.dst[4:])
	}
	if dir == 0 {
		k.sport, k.dport = en.sport, en.dport
		return
	}
	// The reply: the translated original, reversed.
	k.src, k.dst = k.dst, k.src
	k.sport, k.dport = en.dport, en.sport
	if en.status&ctStDNAT != 0 {
		*(*[4]byte)(k.src[:4]) = en.natDst()
		k.sport = en.natDport()
	}
	if en.status&ctStSNAT != 0 {
		*(*[4]byte)(k.dst[:4]) = en.natSrc()
		k.dport = en.natSport()
	}
}

// tupleIs reports whether entry en's direction dir tuple is k.
func (t *ctTable) tupleIs(en *ctEntry, dir uint8, k *ctTuple) bool {
	if en.zone != k.zone || en.proto != k.proto || (en.status&ctStV6 != 0) != k.v6 {
		return false
	}
	if !k.v6 {
		le := binary.LittleEndian
		return tuple4Eq(en, dir, le.Uint32(k.src[:4]), le.Uint32(k.dst[:4]), k.sport, k.dport)
	}
	var r ctTuple
	t.tupleOf(en, dir, &r)
	return r.src == k.src && r.dst == k.dst && r.sport == k.sport && r.dport == k.dport
}

// tuple4Eq reports whether IPv4 entry en's direction dir tuple has
// these addresses (little-endian words of their bytes) and ports,
// compared in place (the NAT bytes are not part of the addresses): the
// original as it arrived, the reply reversed with the translation.
func tuple4Eq(en *ctEntry, dir uint8, src, dst uint32, sport, dport uint16) bool {
	le := binary.LittleEndian
	if dir == 0 {
		return le.Uint32(en.src[:4]) == src && le.Uint32(en.dst[:4]) == dst && en.sport == sport && en.dport == dport
	}
	rs, rsp := le.Uint32(en.dst[:4]), en.dport
	if en.status&ctStDNAT != 0 {
		rs, rsp = le.Uint32(en.dst[4:8]), en.natDport()
	}
	rd, rdp := le.Uint32(en.src[:4]), en.sport
	if en.status&ctStSNAT != 0 {
		rd, rdp = le.Uint32(en.src[4:8]), en.natSport()
	}
	return rs == src && rd == dst && rsp == sport && rdp == dport
}

// insertSlot adds the index slot of entry e's direction dir (hash h).
// The index always has room: it is sized for two slots per entry.
func (t *ctTable) insertSlot(e uint32, dir uint8, h uint32) {
	i := t.home(h)
	for t.idx[i] != 0 {
		if i++; i == t.slots {
			i = 0
		}
	}
	t.idx[i] = uint64(h)<<32 | uint64(e+1)<<1 | uint64(dir)
}

// deleteSlot removes the slot of entry e's direction dir (hash h),
// shifting the slots after it back so that no probe sequence breaks.
func (t *ctTable) deleteSlot(e uint32, dir uint8, h uint32) {
	want := uint64(h)<<32 | uint64(e+1)<<1 | uint64(dir)
	i := t.home(h)
	for t.idx[i] != want {
		if t.idx[i] == 0 {
			return // not there: nothing to do (cannot happen for a live entry)
		}
		if i++; i == t.slots {
			i = 0
		}
	}
	probeDelete(t.idx, t.slots, i)
}

// alloc takes a free entry, or reports false when there is none: one
// freed before, else the first never used.
func (t *ctTable) alloc() (uint32, bool) {
	if t.free == 0 {
		if int(t.unused) < len(t.ent) {
			t.unused++
			return t.unused - 1, true
		}
		return 0, false
	}
	e := t.free - 1
	t.free = t.ent[e].expires
	return e, true
}

// add makes entry e (already filled in, status used) live: both index
// slots.
func (t *ctTable) add(e uint32) {
	en := &t.ent[e]
	var k ctTuple
	t.tupleOf(en, 0, &k)
	t.insertSlot(e, 0, k.hash(t.seed))
	t.tupleOf(en, 1, &k)
	t.insertSlot(e, 1, k.hash(t.seed))
	t.n++
}

// remove takes entry e out of the index and puts it on the free list.
func (t *ctTable) remove(e uint32) {
	t.unlink(e)
	t.release(e)
}

// unlink takes entry e out of the index: no lookup finds it, and it is
// no longer live (used), but it keeps its fields, the translation
// included, for the packets of the vector tracked to it, until release.
func (t *ctTable) unlink(e uint32) {
	en := &t.ent[e]
	var k ctTuple
	t.tupleOf(en, 0, &k)
	t.deleteSlot(e, 0, k.hash(t.seed))
	t.tupleOf(en, 1, &k)
	t.deleteSlot(e, 1, k.hash(t.seed))
	en.status &^= ctStUsed
	t.n--
}

// release puts unlinked entry e on the free list.
func (t *ctTable) release(e uint32) {
	en := &t.ent[e]
	en.status = 0
	en.expires = t.free
	t.free = e + 1
}

// rekeyReply moves entry e's reply slot after its NAT fields changed:
// oldHash is the reply tuple's hash before the change.
func (t *ctTable) rekeyReply(e uint32, oldHash uint32) {
	t.deleteSlot(e, 1, oldHash)
	var k ctTuple
	t.tupleOf(&t.ent[e], 1, &k)
	t.insertSlot(e, 1, k.hash(t.seed))
}

// victim finds an entry to evict for a new flow: among ctEvictScan
// entries from the sweep hand, passing over pinned ones, the first
// expired one, else the unassured one nearest to expiry. ok is false
// when all are assured or pinned (or the table has no entries).
func (t *ctTable) victim() (e uint32, expired, ok bool) {
	size := uint32(len(t.ent))
	if size == 0 {
		return 0, false, false
	}
	best, bestLeft := uint32(0), int32(0)
	found := false
	h := t.hand
	for range min(ctEvictScan, int(size)) {
		en := &t.ent[h]
		// Neither an entry made in this vector (tentative) nor one a
		// packet of it was tracked to (pinned): the nat stage has yet
		// to read it for that packet.
		if en.status&ctStUsed != 0 && en.status&ctStTentative == 0 && !t.pinned(h) {
			if t.expired(en) {
				t.hand = next(h, size)
				return h, true, true
			}
			if en.status&ctStAssured == 0 {
				left := int32(en.expires - t.now)
				if !found || left < bestLeft {
					best, bestLeft, found = h, left, true
				}
			}
		}
		h = next(h, size)
	}
	t.hand = h
	return best, false, found
}

func next(h, size uint32) uint32 {
	if h++; h == size {
		return 0
	}
	return h
}

// sweep looks at up to n entries from the hand and removes the expired
// ones (not those pinned: a later sweep or lookup does), returning how
// many it removed.
func (t *ctTable) sweep(n int) int {
	size := uint32(len(t.ent))
	if size == 0 || t.n == 0 {
		return 0
	}
	removed := 0
	h := t.hand
	for range min(n, int(size)) {
		en := &t.ent[h]
		if en.status&ctStUsed != 0 && en.status&ctStTentative == 0 && t.expired(en) && !t.pinned(h) {
			t.remove(h)
			removed++
		}
		h = next(h, size)
	}
	t.hand = h
	return removed
}

// sweepDue returns how many entries the sweep is to look at now, for the
// clock's advance since it last asked (see ctSweepPeriod), at most
// ctSweepMax.
func (t *ctTable) sweepDue() int { return t.sweepDueUpTo(ctSweepMax) }

// sweepDueUpTo is sweepDue with the cap most.
func (t *ctTable) sweepDueUpTo(most uint64) int {
	if !t.nowSet {
		return 0
	}
	d := t.now - t.sweptAt // the clock never goes back: a wrap is still the advance
	if d == 0 {
		return 0
	}
	t.sweptAt = t.now
	full := uint64(len(t.ent)) * ctSweepPeriod
	t.owed = min(t.owed+uint64(d)*uint64(len(t.ent)), full)
	n := min(t.owed/ctSweepPeriod, most)
	t.owed -= n * ctSweepPeriod
	return int(n)
}

// bytes is the table's memory.
func (t *ctTable) bytes() int { return len(t.ent)*ctEntryBytes + ctPinBytes*len(t.pin) + 8*len(t.idx) }
