package rings

// Batch is the unit of work that moves between ports, workers and pipeline
// stages: a fixed-capacity vector of descriptors with one Meta per
// descriptor, and a view of the arena the descriptors point into.
//
// A batch never owns packet bytes; it owns the frames its descriptors name
// for as long as it holds them, and hands them on by handing on the
// descriptors. Its capacity is fixed for its whole life, so a batch can be
// reused forever without allocating.
type Batch struct {
	Descs []Desc // len is the number of packets in the batch; cap is the capacity
	Meta  []Meta // same len as Descs

	// Outcome, when Valid, summarises the verdicts of the whole batch, so
	// the consumer need not read every packet's Meta. A pipeline runner
	// sets it; any change to the batch's length resets it.
	Outcome Outcome

	mem []byte // the arena's memory
	// frameMask is frameSize-1: 16 bits, as a frame is at most 64 KiB
	// (Packet counts on it).
	frameMask uint16

	// time is the Meta.Time Append and AppendRun give the packets they
	// add (SetTime).
	time uint32
	// epoch is the whole time behind time, in ms since the Unix epoch,
	// when SetTime64 set it; 0 when SetTime did (only the low 32 bits
	// known). See Epoch.
	epoch uint64

	// Deferred metadata (DeferMeta): the packets from index lazyFrom on
	// have their Meta not yet written; runs say which Seq and InPort each
	// gets. SettleMeta writes them.
	lazy     bool
	nruns    uint8
	lazyFrom uint16
	runs     [maxLazyRuns]lazyRun
}

// lazyRun is a run of appended packets whose metadata is still to be
// written: n packets, consecutive receive sequence numbers from seq.
type lazyRun struct {
	seq    uint64
	n      uint16
	inPort uint16
	time   uint32
}

// maxLazyRuns bounds the runs a batch defers; one more appended run
// settles the metadata at once (a port that hands out frames one by one
// with gaps in its sequence numbers).
const maxLazyRuns = 4

// Outcome says that every packet of a batch got the same verdict and
// target and that none carries a sample mark, and gives their total length.
// When Valid is false, each packet's Meta is the only record.
type Outcome struct {
	Valid   bool
	Verdict Verdict
	Target  uint16
	Bytes   uint64 // sum of Desc.Len over the batch
}

// NewBatch returns an empty batch of the given capacity whose descriptors
// point into a.
func NewBatch(capacity int, a *Arena) *Batch {
	if capacity <= 0 || capacity > MaxBatch {
		panic("rings: batch capacity out of range") // programming error, validated by callers
	}
	return &Batch{
		Descs:     make([]Desc, 0, capacity),
		Meta:      make([]Meta, 0, capacity),
		mem:       a.mem,
		frameMask: uint16(a.frameSize - 1),
	}
}

// MaxBatch is the largest batch capacity. Packet indices within a batch fit
// in a uint16.
const MaxBatch = 1024

// Len returns the number of packets in the batch.
func (b *Batch) Len() int { return len(b.Descs) }

// Cap returns the batch's fixed capacity.
func (b *Batch) Cap() int { return cap(b.Descs) }

// SetLen sets the number of packets, within capacity. Descriptors and
// metadata beyond the old length keep whatever they held.
func (b *Batch) SetLen(n int) {
	if b.nruns != 0 {
		if n == 0 {
			b.nruns = 0
		} else {
			b.SettleMeta()
		}
	}
	b.Outcome.Valid = false
	b.Descs = b.Descs[:n]
	b.Meta = b.Meta[:n]
}

// Append adds one packet at the end of the batch: descriptor d, with its
// metadata zeroed but for the receive sequence number and input port. The
// caller checks Len() < Cap(). Metadata is cleared in place: building a
// Meta value and copying it in costs several times more.
func (b *Batch) Append(d Desc, seq uint64, inPort uint16) {
	n := len(b.Descs)
	b.Outcome.Valid = false
	b.Descs = append(b.Descs, d)
	b.Meta = b.Meta[:n+1]
	if b.lazy && b.deferRun(n, 1, seq, inPort) {
		return
	}
	m := &b.Meta[n]
	*m = Meta{}
	m.Seq, m.InPort, m.Time = seq, inPort, b.time
}

// SetTime sets the receive time (Meta.Time, milliseconds on the wrapping
// clock) that Append and AppendRun give the packets they add from now on.
// A port that knows each packet's time (a replay) calls it per packet; the
// engine calls it once per receive call for the others. It is cheap: one
// store, and a run of deferred metadata only splits where the time
// changes.
func (b *Batch) SetTime(ms uint32) { b.time, b.epoch = ms, 0 }

// SetTime64 is SetTime with the whole time, ms since the Unix epoch, which
// Epoch then returns: the engine's clock, for ports that stamp nothing.
func (b *Batch) SetTime64(ms uint64) { b.time, b.epoch = uint32(ms), ms }

// SetEpoch sets what Epoch returns without changing the time: for a batch
// built from another's packets (steering), the other's Epoch.
func (b *Batch) SetEpoch(ms uint64) { b.epoch = ms }

// Time returns the time SetTime set last.
func (b *Batch) Time() uint32 { return b.time }

// Epoch returns the whole time SetTime64 set last, or 0 when SetTime came
// after it. Meta.Time's 32 bits wrap every 49.7 days, and a gap between
// two packets of 37 days looks the same as a step back of 12: a stage that
// keeps time (conntrack) tells them apart by this, once a batch.
func (b *Batch) Epoch() uint64 { return b.epoch }

