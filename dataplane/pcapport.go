package dataplane

import (
	"fmt"
	"io"
	"math/bits"
	"net"
	"os"
	"sync/atomic"

	"github.com/warpflow/warpflow/rings"
)

// ReplayOptions configures a replay port.
type ReplayOptions struct {
	// Name is the port's name in reports; "replay" when empty.
	Name string
	// PortIndex is written to every packet's Meta.InPort.
	PortIndex uint16
	// Loops is how many passes over the capture to make: 0 or 1 for one,
	// N > 1 for N, -1 forever. Without Preload, passes after the first
	// re-read the capture, which needs a seekable source (a file); a rewind
	// reuses the reader (no allocation for an uncompressed pcap capture, a
	// few per pass for pcapng or gzip, none per packet).
	Loops int
	// Preload reads the whole capture into arena frames at open and replays
	// from there, reading nothing more (testpmd infinite_rx, tcpreplay
	// --preload-pcap). See ReplayPort for what looping then means.
	Preload bool
	// MinFrames, with Preload, replicates the capture's packets (whole
	// passes, in capture order) until at least this many frames are filled,
	// so that a small capture can keep a deep pipeline full. 0: no replicas.
	MinFrames int
}

// DefaultReplayOptions returns the options for a single streamed pass.
func DefaultReplayOptions() ReplayOptions {
	return ReplayOptions{Name: "replay", Loops: 1}
}

// ReplayStats counts what a replay port read and handed out.
type ReplayStats struct {
	// Records is the number of capture records read (every pass when
	// streaming; once, at open, when preloaded).
	Records uint64
	// Packets and Bytes count the packets handed out by Receive and their
	// lengths after link-type normalisation (every pass).
	Packets uint64
	Bytes   uint64
	// Oversize counts records skipped because the packet (with a synthetic
	// Ethernet header, where one is added) is longer than a frame can hold:
	// frame size minus headroom. They are never truncated; the engine should
	// report them as receive drops.
	Oversize uint64
	// Malformed counts records skipped because they are shorter than their
	// own link-layer header (an SLL record under 16 bytes, ...).
	Malformed uint64
	// ZeroLength counts records skipped because they hold no bytes at all.
	// tcpdump and tshark count such a record as a packet (an empty frame
	// with its own number); there is nothing in it to run a pipeline on, so
	// it is an input drop here, and Records still counts it, so record
	// numbers stay tshark's frame numbers.
	ZeroLength uint64
	// Cut counts packets handed out whose capture record is shorter than
	// the original packet (a small snaplen); they carry rings.FlagCut.
	Cut uint64
	// BadRecycles counts descriptors given to Recycle that this port did not
	// have in flight (preload mode only; they are ignored).
	BadRecycles uint64
}

// Preloaded frame states.
const (
	frameHome     uint8 = iota // in the port, ready to be handed out
	frameOut                   // handed out, not yet recycled
	frameReleased              // returned to the arena (replay over or closed)
)

