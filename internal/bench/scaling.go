package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sort"
	"time"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/internal/hostinfo"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/workers"
)

// The scaling bench measures how the default shape (RowDefault1k's
// pipeline) scales with cores, in the two shapes a many-core deployment
// can take:
//
//   - ShapeWorkers: one engine whose I/O loop, pinned to IOCPU, receives
//     from one preloaded capture and hands batches to N workers pinned to
//     CPUs[0..N-1] (a workers.Pool, through dataplane.Options.NewExecutor),
//     completing them in order. The I/O loop is one core's work whatever N
//     is, so it sets a ceiling.
//   - ShapeEngines: N engines side by side, each inline (no workers) on
//     its own pinned core CPUs[i], each over its own preloaded copy of the
//     capture and its own null sink: the shape of one engine per receive
//     queue on the live path. Nothing is shared but the machine.
//   - ShapeIOCeiling: the workers shape (at the largest worker count, or
//     at ScalingOptions.CeilingWorkers) with a pipeline that only
//     transmits, so the workers do next to nothing and the rate is what
//     one I/O loop can hand out and complete.
//
// Every measurement of every point is timed by one wall clock from the
// moment every engine is built and waiting until the last one returns;
// the total rate is all packets counted over that time.
const (
	ShapeWorkers   = "workers"
	ShapeEngines   = "engines"
	ShapeIOCeiling = "io-ceiling"
)

// txOnlyPipeline is the I/O ceiling's pipeline: no parse, no rewrite.
const txOnlyPipeline = `
name: bench-tx-only
stages:
  - {name: out, type: tx, port: sink}
`

// ScalingOptions configures a scaling run.
type ScalingOptions struct {
	// Capture is replayed by every engine, preloaded; "" for the embedded
	// bench-64.pcap.
	Capture string
	// Packets is how many packets each worker (workers shape) or each
	// engine (engines shape) gets per measurement, rounded up to whole
	// passes over the capture: a point with N of them replays about
	// N*Packets, so every point runs for about as long when it scales.
	Packets uint64
	// Repeats is the measurements per point, taken round-robin across the
	// points; the median is reported with the range.
	Repeats int
	// Workers and Engines are the N of each shape, each at least 1; an
	// empty list leaves the shape out.
	Workers []int
	Engines []int
	// IOCPU is the I/O loop's core in the workers shape; -1 leaves it
	// unpinned.
	IOCPU int
	// CPUs are the cores of worker i (workers shape) and engine i (engines
	// shape); empty leaves them unpinned. It must hold at least the largest
	// N, and must not contain IOCPU.
	CPUs []int
	// Frames is the number of frames each engine's capture is preloaded
	// into (whole passes over the capture, so rounded up to one); every
	// point uses the same number, so that the working set does not change
	// with N. 0: enough that the largest worker count's batches in flight
	// never wait for a frame (twice the slots times the batch size), at
	// least 8192.
	Frames int
	// BatchSize overrides the pipeline's batch size when > 0.
	BatchSize int
	// Spin makes idle workers busy-poll instead of the engine's default
	// idle policy (spin, yield, then park until woken).
	Spin bool
	// IOCeiling adds the ShapeIOCeiling point at the largest worker count;
	// CeilingWorkers, when not empty, names the worker counts to measure it
	// at instead (idle workers poll the slots the I/O loop writes, so the
	// ceiling depends on how many there are).
	IOCeiling      bool
	CeilingWorkers []int
}

// DefaultScalingOptions measures 1, 2, 4, 8 and 14 workers and engines, 20
// million packets per worker or engine (about half a second per point at
// 40 Mpps per core), 5 repeats, the I/O loop on the first allowed CPU and
// the workers on the others (one thread per physical core first). Counts
// beyond the CPUs there are left out of the lists.
func DefaultScalingOptions() ScalingOptions {
	io, cpus := defaultScalingCPUs()
	ns := []int{1, 2, 4, 8, 14}
	if len(cpus) > 0 {
		ns = slices.DeleteFunc(ns, func(n int) bool { return n > len(cpus) })
	}
	return ScalingOptions{
		Packets: 20_000_000, Repeats: 5,
		Workers: ns, Engines: slices.Clone(ns),
		IOCPU: io, CPUs: cpus, IOCeiling: true,
	}
}

