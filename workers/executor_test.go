package workers_test

import (
	"testing"
	"time"

	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/workers"
	"github.com/warpflow/warpflow/workers/executortest"
)

// parity drops packets of odd length and passes the rest.
type parity struct{}

func (parity) Process(b *rings.Batch) {
	for i, d := range b.Descs {
		b.Meta[i].Verdict = rings.VerdictPass
		if d.Len%2 == 1 {
			b.Meta[i].Verdict = rings.VerdictDrop
		}
	}
}

// TestPoolIsAnExecutor runs the executor conformance checks on the CPU
// pool, with one worker and with several.
func TestPoolIsAnExecutor(t *testing.T) {
	arena, err := rings.NewArena(rings.ArenaOptions{Frames: 1, FrameSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 3} {
		o := workers.DefaultOptions()
		o.Workers, o.Slots = n, 8
		o.Idle = workers.IdlePolicy{Spins: 64, Yields: 16, MaxPark: 20 * time.Millisecond}
		o.NewBatch = func() *rings.Batch { return rings.NewBatch(16, arena) }
		kernels := make([]workers.Kernel, n)
		for i := range kernels {
			kernels[i] = parity{}
		}
		p, err := workers.NewPool(o, kernels)
		if err != nil {
			t.Fatal(err)
		}
		executortest.Run(t, p, executortest.Config{
			Fill: executortest.Lengths,
			Check: func(b *rings.Batch, _ int) error {
				for i, d := range b.Descs {
					want := rings.VerdictPass
					if d.Len%2 == 1 {
						want = rings.VerdictDrop
					}
					if b.Meta[i].Verdict != want {
						return executortest.ErrVerdict(i, b.Meta[i].Verdict, want)
					}
				}
				return nil
			},
		})
	}
}
