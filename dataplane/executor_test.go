package dataplane

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/warpflow/warpflow/pipelines"
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
		if got.Graph != g || got.BatchSize != 16 || got.Workers != w || len(got.Runners) != max(w, 1)+1 || got.Arena == nil || got.Slots&(got.Slots-1) != 0 {
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

// verdictAdapter turns an executor into a workers.VerdictExecutor, as a
// GPU backend is: at Completed it moves each packet's verdict into a word
// and its sample marks into per-sampler lists, then poisons the Meta, so a
// run through it is right only if the engine acts on the words alone.
type verdictAdapter struct {
	workers.Executor
	samplers int
	v        workers.Verdicts
	words    []uint32
}

func (a *verdictAdapter) Completed() (*rings.Batch, bool) {
	b, ok := a.Executor.Completed()
	if !ok {
		return nil, false
	}
	a.words = a.words[:0]
	a.v.Samples = make([][]uint16, a.samplers)
	for i := range b.Meta {
		m := &b.Meta[i]
		a.words = append(a.words, workers.PackVerdict(m.Verdict, m.Target))
		for k := range a.samplers {
			if m.SampleMask>>k&1 != 0 {
				a.v.Samples[k] = append(a.v.Samples[k], uint16(i))
			}
		}
		m.Verdict, m.Target, m.SampleMask = rings.VerdictNone, 0xffff, 0
	}
	a.v.Words = a.words
	b.Outcome.Valid = false
	return b, true
}

func (a *verdictAdapter) Verdicts() workers.Verdicts { return a.v }

// TestVerdictExecutor: the engine's completion for a VerdictExecutor
// (verdict words, candidate lists) gives the same counters, samples and
// outputs as the Meta path, with samplers of both modes and several
// verdicts per batch.
func TestVerdictExecutor(t *testing.T) {
	src := `name: v
settings: {batch_size: 16}
stages:
  - {name: parse, type: parse}
  - name: acl
    type: filter
    default: spread
    rules:
      - {proto: tcp, dst_port: 80, action: web}
      - {proto: udp, action: kernel}
      - {class: malformed, action: "drop:malformed"}
  - {name: spread, type: balance, to: [every, first]}
  - {name: every, type: sample, every: 3, file: every.pcap, next: web}
  - {name: first, type: sample, first: 5, file: first.pcap, next: web}
  - {name: web, type: tx, port: web0}
  - {name: kernel, type: pass}
`
	g, err := pipelines.Load("v.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	capture := "../testdata/captures/mixed.pcap"
	refDir, gotDir := t.TempDir(), t.TempDir()
	ref := replayTo(t, g, capture, refDir, 1, 0)
	cfg := ReplayConfig{Capture: capture, Graph: g, Engine: DefaultOptions(), Replay: DefaultReplayOptions(), OutDir: gotDir}
	cfg.Engine.Workers = 1
	cfg.Engine.TrackFrames = true
	cfg.Engine.NewExecutor = func(c ExecutorConfig) (workers.Executor, error) {
		ex, err := NewCPUExecutor(c)
		if err != nil {
			return nil, err
		}
		return &verdictAdapter{Executor: ex, samplers: len(c.Graph.Samplers())}, nil
	}
	rep, err := Replay(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rep.Deterministic(), ref.Deterministic()) {
		t.Fatalf("counters differ from the Meta path:\n got %+v\nwant %+v", rep.Deterministic(), ref.Deterministic())
	}
	if len(rep.samples()) != 2 || rep.samples()[0].Written == 0 || rep.samples()[1].Written != 5 {
		t.Fatalf("samples %+v: want both samplers to have written", rep.samples())
	}
	for _, f := range []string{"web0.pcap", "pass.pcap", "every.pcap", "first.pcap"} {
		want, err := os.ReadFile(filepath.Join(refDir, f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(gotDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s differs from the Meta path's", f)
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
