package daemon

import (
	"errors"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/gpu"
	"github.com/warpflow/warpflow/pipelines"
)

// TestExecutorForBackend: settings.backend cuda gives the CUDA executor,
// or, without a GPU, gpu.ErrUnavailable's one line, which stops the daemon
// at start (the daemon ignored the setting before); cpu gives the engine's
// default.
func TestExecutorForBackend(t *testing.T) {
	load := func(b string) *pipelines.Graph {
		g, err := pipelines.Load("b.yaml", []byte("name: b\nsettings: {backend: "+b+"}\nstages:\n  - {name: parse, type: parse}\n  - {name: out, type: tx, port: o}\n"))
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	if ex, err := executorFor(load("cpu")); ex != nil || err != nil {
		t.Fatalf("cpu: %v, %v; want the engine's default", ex != nil, err)
	}
	ex, err := executorFor(load("cuda"))
	if gerr := gpu.Available(); gerr != nil {
		if !errors.Is(err, gpu.ErrUnavailable) || !strings.HasPrefix(err.Error(), "cuda backend unavailable: ") || strings.Contains(err.Error(), "\n") {
			t.Fatalf("cuda without a GPU: %v; want the one line of gpu.ErrUnavailable", err)
		}
		return
	}
	if ex == nil || err != nil {
		t.Fatalf("cuda with a GPU: %v, %v", ex != nil, err)
	}
}