// AppendRun appends as many of descs as fit, giving them consecutive
// receive sequence numbers from seq, and returns how many it appended. It
// is Append for a port that hands out runs of frames. Each Meta is
// written whole from a composite literal: in this loop that compiles to
// six 16-byte zero stores and the three fields, where a bulk clear
// (a memclr call) and the fields written after it cost 21 instructions
// a packet against 16.
func (b *Batch) AppendRun(descs []Desc, seq uint64, inPort uint16) int {
	n := len(b.Descs)
	b.Outcome.Valid = false
	k := min(len(descs), cap(b.Descs)-n)
	b.Descs = append(b.Descs, descs[:k]...)
	b.Meta = b.Meta[:n+k]
	if b.lazy && b.deferRun(n, k, seq, inPort) {
		return k
	}
	meta := b.Meta[n : n+k]
	t := b.time // not reloaded after each store to meta
	for i := range meta {
		meta[i] = Meta{Seq: seq + uint64(i), InPort: inPort, Time: t}
	}
	return k
}

// DeferMeta sets whether Append and AppendRun leave the new packets'
// metadata to SettleMeta instead of writing it at once. A batch that one
// goroutine fills and another processes (a worker slot) defers it so that
// the metadata, which the processing side writes anyway, is written on
// that side: clearing it on the filling side costs a cache-line transfer
// per 64 bytes of Meta, both ways. While it is deferred, the Meta of the
// packets appended since the last SettleMeta holds stale values: whoever
// reads or writes Meta before processing calls SettleMeta first. SetLen
// to a non-zero length settles first; Clear drops what was deferred.
func (b *Batch) DeferMeta(on bool) {
	if !on {
		b.SettleMeta()
	}
	b.lazy = on
}

// SettleMeta writes the metadata Append and AppendRun deferred (zero but
// for Seq, InPort and Time). It costs nothing when nothing is deferred. The
// goroutine that processes a batch calls it first.
func (b *Batch) SettleMeta() {
	if b.nruns == 0 {
		return
	}
	at := int(b.lazyFrom)
	for _, r := range b.runs[:b.nruns] {
		meta := b.Meta[at : at+int(r.n)]
		clear(meta)
		for i := range meta {
			meta[i].Seq = r.seq + uint64(i)
			meta[i].InPort = r.inPort
			meta[i].Time = r.time
		}
		at += int(r.n)
	}
	b.nruns = 0
}

// deferRun records that the k packets appended at index n get consecutive
// sequence numbers from seq: it extends the last run when they follow on,
// else starts a run. It reports false, deferring nothing (and settling
// what was deferred), when the runs are all in use.
func (b *Batch) deferRun(n, k int, seq uint64, inPort uint16) bool {
	if b.nruns == 0 {
		b.lazyFrom = uint16(n)
		b.runs[0] = lazyRun{seq: seq, n: uint16(k), inPort: inPort, time: b.time}
		b.nruns = 1
		return true
	}
	last := &b.runs[b.nruns-1]
	if last.inPort == inPort && last.seq+uint64(last.n) == seq && last.time == b.time {
		last.n += uint16(k)
		return true
	}
	if int(b.nruns) < maxLazyRuns {
		b.runs[b.nruns] = lazyRun{seq: seq, n: uint16(k), inPort: inPort, time: b.time}
		b.nruns++
		return true
	}
	b.SettleMeta()
	return false
}

// Clear empties the batch.
func (b *Batch) Clear() { b.SetLen(0) }

// Packet returns packet i's bytes: a view into the arena, valid until the
// descriptor leaves this batch (handed on, freed or overwritten). Writing
// through it rewrites the packet in place. Its capacity ends at the end of
// the frame, so a stage can grow the packet's tail within the frame.
//
// Every stage calls it for every packet, so it is written for the
// compiler: room, the bytes from the packet's start to its frame's end,
// is computed in 32 bits from the 16-bit mask, so the compiler proves it
// at least 1 and the view's capacity never 0, which spares the masking
// of the view's pointer that a slice that may end empty costs (over
// parse, conntrack and nat, 9 instructions a packet with the registers
// that frees).
// TestBatchPacketMatchesFrame holds it to the plain form,
// mem[Addr : Addr+Len : (Addr|frameMask)+1].
func (b *Batch) Packet(i int) []byte {
	d := &b.Descs[i]
	lo := d.Addr
	room := uint64(uint32(^lo)&uint32(b.frameMask) + 1)
	return b.mem[lo : lo+uint64(d.Len) : lo+room]
}

// Headroom returns how many bytes lie between the frame's start and packet
// i's first byte: how far AdjustHead can move the start back.
func (b *Batch) Headroom(i int) int {
	return int(b.Descs[i].Addr & uint64(b.frameMask))
}

// AdjustHead moves packet i's first byte by delta bytes, like
// bpf_xdp_adjust_head: a negative delta grows the packet at the front (to
// push a header), a positive one shrinks it. It reports false, changing
// nothing, when the result would leave the frame or be empty.
func (b *Batch) AdjustHead(i int, delta int) bool {
	d := &b.Descs[i]
	off := int(d.Addr & uint64(b.frameMask))
	if delta < 0 && -delta > off {
		return false
	}
	if delta >= int(d.Len) {
		return false
	}
	d.Addr = uint64(int64(d.Addr) + int64(delta))
	d.Len = uint32(int(d.Len) - delta)
	return true
}
