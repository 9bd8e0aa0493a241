package executortest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/workers"
)

// Config says how to feed the executor under test and what its results
// must be.
type Config struct {
	// Fill appends at least one packet to an acquired (empty) batch for
	// batch number seq, giving them distinct Meta.Seq values with
	// Batch.Append; the harness uses Seq to check order.
	Fill func(b *rings.Batch, seq int)
	// Check returns an error when completed batch number seq does not hold
	// what the executor's kernel should have written.
	Check func(b *rings.Batch, seq int) error
	// Batches is how many batches the ordered phase pushes through; zero
	// means 2000.
	Batches int
	// Timeout bounds each wait for a completion; zero means 10s.
	Timeout time.Duration
}

type sent struct {
	n        int
	firstSeq uint64
}

type harness struct {
	t    testing.TB
	ex   workers.Executor
	cfg  Config
	sent []sent // by batch number
	next int    // next batch number to submit
	done int    // batches completed and released
}

// Run drives ex through the protocol on the calling goroutine (producer
// and consumer both) and closes it at the end. It reports failures with
// t.Fatalf.
func Run(t testing.TB, ex workers.Executor, cfg Config) {
	t.Helper()
	if cfg.Fill == nil || cfg.Check == nil {
		t.Fatal("executortest: Config needs Fill and Check")
	}
	if cfg.Batches == 0 {
		cfg.Batches = 2000
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	h := &harness{t: t, ex: ex, cfg: cfg}
	h.ordered()
	h.backPressure()
	h.close()
}

// ordered interleaves producing and consuming at random.
func (h *harness) ordered() {
	rng := rand.New(rand.NewPCG(1, 2))
	last := time.Now()
	for h.done < h.cfg.Batches {
		if h.next < h.cfg.Batches && rng.IntN(3) != 0 {
			if h.produce() {
				last = time.Now()
			}
		} else if h.consume() {
			last = time.Now()
		}
		if time.Since(last) > h.cfg.Timeout {
			h.t.Fatalf("executortest: no progress for %v: %d submitted, %d done, in flight %d", h.cfg.Timeout, h.next, h.done, h.ex.InFlight())
		}
		h.inFlight()
	}
}

// backPressure fills every slot: Acquire must refuse before long, and
// everything comes back.
func (h *harness) backPressure() {
	start := h.next
	for h.produce() {
		if h.next-start > 1<<17 {
			h.t.Fatalf("executortest: Acquire never refused with %d batches in flight and none released", h.next-start)
		}
	}
	if h.next == start || h.ex.InFlight() != h.next-h.done {
		h.t.Fatalf("executortest: back-pressure after %d batches, in flight %d", h.next-start, h.ex.InFlight())
	}
	h.drain()
}

// close submits a few batches, closes the executor, and drains: each must
// still complete; Acquire after Close is refused.
func (h *harness) close() {
	for range 3 {
		if !h.produce() {
			break
		}
	}
	if err := h.ex.Close(); err != nil {
		h.t.Fatalf("executortest: Close: %v", err)
	}
	h.drain()
	if _, ok := h.ex.Acquire(); ok {
		h.t.Fatal("executortest: Acquire succeeded after Close")
	}
	if h.ex.InFlight() != 0 {
		h.t.Fatalf("executortest: in flight %d after draining a closed executor", h.ex.InFlight())
	}
}

func (h *harness) drain() {
	deadline := time.Now().Add(h.cfg.Timeout)
	for h.done < h.next {
		if !h.consume() && time.Now().After(deadline) {
			h.t.Fatalf("executortest: batches %d..%d not completed within %v", h.done, h.next-1, h.cfg.Timeout)
		}
	}
}

func (h *harness) inFlight() {
	if got, want := h.ex.InFlight(), h.next-h.done; got != want {
		h.t.Fatalf("executortest: InFlight %d, want %d (submitted %d, released %d)", got, want, h.next, h.done)
	}
}

// produce acquires, fills and submits one batch; false when refused.
func (h *harness) produce() bool {
	b, ok := h.ex.Acquire()
	if !ok {
		return false
	}
	if b.Len() != 0 {
		h.t.Fatalf("executortest: Acquire returned a batch of %d packets, want it cleared", b.Len())
	}
	if again, ok := h.ex.Acquire(); !ok || again != b {
		h.t.Fatal("executortest: a second Acquire before Submit did not return the same batch")
	}
	h.cfg.Fill(b, h.next)
	if b.Len() == 0 {
		h.t.Fatal("executortest: Fill appended nothing")
	}
	h.sent = append(h.sent, sent{n: b.Len(), firstSeq: b.Meta[0].Seq})
	h.next++
	h.ex.Submit()
	return true
}

// consume takes, checks and releases the next completed batch; false when
// none is ready.
func (h *harness) consume() bool {
	b, ok := h.ex.Completed()
	if !ok {
		return false
	}
	if again, ok := h.ex.Completed(); !ok || again != b {
		h.t.Fatal("executortest: a second Completed before Release did not return the same batch")
	}
	if h.done >= h.next {
		h.t.Fatalf("executortest: Completed returned a batch with none in flight (%d submitted)", h.next)
	}
	s := h.sent[h.done]
	if b.Len() != s.n || b.Meta[0].Seq != s.firstSeq {
		h.t.Fatalf("executortest: completion %d has %d packets from seq %d, want batch %d's %d from seq %d (out of order or lost)",
			h.done, b.Len(), b.Meta[0].Seq, h.done, s.n, s.firstSeq)
	}
	if err := h.cfg.Check(b, h.done); err != nil {
		h.t.Fatalf("executortest: batch %d: %v", h.done, err)
	}
	h.done++
	h.ex.Release()
	return true
}

// Lengths is a ready-made Fill for executors whose kernel looks only at
// descriptors: batch seq gets 1 + seq%cap packets with distinct lengths
// and addresses inside the first frame.
func Lengths(b *rings.Batch, seq int) {
	n := 1 + seq%b.Cap()
	for i := range n {
		b.Append(rings.Desc{Addr: uint64(i), Len: uint32(60 + (seq*7+i)%1400)}, uint64(seq)<<16|uint64(i), 0)
	}
}

// ErrVerdict formats a wrong verdict for Check functions.
func ErrVerdict(i int, got, want rings.Verdict) error {
	return fmt.Errorf("packet %d: verdict %v, want %v", i, got, want)
}
