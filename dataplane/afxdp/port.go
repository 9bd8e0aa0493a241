package afxdp

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/xdp"
)

// Port is a dataplane.Port over one AF_XDP socket. A port on a receive
// queue's socket receives (and may transmit: forwarding out of the same
// interface); a port on a shared-UMEM socket of an output interface only
// transmits. Every method but the counters and FramePlaces belongs to the
// engine's I/O loop.
type Port struct {
	name    string
	sock    *xdp.Socket
	arena   *rings.Arena
	receive bool
	inPort  uint16
	seq     uint64

	frameMask uint64 // frame size - 1
	fillBuf   []uint64
	// outstanding counts frames accepted by Transmit and not yet handed
	// back by Complete: on the TX ring, in the kernel, or on the
	// completion ring. Written by the I/O loop only.
	outstanding int

	// Adaptive idle (Wait): spin is how many idle turns to spin before
	// sleeping in poll(2), doubled when packets arrived during a spin and
	// halved when a spin ran out; limit is the current idle stretch's
	// (spin, or a probe), spun its turns so far, slept whether it reached
	// poll; stretches counts idle stretches. I/O loop only.
	spin, limit, spun int
	stretches         uint
	slept             bool
	waitErr           error // a failed poll, returned by the next Receive

	stats portCounters
	// pub is the ring indices the I/O loop writes, as of the engine's
	// last publication (PublishPlaces), for FramePlaces.
	pub    struct{ fillProd, rxCons, txProd, compCons atomic.Uint32 }
	err    error       // first socket error seen (ENETDOWN after the link went)
	closed atomic.Bool // set by Close; FramePlaces reads nothing after it
	// settled is set by Settle: the port transmits no more, and what was
	// still on its TX ring then is counted (tx_abandoned).
	settled atomic.Bool

	// Accounting (debug) mode: nil tracker when off. home is where the
	// engine and the port hand frames over; rxKernel holds the frames
	// given to the kernel to receive into (fill ring and kernel), txKernel
	// those given to it to send (TX ring, kernel, completion ring).
	tracker            *rings.Tracker
	home               rings.Owner
	rxKernel, txKernel rings.Owner
	trackErr           error
}

// Engine-side interfaces this port implements.
var (
	_ dataplane.Completer     = (*Port)(nil)
	_ dataplane.FrameReporter = (*Port)(nil)
	_ dataplane.FrameTracker  = (*Port)(nil)
	_ dataplane.Waiter        = (*Port)(nil)
)

// portCounters are written by the I/O loop and read from any goroutine
// (ReadCounters); portCounterDecls declares them.
type portCounters struct {
	rxPackets, txPackets, completions atomic.Uint64
	fillStarved, txRingFull           atomic.Uint64
	txAbandoned                       atomic.Uint64
	kicks, wakeups, kickErrors        atomic.Uint64
	linkDown                          atomic.Uint64
	polls, pollErrors                 atomic.Uint64
}

// ErrBadOptions reports options that cannot make a port.
var ErrBadOptions = errors.New("bad port options")

// NewPort makes a port named name over sock, whose UMEM is arena's memory.
// A receiving port tags its packets with inPort.
func NewPort(name string, sock *xdp.Socket, arena *rings.Arena, receive bool, inPort uint16) (*Port, error) {
	if sock == nil || arena == nil {
		return nil, fmt.Errorf("port %s: %w: a socket and an arena are required", name, ErrBadOptions)
	}
	p := &Port{
		name:      name,
		sock:      sock,
		arena:     arena,
		receive:   receive,
		inPort:    inPort,
		frameMask: uint64(arena.FrameSize() - 1),
		spin:      minSpin,
	}
	if receive {
		// The first Receive fills the fill ring: after NewEngine has
		// offered the accounting mode its tracker.
		p.fillBuf = make([]uint64, sock.Fill().Size())
	}
	return p, nil
}

// Name returns the port's name.
func (p *Port) Name() string { return p.name }

// Socket returns the port's socket.
func (p *Port) Socket() *xdp.Socket { return p.sock }

// Err returns the first socket error the port saw (nil while healthy).
func (p *Port) Err() error { return p.err }

