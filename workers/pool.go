package workers

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/warpflow/warpflow/rings"
)

// Kernel runs on one batch in place. Each worker has its own Kernel, so a
// Kernel needs no locking for its own state; Process must not keep the batch
// or anything in it after it returns.
type Kernel interface {
	Process(b *rings.Batch)
}

// Slot states, the low two bits of a slot's status word. The rest of the
// word is the lap (sequence number / Slots) the state belongs to, so that a
// worker can tell "ready for the sequence number I am about to claim" from a
// ready left over from the previous lap whose claimer has not yet stored
// busy. Each transition has exactly one writer; see doc.go.
const (
	statusFree  uint32 = iota // producer may fill it         (written by consumer Release, or initially)
	statusReady               // submitted, not yet claimed   (written by producer Submit)
	statusBusy                // a worker runs its kernel     (written by the claiming worker)
	statusDone                // processed, consumer may read (written by the worker)

	stateMask = 3
)

// word returns the status word for state in sequence number seq's lap.
func (p *Pool) word(state uint32, seq uint64) uint32 {
	return uint32(seq>>p.lapShift)<<2 | state
}

const cacheLine = 64

// slot is one batch and its status word, alone on its cache line so that
// workers finishing neighbouring slots do not share a line.
type slot struct {
	status atomic.Uint32
	batch  *rings.Batch
	_      [cacheLine - 16]byte
}

// Pool is a set of persistent worker goroutines fed through a ring of
// slots. One producer goroutine calls Acquire and Submit, one consumer
// goroutine (possibly the same) calls Completed and Release; any goroutine
// may call InFlight, Stats and Close.
type Pool struct {
	slots    []slot
	mask     uint64
	lapShift uint // log2(len(slots))

	// Producer's line. pseq is the sequence number of the next slot to fill,
	// private to the producer; submitted is its published copy (after
	// Submit), read by InFlight.
	_         [cacheLine]byte
	pseq      uint64
	acquired  bool // producer holds slot pseq between Acquire and Submit
	submitted atomic.Uint64

	// Consumer's line, same scheme.
	_        [cacheLine]byte
	cseq     uint64
	holding  bool // consumer holds slot cseq between Completed and Release
	released atomic.Uint64

	// Workers' shared claim counter: the sequence number of the next slot
	// to claim. Advanced only by a successful CAS, so each sequence number
	// is claimed by exactly one worker.
	_     [cacheLine]byte
	claim atomic.Uint64

	// Parking. sleepers counts workers that announced they are about to
	// park; the producer reads it on every Submit and touches wake only
	// when it is not zero.
	_        [cacheLine]byte
	sleepers atomic.Int32
	closed   atomic.Bool
	_        [cacheLine]byte

	wake chan struct{} // capacity Workers: wake-up tokens for parked workers
	quit chan struct{} // closed by Close: wakes every parked worker at once

	idle    IdlePolicy
	workers []*worker
	wg      sync.WaitGroup
	// pinned: sequence s belongs to worker s % len(workers) (Options.Pinned);
	// each worker's next sequence is its own (worker.next), claim unused.
	pinned bool

	closeMu sync.Mutex // serialises Close and late Submits
	stopped bool       // every worker has exited; guarded by closeMu
}

// NewPool validates o, makes the slots' batches and starts one worker per
// kernel (len(kernels) must equal o.Workers). Kernel i belongs to worker i.
// When pinning a worker fails, the workers already started are stopped and
// the error is returned.
func NewPool(o Options, kernels []Kernel) (*Pool, error) {
	n, err := o.validate(kernels)
	if err != nil {
		return nil, err
	}
	p := &Pool{
		slots:    make([]slot, n),
		mask:     uint64(n - 1),
		lapShift: uint(bits.TrailingZeros(uint(n))),
		wake:     make(chan struct{}, o.Workers),
		quit:     make(chan struct{}),
		idle:     o.Idle,
		workers:  make([]*worker, o.Workers),
		pinned:   o.Pinned,
	}
	for i := range p.slots {
		b := o.NewBatch()
		if b == nil {
			return nil, badOption("new batch: returned nil for slot %d", i)
		}
		p.slots[i].batch = b
	}

	started := make(chan error, o.Workers)
	for i := range p.workers {
		w := &worker{id: i, kernel: kernels[i], cpu: -1, lock: o.LockOSThread, next: uint64(i), wake: make(chan struct{}, 1)}
		if len(o.CPUs) > 0 {
			w.cpu = o.CPUs[i%len(o.CPUs)]
			w.lock = true
		}
		p.workers[i] = w
		p.wg.Add(1)
		go p.run(w, started)
	}
	var first error
	for range p.workers {
		if err := <-started; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		p.Close()
		return nil, first
	}
	return p, nil
}

// Slots returns the number of slots: the most batches that can be in flight.
func (p *Pool) Slots() int { return len(p.slots) }

