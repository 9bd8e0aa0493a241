package daemon

import (
	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/gpu"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/workers"
)

// executorFor returns the engine's executor factory for graph g's
// settings.backend: nil for the CPU workers (the engine's default), the
// CUDA executor for cuda. Every queue's engine then gets its own ring of
// the process's one persistent kernel, and the queue's UMEM is
// registered with the device (cuMemHostRegister, device-mapped) when the
// engine starts, so the kernel reads and rewrites the frames where the
// kernel's AF_XDP copy put them. Without a usable GPU it returns
// gpu.ErrUnavailable's one line, "cuda backend unavailable: <reason>", and
// the daemon stops at start: never silently on the CPU. The backend is
// the start pipeline's: a swap keeps it (the engine's executor factory is
// fixed when the queue's engine is made).
func executorFor(g *pipelines.Graph) (func(dataplane.ExecutorConfig) (workers.Executor, error), error) {
	if g.Settings().Backend != "cuda" {
		return nil, nil
	}
	if err := gpu.Available(); err != nil {
		return nil, err
	}
	return gpu.NewExecutor(gpu.ExecutorOptions{Kernel: gpu.DefaultOptions()}), nil
}