// refill tops the fill ring up from the arena's free stack.
func (p *Port) refill() {
	f := p.sock.Fill()
	room := f.Size() - int(f.Producer()-f.Consumer())
	if room <= 0 {
		return
	}
	free := p.arena.FreeFrames()
	if free == 0 {
		if room > 3*f.Size()/4 {
			p.stats.fillStarved.Add(1)
		}
		return
	}
	n := p.arena.AllocN(p.fillBuf[:min(room, free)])
	for i := range n {
		p.fillBuf[i] &^= p.frameMask // the kernel takes frame bases
	}
	put := f.ProduceAddrs(p.fillBuf[:n])
	for _, a := range p.fillBuf[put:n] { // cannot happen: room was measured
		p.arena.Free(a)
	}
	if p.tracker != nil {
		for _, a := range p.fillBuf[:put] {
			p.track(a, rings.OwnerFree, p.rxKernel)
		}
	}
}

// track records one move in the accounting mode, keeping the first error.
func (p *Port) track(addr uint64, from, to rings.Owner) {
	if p.trackErr != nil {
		return
	}
	if err := p.tracker.Move(addr, from, to); err != nil {
		p.trackErr = fmt.Errorf("%s: %w", p.name, err)
	}
}

// TrackFrames interns the port's places in t and returns its home (the
// accounting mode; the engine calls it before anything else).
func (p *Port) TrackFrames(t *rings.Tracker) rings.Owner {
	p.tracker = t
	p.home = t.Owner(p.name)
	p.rxKernel = t.Owner(p.name + " fill/kernel rx")
	p.txKernel = t.Owner(p.name + " tx/kernel/completion")
	return p.home
}

// Receive tops the fill ring up, then appends the RX ring's descriptors to
// b. With nothing on the RX ring and the kernel asking for a wake-up on the
// fill ring, it makes the one syscall that asks.
func (p *Port) Receive(b *rings.Batch) (int, error) {
	if p.closed.Load() {
		return 0, net.ErrClosed
	}
	if !p.receive {
		return 0, dataplane.ErrNotReceiver
	}
	if p.trackErr != nil {
		return 0, p.trackErr
	}
	if p.waitErr != nil {
		return 0, p.waitErr
	}
	p.refill()
	rx := p.sock.RX()
	want := b.Cap() - b.Len()
	idx, got := rx.Peek(want)
	for i := range got {
		d := rx.Get(idx + uint32(i))
		b.Append(d, p.seq, p.inPort)
		p.seq++
		if p.tracker != nil {
			p.track(d.Addr, p.rxKernel, p.home)
		}
	}
	if got > 0 {
		rx.Release(got)
		p.stats.rxPackets.Add(uint64(got))
		p.idleEnded()
		return got, nil
	}
	if p.sock.Fill().NeedWakeup() {
		p.stats.wakeups.Add(1)
		if err := p.sock.WakeRX(); err != nil && !p.linkDown(err) {
			return 0, p.fail(err)
		}
	}
	return 0, nil
}

// Spin budget bounds for Wait, in idle turns of the I/O loop (each one a
// Receive, a completion poll and a Wait: some tens of ns).
const (
	minSpin = 2
	maxSpin = 4096
	// At the floor, one idle stretch in probeEvery spins probeSpin turns:
	// without it a budget that shrank (a burst of waits) could never
	// learn that packets now come from another core.
	probeSpin  = 1024
	probeEvery = 16
)

// idleEnded adapts the spin budget when packets arrive: spinning paid when
// they came before the spin ran out, so the next idle stretch spins
// longer.
func (p *Port) idleEnded() {
	if p.spun > 0 && !p.slept {
		p.spin = min(max(2*p.spin, 2*p.spun), maxSpin)
	}
	p.spun, p.limit, p.slept = 0, 0, false
}

// Wait is the engine's idle wait (dataplane.Waiter). With packets on the RX
// ring, or completions to collect, it returns at once. Otherwise it spins
// (returns at once) for the current spin budget of idle turns, then gives
// the CPU to the kernel in poll(2) until a packet arrives or timeout ends.
//
// The budget adapts to where the kernel's receive work runs. When it runs
// on another core (veth's default NAPI: the sender's softirq), packets
// arrive while the loop spins, spinning pays and the budget grows: no
// syscall, no wake-up on a busy port. When it runs on this core (threaded
// NAPI pinned beside the dataplane, or a NIC's interrupt here), nothing
// can arrive while the loop spins, every spin runs out, the budget shrinks
// to its floor (with a longer probe now and then) and the loop sleeps at
// once: the kernel thread gets the
// core, fills the RX ring, and its wake-up brings the loop back with a
// batch. Spinning there instead is receive livelock: the kernel gets the
// core only when the scheduler takes it from the spinner, fills the rings
// in one go and drops the rest of its slice.
func (p *Port) Wait(timeout time.Duration) {
	if !p.receive || p.closed.Load() || p.waitErr != nil {
		return
	}
	rx := p.sock.RX()
	if rx.Producer() != rx.Consumer() {
		return
	}
	if p.outstanding > 0 {
		if c := p.sock.Completion(); c.Producer() != c.Consumer() {
			return
		}
	}
	if p.spun == 0 && p.limit == 0 { // a new idle stretch
		p.stretches++
		p.limit = p.spin
		if p.spin <= minSpin && p.stretches%probeEvery == 0 {
			p.limit = probeSpin
		}
	}
	if p.spun < p.limit {
		p.spun++
		return
	}
	if !p.slept {
		if p.limit == p.spin {
			p.spin = max(p.spin/2, minSpin)
		}
		p.slept = true
	}
	p.stats.polls.Add(1)
	if _, err := p.sock.Poll(timeout); err != nil {
		p.stats.pollErrors.Add(1)
		p.waitErr = p.fail(err) // Receive reports it
	}
}

