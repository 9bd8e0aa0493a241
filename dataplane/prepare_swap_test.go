package dataplane

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warpflow/warpflow/rings"

	"github.com/warpflow/warpflow/internal/testwait"
)

// cutPort is seqPort counting the frames it handed out, so that a swap's
// AtTakeUp (on the I/O loop, between two receives) can note the first
// sequence number the new plan gets.
type cutPort struct {
	seqPort
	handed atomic.Uint64
}

func (p *cutPort) Receive(b *rings.Batch) (int, error) {
	had := b.Len()
	n, err := p.seqPort.Receive(b)
	p.handed.Add(uint64(b.Len() - had))
	return n, err
}

// idlePort is a live input with nothing to receive.
type idlePort struct{}

func (idlePort) Name() string                                     { return "idle" }
func (idlePort) Receive(*rings.Batch) (int, error)                { return 0, nil }
func (idlePort) Transmit(*rings.Arena, []rings.Desc) (int, error) { return 0, ErrNotTransmitter }
func (idlePort) Recycle([]rings.Desc)                             {}
func (idlePort) Close() error                                     { return nil }

// TestAtTakeUpIsTheBoundary: a swap's AtTakeUp runs on the I/O loop at the
// batch boundary at which the plan is taken up, so that the frames
// received before it are exactly the old plan's and those after exactly
// the new one's: with the cut each hook notes (the input's count of
// frames handed out), every sequence number below it went to the old
// pipeline's sink or was dropped by the old pipeline, and every one from
// it on to the new one's. In every executor mode, pool changes included.
func TestAtTakeUpIsTheBoundary(t *testing.T) {
	for _, tc := range []struct {
		name               string
		workersA, workersB int
		batchA, batchB     int
		custom             bool
	}{
		{"inline", 0, 0, 32, 32, false},
		{"2workers", 2, 2, 32, 32, false},
		{"pool-change", 1, 2, 32, 32, false},
		{"inline-to-workers", 0, 1, 32, 32, false},
		{"custom-executor", 1, 1, 32, 32, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tune []func(*Options)
			if tc.custom {
				tune = append(tune, func(o *Options) { o.NewExecutor = NewCPUExecutor })
			}
			r := newSwapRig(t, tc.workersA, tc.workersB, tc.batchA, tc.batchB, tune...)
			in := &cutPort{seqPort: r.e.in.(seqPort)}
			r.e.in = in
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			runErr := make(chan error, 1)
			go func() { runErr <- r.e.RunContext(ctx, nil) }()
			const swaps = 20
			var cuts []uint64 // cuts[i]: the first sequence number of plan i+2
			for i := range swaps {
				// Each plan gets 2048 frames of its own before the next swap
				// is prepared (counted from its own cut, not from the start:
				// a take-up delayed under the race detector would otherwise
				// leave the next plan none, and checkSwapRun's one change
				// of owner per swap would not hold).
				from := uint64(0)
				if i > 0 {
					from = cuts[i-1]
				}
				for deadline := time.Now().Add(5 * time.Second); in.handed.Load() < from+2048; {
					if time.Now().After(deadline) {
						t.Fatalf("swap %d: no traffic", i)
					}
					time.Sleep(100 * time.Microsecond)
				}
				g, outs := r.gb, Outputs{Ports: map[string]Port{"b": r.sb}}
				if i%2 == 1 {
					g, outs = r.ga, Outputs{Ports: map[string]Port{"a": r.sa}}
				}
				var cut uint64
				var calls atomic.Int32
				ps, err := r.e.PrepareSwap(g, outs, SwapOptions{Timeout: 5 * time.Second, AtTakeUp: func() error {
					calls.Add(1)
					cut = in.handed.Load() // the I/O loop's goroutine: nothing is being received
					return nil
				}})
				if err != nil {
					t.Fatalf("prepare swap %d: %v", i, err)
				}
				if calls.Load() != 0 {
					t.Fatalf("swap %d: AtTakeUp ran at PrepareSwap", i)
				}
				res, err := ps.Publish()
				if err != nil {
					t.Fatalf("publish swap %d: %v", i, err)
				}
				wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
				at, err := r.e.WaitTakenUp(wctx, res)
				wcancel()
				if err != nil || at.IsZero() || calls.Load() != 1 {
					t.Fatalf("swap %d: taken up at %v, %v, AtTakeUp called %d times", i, at, err, calls.Load())
				}
				cuts = append(cuts, cut) // read after WaitTakenUp: ordered by takenUpAt
			}
			// The last plan too gets frames of its own before the run stops.
			for deadline := time.Now().Add(5 * time.Second); in.handed.Load() < cuts[swaps-1]+2048; {
				if time.Now().After(deadline) {
					t.Fatal("after the last swap: no traffic")
				}
				time.Sleep(100 * time.Microsecond)
			}
			cancel()
			if err := testwait.Recv(t, runErr, "RunContext to return after cancel", testwait.Deadline); err != nil {
				t.Fatal(err)
			}
			rep := r.e.Report()
			checkSwapRun(t, r, rep, swaps)
			// plan k (0: a, 1: b, ...) got [cuts[k-1], cuts[k]).
			planOf := func(q uint64) int {
				k, _ := slices.BinarySearchFunc(cuts, q, func(c, q uint64) int {
					if c <= q {
						return -1
					}
					return 1
				})
				return k
			}
			for _, s := range []*seqSink{r.sa, r.sb} {
				for _, q := range s.seqs {
					if k := planOf(q); (k%2 == 0) != (s == r.sa) {
						t.Fatalf("sequence %d reached sink %s, but plan %d (%s) received it (cuts %v)", q, s.name, k, map[bool]string{true: "a", false: "b"}[k%2 == 0], cuts)
					}
				}
			}
			// And every dropped one was dropped by the plan that got it.
			seen := make([]bool, rep.Received)
			for _, s := range []*seqSink{r.sa, r.sb} {
				for _, q := range s.seqs {
					seen[q] = true
				}
			}
			for q, ok := range seen {
				port := swapDstPorts[q%len(swapDstPorts)]
				if k := planOf(uint64(q)); !ok && (k%2 == 0 && port != 9 || k%2 == 1 && port != 7) {
					t.Fatalf("sequence %d (port %d) missing, but plan %d does not drop it", q, port, k)
				}
			}
			t.Logf("%s: %d packets over %d swaps, cuts %v", tc.name, rep.Received, swaps, cuts[:3])
		})
	}
}

