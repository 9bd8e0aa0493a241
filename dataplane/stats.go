package dataplane

import (
	"runtime"
	"slices"
	"strings"

	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/workers"
)

// Stats is what an engine counted: the one model every report, `warpctl
// stats` and `top`, /metrics and the daemon's stats line are made from.
// Engine.Stats takes it; Report is it plus what only a replay has.
//
// What the words mean at the engine (docs/COUNTERS.md says what they
// mean to a daemon's user, with the kernel's counters beside them):
//   - received: packets the engine took from its input (a capture, an
//     AF_XDP RX ring) and completed a batch of. A daemon adds the
//     packets its XDP program's kernel rules decided (they are in
//     received there, never in Batches).
//   - every packet received is exactly one of transmitted (a tx port
//     took it), dropped (by a named reason, the pipeline's or the
//     engine's: tx_full, tx_error, pass_full, pass_error, internal_*) or
//     passed; a daemon's kernel rules' decisions are counted apart
//     (xdp_dropped, xdp_passed), so received = transmitted + dropped +
//     passed + xdp_dropped + xdp_passed.
//   - frames the kernel dropped before the engine saw them (an RX ring
//     full, no free frame on the fill ring) were never received: they are
//     the daemon's kernel drops, not here.
//   - Batches counts the batches of packets completed, so received /
//     Batches (the fill per batch) is never above the batch size; the
//     empty batches that take a tick or a control request to an idle
//     worker are not counted.
//
// The verdict counters (received through Drops, Batches, ExecutorFull,
// FramesLost) and Frames are one snapshot: the I/O loop publishes them
// between batches under one sequence count, and Stats reads them all
// within one, so transmitted + dropped + passed = received and the frame
// places sum to the arena's frame count in every Stats, and no counter is
// ever below an earlier read's. The stage counters are read beside them,
// each exact as of its worker's last publish (at most 1024 packets old
// under load, exact at rest); they never go down either, except where a
// swap reset them (SwapResult).
type Stats struct {
	Received      uint64 `json:"received"`
	ReceivedBytes uint64 `json:"received_bytes"`
	Transmitted   uint64 `json:"transmitted"`
	Dropped       uint64 `json:"dropped"`
	Passed        uint64 `json:"passed"`
	PassedBytes   uint64 `json:"passed_bytes"`
	// Ports is what each tx port took, in the graph's port order (after a
	// swap: every port any plan had, in order of first appearance).
	Ports []PortCount `json:"ports"`
	// Drops has every reason of the pipelines this engine ran, in a fixed
	// order (the first graph's reasons, then those later plans added),
	// zeros included, so a scraper's series are stable; the engine's own
	// reasons (tx_full, tx_error, pass_full, pass_error) and internal_*
	// ones only once they happened.
	Drops []DropCount `json:"drops"`
	// Stages are the pipeline's stages, in the newest graph's order, with
	// their drops by reason and their own counters.
	Stages []StageReport `json:"stages"`

	// What depends on batching, timing and the executor (a replay's
	// goldens leave it out: Report.Deterministic).

	// Batches is how many batches the engine completed.
	Batches uint64 `json:"batches,omitempty"`
	// ExecutorFull counts loop turns that found every executor slot in
	// flight (back-pressure from the workers; nothing is lost, the input
	// waits).
	ExecutorFull uint64 `json:"executor_full,omitempty"`
	// FramesLost is what Completers never gave back (Frames.Lost,
	// reporting ports included).
	FramesLost uint64 `json:"frames_lost,omitempty"`
	// Frames says where every frame of the arena is.
	Frames *FrameAccount `json:"frames,omitempty"`
	// Executor is what runs the pipeline and what it counted.
	Executor *ExecutorStats `json:"executor,omitempty"`
}

// Balanced reports whether every packet received has one verdict.
func (s *Stats) Balanced() bool { return s.Received == s.Transmitted+s.Dropped+s.Passed }

// BatchFill is the packets per batch completed (received / batches): never
// above the batch size.
func (s *Stats) BatchFill() float64 { return Fill(s.Received, s.Batches) }

// Fill is packets / batches, 0 without batches: the one definition of the
// fill per batch.
func Fill(packets, batches uint64) float64 {
	if batches == 0 {
		return 0
	}
	return float64(packets) / float64(batches)
}

// PortCount is what one output port transmitted.
type PortCount struct {
	Port    string `json:"port"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// DropCount is the packets dropped for one reason.
type DropCount struct {
	Reason  string `json:"reason"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes,omitempty"`
}

// StageReport is one graph node's counters.
type StageReport struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Calls   uint64 `json:"calls,omitempty"` // batches; depends on batching, so not in counters.json
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	// Nanos is the time spent in the stage, with Options.Timing (not in
	// counters.json).
	Nanos uint64 `json:"nanos,omitempty"`
	// Drops is what this stage sent to drop terminals, by reason, packets
	// and bytes, in edge order.
	Drops []DropCount `json:"drops,omitempty"`
	// Counters are the stage's own, as its kind declares them
	// (pipelines.Kind.Counters): a filter's hits per rule, a count
	// stage's keys, a rewrite's exceptions, a sample stage's kept
	// packets.
	Counters []counters.Group `json:"counters,omitempty"`
	// File is the file a sample stage's kept packets go to.
	File string `json:"file,omitempty"`
}