// ReplayPort is a receive-only Port that replays a pcap or pcapng capture
// (optionally gzip-compressed) as Ethernet frames; other link types are
// normalised (see linktype.go). Seq is dense from 0 over the whole replay,
// across loops.
//
// Streaming (the default): Receive allocates a frame from the arena for
// every packet and copies the record into it (the replay's "DMA", the only
// write of packet bytes into a frame); Recycle frees frames to the arena.
// When the arena is empty Receive returns the packets it has so far and
// continues on the next call, once the engine has recycled frames.
//
// Preload: the capture is copied into frames once, at open; Receive hands
// out the preloaded frames in capture order, each only after it has come back
// through Recycle, so a frame is never in flight twice. If the next frame in
// order is still in flight Receive stops there (0, nil when nothing was
// given), keeping the order deterministic. Looping restores each
// descriptor's original Addr and Len but copies no bytes: a looped packet is
// replayed as the pipeline left it, as in-place rewriting implies (a MAC swap
// applied twice gives the original back; a NAT rewrite is not undone). Once
// the last packet is handed out, frames go back to the arena as they are
// recycled.
//
// Errors: a damaged capture stops the replay with an error wrapping
// ErrCorruptCapture that names the capture and record number (1-based);
// packets read before it are still handed out first. An unsupported link type
// is a *LinkTypeError (wrapping ErrUnsupportedLinkType): at open for pcap, at
// the first record on that interface for pcapng (at open if it is the first
// record).
//
// Like every Port, it is driven by one goroutine; Stats may be called from
// any goroutine.
type ReplayPort struct {
	name   string
	opt    ReplayOptions
	a      *rings.Arena
	mem    []byte
	maxLen int // longest packet a frame holds: frame size minus headroom

	// streaming
	src io.Reader
	// seeker is src as an io.Seeker (nil when it is not one), asserted
	// once here: an assertion to an interface in rewind, once a pass,
	// allocated now and then (the runtime fills a call site's assertion
	// cache lazily, allocating on a random miss), which the exact
	// zero-allocation count of TestStreamRewindReuse caught once in a
	// few hundred to 3000 runs.
	seeker  io.Seeker
	file    *os.File // owned, closed by Close; nil for NewReplay
	rd      *recordReader
	rec     record // read but not yet placed (arena was empty)
	pending bool
	live    bool   // the source cannot seek (a pipe): hand out what is read before a read that may block
	nrec    uint64 // records read (all passes); published to records per call
	hdr     [ethHeaderLen]byte
	passes  int    // passes started
	passPkt uint64 // packets placed in the current pass
	size    int64  // the capture's size in bytes as stored, 0 when unknown

	// preload
	pre      []rings.Desc // original descriptors, capture order, replicas included
	preCut   []bool       // per pre entry: the record was cut by the capture (nil when none was)
	preTime  []uint32     // per pre entry: the record's time (Meta.Time); nil when all are preTime0
	preTime0 uint32       // the first record's time
	state    []uint8      // per pre entry: frameHome, frameOut, frameReleased
	byFrame  []int32      // arena frame number -> pre index + 1 (0: not preloaded)
	shift    uint         // log2(frame size)
	cursor   int          // next pre index to hand out
	left     int64        // packets still to hand out; -1 forever
	finished bool         // left reached 0 and home frames went back to the arena

	// stamps holds, per arena frame, what the capture said of the packet
	// in it (timestamp, original length), for the pcap writers.
	stamps *frameStamps
	// budget, when set, is the outputs' byte limit: once it is reached
	// the port stops with its error (see outputBudget).
	budget *outputBudget

	seq    uint64
	err    error // sticky receive error
	eof    bool
	closed bool

	records, packets, bytes, oversize, malformed, zeroLen, cut, badRecycles atomic.Uint64
}

// OpenReplay opens the capture at path for replay into arena a.
func OpenReplay(path string, a *rings.Arena, o ReplayOptions) (*ReplayPort, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open capture: %w", err)
	}
	p, err := newReplay(path, f, f, a, o)
	if err != nil {
		f.Close()
		return nil, err
	}
	return p, nil
}

// NewReplay replays the capture read from r, named name in errors, into
// arena a. Looping without Preload needs r to be an io.Seeker. The caller
// keeps ownership of r: Close does not close it.
func NewReplay(name string, r io.Reader, a *rings.Arena, o ReplayOptions) (*ReplayPort, error) {
	return newReplay(name, r, nil, a, o)
}

func newReplay(name string, r io.Reader, f *os.File, a *rings.Arena, o ReplayOptions) (*ReplayPort, error) {
	if a == nil {
		return nil, fmt.Errorf("replay %s: nil arena", name)
	}
	rd, err := newRecordReader(name, r)
	if err != nil {
		return nil, err
	}
	return newReplayFrom(rd, f, a, o)
}

// canSeek reports whether r can be read again from its start: a Seeker
// that is not an *os.File, or an *os.File of a regular file (a pipe's
// Seek fails).
func canSeek(r io.Reader) bool {
	if f, ok := r.(*os.File); ok {
		fi, err := f.Stat()
		return err == nil && fi.Mode().IsRegular()
	}
	_, ok := r.(io.Seeker)
	return ok
}

