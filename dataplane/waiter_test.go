package dataplane

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// waitPort is a live-like input: it has packets only after the engine
// waited on it (the kernel delivers while the loop sleeps), a batch per
// wait.
type waitPort struct {
	genPort
	ready        bool
	waits        atomic.Int64
	emptyRecv    atomic.Int64 // Receive calls that found nothing
	badTimeout   atomic.Int64 // Wait calls with a timeout outside (0, waitTimeout]
	receivedHere atomic.Uint64
}

func (p *waitPort) Receive(b *rings.Batch) (int, error) {
	if !p.ready {
		p.emptyRecv.Add(1)
		return 0, nil
	}
	p.ready = false
	n, err := p.genPort.Receive(b)
	p.receivedHere.Add(uint64(n))
	return n, err
}

func (p *waitPort) Wait(timeout time.Duration) {
	if timeout <= 0 || timeout > waitTimeout {
		p.badTimeout.Add(1)
	}
	p.waits.Add(1)
	p.ready = true
}

// TestIdleWaitsOnWaiter checks that an idle I/O loop gives its turn to an
// input that can wait, instead of spinning on Receive: inline, every turn
// that found nothing is followed by one Wait (with the bounded timeout);
// with workers, the loop still waits when nothing is in flight. Packets
// that only come after a wait all arrive, and a stop is seen at once.
func TestIdleWaitsOnWaiter(t *testing.T) {
	for _, workers := range []int{0, 2} {
		g, err := pipelines.Load("t.yaml", []byte(holdPipeline))
		if err != nil {
			t.Fatal(err)
		}
		arena, _ := rings.NewArena(rings.ArenaOptions{Frames: 256, FrameSize: 2048, Headroom: 256})
		in := &waitPort{genPort: genPort{a: arena, tmpl: genTemplates()}}
		o := DefaultOptions()
		o.Workers, o.BatchSize = workers, 32
		e, err := NewEngine(g, arena, in, Outputs{Ports: map[string]Port{"p": NewNullPort("p")}, Pass: NewNullPort("kernel")}, o)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		res := make(chan error, 1)
		go func() { res <- e.RunContext(ctx, nil) }()
		deadline := time.Now().Add(10 * time.Second)
		for in.receivedHere.Load() < 10000 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		cancel()
		select {
		case err := <-res:
			if err != nil {
				t.Fatalf("workers %d: %v", workers, err)
			}
		case <-time.After(time.Second):
			t.Fatalf("workers %d: RunContext did not return within a second of the stop", workers)
		}
		waits, empty := in.waits.Load(), in.emptyRecv.Load()
		if got := in.receivedHere.Load(); got < 10000 {
			t.Fatalf("workers %d: %d packets arrived, %d waits", workers, got, waits)
		}
		if in.badTimeout.Load() != 0 {
			t.Errorf("workers %d: %d waits with a timeout outside (0, %s]", workers, in.badTimeout.Load(), waitTimeout)
		}
		if workers == 0 && (empty > waits+1 || waits > empty+1) {
			t.Errorf("inline: %d empty receives, %d waits: want one wait per idle turn", empty, waits)
		}
		if rep := e.Report(); !rep.Balanced || rep.Received != in.receivedHere.Load() {
			t.Errorf("workers %d: report %s, port gave %d", workers, rep.AccountingLine(), in.receivedHere.Load())
		}
	}
}