// fail records the socket's first error and returns it.
func (p *Port) fail(err error) error {
	if p.err == nil {
		p.err = fmt.Errorf("%s: %w", p.name, err)
	}
	return p.err
}

// Transmit puts descs on the TX ring and takes ownership of the frames it
// accepted (a prefix of descs): they come back through Complete once the
// kernel reports them on the completion ring.
//
// After Settle (or Close) it refuses everything with net.ErrClosed: a frame
// accepted then would be counted neither as sent nor as abandoned.
func (p *Port) Transmit(_ *rings.Arena, descs []rings.Desc) (int, error) {
	if p.settled.Load() {
		return 0, net.ErrClosed
	}
	tx := p.sock.TX()
	idx, got := tx.Reserve(len(descs))
	for i := range got {
		tx.Set(idx+uint32(i), descs[i])
		if p.tracker != nil {
			p.track(descs[i].Addr, p.home, p.txKernel)
		}
	}
	if got > 0 {
		tx.Submit(got)
		p.outstanding += got
		p.stats.txPackets.Add(uint64(got))
	}
	if got < len(descs) {
		p.stats.txRingFull.Add(1)
	}
	if err := p.kick(); err != nil {
		return got, err
	}
	return got, nil
}

// kick asks the kernel to send what is on the TX ring, when it said it
// needs asking.
func (p *Port) kick() error {
	if !p.sock.TX().NeedWakeup() {
		return nil
	}
	p.stats.kicks.Add(1)
	if err := p.sock.KickTX(); err != nil && !p.linkDown(err) {
		p.stats.kickErrors.Add(1)
		return p.fail(err)
	}
	return nil
}

// linkDown reports (and counts) a kick or wake-up refused because the
// interface is down. That is not the port's failure: the link coming back
// ends it, and the daemon reports the link's state. The port goes on;
// frames on the TX ring wait there, and a full ring refuses more (the
// engine's tx_full drops).
func (p *Port) linkDown(err error) bool {
	if errors.Is(err, xdp.ErrLinkDown) {
		p.stats.linkDown.Add(1)
		return true
	}
	return false
}

// Complete appends the frames whose transmission completed to dst (up to
// its capacity) and gives up their ownership to the caller. It also kicks
// a TX ring the kernel has not yet drained, so a refused kick is retried.
func (p *Port) Complete(dst []rings.Desc) []rings.Desc {
	if p.outstanding == 0 {
		return dst
	}
	tx := p.sock.TX()
	if tx.Producer() != tx.Consumer() {
		_ = p.kick() // recorded in p.err and the counters
	}
	c := p.sock.Completion()
	idx, got := c.Peek(cap(dst) - len(dst))
	for i := range got {
		addr := c.Get(idx + uint32(i))
		dst = append(dst, rings.Desc{Addr: addr})
		if p.tracker != nil {
			p.track(addr, p.txKernel, p.home)
		}
	}
	if got > 0 {
		c.Release(got)
		p.outstanding -= got
		p.stats.completions.Add(uint64(got))
	}
	return dst
}

// Outstanding returns how many frames Transmit accepted that Complete has
// not handed back.
func (p *Port) Outstanding() int { return p.outstanding }

// Recycle takes back frames the engine is done with: straight onto the
// fill ring of a receiving port while it has room, else to the arena.
func (p *Port) Recycle(descs []rings.Desc) {
	i := 0
	if p.receive && !p.closed.Load() {
		f := p.sock.Fill()
		idx, got := f.Reserve(len(descs))
		for ; i < got; i++ {
			f.Set(idx+uint32(i), descs[i].Addr&^p.frameMask)
			if p.tracker != nil {
				p.track(descs[i].Addr, p.home, p.rxKernel)
			}
		}
		if got > 0 {
			f.Submit(got)
		}
	}
	for _, d := range descs[i:] {
		p.arena.Free(d.Addr)
		if p.tracker != nil {
			p.track(d.Addr, p.home, rings.OwnerFree)
		}
	}
}