// ScalingPoint is one shape at one N, over every repeat.
type ScalingPoint struct {
	Shape string `json:"shape"`
	N     int    `json:"n"`
	IOCPU int    `json:"io_cpu,omitempty"` // workers shapes; -1 unpinned
	CPUs  []int  `json:"cpus,omitempty"`   // worker or engine i's core
	// Mpps is the median total rate, MppsRuns every repeat's in order.
	Mpps     float64   `json:"mpps"`
	MppsRuns []float64 `json:"mpps_runs"`
	MinMpps  float64   `json:"min_mpps"`
	MaxMpps  float64   `json:"max_mpps"`
	// PerUnitMpps is Mpps / N.
	PerUnitMpps float64 `json:"per_unit_mpps"`
	// Efficiency is the per-unit rate against the shape's smallest N
	// (linear = 1.0): (Mpps/N) / (Mpps_base/N_base), by the medians;
	// EfficiencyRange divides this point's lowest and highest repeat by
	// the same base. Not set for the I/O ceiling.
	Efficiency      float64    `json:"efficiency,omitempty"`
	EfficiencyRange [2]float64 `json:"efficiency_range,omitempty"`
	// Packets is what each measurement counted (received by the engines,
	// all accounted as transmitted, dropped or passed); Replayed is what
	// the replay ports handed out; they are equal, or the point fails.
	Packets  uint64 `json:"packets"`
	Replayed uint64 `json:"replayed"`
	// Allocs is the most heap allocations of any measurement's timed
	// region (all goroutines): zero per packet means a handful per run.
	Allocs uint64 `json:"allocs_per_run"`
	// Batches (workers shapes) is the batches the engine completed in the
	// median run. ExecutorFullPerBatch is the I/O loop's turns that
	// found every worker slot in flight, per batch, over the median run:
	// well above zero when the workers set the pace, near zero when the I/O
	// loop does. WorkerIdlePerBatch is the workers' idle polls per batch
	// (spins + yields), high when the I/O loop starves them; WorkerShare
	// is the least and most packets any one worker took, as a fraction of
	// an even share.
	Batches              uint64    `json:"batches,omitempty"`
	ExecutorFullPerBatch float64   `json:"executor_full_per_batch,omitempty"`
	WorkerIdlePerBatch   float64   `json:"worker_idle_polls_per_batch,omitempty"`
	WorkerParks          uint64    `json:"worker_parks,omitempty"`
	WorkerShare          []float64 `json:"worker_share,omitempty"`
	Err                  string    `json:"error,omitempty"`
}

// ScalingResult is a whole scaling run.
type ScalingResult struct {
	Capture    string    `json:"capture"`
	Pipeline   string    `json:"pipeline"`
	BatchSize  int       `json:"batch_size"`
	Frames     int       `json:"frames_per_engine"`
	Idle       string    `json:"idle"`
	GoVersion  string    `json:"go_version"`
	NumCPU     int       `json:"num_cpu"`
	Machine    string    `json:"machine"` // hostinfo.CPU
	GOMAXPROCS int       `json:"gomaxprocs"`
	When       time.Time `json:"when"`
	// PacketsPerUnit is ScalingOptions.Packets rounded up to whole passes.
	PacketsPerUnit uint64         `json:"packets_per_unit"`
	Repeats        int            `json:"repeats"`
	Points         []ScalingPoint `json:"points"`
	// Targets: the ">= 0.8x linear up to 8 workers" for every
	// worker count in (1, 8]; the same for engines as reference.
	Targets []Target `json:"targets"`
	// SaturatesAt is the smallest worker count whose efficiency falls
	// under 0.8 (0: none in the run), SaturatedMpps its rate, and
	// CeilingMpps the I/O ceiling point's at the largest worker count
	// measured (0: not measured).
	SaturatesAt   int     `json:"saturates_at_workers,omitempty"`
	SaturatedMpps float64 `json:"saturated_mpps,omitempty"`
	CeilingMpps   float64 `json:"io_ceiling_mpps,omitempty"`
}

