package dataplane

import (
	"runtime"
	"sync/atomic"

	"github.com/warpflow/warpflow/rings"
)

// FrameAccount says where every frame of an engine's arena is, one count
// per place. At any moment each frame is in exactly one place, so at
// quiescence Total equals the arena's frame count. The counts come from the
// engine's own counters and from ports' ring indices, never from a walk
// over the frames, so an account is cheap enough to export with every
// stats scrape.
type FrameAccount struct {
	// Free frames are on the arena's free stack.
	Free int `json:"free"`
	// Fill frames are on an input's fill ring: given to the kernel to
	// receive into, not yet taken by it.
	Fill int `json:"fill"`
	// KernelRX frames were taken by the kernel from the fill ring and are
	// not yet on the RX ring (being received into, or waiting).
	KernelRX int `json:"kernel_rx"`
	// RX frames are on an RX ring, not yet received by the engine.
	RX int `json:"rx"`
	// Port frames are in a port's own store: a port's private free list,
	// a preloaded capture's frames at home.
	Port int `json:"port"`
	// Engine frames are the engine's: in the batch being received into, in
	// an executor slot, or being completed (the "worker" place).
	Engine int `json:"engine"`
	// TX frames are on a TX ring, not yet taken by the kernel.
	TX int `json:"tx"`
	// KernelTX frames were taken by the kernel from the TX ring and are not
	// yet on the completion ring.
	KernelTX int `json:"kernel_tx"`
	// Completion frames are on a completion ring, not yet taken back.
	Completion int `json:"completion"`
	// Output frames are held by a Completer output that does not report
	// its own places (the engine's count of accepted minus completed).
	Output int `json:"output"`
	// Lost frames were never given back by a Completer that does not
	// report its places within Options.DrainTimeout. (A reporting port
	// keeps counting the ones it still holds in its own places.)
	Lost int `json:"lost"`
	// Unreported is the rest when the input port does not report its
	// places (a replay port): the arena's frames minus every count above,
	// that is, what the input holds by its own means. It is zero when the
	// input reports.
	Unreported int `json:"unreported"`
}

// Total is the sum over every place.
func (a FrameAccount) Total() int {
	return a.Free + a.Fill + a.KernelRX + a.RX + a.Port + a.Engine + a.TX + a.KernelTX + a.Completion + a.Output + a.Lost + a.Unreported
}

// FrameReporter is a port that reports where the frames it holds are (an
// AF_XDP port: fill, kernel, RX, TX and completion, from its rings'
// producer and consumer indices and its own counters). FramePlaces adds its
// counts to acct (it never overwrites a field: two ports may share one
// account). It is called from any goroutine while the engine runs, so it
// reads only atomics; a count read while frames move may be off by the
// frames in transit, and is exact once the port is quiescent. It must not
// walk frames or allocate.
type FrameReporter interface {
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

// published is what the I/O loop publishes for other goroutines (Frames,
// Snapshot): single-writer atomics under a sequence count, so a reader
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
	// ...), published with it: Engine.layPtr, stored inside the sequence.
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
// (Frames, Snapshot), under the sequence count. I/O loop only; never per
// packet.
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
	publishSamples(e.cur)
	publishSamples(e.old)
	p.seq.Store(s + 2)
	e.dirty = false
	e.pubAt = c.received
}

