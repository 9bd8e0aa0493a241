package dataplane

import (
	"sync/atomic"

	"github.com/warpflow/warpflow/rings"
)

// FrameAccount says where every frame of an engine's arena is, one count
// per place. At any moment each frame is in exactly one place, so Total
// equals the arena's frame count (in every Engine.Stats: the places are
// read as of one publication of the I/O loop). The counts come from the
// engine's own counters and from ports' ring indices, never from a walk
// over the frames, so an account is cheap enough to export with every
// stats scrape. FramePlaces lists the places with their names: everything
// that prints or exports an account iterates it.
type FrameAccount struct {
	Free       int `json:"free"`
	Fill       int `json:"fill"`
	KernelRX   int `json:"kernel_rx"`
	RX         int `json:"rx"`
	Port       int `json:"port"`
	Engine     int `json:"engine"`
	TX         int `json:"tx"`
	KernelTX   int `json:"kernel_tx"`
	Completion int `json:"completion"`
	Output     int `json:"output"`
	Lost       int `json:"lost"`
	Unreported int `json:"unreported"`
}

// FramePlace is one place a frame can be: its name (FrameAccount's JSON
// key), what it means and its count in an account.
type FramePlace struct {
	Name string
	Help string
	of   func(*FrameAccount) *int
}

// Frames is the place's count in a.
func (p FramePlace) Frames(a *FrameAccount) int { return *p.of(a) }

// framePlaces is the one list of places, in the order frames go round.
var framePlaces = [...]FramePlace{
	{"free", "on the arena's free stack", func(a *FrameAccount) *int { return &a.Free }},
	{"fill", "on an input's fill ring: given to the kernel to receive into, not yet taken", func(a *FrameAccount) *int { return &a.Fill }},
	{"kernel_rx", "taken by the kernel from the fill ring, not yet on the RX ring (being received into, or waiting)", func(a *FrameAccount) *int { return &a.KernelRX }},
	{"rx", "on an RX ring, not yet received by the engine", func(a *FrameAccount) *int { return &a.RX }},
	{"port", "in a port's own store (its private free list, a preloaded capture's frames at home)", func(a *FrameAccount) *int { return &a.Port }},
	{"engine", "the engine's: in the batch being received into, in an executor slot, or being completed", func(a *FrameAccount) *int { return &a.Engine }},
	{"tx", "on a TX ring, not yet taken by the kernel", func(a *FrameAccount) *int { return &a.TX }},
	{"kernel_tx", "taken by the kernel from the TX ring, not yet on the completion ring", func(a *FrameAccount) *int { return &a.KernelTX }},
	{"completion", "on a completion ring, not yet taken back", func(a *FrameAccount) *int { return &a.Completion }},
	{"output", "held by a Completer output that does not report its own places (accepted minus completed)", func(a *FrameAccount) *int { return &a.Output }},
	{"lost", "never given back by a Completer within Options.DrainTimeout (a reporting port, such as a sharing AF_XDP output, keeps counting its own in its places: Stats.FramesLost, frames_lost, counts both)", func(a *FrameAccount) *int { return &a.Lost }},
	{"unreported", "held by an input that does not report its places (a replay port): the arena's frames minus every place above", func(a *FrameAccount) *int { return &a.Unreported }},
}

// FramePlaces lists every place a frame can be, in the order frames go
// round.
func FramePlaces() []FramePlace { return framePlaces[:] }

// Total is the sum over every place.
func (a FrameAccount) Total() int {
	n := 0
	for _, p := range framePlaces {
		n += p.Frames(&a)
	}
	return n
}

// FrameReporter is a port that reports where the frames it holds are (an
// AF_XDP port: fill, kernel, RX, TX and completion, from its rings'
// producer and consumer indices).
//
// The I/O loop calls PublishPlaces at every publication, inside the
// engine's sequence count: the port stores the ring indices the I/O loop
// writes itself (the fill and TX producers, the RX and completion
// consumers) where FramePlaces reads them. FramePlaces, called from any
// goroutine within the same sequence, adds the port's counts to acct
// (never overwriting a field: two ports may share one account) from those
// published indices and the kernel's, each read once, downstream first
// and held between its published neighbours, so that no count is ever
// negative and the port's counts sum to what it held at the publication:
// the account sums to the arena's frame count exactly. Neither may walk
// frames or allocate.
type FrameReporter interface {
	PublishPlaces()
	FramePlaces(acct *FrameAccount)
}

// FrameTracker is a port that records its own places in the accounting
// (debug) mode. NewEngine calls TrackFrames once, before any other call,
// when Options.TrackFrames is set. The port interns each of its places with
// t.Owner ("xsk0 fill", "xsk0 tx", ...) and returns home, the place where
// it and the engine hand frames over:
//   - the engine moves a frame from its own place to home just before it
//     gives it to the port (Recycle, and Transmit on a Completer, whose
//     refused suffix it moves back after), and from home to its own place
//     just after the port gave it (Receive, Complete);
//   - the port records, with t.Move, each move between home and its other
//     places (home to fill ring in Recycle, home to TX ring in Transmit, RX
//     ring to home in Receive, completion ring to home in Complete).
//
// So a frame in two places fails the first move that meets it, with an
// error naming the frame and both places. The tracker is used only from
// the I/O loop.
type FrameTracker interface {
	TrackFrames(t *rings.Tracker) (home rings.Owner)
}

