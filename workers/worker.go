package workers

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/warpflow/warpflow/internal/cpuaffinity"
	"github.com/warpflow/warpflow/rings"
)

// worker is one persistent goroutine's identity and counters. The counters
// have a single writer (the worker, or a drain after it exited) and are read
// by Stats with atomic loads, so the writer uses load+store, not an atomic
// add: no locked instruction on the hot path.
type worker struct {
	id     int
	kernel Kernel
	cpu    int // -1: not pinned
	lock   bool

	// A pinned pool's: the worker's next sequence (its own, written only
	// by it, or by a drain after it exited), whether it is parked, and its
	// own wake-up channel.
	next     uint64
	sleeping atomic.Int32
	wake     chan struct{}

	_       [cacheLine]byte
	batches atomic.Uint64
	packets atomic.Uint64
	spins   atomic.Uint64
	yields  atomic.Uint64
	parks   atomic.Uint64
	_       [cacheLine]byte
}

func bump(c *atomic.Uint64, n uint64) { c.Store(c.Load() + n) }

// run is a worker's life: poll for the next ready slot, run the kernel,
// back off when there is none, exit once closed and nothing is ready.
func (p *Pool) run(w *worker, started chan<- error) {
	defer p.wg.Done()
	if w.lock {
		runtime.LockOSThread()
		if w.cpu < 0 {
			defer runtime.UnlockOSThread()
		}
		// A pinned thread is never unlocked: when the goroutine exits the
		// runtime destroys the thread instead of reusing its odd affinity.
	}
	if w.cpu >= 0 {
		if err := cpuaffinity.PinThread(w.cpu); err != nil {
			started <- fmt.Errorf("worker %d: %w", w.id, err)
			return
		}
	}
	started <- nil

	var timer *time.Timer
	if p.idle.MaxPark > 0 {
		timer = time.NewTimer(p.idle.MaxPark)
		timer.Stop()
	}
	spinEnd := p.idle.Spins
	yieldEnd := spinEnd + p.idle.Yields
	idle := 0
	var spins, yields uint64
	for {
		if p.claimOne(w) {
			if idle != 0 {
				idle = 0
				flush(w, &spins, &yields)
			}
			continue
		}
		// Order matters: load closed, then look for work. Submit stores
		// ready and then loads closed, so a batch submitted before Close
		// is either seen here or handled by Close's drain.
		if p.closed.Load() && !p.readyFor(w) {
			break
		}
		switch {
		case idle < spinEnd:
			idle++
			spins++
		case idle < yieldEnd:
			idle++
			yields++
			runtime.Gosched()
		default:
			flush(w, &spins, &yields)
			if p.park(w, timer) {
				idle = 0 // woken for work: spin again before the next park
			}
		}
	}
	flush(w, &spins, &yields)
	if timer != nil {
		timer.Stop()
	}
}

// flush publishes the idle counters a worker keeps locally while it polls,
// once per idle episode rather than once per poll.
func flush(w *worker, spins, yields *uint64) {
	if *spins|*yields != 0 {
		bump(&w.spins, *spins)
		bump(&w.yields, *yields)
		*spins, *yields = 0, 0
	}
}

// readyAtClaim reports whether the next slot to claim is ready.
func (p *Pool) readyAtClaim() bool {
	c := p.claim.Load()
	return p.slots[c&p.mask].status.Load() == p.word(statusReady, c)
}

// readyFor reports whether worker w has a ready slot to run.
func (p *Pool) readyFor(w *worker) bool {
	if p.pinned {
		return p.slots[w.next&p.mask].status.Load() == p.word(statusReady, w.next)
	}
	return p.readyAtClaim()
}

// claimOne claims the next ready slot, runs w's kernel on it and marks it
// done. It reports false, doing nothing, when that slot is not ready.
func (p *Pool) claimOne(w *worker) bool {
	if p.pinned {
		return p.runPinned(w)
	}
	c := p.claim.Load()
	s := &p.slots[c&p.mask]
	// Only "ready in c's lap" will do. A plain "ready" could be left over
	// from sequence c-Slots, claimed by a worker that has not stored busy
	// yet; claiming it again would run two kernels on one batch.
	if s.status.Load() != p.word(statusReady, c) {
		return false
	}
	// Seeing ready in c's lap means the producer submitted c. If another
	// worker claimed c since our load, claim moved on and the CAS fails, so
	// each sequence number is claimed exactly once.
	if !p.claim.CompareAndSwap(c, c+1) {
		return true // lost the race to another worker: there is work, poll again at once
	}
	s.status.Store(p.word(statusBusy, c))
	b := s.batch
	b.SettleMeta() // what the producer deferred (DeferMeta), written here
	w.kernel.Process(b)
	w.count(b)
	// Publishes the kernel's writes to the consumer.
	s.status.Store(p.word(statusDone, c))
	return true
}

// count counts a processed batch that had packets: an empty one (the
// engine's way to take a control request or the time to an idle worker)
// is no batch of traffic, and counted it would lower the worker's fill.
func (w *worker) count(b *rings.Batch) {
	if n := b.Len(); n > 0 {
		bump(&w.batches, 1)
		bump(&w.packets, uint64(n))
	}
}

// runPinned runs worker w's next sequence if it is ready. Only w (or a
// drain after it exited) runs its sequences, so no claim is contended;
// "ready in the sequence's lap" still guards against a word left from the
// previous lap.
func (p *Pool) runPinned(w *worker) bool {
	c := w.next
	s := &p.slots[c&p.mask]
	if s.status.Load() != p.word(statusReady, c) {
		return false
	}
	s.status.Store(p.word(statusBusy, c))
	b := s.batch
	b.SettleMeta()
	w.kernel.Process(b)
	w.count(b)
	w.next = c + uint64(len(p.workers))
	s.status.Store(p.word(statusDone, c))
	return true
}

// parkPinned is park for a pinned pool's worker: it announces itself on
// its own flag, which Submit reads after storing ready for its sequence.
func (p *Pool) parkPinned(w *worker, timer *time.Timer) bool {
	w.sleeping.Store(1)
	if p.readyFor(w) || p.closed.Load() {
		w.sleeping.Store(0)
		return true
	}
	woken := p.sleep(w, w.wake, timer)
	w.sleeping.Store(0)
	return woken
}

// park sleeps until a Submit wakes a worker, Close, or MaxPark passes. It
// reports whether it was woken (rather than timing out with nothing to do).
func (p *Pool) park(w *worker, timer *time.Timer) bool {
	if p.pinned {
		return p.parkPinned(w, timer)
	}
	// Announce, then re-check: pairs with Submit's store-ready-then-load-
	// sleepers so that a Submit never misses a parking worker.
	p.sleepers.Add(1)
	if p.readyAtClaim() || p.closed.Load() {
		p.sleepers.Add(-1)
		return true
	}
	woken := p.sleep(w, p.wake, timer)
	p.sleepers.Add(-1)
	return woken
}

// sleep blocks an announced worker until wake fires, Close, or MaxPark
// passes (no limit without a timer), counting the park. It reports whether
// it was woken rather than timing out; the caller withdraws its
// announcement after it.
func (p *Pool) sleep(w *worker, wake <-chan struct{}, timer *time.Timer) bool {
	bump(&w.parks, 1)
	var timeout <-chan time.Time
	if timer != nil {
		timer.Reset(p.idle.MaxPark)
		timeout = timer.C
		defer timer.Stop()
	}
	select {
	case <-wake:
		return true
	case <-p.quit:
		return true
	case <-timeout:
		return false
	}
}
