package dataplane

import (
	"errors"
	"reflect"
	"testing"

	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/workers"
)

// countingExecutor wraps an executor and counts the batches through it, so
// a test can tell that the engine used the factory's executor.
type countingExecutor struct {
	workers.Executor
	submits, releases int
	closed            bool
}

func (c *countingExecutor) Submit()  { c.submits++; c.Executor.Submit() }
func (c *countingExecutor) Release() { c.releases++; c.Executor.Release() }
func (c *countingExecutor) Close() error {
	c.closed = true
	return c.Executor.Close()
}

// TestExecutorFactory runs the default pipeline through an executor made by
// Options.NewExecutor, with Workers zero (a factory overrides inline mode)
// and two, and checks that the engine drove it (every submitted batch
// released, the executor closed) and that the results equal the inline run.
func TestExecutorFactory(t *testing.T) {
	g := defaultGraph(t)
	capture := "../testdata/captures/mixed.pcap"
	ref := replayTo(t, g, capture, "", 0, 0)
	for _, w := range []int{0, 2} {
		var made *countingExecutor
		var got ExecutorConfig
		cfg := ReplayConfig{Capture: capture, Graph: g, Engine: DefaultOptions(), Replay: DefaultReplayOptions()}
		cfg.Engine.Workers = w
		cfg.Engine.BatchSize = 16
		cfg.Engine.TrackFrames = true
		cfg.Engine.NewExecutor = func(c ExecutorConfig) (workers.Executor, error) {
			got = c
			ex, err := NewCPUExecutor(c)
			if err != nil {
				return nil, err
			}
			made = &countingExecutor{Executor: ex}
			return made, nil
		}
		rep, err := Replay(cfg)
		if err != nil {
			t.Fatalf("workers %d: %v", w, err)
		}
		if made == nil || made.submits == 0 || made.submits != made.releases || !made.closed {
			t.Fatalf("workers %d: executor not driven to the end: %+v", w, made)
		}
		if got.Graph != g || got.BatchSize != 16 || got.Workers != w || len(got.Runners) != max(w, 1) || got.Arena == nil || got.Slots&(got.Slots-1) != 0 {
			t.Errorf("workers %d: factory got %+v", w, got)
		}
		if b := got.NewBatch(); b.Cap() != 16 {
			t.Errorf("workers %d: NewBatch capacity %d, want 16", w, b.Cap())
		}
		if !reflect.DeepEqual(rep.Deterministic(), ref.Deterministic()) {
			t.Fatalf("workers %d: counters differ from the inline run:\n got %+v\nwant %+v", w, rep.Deterministic(), ref.Deterministic())
		}
	}
}

// TestExecutorFactoryError: a factory's error is returned by NewEngine,
// wrapped, and a nil executor is refused.
func TestExecutorFactoryError(t *testing.T) {
	g := defaultGraph(t)
	arena, err := rings.NewArena(rings.DefaultArenaOptions())
	if err != nil {
		t.Fatal(err)
	}
	outs := Outputs{Ports: map[string]Port{}}
	for _, name := range g.Ports() {
		outs.Ports[name] = NewNullPort(name)
	}
	errNoGPU := errors.New("no gpu")
	o := DefaultOptions()
	o.NewExecutor = func(ExecutorConfig) (workers.Executor, error) { return nil, errNoGPU }
	if _, err := NewEngine(g, arena, NewNullPort("in"), outs, o); !errors.Is(err, errNoGPU) {
		t.Fatalf("factory error: got %v", err)
	}
	o.NewExecutor = func(ExecutorConfig) (workers.Executor, error) { return nil, nil }
	if _, err := NewEngine(g, arena, NewNullPort("in"), outs, o); err == nil {
		t.Fatal("a nil executor was accepted")
	}
}