// ScalingTargetEfficiency is the bar: at least 0.8x linear.
const ScalingTargetEfficiency = 0.8

// ScalingTargetMaxWorkers is how far up the bar applies.
const ScalingTargetMaxWorkers = 8

func (o ScalingOptions) validate() error {
	if o.Repeats < 1 {
		return fmt.Errorf("repeats %d: must be at least 1", o.Repeats)
	}
	if o.Packets == 0 {
		return errors.New("packets 0: must be positive")
	}
	if len(o.Workers) == 0 && len(o.Engines) == 0 {
		return errors.New("no worker or engine counts: nothing to measure")
	}
	if o.BatchSize < 0 || o.BatchSize > rings.MaxBatch {
		return fmt.Errorf("batch size %d: must be in [0, %d] (0: the pipeline's)", o.BatchSize, rings.MaxBatch)
	}
	if o.Frames < 0 || o.Frames > 1<<22 {
		return fmt.Errorf("frames %d: must be in [0, %d]", o.Frames, 1<<22)
	}
	seen := map[int]bool{}
	for _, c := range o.CPUs {
		if c < 0 {
			return fmt.Errorf("cpus %v: cpu %d is negative", o.CPUs, c)
		}
		if seen[c] {
			return fmt.Errorf("cpus %v: cpu %d given twice", o.CPUs, c)
		}
		seen[c] = true
	}
	for _, list := range []struct {
		name string
		ns   []int
	}{{"workers", o.Workers}, {"engines", o.Engines}, {"ceiling workers", o.CeilingWorkers}} {
		for _, n := range list.ns {
			if n < 1 {
				return fmt.Errorf("%s %d: must be at least 1", list.name, n)
			}
			if len(o.CPUs) > 0 && n > len(o.CPUs) {
				return fmt.Errorf("%s %d: only %d cpus given (%s)", list.name, n, len(o.CPUs), FormatCPUList(o.CPUs))
			}
		}
	}
	if ws := append(slices.Clone(o.Workers), ceilingWorkers(o)...); len(ws) > 0 && o.IOCPU >= 0 && len(o.CPUs) > 0 {
		used := o.CPUs[:slices.Max(ws)]
		if slices.Contains(used, o.IOCPU) {
			return fmt.Errorf("io cpu %d is also a worker cpu (%s): give the I/O loop a core of its own", o.IOCPU, FormatCPUList(used))
		}
	}
	return nil
}

// scalingPlan is one point's fixed parameters.
type scalingPlan struct {
	shape  string
	n      int
	graphs []*pipelines.Graph // one per engine
	loops  int                // passes per engine
	pass   uint64             // packets per pass
}

