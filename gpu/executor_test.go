package gpu

import (
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/workers"
)

// runExecutorEquality replays every capture through the engine twice, on
// CPU workers and on the CUDA executor, and requires identical reports
// (verdicts, per-port, per-reason and per-stage counters, the filter's
// per-rule counters).
func runExecutorEquality(t *testing.T, emulate bool) {
	if !emulate {
		if err := Available(); err != nil {
			t.Skip(err)
		}
	}
	files := captures(t)
	var graphs []*pipelines.Graph
	for _, f := range []string{"split.yaml", "default.yaml"} {
		g, err := pipelines.LoadFile(filepath.Join("../testdata/pipelines/valid", f))
		if err != nil {
			t.Fatal(err)
		}
		graphs = append(graphs, g)
	}
	g, err := pipelines.Load("acl.yaml", []byte(aclYAML(t, 1000, files, 5)))
	if err != nil {
		t.Fatal(err)
	}
	graphs = append(graphs, g)
	var total, back uint64
	// Registered first, so it runs after every executor's own cleanup.
	t.Cleanup(func() {
		t.Logf("%d packets through the executor, %d handed back to the CPU path", total, back)
		if total == 0 || back == total {
			t.Errorf("the kernel classified nothing (%d packets, %d handed back)", total, back)
		}
	})
	run := func(g *pipelines.Graph, f string, gpu bool) dataplane.Report {
		eo := dataplane.DefaultOptions()
		eo.Timing = false
		eo.Workers = 1
		eo.TrackFrames = true
		if gpu {
			mk := NewExecutor(ExecutorOptions{Emulate: emulate})
			eo.NewExecutor = func(c dataplane.ExecutorConfig) (workers.Executor, error) {
				ex, err := mk(c)
				if err == nil {
					t.Cleanup(func() {
						n, b := ex.(*Executor).Stats()
						total += n
						back += b
					})
				}
				return ex, err
			}
		}
		rep, err := dataplane.Replay(dataplane.ReplayConfig{Capture: f, Graph: g, Engine: eo})
		if err != nil {
			t.Fatalf("%s through %s (gpu %v): %v", filepath.Base(f), g.Name(), gpu, err)
		}
		rep.Timing = dataplane.Timing{}
		for i := range rep.Stages {
			rep.Stages[i].Calls = 0
		}
		return rep
	}
	for _, g := range graphs {
		for _, f := range files {
			cpu, gpu := run(g, f, false), run(g, f, true)
			if !reflect.DeepEqual(cpu, gpu) {
				t.Fatalf("%s through %s: CPU report\n%+v\nCUDA executor report\n%+v", filepath.Base(f), g.Name(), cpu, gpu)
			}
		}
	}
}

// TestExecutorEmulated: the CUDA executor in the engine, kernel emulated.
func TestExecutorEmulated(t *testing.T) { runExecutorEquality(t, true) }

// TestExecutorCUDA: the same on the GPU, skipped with the reason without.
func TestExecutorCUDA(t *testing.T) { runExecutorEquality(t, false) }

// TestExecutorRefusesPipelineWithoutFilter: a pipeline the kernel cannot
// classify is refused up front, naming the reason.
func TestExecutorRefusesPipelineWithoutFilter(t *testing.T) {
	g, err := pipelines.LoadFile("../testdata/pipelines/valid/drop_all.yaml")
	if err != nil {
		t.Fatal(err)
	}
	eo := dataplane.DefaultOptions()
	eo.NewExecutor = NewExecutor(ExecutorOptions{Emulate: true})
	_, err = dataplane.Replay(dataplane.ReplayConfig{Capture: "../testdata/captures/mixed.pcap", Graph: g, Engine: eo})
	if !errors.Is(err, pipelines.ErrNoFilter) {
		t.Fatalf("got %v, want ErrNoFilter", err)
	}
}

// TestUnavailableMessage: without a GPU, asking for the backend gives one
// line, "cuda backend unavailable: <reason>".
func TestUnavailableMessage(t *testing.T) {
	err := Available()
	if err == nil {
		t.Skip("a CUDA device is present")
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("%v does not wrap ErrUnavailable", err)
	}
	_, oerr := Open(DefaultOptions())
	for _, e := range []error{err, oerr} {
		msg := e.Error()
		if len(msg) < 30 || msg[:len("cuda backend unavailable: ")] != "cuda backend unavailable: " {
			t.Fatalf("message %q", msg)
		}
		for _, c := range msg {
			if c == '\n' {
				t.Fatalf("message %q spans lines", msg)
			}
		}
	}
}