// newReplayFrom makes the port over a record reader that has read the
// capture's header (and nothing more, or was rewound). f, when set, is
// the file under it, which the port then owns.
func newReplayFrom(rd *recordReader, f *os.File, a *rings.Arena, o ReplayOptions) (*ReplayPort, error) {
	name, r := rd.name, rd.src
	if a == nil {
		return nil, fmt.Errorf("replay %s: nil arena", name)
	}
	if o.Loops < -1 {
		return nil, fmt.Errorf("replay %s: loops %d: want -1 (forever), 0, 1 or more", name, o.Loops)
	}
	if o.MinFrames < 0 || o.MinFrames > a.Frames() {
		return nil, fmt.Errorf("replay %s: min frames %d: want 0 to %d (the arena's frames)", name, o.MinFrames, a.Frames())
	}
	if o.MinFrames > 0 && !o.Preload {
		return nil, fmt.Errorf("replay %s: min frames %d needs preload", name, o.MinFrames)
	}
	seekable := canSeek(r)
	if !seekable && !o.Preload && (o.Loops > 1 || o.Loops == -1) {
		return nil, fmt.Errorf("replay %s: loops %d without preload need a seekable source", name, o.Loops)
	}
	if o.Name == "" {
		o.Name = "replay"
	}
	p := &ReplayPort{
		name:   o.Name,
		opt:    o,
		a:      a,
		mem:    a.Mem(),
		maxLen: a.FrameSize() - a.Headroom(),
		src:    r,
		file:   f,
		live:   !seekable,
		shift:  uint(bits.TrailingZeros(uint(a.FrameSize()))),
	}
	p.seeker, _ = r.(io.Seeker)
	p.stamps = newFrameStamps(a)
	switch src := r.(type) {
	case *os.File:
		if fi, err := src.Stat(); err == nil && fi.Mode().IsRegular() {
			p.size = fi.Size()
		}
	case interface{ Size() int64 }: // bytes.Reader, strings.Reader
		p.size = src.Size()
	}
	p.rd = rd
	p.passes = 1
	if o.Preload {
		if err := p.preload(); err != nil {
			return nil, err
		}
		p.rd, p.src = nil, nil
		if f != nil {
			// Everything is in frames; the file is not needed any more.
			p.file = nil
			if err := f.Close(); err != nil {
				p.releaseAll()
				return nil, fmt.Errorf("close capture %s: %w", name, err)
			}
		}
		return p, nil
	}
	// Read the first record now, so that a pcapng capture whose first
	// interface has an unsupported link type (or a capture that is corrupt
	// from its first record) fails at open.
	if _, _, err := p.receiveStream(nil); err != nil {
		return nil, err
	}
	p.records.Store(p.nrec)
	return p, nil
}

// fill reads the next record into p.rec unless one is pending. At the end
// of a pass it starts the next one if loops remain; it sets p.eof at the
// end of the last. The caller recovers from a panic in the capture reader
// (see receiveStream) and publishes p.nrec.
func (p *ReplayPort) fill() error {
	for !p.pending && !p.eof {
		err := p.rd.readInto(&p.rec)
		if err == io.EOF {
			if err := p.rewind(); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		p.nrec++
		p.pending = true
	}
	return nil
}

// rewind starts the next pass, or sets p.eof when the replay is over. A pass
// that handed out no packet ends the replay, so a capture of only skipped
// records cannot loop forever.
func (p *ReplayPort) rewind() error {
	more := p.opt.Loops == -1 || p.passes < p.opt.Loops
	if !more || p.passPkt == 0 {
		p.eof = true
		return nil
	}
	if p.seeker == nil { // canSeek at open makes this unreachable
		return fmt.Errorf("capture %s: rewind for pass %d: the source cannot seek", p.rd.name, p.passes+1)
	}
	if _, err := p.seeker.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("capture %s: rewind for pass %d: %w", p.rd.name, p.passes+1, err)
	}
	if err := p.rd.rewind(); err != nil {
		return err
	}
	p.passes++
	p.passPkt = 0
	return nil
}

// place normalises the pending record into a frame taken from the arena.
// It reports false (leaving the record pending) when the arena is empty;
// skipped records are consumed and counted.
func (p *ReplayPort) place() (d rings.Desc, placed, ok bool) {
	data := p.rec.data
	if len(data) == 0 {
		p.pending = false
		p.zeroLen.Add(1)
		return d, false, true
	}
	hl, skip, good := normalize(p.rec.kind, data, &p.hdr)
	if !good {
		p.pending = false
		p.malformed.Add(1)
		return d, false, true
	}
	n := hl + len(data) - skip
	if n > p.maxLen {
		p.pending = false
		p.oversize.Add(1)
		return d, false, true
	}
	addr, ok := p.a.Alloc()
	if !ok {
		return d, false, false
	}
	p.stamps.s[addr>>p.shift] = frameStamp{ts: p.rec.ts, delta: int32(int64(p.rec.orig) - int64(len(data)))}
	dst := p.mem[addr : addr+uint64(n)]
	if hl > 0 { // Ethernet (most captures) has no header to write
		copy(dst, p.hdr[:hl])
	}
	copy(dst[hl:], data[skip:])
	p.pending = false
	return rings.Desc{Addr: addr, Len: uint32(n)}, true, true
}

// fraction returns how much of the replay is done, from 0 to 1, or -1 when
// that is unknown (looping forever, or a stream of unknown size). Call it
// from the goroutine that drives the port.
func (p *ReplayPort) fraction() float64 {
	loops := max(p.opt.Loops, 1)
	switch {
	case p.opt.Loops == -1:
		return -1
	case p.eof:
		return 1
	case p.opt.Preload:
		total := int64(loops) * int64(len(p.pre))
		if total == 0 {
			return 1
		}
		return float64(total-p.left) / float64(total)
	case p.size <= 0 || p.rd == nil:
		return -1
	}
	pos := min(float64(p.rd.in.n)/float64(p.size), 1)
	return (float64(p.passes-1) + pos) / float64(loops)
}