// RunScaling measures every point. Progress lines go to log.
func RunScaling(ctx context.Context, o ScalingOptions, log io.Writer) (ScalingResult, error) {
	res := ScalingResult{
		Capture: o.Capture, GoVersion: runtime.Version(), NumCPU: runtime.NumCPU(), Machine: hostinfo.CPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0), When: time.Now().UTC(), Repeats: o.Repeats, Idle: "default",
	}
	if o.Spin {
		res.Idle = "spin"
	}
	if err := o.validate(); err != nil {
		return res, err
	}
	capture := benchCapture
	if o.Capture == "" {
		res.Capture = EmbeddedCaptureName
	} else {
		data, err := os.ReadFile(o.Capture)
		if err != nil {
			return res, fmt.Errorf("capture: %w", err)
		}
		capture = data
	}
	load := loadScalingGraph
	probe, err := load(txOnlyPipeline)
	if err != nil {
		return res, err
	}
	pass, err := passPackets(res.Capture, capture, probe)
	if err != nil {
		return res, err
	}
	loops := int((o.Packets + pass - 1) / pass)
	res.PacketsPerUnit = uint64(loops) * pass

	// One graph per engine index, shared by the points (a graph is
	// immutable; each engine makes its own runners).
	maxEngines := max(1, slices.Max(append([]int{0}, o.Engines...)))
	defaults := make([]*pipelines.Graph, maxEngines)
	for i := range defaults {
		if defaults[i], err = load(defaultPipeline1k()); err != nil {
			return res, err
		}
	}
	res.Pipeline, res.BatchSize = defaults[0].Name(), defaults[0].Settings().BatchSize
	if o.BatchSize > 0 {
		res.BatchSize = o.BatchSize
	}

	maxWorkers := slices.Max(append(append([]int{0}, o.Workers...), ceilingWorkers(o)...))
	res.Frames = o.Frames
	if res.Frames == 0 {
		res.Frames = max(8192, 2*workerSlots(maxWorkers)*res.BatchSize)
	}
	res.Frames = int((uint64(res.Frames) + pass - 1) / pass * pass)

	var plans []scalingPlan
	for _, n := range o.Workers {
		plans = append(plans, scalingPlan{shape: ShapeWorkers, n: n, graphs: defaults[:1], loops: loops * n, pass: pass})
	}
	for _, n := range o.Engines {
		plans = append(plans, scalingPlan{shape: ShapeEngines, n: n, graphs: defaults[:n], loops: loops, pass: pass})
	}
	if ceil := ceilingWorkers(o); len(ceil) > 0 {
		g, err := load(txOnlyPipeline)
		if err != nil {
			return res, err
		}
		for _, n := range ceil {
			plans = append(plans, scalingPlan{shape: ShapeIOCeiling, n: n, graphs: []*pipelines.Graph{g}, loops: loops * n, pass: pass})
		}
	}

	samples := make([][]measurement, len(plans))
	errs := make([]string, len(plans))
	for rep := range o.Repeats {
		for i, p := range plans {
			if errs[i] != "" {
				continue
			}
			if err := ctx.Err(); err != nil {
				return res, err
			}
			fmt.Fprintf(log, "measuring %s %d (%d of %d) ...\n", p.shape, p.n, rep+1, o.Repeats)
			m, err := measure(ctx, p, capture, res.Frames, o)
			if err != nil {
				errs[i] = err.Error()
				fmt.Fprintf(log, "  %s %d: %v\n", p.shape, p.n, err)
				continue
			}
			fmt.Fprintf(log, "  %.2f Mpps\n", m.mpps)
			samples[i] = append(samples[i], m)
		}
	}
	for i, p := range plans {
		pt := ScalingPoint{Shape: p.shape, N: p.n, Err: errs[i]}
		if p.shape != ShapeEngines {
			pt.IOCPU = o.IOCPU
		}
		if len(o.CPUs) > 0 {
			pt.CPUs = o.CPUs[:p.n]
		}
		if pt.Err == "" {
			pt.fill(samples[i])
		}
		res.Points = append(res.Points, pt)
	}
	res.analyse()
	return res, nil
}

// ceilingWorkers lists the worker counts of the I/O ceiling points.
func ceilingWorkers(o ScalingOptions) []int {
	switch {
	case !o.IOCeiling:
		return nil
	case len(o.CeilingWorkers) > 0:
		return o.CeilingWorkers
	case len(o.Workers) > 0:
		return []int{slices.Max(o.Workers)}
	}
	return nil
}