// TestPrepareSwapChangesNothing: a prepared swap changes nothing until
// Publish; Abort drops it (and the pool it started); a swap prepared
// before another was published is refused.
func TestPrepareSwapChangesNothing(t *testing.T) {
	r := newSwapRig(t, 0, 1, 32, 32) // a inline, b on a worker: b needs a pool
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- r.e.RunContext(ctx, nil) }()
	waitRecv := func(n uint64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); r.e.Stats().Received < n; {
			if time.Now().After(deadline) {
				t.Fatal("no traffic")
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	waitRecv(4096)
	before := runtime.NumGoroutine()
	ran := false
	ps, err := r.e.PrepareSwap(r.gb, Outputs{Ports: map[string]Port{"b": r.sb}}, SwapOptions{Timeout: time.Second, AtTakeUp: func() error { ran = true; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if runtime.NumGoroutine() <= before {
		t.Fatalf("a prepared pool change started no worker (%d goroutines, %d before)", runtime.NumGoroutine(), before)
	}
	waitRecv(r.e.Stats().Received + 8192)
	if gen, name := r.e.Generation(); gen != 1 || name != "a" {
		t.Fatalf("prepared, not published: generation %d %q", gen, name)
	}
	ps.Abort()
	ps.Abort() // twice: nothing more
	if _, err := ps.Publish(); !errors.Is(err, ErrSwap) {
		t.Fatalf("publish after abort: %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before; {
		if time.Now().After(deadline) {
			t.Fatalf("the aborted swap's pool is still running: %d goroutines, %d before", runtime.NumGoroutine(), before)
		}
		time.Sleep(time.Millisecond)
	}
	waitRecv(r.e.Stats().Received + 8192)

	// Prepared, then another swap publishes first: refused, its pool closed.
	stale, err := r.e.PrepareSwap(r.gb, Outputs{Ports: map[string]Port{"b": r.sb}}, SwapOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.Swap(r.ga, Outputs{Ports: map[string]Port{"a": r.sa}}, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := stale.Publish(); !errors.Is(err, ErrSwap) || !strings.Contains(err.Error(), "since this swap was prepared") {
		t.Fatalf("publish of a stale prepared swap: %v", err)
	}
	cancel()
	if err := testwait.Recv(t, runErr, "RunContext to return after cancel", testwait.Deadline); err != nil {
		t.Fatal(err)
	}
	rep := r.e.Report()
	if ran || len(r.sb.seqs) != 0 || !rep.Balanced {
		t.Fatalf("aborted swaps: AtTakeUp ran %v, b's sink got %d; %s", ran, len(r.sb.seqs), rep.AccountingLine())
	}
}

// TestWaitTakenUpIdle: an I/O loop with no traffic takes a plan up at its
// next turn (WaitTakenUp needs no packet, unlike WaitActive), AtTakeUp's
// error comes back, before Run the hook runs at Publish, and a stopped
// engine is an error, not a wait.
func TestWaitTakenUpIdle(t *testing.T) {
	r := newSwapRig(t, 0, 0, 32, 32)
	r.e.in = idlePort{}
	beforeRun := 0
	res, err := r.e.PrepareSwap(r.gb, Outputs{Ports: map[string]Port{"b": r.sb}}, SwapOptions{Timeout: time.Second, AtTakeUp: func() error { beforeRun++; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	sres, err := res.Publish()
	if err != nil || beforeRun != 1 {
		t.Fatalf("before Run: %v, AtTakeUp ran %d times", err, beforeRun)
	}
	if at, err := r.e.WaitTakenUp(context.Background(), sres); err != nil || at.IsZero() {
		t.Fatalf("before Run: taken up at %v, %v", at, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- r.e.RunContext(ctx, nil) }()
	hookErr := errors.New("flip failed")
	ps, err := r.e.PrepareSwap(r.ga, Outputs{Ports: map[string]Port{"a": r.sa}}, SwapOptions{Timeout: time.Second, AtTakeUp: func() error { return hookErr }})
	if err != nil {
		t.Fatal(err)
	}
	published := time.Now()
	sres, err = ps.Publish()
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	at, err := r.e.WaitTakenUp(wctx, sres)
	if !errors.Is(err, hookErr) || at.Before(published) {
		t.Fatalf("idle engine: taken up at %v (published %v), %v", at, published, err)
	}
	if actx, acancel := context.WithTimeout(ctx, 20*time.Millisecond); r.e.WaitActive(actx, sres) {
		t.Fatal("WaitActive returned true with no traffic")
	} else {
		acancel()
	}
	t.Logf("idle engine took the plan up %v after Publish", at.Sub(published))
	cancel()
	if err := testwait.Recv(t, runErr, "RunContext to return after cancel", testwait.Deadline); err != nil {
		t.Fatal(err)
	}
	// Published on a stopped engine: refused; a plan published and never
	// taken up (the engine stopped first) is an error from WaitTakenUp.
	if _, err := r.e.PrepareSwap(r.gb, Outputs{Ports: map[string]Port{"b": r.sb}}, SwapOptions{}); !errors.Is(err, ErrSwap) {
		t.Fatalf("prepare on a stopped engine: %v", err)
	}
	never := SwapResult{plan: &plan{graph: r.gb}}
	if _, err := r.e.WaitTakenUp(context.Background(), never); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("wait on a stopped engine: %v", err)
	}
}
