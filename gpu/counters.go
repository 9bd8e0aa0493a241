package gpu

import (
	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/dataplane"
)

var _ dataplane.CountingExecutor = (*Executor)(nil)

// The executor's own counters (dataplane.CountingExecutor), declared once:
// what `warpctl stats` and `top` show for a queue on the cuda backend and
// /metrics exports (warpflow_executor_...).
var (
	execPacketsDecl = counters.Decl{Name: "packets", Label: "path",
		Help: "Packets the executor completed, by path: device (decided on the GPU) or fallback (handed back to the CPU workers)."}
	execInFlightDecl = counters.Decl{Name: "slots_in_flight", Kind: counters.Gauge,
		Help: "Slots submitted to the GPU and not yet released."}
	execLayout = counters.NewLayout(
		counters.Keyed(execPacketsDecl, []string{"device", "fallback"}),
		counters.Single(execInFlightDecl))
)

// CounterDecls are the executor's declarations (for what lists every
// declared family: the Grafana dashboard).
func CounterDecls() []counters.Decl {
	var out []counters.Decl
	for _, f := range execLayout.Families() {
		out = append(out, f.Decl)
	}
	return out
}

// Backend names the executor's backend.
func (e *Executor) Backend() string { return "cuda" }

// Counters is the executor's counters' layout: packets by path, slots in
// flight.
func (e *Executor) Counters() *counters.Layout { return execLayout }

// ReadCounters adds the executor's counters into dst; safe from any
// goroutine. Each counter is one monotonic atomic (device and fallback
// are added apart, once per batch), so neither ever reads lower than
// before; the slots in flight read the released count first, so the
// difference is never negative.
func (e *Executor) ReadCounters(dst []counters.Value) {
	dst[0].Value += e.device.Load()
	dst[1].Value += e.fallbacks.Load()
	rel := e.r.released.Load()
	dst[2].Value += e.r.submitted.Load() - rel
}