func loadScalingGraph(src string) (*pipelines.Graph, error) {
	g, err := pipelines.Load("bench-scaling.yaml", []byte(src))
	if err != nil {
		return nil, fmt.Errorf("bench pipeline: %w", err)
	}
	return g, nil
}

// workerSlots is the slot count the engine gives a pool of n workers
// (dataplane's newPool: 64, doubled until at least 8 per worker).
func workerSlots(n int) int {
	s := 64
	for s < 8*n {
		s *= 2
	}
	return s
}

// passPackets counts the packets one pass over the capture yields.
func passPackets(name string, capture []byte, g *pipelines.Graph) (uint64, error) {
	cfg := dataplane.ReplayConfig{Capture: name, CaptureData: capture, Graph: g, Engine: dataplane.DefaultOptions(), Replay: dataplane.DefaultReplayOptions()}
	cfg.Engine.Workers = 0
	rep, err := dataplane.Replay(cfg)
	if err != nil {
		return 0, err
	}
	if rep.Received == 0 {
		return 0, errors.New("capture " + name + " holds no packets")
	}
	return rep.Received, nil
}

// measurement is one timed run of one point.
type measurement struct {
	mpps     float64
	packets  uint64
	replayed uint64
	allocs   uint64
	// workers shapes
	batches, execFull, idlePolls, parks uint64
	share                               [2]float64
}

func (p *ScalingPoint) fill(ms []measurement) {
	for _, m := range ms {
		p.MppsRuns = append(p.MppsRuns, m.mpps)
		p.Allocs = max(p.Allocs, m.allocs)
	}
	p.MinMpps, p.MaxMpps = slices.Min(p.MppsRuns), slices.Max(p.MppsRuns)
	sorted := append([]measurement(nil), ms...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].mpps < sorted[j].mpps })
	med := sorted[len(sorted)/2]
	p.Mpps, p.Packets, p.Replayed = med.mpps, med.packets, med.replayed
	p.PerUnitMpps = p.Mpps / float64(p.N)
	if med.batches > 0 {
		p.Batches = med.batches
		p.ExecutorFullPerBatch = float64(med.execFull) / float64(med.batches)
		p.WorkerIdlePerBatch = float64(med.idlePolls) / float64(med.batches)
		p.WorkerParks, p.WorkerShare = med.parks, med.share[:]
	}
}

// analyse computes the efficiencies, the targets and the saturation point.
func (r *ScalingResult) analyse() {
	for _, shape := range []string{ShapeWorkers, ShapeEngines} {
		var base *ScalingPoint
		for i := range r.Points {
			p := &r.Points[i]
			if p.Shape == shape && p.Err == "" && (base == nil || p.N < base.N) {
				base = p
			}
		}
		if base == nil {
			continue
		}
		unit := base.Mpps / float64(base.N)
		for i := range r.Points {
			p := &r.Points[i]
			if p.Shape != shape || p.Err != "" || unit <= 0 {
				continue
			}
			p.Efficiency = p.PerUnitMpps / unit
			p.EfficiencyRange = [2]float64{p.MinMpps / float64(p.N) / unit, p.MaxMpps / float64(p.N) / unit}
			if p.N <= base.N || p.N > ScalingTargetMaxWorkers {
				continue
			}
			t := Target{
				Name:      fmt.Sprintf("%d %s >= %.1fx linear", p.N, shape, ScalingTargetEfficiency),
				Row:       fmt.Sprintf("%s %d", shape, p.N),
				Base:      fmt.Sprintf("%s %d", shape, base.N),
				Want:      ScalingTargetEfficiency,
				Ratio:     p.Efficiency,
				Met:       p.Efficiency >= ScalingTargetEfficiency,
				Reference: shape == ShapeEngines,
			}
			r.Targets = append(r.Targets, t)
		}
	}
	ceilN := 0
	for _, p := range r.Points {
		switch {
		case p.Err != "":
		case p.Shape == ShapeIOCeiling:
			if p.N >= ceilN {
				r.CeilingMpps, ceilN = p.Mpps, p.N
			}
		case p.Shape == ShapeWorkers && p.Efficiency > 0 && p.Efficiency < ScalingTargetEfficiency && (r.SaturatesAt == 0 || p.N < r.SaturatesAt):
			r.SaturatesAt, r.SaturatedMpps = p.N, p.Mpps
		}
	}
}