// NsPerPacket is the time spent per packet that reached the stage (0
// without timing).
func (s *StageReport) NsPerPacket() float64 {
	if s.Packets == 0 {
		return 0
	}
	return float64(s.Nanos) / float64(s.Packets)
}

// ExecutorStats says what runs the pipeline and what it counted.
type ExecutorStats struct {
	// Backend is "inline" (the I/O loop runs the pipeline), "cpu" (a pool
	// of CPU workers) or the backend a CountingExecutor names ("cuda").
	Backend string `json:"backend"`
	// Workers are the CPU workers' counters (the engine's own pool).
	Workers []WorkerCount `json:"workers,omitempty"`
	// Counters are a CountingExecutor's own (the GPU's packets by path,
	// device or fallback, and its slots in flight).
	Counters []counters.Group `json:"counters,omitempty"`
}

// WorkerCount is one CPU worker's counters.
type WorkerCount struct {
	Batches uint64 `json:"batches"`
	Packets uint64 `json:"packets"`
	// Parks counts the times it parked for want of work.
	Parks uint64 `json:"parks"`
}

// CountingExecutor is an executor (Options.NewExecutor) that names its
// backend and declares counters of its own, so they show wherever the
// engine's do.
type CountingExecutor interface {
	workers.Executor
	// Backend names it ("cuda"): snake_case.
	Backend() string
	// Counters is its counters' layout, fixed for its life.
	Counters() *counters.Layout
	// ReadCounters adds its counters into dst (the layout's length).
	// Safe from any goroutine while it runs; it must not allocate.
	ReadCounters(dst []counters.Value)
}

// Stats returns what the engine counted (see Stats for what is one
// snapshot). It is safe from any goroutine, before, while and after the
// engine runs, and never blocks the I/O loop: the verdict counters and
// frame places come from what the loop published (retried while a
// publication is under way), the stage counters from the runners'
// published counters (exact after the run). Control plane only: it
// allocates.
func (e *Engine) Stats() Stats {
	var s Stats
	e.readPublished(&s)
	c := &e.ctl
	c.mu.Lock()
	e.foldLocked()
	if c.stopped {
		s.Stages = e.stagesLocked(e.cur, false)
	} else {
		s.Stages = e.stagesLocked(c.latest, true)
	}
	c.mu.Unlock()
	s.Executor = e.executorStats()
	return s
}

// readPublished reads the verdict counters and the frame places into s,
// all within one publication of the I/O loop.
func (e *Engine) readPublished(s *Stats) {
	p := &e.pub
	var a FrameAccount
	for {
		seq := p.seq.Load()
		if seq&1 != 0 {
			runtime.Gosched()
			continue
		}
		l := e.layPtr.Load()
		s.Received, s.ReceivedBytes = p.received.Load(), p.receivedBytes.Load()
		s.Passed, s.PassedBytes = p.passPackets.Load(), p.passBytes.Load()
		s.Batches, s.ExecutorFull = p.batches.Load(), p.execFull.Load()
		s.Transmitted, s.Dropped, s.FramesLost = 0, 0, 0
		s.Ports, s.Drops = s.Ports[:0], s.Drops[:0]
		for i, name := range l.ports {
			pc := PortCount{Port: name, Packets: l.txPackets[i].Load(), Bytes: l.txBytes[i].Load()}
			s.Ports = append(s.Ports, pc)
			s.Transmitted += pc.Packets
		}
		for i, name := range l.reasons {
			dc := DropCount{Reason: name, Packets: l.dropPackets[i].Load(), Bytes: l.dropBytes[i].Load()}
			s.Dropped += dc.Packets
			if dc.Packets == 0 && (i >= l.engineBase || strings.HasPrefix(name, "internal_")) {
				continue // engine and internal reasons show once they happened
			}
			s.Drops = append(s.Drops, dc)
		}
		a = FrameAccount{Free: int(p.free.Load()), Engine: int(p.engine.Load())}
		for k := range e.comps {
			s.FramesLost += uint64(p.lost[k].Load())
			if !e.comps[k].reports {
				a.Output += int(p.held[k].Load())
				a.Lost += int(p.lost[k].Load())
			}
		}
		// The ports' places from the indices they published in this
		// publication and the kernel's, read once each (FrameReporter).
		for _, r := range e.reporters {
			r.FramePlaces(&a)
		}
		if p.seq.Load() == seq {
			break
		}
	}
	if !e.inReports {
		a.Unreported = e.arena.Frames() - a.Total()
	}
	s.Frames = &a
}