// publishSamples stores pl's sampler counts for Engine.Samples. I/O loop
// only (or a plan nothing runs).
func publishSamples(pl *plan) {
	if pl == nil {
		return
	}
	for k := range pl.samples {
		storeIfChanged(&pl.samplePub[k].candidates, pl.samples[k].candidate)
		storeIfChanged(&pl.samplePub[k].written, pl.samples[k].written)
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

// Snapshot is the engine's verdict counters as of one loop turn: received
// equals transmitted plus dropped plus passed in every snapshot, because
// the I/O loop publishes between batches, never inside one.
type Snapshot struct {
	Received      uint64 `json:"received"`
	ReceivedBytes uint64 `json:"received_bytes"`
	Transmitted   uint64 `json:"transmitted"`
	Dropped       uint64 `json:"dropped"`
	Passed        uint64 `json:"passed"`
	PassedBytes   uint64 `json:"passed_bytes"`
	// Ports is what each tx port took, in the graph's port order (after a
	// swap: every port any plan had, in order of first appearance).
	Ports []PortCount `json:"ports"`
	// Drops has every reason, in a fixed order (the first graph's reasons,
	// then the engine's: tx_full, tx_error, internal_no_verdict, pass_full,
	// pass_error, then reasons later plans added), zeros included, so a
	// scraper's series are stable.
	Drops []DropCount `json:"drops"`
	// Batches is how many batches the engine completed.
	Batches uint64 `json:"batches"`
	// ExecutorFull counts loop turns that found every executor slot in
	// flight (back-pressure from the workers; nothing is lost, the input
	// waits).
	ExecutorFull uint64 `json:"executor_full"`
	// FramesLost is what Completers never gave back (FrameAccount.Lost,
	// reporting ports included).
	FramesLost uint64 `json:"frames_lost"`
}

// engineReasonNames are the engine's drop reasons, in index order.
var engineReasonNames = [engineReasons]string{reasonTxFull, reasonTxError, reasonNoVerdict, reasonPassFull, reasonPassError}

// Snapshot returns the engine's verdict counters without a lock: safe from
// any goroutine while the engine runs, it never blocks the I/O loop (it
// retries while a publication is under way). The counts are at most
// publishEvery packets old, and exact when the engine rests or has
// stopped. It allocates the result (control plane only).
func (e *Engine) Snapshot() Snapshot {
	var s Snapshot
	p := &e.pub
	for {
		seq := p.seq.Load()
		if seq&1 != 0 {
			runtime.Gosched()
			continue
		}
		l := e.layPtr.Load()
		s.Received, s.ReceivedBytes = p.received.Load(), p.receivedBytes.Load()
		s.Passed, s.PassedBytes = p.passPackets.Load(), p.passBytes.Load()
		s.Batches, s.ExecutorFull = p.batches.Load(), p.execFull.Load()
		s.Transmitted, s.Dropped, s.FramesLost = 0, 0, 0
		s.Ports = s.Ports[:0]
		s.Drops = s.Drops[:0]
		for i, name := range l.ports {
			s.Ports = append(s.Ports, PortCount{Port: name, Packets: l.txPackets[i].Load(), Bytes: l.txBytes[i].Load()})
			s.Transmitted += s.Ports[i].Packets
		}
		for i, name := range l.reasons {
			s.Drops = append(s.Drops, DropCount{Reason: name, Packets: l.dropPackets[i].Load(), Bytes: l.dropBytes[i].Load()})
			s.Dropped += s.Drops[i].Packets
		}
		for k := range p.lost {
			s.FramesLost += uint64(p.lost[k].Load())
		}
		if p.seq.Load() == seq {
			return s
		}
	}
}

// Frames returns where every frame of the engine's arena is now. It is safe
// from any goroutine while the engine runs and never blocks it. The
// engine's own places (Free, Engine, Output, Lost) are one consistent
// snapshot, taken at the end of a loop turn; ports that report their places
// are read after it, so while frames move between a port and the engine
// the total may be off by the frames in transit. At quiescence (before Run,
// after it, or with the loop parked) Total equals the arena's frame count.
func (e *Engine) Frames() FrameAccount {
	var a FrameAccount
	p := &e.pub
	for {
		s := p.seq.Load()
		if s&1 != 0 {
			runtime.Gosched()
			continue
		}
		a = FrameAccount{Free: int(p.free.Load()), Engine: int(p.engine.Load())}
		for k := range e.comps {
			if !e.comps[k].reports {
				a.Output += int(p.held[k].Load())
				a.Lost += int(p.lost[k].Load())
			}
		}
		if p.seq.Load() == s {
			break
		}
	}
	for _, r := range e.reporters {
		r.FramePlaces(&a)
	}
	if !e.inReports {
		a.Unreported = e.arena.Frames() - a.Total()
	}
	return a
}

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