// unit is one engine built for one measurement, with what it needs to be
// checked afterwards.
type unit struct {
	e     *dataplane.Engine
	in    *dataplane.ReplayPort
	sinks []*dataplane.NullPort
	pool  *workers.Pool
	end   time.Time
	err   error
}

// newUnit builds an engine over a fresh arena holding the preloaded
// capture, with a null port for every tx port of g. workersN 0 runs inline;
// otherwise the pool's workers are pinned to cpus (when not empty).
func newUnit(g *pipelines.Graph, capture []byte, frames, loops, workersN int, cpus []int, o ScalingOptions) (*unit, error) {
	arena, err := rings.NewArena(rings.ArenaOptions{Frames: frames, FrameSize: 2048, Headroom: 256})
	if err != nil {
		return nil, fmt.Errorf("frame arena: %w", err)
	}
	ro := dataplane.ReplayOptions{Name: "replay", Loops: loops, Preload: true, MinFrames: frames}
	in, err := dataplane.NewReplay("bench capture", bytes.NewReader(capture), arena, ro)
	if err != nil {
		return nil, err
	}
	u := &unit{in: in}
	outs := dataplane.Outputs{Ports: map[string]dataplane.Port{}}
	for _, name := range g.Ports() {
		s := dataplane.NewNullPort(name)
		u.sinks = append(u.sinks, s)
		outs.Ports[name] = s
	}
	eo := dataplane.DefaultOptions()
	eo.Workers, eo.Timing, eo.BatchSize = workersN, false, o.BatchSize
	if o.Spin {
		eo.Idle = workers.IdlePolicy{Spins: 1 << 30}
	}
	if workersN > 0 {
		eo.NewExecutor = func(c dataplane.ExecutorConfig) (workers.Executor, error) {
			kernels := make([]workers.Kernel, c.Workers)
			for i := range kernels {
				kernels[i] = c.Runners[i]
			}
			wo := workers.DefaultOptions()
			wo.Workers, wo.Slots, wo.NewBatch, wo.Idle = c.Workers, c.Slots, c.NewBatch, c.Idle
			if len(cpus) > 0 {
				wo.CPUs = cpus[:c.Workers]
			}
			p, err := workers.NewPool(wo, kernels)
			u.pool = p
			return p, err
		}
	}
	if u.e, err = dataplane.NewEngine(g, arena, in, outs, eo); err != nil {
		in.Close()
		return nil, err
	}
	return u, nil
}

// close closes the unit's ports (the engine has stopped).
func (u *unit) close() {
	u.in.Close()
	for _, s := range u.sinks {
		s.Close()
	}
}

// check verifies a finished unit's accounting: every packet the replay
// handed out was received and accounted as transmitted, dropped or passed,
// the sinks took what was transmitted, and the pass count is as planned.
func (u *unit) check(want uint64) (received uint64, err error) {
	if u.err != nil {
		return 0, u.err
	}
	rep := u.e.Report()
	st := u.in.Stats()
	var sunk uint64
	for _, s := range u.sinks {
		sunk += s.Stats().Packets
	}
	switch {
	case !rep.Balanced:
		return 0, fmt.Errorf("%s", rep.AccountingLine())
	case rep.Received != st.Packets || rep.Received != want:
		return 0, fmt.Errorf("engine received %d, replay handed out %d, want %d", rep.Received, st.Packets, want)
	case rep.Transmitted+rep.Dropped+rep.Passed != rep.Received:
		return 0, fmt.Errorf("received %d but transmitted %d + dropped %d + passed %d", rep.Received, rep.Transmitted, rep.Dropped, rep.Passed)
	case sunk != rep.Transmitted:
		return 0, fmt.Errorf("sinks took %d, engine transmitted %d", sunk, rep.Transmitted)
	}
	return rep.Received, nil
}