// published is what the I/O loop publishes for other goroutines (Stats):
// single-writer atomics under a sequence count, so a reader
// gets one consistent batch boundary without a lock. The writer makes seq
// odd, stores, and makes it even again; a reader retries while seq is odd
// or changed under it.
type published struct {
	seq    atomic.Uint64
	free   atomic.Int64
	engine atomic.Int64
	held   []atomic.Int64 // by completer
	lost   []atomic.Int64 // by completer

	received, receivedBytes atomic.Uint64
	passPackets, passBytes  atomic.Uint64
	batches, execFull       atomic.Uint64
	// The per-port and per-reason counters are the layout's (layout.txPackets
	// ...), published with it: Engine.layPtr, stored inside the sequence;
	// so are the reporting ports' ring indices (FrameReporter).
	_ [cacheLinePad]byte
}

const cacheLinePad = 64

// publishEvery is how many packets the I/O loop may count before it
// publishes, when nothing else makes it: a publication costs about ten
// atomic stores (some 50ns), too much for every 64-packet batch of a
// replay, nothing against a few microseconds of 1024 packets. An idle loop
// publishes at once, and so does every turn of an engine with a Completer
// output (a live port, whose turn costs far more), so a reader sees the
// counts at most publishEvery packets old and exact whenever the engine
// rests.
const publishEvery = 1024

// turnDone publishes after a loop turn that did work, when it is time to.
func (e *Engine) turnDone() {
	e.dirty = true
	if e.holds || e.counts.received-e.pubAt >= publishEvery {
		e.publish()
	}
}

// idleTurn publishes what the last busy turns left unpublished, and a
// free count that a port changed on a turn that received nothing (an
// AF_XDP port's first Receive moves frames from the arena to its fill
// ring before any packet arrives).
func (e *Engine) idleTurn() {
	if e.dirty || e.pub.free.Load() != int64(e.arena.FreeFrames()) {
		e.publish()
	}
}

// storeIfChanged stores v unless c already holds it: the I/O loop is the
// only writer, so its own load is exact and costs a plain read, while a
// store is a locked instruction.
func storeIfChanged(c *atomic.Uint64, v uint64) {
	if c.Load() != v {
		c.Store(v)
	}
}

// publish stores the I/O loop's counts for readers on other goroutines
// (Stats), under the sequence count. I/O loop only; never per packet.
func (e *Engine) publish() {
	p := &e.pub
	c := &e.counts
	s := p.seq.Load()
	p.seq.Store(s + 1)
	p.free.Store(int64(e.arena.FreeFrames()))
	p.engine.Store(int64(e.inEngine))
	for k := range e.comps {
		cp := &e.comps[k]
		p.held[k].Store(int64(cp.held))
		p.lost[k].Store(int64(cp.lost))
	}
	storeIfChanged(&p.received, c.received)
	storeIfChanged(&p.receivedBytes, c.receivedBytes)
	storeIfChanged(&p.passPackets, c.passPackets)
	storeIfChanged(&p.passBytes, c.passBytes)
	storeIfChanged(&p.batches, c.batches)
	storeIfChanged(&p.execFull, c.execFull)
	l := e.lay
	for i := range c.txPackets {
		storeIfChanged(&l.txPackets[i], c.txPackets[i])
		storeIfChanged(&l.txBytes[i], c.txBytes[i])
	}
	for i := range c.dropPackets {
		storeIfChanged(&l.dropPackets[i], c.dropPackets[i])
		storeIfChanged(&l.dropBytes[i], c.dropBytes[i])
	}
	if e.layPtr.Load() != l {
		e.layPtr.Store(l)
	}
	for _, r := range e.reporters {
		r.PublishPlaces()
	}
	publishSamples(e.cur)
	publishSamples(e.old)
	p.seq.Store(s + 2)
	e.dirty = false
	e.pubAt = c.received
}

// publishSamples stores pl's sampler counts for Engine.Stats. I/O loop
// only (or a plan nothing runs).
func publishSamples(pl *plan) {
	if pl == nil {
		return
	}
	for k := range pl.samples {
		storeIfChanged(&pl.samplePub[k].kept, pl.samples[k].kept)
	}
}

func (e *Engine) initPublished() {
	p := &e.pub
	p.held = make([]atomic.Int64, len(e.comps))
	p.lost = make([]atomic.Int64, len(e.comps))
	e.publish()
}

// adoptLayout moves the I/O loop's counters to layout l, which extends the
// current one (indices keep their meaning; new ones start at zero). It
// allocates: once per swap that adds names, never per packet.
func (e *Engine) adoptLayout(l *layout) {
	c := &e.counts
	grow := func(s []uint64, n int) []uint64 {
		for len(s) < n {
			s = append(s, 0)
		}
		return s
	}
	c.txPackets = grow(c.txPackets, len(l.ports))
	c.txBytes = grow(c.txBytes, len(l.ports))
	c.dropPackets = grow(c.dropPackets, len(l.reasons))
	c.dropBytes = grow(c.dropBytes, len(l.reasons))
	e.lay = l
}

// engineReasonNames are the engine's drop reasons, in index order.
var engineReasonNames = [engineReasons]string{reasonTxFull, reasonTxError, reasonNoVerdict, reasonPassFull, reasonPassError}

// addReporter registers p if it reports its places and is not registered
// yet.
func (e *Engine) addReporter(p Port) bool {
	r, ok := p.(FrameReporter)
	if !ok {
		return false
	}
	for _, q := range e.reporters {
		if rp, ok := q.(Port); ok && samePort(rp, p) {
			return true
		}
	}
	e.reporters = append(e.reporters, r)
	return true
}
