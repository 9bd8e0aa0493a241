package main

import (
	"fmt"
	"io"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/gpu"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/workers"
)

// executorFor returns the engine's executor factory for a backend: the
// --backend flag, or when it is empty the pipeline's settings.backend. The
// CPU backend is the engine's default (nil). Asking for cuda where it
// cannot run returns gpu.ErrUnavailable's one line, "cuda backend
// unavailable: <reason>".
//
// unsupported is what the cuda backend does with a pipeline the device
// cannot run whole: refuse, or cpu (its one-line notice goes to notices).
func executorFor(flag, unsupported string, g *pipelines.Graph, notices io.Writer) (func(dataplane.ExecutorConfig) (workers.Executor, error), error) {
	b := flag
	if b == "" {
		b = g.Settings().Backend
	}
	switch b {
	case "", "cpu":
		return nil, nil
	case "cuda":
		if err := gpu.Available(); err != nil {
			return nil, err
		}
		if unsupported != gpu.UnsupportedRefuse && unsupported != gpu.UnsupportedCPU {
			return nil, fmt.Errorf("--cuda-unsupported %q: want %s or %s", unsupported, gpu.UnsupportedRefuse, gpu.UnsupportedCPU)
		}
		return gpu.NewExecutor(gpu.ExecutorOptions{
			Kernel:      gpu.DefaultOptions(),
			Unsupported: unsupported,
			Notice:      func(s string) { fmt.Fprintln(notices, s) },
		}), nil
	}
	return nil, fmt.Errorf("--backend %q: want cpu or cuda", flag)
}