// stagesLocked is p's stages as one report: the counters of its runners
// (live: as published, with those of a plan in its grace period; else
// their plain counters, exact once they are quiescent) and those carried
// from retired plans. c.mu is held.
func (e *Engine) stagesLocked(p *plan, live bool) []StageReport {
	c := &e.ctl
	var nodes []pipelines.NodeStats
	for _, r := range p.runners {
		if live {
			nodes = pipelines.SumStats(nodes, r.LiveStats(nil))
		} else {
			nodes = pipelines.SumStats(nodes, r.Stats(nil))
		}
	}
	info := p.graph.Stages()
	prev := c.prev
	if !live || p != c.latest {
		prev = nil
	}
	// A plan still in its grace period: its counts so far, for the
	// stages p keeps.
	var grace []pipelines.NodeStats
	if prev != nil {
		for _, r := range prev.runners {
			grace = pipelines.SumStats(grace, r.LiveStats(nil))
		}
	}
	out := make([]StageReport, 0, len(nodes))
	for i := range nodes {
		s := &nodes[i]
		if cs, ok := c.carried[s.Name]; ok && cs.Kind == s.Kind && (live || p == c.latest) {
			*s = addNode(*s, cs)
		}
		for _, g := range grace {
			if g.Name == s.Name && g.Kind == s.Kind {
				if !slices.Equal(prevEdges(prev, s.Name), info[i].Edges) {
					g.Edges, g.EdgeBytes = nil, nil
				}
				*s = addNode(*s, g)
			}
		}
		st := StageReport{Name: s.Name, Kind: s.Kind, Calls: s.Calls, Packets: s.Packets, Bytes: s.Bytes, Nanos: s.Nanos,
			Drops: stageDrops(info, s)}
		if l := info[i].Counters; l != nil {
			st.Counters = l.Groups(e.stageValuesLocked(p, prev, i, live))
		}
		out = append(out, st)
	}
	for k := range p.samples {
		for i := range out {
			if out[i].Name == p.samples[k].info.Stage {
				out[i].File = p.samples[k].info.File
			}
		}
	}
	return out
}

// stageValuesLocked is stage i of p's own counters: its runners' (live:
// as published), those carried from retired plans, and those of prev (a
// plan in its grace period, or nil) where it has the stage configured
// the same; a sample stage's kept count is the engine's. c.mu is held.
func (e *Engine) stageValuesLocked(p, prev *plan, i int, live bool) []counters.Value {
	c := &e.ctl
	info := p.graph.Stages()
	name := info[i].Name
	vals := make([]counters.Value, info[i].Counters.Len())
	add := func(pl *plan, node int) {
		for _, r := range pl.runners {
			if live {
				r.LiveCounters(node, vals)
			} else {
				r.Counters(node, vals)
			}
		}
		for k := range pl.samples {
			if pl.samples[k].info.Stage == name {
				// Live, the I/O loop owns kept and publishes it; only a
				// stopped engine's may be read directly.
				var kept uint64
				if live {
					kept = pl.samplePub[k].kept.Load()
				} else {
					kept = pl.samples[k].kept
				}
				vals[pipelines.SampleKept].Value += kept
			}
		}
	}
	add(p, i)
	if carried, ok := c.carriedCounters[name]; ok && len(carried) == len(vals) && e.carriedApplyLocked(p.graph, name) {
		counters.Add(vals, carried)
	}
	if prev != nil && sameStage(prev.graph, p.graph, name) {
		add(prev, stageIndex(prev.graph.Stages(), name))
	}
	return vals
}

// executorStats says what runs the engine's pipeline now.
func (e *Engine) executorStats() *ExecutorStats {
	pl := e.poolPtr.Load()
	if pl == nil {
		return &ExecutorStats{Backend: "inline"}
	}
	switch ex := pl.exec.(type) {
	case *workers.Pool:
		x := &ExecutorStats{Backend: "cpu"}
		for _, w := range ex.Stats().Workers {
			x.Workers = append(x.Workers, WorkerCount{Batches: w.Batches, Packets: w.Packets, Parks: w.Parks})
		}
		return x
	case CountingExecutor:
		l := ex.Counters()
		vals := make([]counters.Value, l.Len())
		ex.ReadCounters(vals)
		return &ExecutorStats{Backend: ex.Backend(), Counters: l.Groups(vals)}
	}
	return &ExecutorStats{Backend: "custom"}
}

// stageDrops lists the packets node s sent over edges that lead to drop
// terminals, by reason, in edge order: the one walk from a stage's edges
// to its drops by reason.
func stageDrops(info []pipelines.StageInfo, s *pipelines.NodeStats) []DropCount {
	me := stageIndex(info, s.Name)
	if me < 0 {
		return nil
	}
	var out []DropCount
	add := func(reason string, n, bytes uint64) {
		for i := range out {
			if out[i].Reason == reason {
				out[i].Packets += n
				out[i].Bytes += bytes
				return
			}
		}
		out = append(out, DropCount{Reason: reason, Packets: n, Bytes: bytes})
	}
	for edge, n := range s.Edges {
		if n == 0 {
			continue
		}
		var bytes uint64
		if edge < len(s.EdgeBytes) {
			bytes = s.EdgeBytes[edge]
		}
		if edge >= len(info[me].Edges) {
			add(pipelines.BadEdgeReason, n, bytes)
			continue
		}
		if t := stageIndex(info, info[me].Edges[edge]); t >= 0 && info[t].Kind == "drop" {
			add(info[t].Target, n, bytes)
		}
	}
	return out
}
