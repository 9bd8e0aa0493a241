package executortest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/workers"
)

// recorder is a testing.TB whose Fatal ends only the goroutine running
// the harness and records why, so a test can check that Run fails.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatal(args ...any) {
	r.msg = fmt.Sprint(args...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func runRecorded(t *testing.T, ex workers.Executor, cfg Config) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(r, ex, cfg)
	}()
	const d = 30 * time.Second
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("gave up after %v waiting for the harness's Run to return", d)
	}
	return r.msg
}

type nop struct{}

func (nop) Process(b *rings.Batch) {
	for i := range b.Meta {
		b.Meta[i].Verdict = rings.VerdictPass
	}
}

func newPool(t *testing.T) *workers.Pool {
	arena, _ := rings.NewArena(rings.ArenaOptions{Frames: 1, FrameSize: 2048})
	o := workers.DefaultOptions()
	o.Workers, o.Slots = 2, 4
	o.NewBatch = func() *rings.Batch { return rings.NewBatch(8, arena) }
	p, err := workers.NewPool(o, []workers.Kernel{nop{}, nop{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// loseAfterClose never completes anything once closed.
type loseAfterClose struct {
	*workers.Pool
	closed bool
}

func (l *loseAfterClose) Close() error { l.closed = true; return l.Pool.Close() }
func (l *loseAfterClose) Completed() (*rings.Batch, bool) {
	if l.closed {
		return nil, false
	}
	return l.Pool.Completed()
}

// miscount reports one batch too many in flight.
type miscount struct{ *workers.Pool }

func (m miscount) InFlight() int { return m.Pool.InFlight() + 1 }

// TestRunCatches: the harness passes a correct executor and fails
// executors that break the protocol, naming what broke.
func TestRunCatches(t *testing.T) {
	pass := func(*rings.Batch, int) error { return nil }
	wantPass := func(b *rings.Batch, _ int) error {
		for i := range b.Meta {
			if b.Meta[i].Verdict != rings.VerdictPass {
				return ErrVerdict(i, b.Meta[i].Verdict, rings.VerdictPass)
			}
		}
		return nil
	}
	cfg := Config{Fill: Lengths, Check: wantPass, Batches: 200, Timeout: 200 * time.Millisecond}
	if msg := runRecorded(t, newPool(t), cfg); msg != "" {
		t.Fatalf("a correct pool failed: %s", msg)
	}
	for _, tc := range []struct {
		name string
		ex   workers.Executor
		cfg  Config
		want string
	}{
		{"lost after close", &loseAfterClose{Pool: newPool(t)}, Config{Fill: Lengths, Check: pass, Batches: 50, Timeout: 100 * time.Millisecond}, "not completed within"},
		{"in flight miscounted", miscount{newPool(t)}, cfg, "InFlight"},
		{"wrong verdicts", newPool(t), Config{Fill: Lengths, Check: func(b *rings.Batch, _ int) error { return ErrVerdict(0, b.Meta[0].Verdict, rings.VerdictDrop) }, Batches: 10}, "verdict"},
	} {
		if msg := runRecorded(t, tc.ex, tc.cfg); !strings.Contains(msg, tc.want) {
			t.Errorf("%s: harness said %q, want it to mention %q", tc.name, msg, tc.want)
		}
	}
}