// PublishPlaces stores the ring indices the engine's I/O loop writes
// (dataplane.FrameReporter): the fill and TX producers, the RX and
// completion consumers, as of the engine's publication. I/O loop only.
func (p *Port) PublishPlaces() {
	if p.closed.Load() {
		return
	}
	tx, c := p.sock.TX(), p.sock.Completion()
	storeIfChanged(&p.pub.txProd, tx.Producer())
	storeIfChanged(&p.pub.compCons, c.Consumer())
	if p.receive {
		storeIfChanged(&p.pub.fillProd, p.sock.Fill().Producer())
		storeIfChanged(&p.pub.rxCons, p.sock.RX().Consumer())
	}
}

func storeIfChanged(a *atomic.Uint32, v uint32) {
	if a.Load() != v {
		a.Store(v)
	}
}

// FramePlaces adds the port's places to acct (dataplane.FrameReporter),
// as of the engine's last publication: the frames between the published
// indices, split at the kernel's (see chain). Safe from any goroutine.
func (p *Port) FramePlaces(acct *dataplane.FrameAccount) {
	if p.closed.Load() {
		return
	}
	tx, c := p.sock.TX(), p.sock.Completion()
	// Downstream first: the completion producer, then the TX consumer.
	comp, kern, ring := chain(p.pub.compCons.Load(), c.Producer(), tx.Consumer(), p.pub.txProd.Load())
	acct.Completion += comp
	acct.KernelTX += kern
	acct.TX += ring
	if p.receive {
		f, rx := p.sock.Fill(), p.sock.RX()
		rxq, kern, fill := chain(p.pub.rxCons.Load(), rx.Producer(), f.Consumer(), p.pub.fillProd.Load())
		acct.RX += rxq
		acct.KernelRX += kern
		acct.Fill += fill
	}
}

// chain splits the frames of one ring pair, from lo (the consumer index
// the I/O loop published) to hi (the producer index it published), at the
// kernel's two indices a <= b, read in that order (a first): it returns
// the counts in [lo, a), [a, b) and [b, hi). The kernel's indices only
// grow and never pass the published ones' live values, so a is at least
// lo; either may have passed hi since the publication (the kernel took
// frames produced after it) and is held at hi, b at least a. So no count
// is negative (a difference of 32-bit indices that wrapped), and the three
// sum to hi - lo, what the chain held at the publication.
func chain(lo, a, b, hi uint32) (first, mid, last int) {
	span := hi - lo
	da, db := a-lo, b-lo
	db = min(db, span)
	da = min(da, db)
	return int(da), int(db - da), int(span - db)
}

// Places is where a port's frames are, from the rings' shared indices.
type Places struct {
	Fill, KernelRX, RX, TX, KernelTX, Completion int
}

// Total is the number of frames the port's rings and the kernel hold.
func (pl Places) Total() int {
	return pl.Fill + pl.KernelRX + pl.RX + pl.TX + pl.KernelTX + pl.Completion
}

// Places reads the frame counts of each place from the rings' live
// indices (atomic loads: safe from any goroutine), each read once,
// downstream first, so no count is negative; read while frames move, a
// frame may show in a neighbouring place. FramePlaces is the engine's
// consistent account.
func (p *Port) Places() Places {
	var pl Places
	if p.closed.Load() {
		return pl
	}
	tx, c := p.sock.TX(), p.sock.Completion()
	cCons := c.Consumer()
	cProd := c.Producer()
	txCons := tx.Consumer()
	txProd := tx.Producer()
	pl.Completion, pl.KernelTX, pl.TX = chain(cCons, cProd, txCons, txProd)
	if p.receive {
		f, rx := p.sock.Fill(), p.sock.RX()
		rCons := rx.Consumer()
		rProd := rx.Producer()
		fCons := f.Consumer()
		fProd := f.Producer()
		pl.RX, pl.KernelRX, pl.Fill = chain(rCons, rProd, fCons, fProd)
	}
	return pl
}

// Close settles the port (Settle: a last bounded flush, then what is still
// on its TX ring is counted as tx_abandoned) and closes its socket. The
// frames it held go with the UMEM, which its Queue releases.
func (p *Port) Close() error {
	if p.closed.Load() {
		return net.ErrClosed
	}
	p.Settle()
	if p.closed.Swap(true) {
		return net.ErrClosed
	}
	return p.sock.Close()
}