// measure builds the point's engines, each on its own pinned goroutine (so
// that its memory is first touched from its core), starts them together
// and times them to the last one's end.
func measure(ctx context.Context, p scalingPlan, capture []byte, frames int, o ScalingOptions) (measurement, error) {
	var m measurement
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	runtime.GC() // the last measurement's arenas are garbage now; not during this one
	type slot struct {
		cpu     int
		workers int
		wcpus   []int
	}
	var slots []slot
	switch p.shape {
	case ShapeEngines:
		for i := range p.n {
			cpu := -1
			if len(o.CPUs) > 0 {
				cpu = o.CPUs[i]
			}
			slots = append(slots, slot{cpu: cpu})
		}
	default:
		var wcpus []int
		if len(o.CPUs) > 0 {
			wcpus = o.CPUs[:p.n]
		}
		slots = append(slots, slot{cpu: o.IOCPU, workers: p.n, wcpus: wcpus})
	}
	units := make([]*unit, len(slots))
	ready := make(chan error, len(slots))
	start := make(chan struct{})
	finished := make(chan struct{}, len(slots))
	for i, s := range slots {
		go func() {
			if s.cpu >= 0 {
				if err := workers.PinCurrentGoroutine(s.cpu); err != nil {
					ready <- err
					return
				}
			}
			u, err := newUnit(p.graphs[i], capture, frames, p.loops, s.workers, s.wcpus, o)
			if err != nil {
				ready <- err
				return
			}
			units[i] = u
			ready <- nil
			<-start
			u.err = u.e.RunContext(runCtx, nil)
			u.end = time.Now()
			finished <- struct{}{}
		}()
	}
	var setupErr error
	for range slots {
		if err := <-ready; err != nil && setupErr == nil {
			setupErr = err
		}
	}
	if setupErr != nil {
		// Run the engines that were built with their context cancelled:
		// they stop at once, and their workers with them.
		cancel()
		close(start)
		for _, u := range units {
			if u != nil {
				<-finished
			}
		}
		return m, setupErr
	}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	t0 := time.Now()
	close(start)
	for range slots {
		<-finished
	}
	runtime.ReadMemStats(&ms1)
	var last time.Time
	if err := ctx.Err(); err != nil {
		return m, err
	}
	for _, u := range units {
		if u.end.After(last) {
			last = u.end
		}
		got, err := u.check(uint64(p.loops) * p.pass)
		if err != nil {
			return m, err
		}
		m.packets += got
		m.replayed += u.in.Stats().Packets
		if u.pool != nil {
			snap := u.e.Stats()
			m.batches, m.execFull = snap.Batches, snap.ExecutorFull
			st := u.pool.Stats()
			t := st.Total()
			m.idlePolls, m.parks = t.Spins+t.Yields, t.Parks
			even := float64(t.Packets) / float64(len(st.Workers))
			lo, hi := float64(st.Workers[0].Packets), float64(st.Workers[0].Packets)
			for _, w := range st.Workers {
				lo, hi = min(lo, float64(w.Packets)), max(hi, float64(w.Packets))
			}
			if even > 0 {
				m.share = [2]float64{lo / even, hi / even}
			}
		}
	}
	for _, u := range units {
		u.close()
	}
	m.allocs = ms1.Mallocs - ms0.Mallocs
	wall := last.Sub(t0)
	if wall <= 0 {
		return m, errors.New("no time measured")
	}
	m.mpps = float64(m.packets) / wall.Seconds() / 1e6
	return m, nil
}