// Name returns the port's name.
func (p *ReplayPort) Name() string { return p.name }

// Receive appends up to b.Cap()-b.Len() packets to b. It returns io.EOF (with
// n == 0) when the replay is over, the replay's error once packets read
// before it have been handed out, and net.ErrClosed after Close.
func (p *ReplayPort) Receive(b *rings.Batch) (int, error) {
	if p.closed {
		return 0, net.ErrClosed
	}
	if p.budget != nil && p.budget.hit && p.err == nil {
		p.err = p.budget.err(p.nrec)
	}
	if p.opt.Preload {
		if p.err != nil {
			return 0, p.err
		}
		return p.receivePreloaded(b)
	}
	n, bytes, err := p.receiveStream(b)
	if err != nil {
		p.err = err
	}
	p.records.Store(p.nrec)
	return p.done(n, bytes)
}

// receiveStream fills b (nil: only reads the first record) from the capture
// stream. It is the streaming hot path: one deferred recover per batch, not
// per record, turns a panic inside the capture reader (a bug on hostile input)
// into an error naming the record; packets placed before it stay in b.
func (p *ReplayPort) receiveStream(b *rings.Batch) (n int, bytes uint64, err error) {
	defer func() {
		if r := recover(); r != nil {
			p.pending = false
			err = p.rd.recovered(r)
		}
	}()
	if b == nil {
		return 0, 0, p.fill()
	}
	for len(b.Descs) < cap(b.Descs) && p.err == nil {
		if err := p.fill(); err != nil {
			return n, bytes, err
		}
		if p.eof {
			break
		}
		d, placed, ok := p.place()
		if !ok {
			break // arena empty: the engine recycles and calls again
		}
		if !placed {
			continue
		}
		b.SetTime(metaTime(p.rec.ts)) // the capture's clock: timeouts replay the same
		b.Append(d, p.seq, p.opt.PortIndex)
		if p.rec.cut {
			b.SettleMeta() // a worker slot defers it: write it before the flag
			b.Meta[len(b.Meta)-1].Flags = rings.FlagCut
			p.cut.Add(1)
		}
		p.seq++
		p.passPkt++
		n++
		bytes += uint64(d.Len)
		if p.live && p.rd.buf.Buffered() == 0 {
			// A live stream: what was read goes on now, rather than
			// waiting in a part-filled batch for traffic that may not come.
			break
		}
	}
	return n, bytes, nil
}

// done publishes a Receive call's counts and picks its error.
func (p *ReplayPort) done(n int, bytes uint64) (int, error) {
	if n > 0 {
		p.packets.Add(uint64(n))
		p.bytes.Add(bytes)
		return n, nil
	}
	if p.err != nil {
		return 0, p.err
	}
	if p.eof {
		return 0, io.EOF
	}
	return 0, nil
}

// Transmit returns ErrNotTransmitter: a replay port only receives.
func (p *ReplayPort) Transmit(*rings.Arena, []rings.Desc) (int, error) {
	if p.closed {
		return 0, net.ErrClosed
	}
	return 0, ErrNotTransmitter
}

// Recycle takes back frames handed out by Receive: to the arena when
// streaming, to the preloaded set (or, once the replay is over or the port
// closed, the arena) when preloaded.
func (p *ReplayPort) Recycle(descs []rings.Desc) {
	if !p.opt.Preload {
		for _, d := range descs {
			p.a.Free(d.Addr)
		}
		return
	}
	p.recyclePreloaded(descs)
}

// Close ends the replay, returns the frames it holds to the arena and closes
// the capture file it opened. Frames still in flight go back to the arena
// when recycled. Calls after Close return net.ErrClosed.
func (p *ReplayPort) Close() error {
	if p.closed {
		return net.ErrClosed
	}
	p.closed = true
	p.releaseAll()
	p.pending = false
	if p.file != nil {
		f := p.file
		p.file = nil
		if err := f.Close(); err != nil {
			return fmt.Errorf("close capture %s: %w", f.Name(), err)
		}
	}
	return nil
}

// Stats returns the port's counters.
func (p *ReplayPort) Stats() ReplayStats {
	return ReplayStats{
		Records:     p.records.Load(),
		Packets:     p.packets.Load(),
		Bytes:       p.bytes.Load(),
		Oversize:    p.oversize.Load(),
		Malformed:   p.malformed.Load(),
		ZeroLength:  p.zeroLen.Load(),
		Cut:         p.cut.Load(),
		BadRecycles: p.badRecycles.Load(),
	}
}

var _ Port = (*ReplayPort)(nil)

// metaTime is a record timestamp (ns since the Unix epoch) on
// rings.Meta.Time's clock: Unix milliseconds, truncated to 32 bits.
func metaTime(ns int64) uint32 { return uint32(ns / 1e6) }