// Acquire returns the next slot's batch, cleared, if that slot is free; it
// never blocks. ok is false when the slot is still in flight (back-pressure:
// drain Completed first) or the pool is closed. The batch belongs to the
// producer until Submit. Calling Acquire again before Submit returns the
// same slot. Producer goroutine only.
func (p *Pool) Acquire() (b *rings.Batch, ok bool) {
	if p.closed.Load() {
		return nil, false
	}
	s := &p.slots[p.pseq&p.mask]
	// This load pairs with Release's store of statusFree: seeing free means
	// the consumer is done with the batch.
	if s.status.Load()&stateMask != statusFree {
		return nil, false
	}
	p.acquired = true
	s.batch.Clear()
	return s.batch, true
}

// Submit hands the acquired batch to the workers: free -> ready. The
// producer must not touch the batch again until Completed returns it. It
// wakes a parked worker only if one has announced it is parked. A batch
// acquired before Close and submitted after it is still processed (on the
// submitting goroutine, once the workers have exited), so every submitted
// batch completes exactly once. Producer goroutine only; Submit without a
// successful Acquire panics.
func (p *Pool) Submit() {
	if !p.acquired {
		panic("workers: Submit without a successful Acquire")
	}
	p.acquired = false
	seq := p.pseq
	s := &p.slots[seq&p.mask]
	p.pseq++
	// Publishes the batch's contents to the worker that claims it.
	s.status.Store(p.word(statusReady, seq))
	p.submitted.Store(p.pseq)
	// Dekker pairing with park: a worker increments sleepers and then
	// re-checks the slot; we stored ready and then read sleepers. With
	// sequentially consistent atomics at least one of us sees the other.
	if p.pinned {
		// Only the sequence's own worker can run it: wake that one.
		if w := p.workers[seq%uint64(len(p.workers))]; w.sleeping.Load() != 0 {
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	} else if p.sleepers.Load() != 0 {
		select {
		case p.wake <- struct{}{}:
		default: // tokens already pending: a parked worker will not stay parked
		}
	}
	if p.closed.Load() {
		p.lateSubmit()
	}
}

// Completed returns the next batch in submission order if its workers are
// done with it; it never blocks. The batch belongs to the consumer until
// Release; calling Completed again before Release returns the same batch.
// Consumer goroutine only.
func (p *Pool) Completed() (b *rings.Batch, ok bool) {
	s := &p.slots[p.cseq&p.mask]
	// Pairs with the worker's store of statusDone: the kernel's writes to
	// the batch are visible once we see done.
	if s.status.Load()&stateMask != statusDone {
		return nil, false
	}
	p.holding = true
	return s.batch, true
}

// Release returns the batch from Completed to the pool: done -> free. The
// consumer must not touch the batch again. Consumer goroutine only; Release
// without a successful Completed panics.
func (p *Pool) Release() {
	if !p.holding {
		panic("workers: Release without a successful Completed")
	}
	p.holding = false
	seq := p.cseq
	s := &p.slots[seq&p.mask]
	p.cseq++
	p.released.Store(p.cseq)
	// Publishes that we no longer read the batch: the producer may refill it.
	s.status.Store(p.word(statusFree, seq))
}

// SettlesMeta reports true: a worker settles a batch's deferred metadata
// before its kernel runs (see MetaSettler).
func (p *Pool) SettlesMeta() bool { return true }

// InFlight returns the number of batches submitted and not yet released.
// Safe from any goroutine; exact when called by the producer or consumer
// while the other is quiet.
func (p *Pool) InFlight() int {
	r := p.released.Load() // load released first so the difference never underflows
	return int(p.submitted.Load() - r)
}

// Close stops the pool: later Acquires report ok=false, the workers finish
// every batch already submitted and exit, and Close waits for them. Batches
// stay readable through Completed and Release afterwards, so the consumer
// can drain them. Close is idempotent and safe from any goroutine; it always
// returns nil.
func (p *Pool) Close() error {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if p.stopped {
		return nil
	}
	p.closed.Store(true)
	close(p.quit)
	p.wg.Wait()
	p.stopped = true
	p.drainLocked()
	return nil
}

// lateSubmit handles a Submit that raced with or followed Close: if the
// workers have exited, nobody else will claim the slot, so process it here.
// If Close is still waiting for them, Close drains it after they exit.
func (p *Pool) lateSubmit() {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if p.stopped {
		p.drainLocked()
	}
}

// drainLocked runs worker 0's kernel on every ready slot left once all
// workers have exited (a pinned pool: each slot's own worker's kernel, in
// sequence order). Caller holds closeMu with stopped set, so no worker
// or other drain touches the claim counter or the kernel.
func (p *Pool) drainLocked() {
	if p.pinned {
		for progress := true; progress; {
			progress = false
			for _, w := range p.workers {
				for p.claimOne(w) {
					progress = true
				}
			}
		}
		return
	}
	w := p.workers[0]
	for p.claimOne(w) {
	}
}
