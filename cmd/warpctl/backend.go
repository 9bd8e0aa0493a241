package main

import (
	"fmt"

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
func executorFor(flag string, g *pipelines.Graph) (func(dataplane.ExecutorConfig) (workers.Executor, error), error) {
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
		return gpu.NewExecutor(gpu.ExecutorOptions{}), nil
	}
	return nil, fmt.Errorf("--backend %q: want cpu or cuda", flag)
}
