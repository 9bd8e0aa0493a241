package bench

import (
	"context"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/pipelines"
)

func tinyScaling() ScalingOptions {
	o := DefaultScalingOptions()
	o.Packets, o.Repeats = 20000, 3
	o.Workers, o.Engines = []int{1, 2}, []int{1, 2}
	o.IOCPU, o.CPUs = -1, nil // this machine may have two cores: do not pin
	return o
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestRunScalingSmall runs both shapes and the I/O ceiling with 1 and 2
// workers and engines on a few thousand packets and checks that every
// point counted what it replayed, N times the per-unit packets, and that
// the medians, ranges, efficiencies and targets follow from the repeats.
func TestRunScalingSmall(t *testing.T) {
	o := tinyScaling()
	res, err := RunScaling(context.Background(), o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.PacketsPerUnit < o.Packets || res.PacketsPerUnit%4096 != 0 {
		t.Fatalf("packets per unit %d: want whole passes of the 4096-packet capture, at least %d", res.PacketsPerUnit, o.Packets)
	}
	type key struct {
		shape string
		n     int
	}
	want := []key{{ShapeWorkers, 1}, {ShapeWorkers, 2}, {ShapeEngines, 1}, {ShapeEngines, 2}, {ShapeIOCeiling, 2}}
	if len(res.Points) != len(want) {
		t.Fatalf("%d points, want %d: %+v", len(res.Points), len(want), res.Points)
	}
	base := map[string]float64{}
	for i, p := range res.Points {
		if (key{p.Shape, p.N}) != want[i] || p.Err != "" {
			t.Fatalf("point %d: %+v, want %v", i, p, want[i])
		}
		if p.Packets != uint64(p.N)*res.PacketsPerUnit || p.Replayed != p.Packets {
			t.Errorf("%s %d: counted %d, replayed %d, want %d", p.Shape, p.N, p.Packets, p.Replayed, uint64(p.N)*res.PacketsPerUnit)
		}
		if len(p.MppsRuns) != o.Repeats {
			t.Errorf("%s %d: %d repeats, want %d", p.Shape, p.N, len(p.MppsRuns), o.Repeats)
		}
		runs := append([]float64(nil), p.MppsRuns...)
		sort.Float64s(runs)
		if p.Mpps != runs[len(runs)/2] || p.MinMpps != runs[0] || p.MaxMpps != runs[len(runs)-1] || p.Mpps <= 0 {
			t.Errorf("%s %d: median %v min %v max %v of %v", p.Shape, p.N, p.Mpps, p.MinMpps, p.MaxMpps, p.MppsRuns)
		}
		if !near(p.PerUnitMpps, p.Mpps/float64(p.N)) {
			t.Errorf("%s %d: per unit %v", p.Shape, p.N, p.PerUnitMpps)
		}
		// A handful per run (goroutines, pool start); one per packet or
		// batch would be hundreds.
		if p.Allocs > 200 {
			t.Errorf("%s %d: %d allocations in a run of %d packets", p.Shape, p.N, p.Allocs, p.Packets)
		}
		if p.Shape == ShapeIOCeiling {
			if p.Efficiency != 0 || res.CeilingMpps != p.Mpps {
				t.Errorf("ceiling %+v, result ceiling %v", p, res.CeilingMpps)
			}
			continue
		}
		if p.N == 1 {
			base[p.Shape] = p.Mpps
		}
		eff := p.Mpps / float64(p.N) / base[p.Shape]
		if !near(p.Efficiency, eff) || !near(p.EfficiencyRange[0], p.MinMpps/float64(p.N)/base[p.Shape]) ||
			!near(p.EfficiencyRange[1], p.MaxMpps/float64(p.N)/base[p.Shape]) {
			t.Errorf("%s %d: efficiency %v range %v, want %v", p.Shape, p.N, p.Efficiency, p.EfficiencyRange, eff)
		}
		if p.Shape == ShapeEngines && p.WorkerShare != nil {
			t.Errorf("engines %d: worker share %v", p.N, p.WorkerShare)
		}
		if p.Shape == ShapeWorkers && (p.ExecutorFullPerBatch < 0 || len(p.WorkerShare) != 2 || p.WorkerShare[1] < 1 || p.WorkerShare[0] > 1) {
			t.Errorf("workers %d: executor stats %+v", p.N, p)
		}
		if p.Shape == ShapeWorkers && p.N == 1 && !slices.Equal(p.WorkerShare, []float64{1, 1}) {
			t.Errorf("one worker took share %v of the packets, want all", p.WorkerShare)
		}
	}
	if len(res.Targets) != 2 {
		t.Fatalf("targets %+v", res.Targets)
	}
	for _, tg := range res.Targets {
		p := res.Points[1] // workers 2
		if tg.Reference {
			p = res.Points[3] // engines 2
		}
		if tg.Ratio != p.Efficiency || tg.Met != (p.Efficiency >= 0.8) || tg.Want != 0.8 {
			t.Errorf("target %+v for point %+v", tg, p)
		}
	}
}

// TestScalingAllocsDoNotGrowWithPackets: ten times the packets cost no
// more allocations, in either shape: nothing per packet or per batch.
func TestScalingAllocsDoNotGrowWithPackets(t *testing.T) {
	o := tinyScaling()
	capture := benchCapture
	g, err := loadScalingGraph(defaultPipeline1k())
	if err != nil {
		t.Fatal(err)
	}
	for _, shape := range []string{ShapeWorkers, ShapeEngines} {
		var allocs [2]uint64
		for i, loops := range []int{5, 50} {
			p := scalingPlan{shape: shape, n: 1, graphs: []*pipelines.Graph{g}, loops: loops, pass: 4096}
			// Best of three: a stray runtime allocation (a timer, the
			// scavenger) should not decide the test.
			best := uint64(math.MaxUint64)
			for range 3 {
				m, err := measure(context.Background(), p, capture, 8192, o)
				if err != nil {
					t.Fatal(err)
				}
				if m.packets != uint64(loops)*4096 {
					t.Fatalf("%s: %d packets, want %d", shape, m.packets, loops*4096)
				}
				best = min(best, m.allocs)
			}
			allocs[i] = best
		}
		// 50 passes are 3200 batches of 64: a per-batch allocation would
		// add thousands.
		if allocs[1] > allocs[0]+16 {
			t.Errorf("%s: %d allocations for 20480 packets, %d for 204800", shape, allocs[0], allocs[1])
		}
		t.Logf("%s: %d allocations for 20480 packets, %d for 204800", shape, allocs[0], allocs[1])
	}
}

// TestRunScalingBatchSize: the batch size override reaches the result and
// sizes the preloaded frames (twice the 64 slots of one worker times the
// batch), and the run still counts what it replayed.
func TestRunScalingBatchSize(t *testing.T) {
	o := tinyScaling()
	o.Repeats, o.Workers, o.Engines, o.IOCeiling, o.BatchSize = 1, []int{1}, nil, false, 256
	res, err := RunScaling(context.Background(), o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.BatchSize != 256 || res.Frames != 2*64*256 {
		t.Fatalf("batch %d, frames %d", res.BatchSize, res.Frames)
	}
	if p := res.Points[0]; p.Err != "" || p.Packets != res.PacketsPerUnit || p.Replayed != p.Packets || p.Batches != p.Packets/256 {
		t.Fatalf("point %+v", p)
	}
}

// TestRunScalingCeilingWorkers: the I/O ceiling is measured at every
// worker count asked for, and the result's ceiling is the largest count's.
func TestRunScalingCeilingWorkers(t *testing.T) {
	o := tinyScaling()
	o.Repeats, o.Workers, o.Engines, o.CeilingWorkers = 1, []int{1}, nil, []int{1, 2}
	res, err := RunScaling(context.Background(), o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Points) != 3 || res.Points[1].Shape != ShapeIOCeiling || res.Points[1].N != 1 || res.Points[2].N != 2 {
		t.Fatalf("points %+v", res.Points)
	}
	if p := res.Points[2]; p.Err != "" || p.Packets != 2*res.PacketsPerUnit || res.CeilingMpps != p.Mpps {
		t.Fatalf("ceiling point %+v, result ceiling %v", p, res.CeilingMpps)
	}
	o.IOCeiling = false
	if res, err := RunScaling(context.Background(), o, io.Discard); err != nil || len(res.Points) != 1 || res.CeilingMpps != 0 {
		t.Fatalf("without the ceiling: %v, %+v", err, res.Points)
	}
}

// TestRunScalingPinned pins the I/O loop and one worker (and one engine)
// where the machine has two CPUs.
func TestRunScalingPinned(t *testing.T) {
	allowed := allowedCPUs()
	if runtime.GOOS != "linux" || len(allowed) < 2 {
		t.Skipf("needs Linux and two allowed CPUs, have %s and %v", runtime.GOOS, allowed)
	}
	o := tinyScaling()
	o.Repeats, o.Workers, o.Engines, o.IOCeiling = 1, []int{1}, []int{1}, false
	o.IOCPU, o.CPUs = allowed[0], allowed[1:2]
	res, err := RunScaling(context.Background(), o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Points {
		if p.Err != "" || p.Packets != res.PacketsPerUnit || !slices.Equal(p.CPUs, allowed[1:2]) {
			t.Errorf("point %+v", p)
		}
	}
}

func TestScalingOptionsValidate(t *testing.T) {
	ok := tinyScaling()
	ok.IOCPU, ok.CPUs = 0, []int{1, 2}
	if err := ok.validate(); err != nil {
		t.Fatalf("valid options rejected: %v", err)
	}
	tests := map[string]struct {
		mutate func(*ScalingOptions)
		want   string
	}{
		"no repeats":       {func(o *ScalingOptions) { o.Repeats = 0 }, "repeats 0"},
		"no packets":       {func(o *ScalingOptions) { o.Packets = 0 }, "packets 0"},
		"nothing":          {func(o *ScalingOptions) { o.Workers, o.Engines = nil, nil }, "nothing to measure"},
		"zero workers":     {func(o *ScalingOptions) { o.Workers = []int{0} }, "workers 0"},
		"zero engines":     {func(o *ScalingOptions) { o.Engines = []int{1, -2} }, "engines -2"},
		"too few cpus":     {func(o *ScalingOptions) { o.Workers = []int{3} }, "workers 3: only 2 cpus"},
		"io cpu is worker": {func(o *ScalingOptions) { o.IOCPU = 2 }, "io cpu 2 is also a worker cpu"},
		"repeated cpu":     {func(o *ScalingOptions) { o.CPUs = []int{1, 1} }, "cpu 1 given twice"},
		"negative cpu":     {func(o *ScalingOptions) { o.CPUs = []int{1, -1} }, "cpu -1 is negative"},
		"bad frames":       {func(o *ScalingOptions) { o.Frames = -1 }, "frames -1"},
		"bad batch":        {func(o *ScalingOptions) { o.BatchSize = 4096 }, "batch size 4096"},
		"zero ceiling":     {func(o *ScalingOptions) { o.CeilingWorkers = []int{0} }, "ceiling workers 0"},
		"ceiling on io":    {func(o *ScalingOptions) { o.Workers, o.IOCPU, o.CeilingWorkers = []int{1}, 2, []int{2} }, "io cpu 2 is also a worker cpu"},
	}
	for name, tt := range tests {
		o := ok
		tt.mutate(&o)
		err := o.validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tt.want)
		}
	}
	// The I/O CPU may be a CPU that only the engines use.
	o := ok
	o.Workers, o.IOCPU = []int{1}, 2
	if err := o.validate(); err != nil {
		t.Errorf("io cpu beyond the workers' cpus rejected: %v", err)
	}
}

// TestScalingAnalyse checks the efficiencies, targets and saturation point
// on made-up points.
func TestScalingAnalyse(t *testing.T) {
	pt := func(shape string, n int, runs ...float64) ScalingPoint {
		p := ScalingPoint{Shape: shape, N: n}
		var ms []measurement
		for _, r := range runs {
			ms = append(ms, measurement{mpps: r})
		}
		p.fill(ms)
		return p
	}
	r := ScalingResult{Points: []ScalingPoint{
		pt(ShapeWorkers, 1, 10, 9, 11),
		pt(ShapeWorkers, 2, 19, 20, 18),  // 0.95
		pt(ShapeWorkers, 4, 36, 30, 40),  // 0.9
		pt(ShapeWorkers, 8, 50, 50, 50),  // 0.625: saturated
		pt(ShapeWorkers, 14, 52, 52, 52), // beyond the target's range
		pt(ShapeEngines, 2, 20, 20, 20),  // the base is the smallest N
		pt(ShapeEngines, 4, 36, 36, 36),  // 0.9
		pt(ShapeIOCeiling, 14, 60, 61, 59),
		{Shape: ShapeEngines, N: 8, Err: "failed"},
		pt(ShapeIOCeiling, 4, 70, 70, 70), // fewer idle workers: not the ceiling reported
	}}
	r.analyse()
	effs := []float64{1, 0.95, 0.9, 0.625, 52.0 / 14 / 10, 1, 0.9, 0, 0, 0}
	for i, p := range r.Points {
		if !near(p.Efficiency, effs[i]) {
			t.Errorf("%s %d: efficiency %v, want %v", p.Shape, p.N, p.Efficiency, effs[i])
		}
	}
	if p := r.Points[2]; !near(p.EfficiencyRange[0], 0.75) || !near(p.EfficiencyRange[1], 1) || p.Mpps != 36 {
		t.Errorf("workers 4: median %v, range %v", p.Mpps, p.EfficiencyRange)
	}
	var got []string
	for _, tg := range r.Targets {
		got = append(got, tg.Row)
		if tg.Met != (tg.Ratio >= 0.8) || tg.Reference != strings.HasPrefix(tg.Row, ShapeEngines) {
			t.Errorf("target %+v", tg)
		}
	}
	if want := []string{"workers 2", "workers 4", "workers 8", "engines 4"}; !slices.Equal(got, want) {
		t.Errorf("targets for %v, want %v", got, want)
	}
	if r.SaturatesAt != 8 || r.SaturatedMpps != 50 || r.CeilingMpps != 60 {
		t.Errorf("saturates at %d (%v Mpps), ceiling %v", r.SaturatesAt, r.SaturatedMpps, r.CeilingMpps)
	}
}

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		err  bool
	}{
		{"", nil, false},
		{"3", []int{3}, false},
		{"1-4,8, 10-11", []int{1, 2, 3, 4, 8, 10, 11}, false},
		{"5,1-2", []int{5, 1, 2}, false},
		{"1-3,2", nil, true},
		{"4-2", nil, true},
		{"-1", nil, true},
		{"a", nil, true},
		{"1,,2", nil, true},
	}
	for _, tt := range tests {
		got, err := ParseCPUList(tt.in)
		if (err != nil) != tt.err || !slices.Equal(got, tt.want) {
			t.Errorf("ParseCPUList(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.err)
		}
		if err == nil {
			back, err := ParseCPUList(FormatCPUList(got))
			if err != nil || !slices.Equal(back, got) {
				t.Errorf("FormatCPUList(%v) = %q does not parse back", got, FormatCPUList(got))
			}
		}
	}
	if s := FormatCPUList([]int{1, 2, 3, 5, 7, 8}); s != "1-3,5,7-8" {
		t.Errorf("FormatCPUList = %q", s)
	}
}

// TestPhysicalFirst: on a made-up sysfs with SMT siblings (cpu n and n+4
// share a core), the first thread of every core comes first.
func TestPhysicalFirst(t *testing.T) {
	root := t.TempDir()
	for c := range 8 {
		dir := filepath.Join(root, "cpu"+string(rune('0'+c)), "topology")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "physical_package_id"), []byte("0\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "core_id"), []byte(string(rune('0'+c%4))+"\n"), 0o644)
	}
	if got, want := physicalFirst([]int{1, 2, 3, 4, 5, 6, 7}, root), []int{1, 2, 3, 4, 5, 6, 7}; !slices.Equal(got, want) {
		// cpu 4 is core 0's second thread, but core 0's first (cpu 0) is
		// not in the list, so 4 is the first thread of its core here.
		t.Errorf("physicalFirst = %v, want %v", got, want)
	}
	if got, want := physicalFirst([]int{0, 4, 1, 5, 2, 6}, root), []int{0, 1, 2, 4, 5, 6}; !slices.Equal(got, want) {
		t.Errorf("physicalFirst = %v, want %v", got, want)
	}
	// Without topology every CPU is a core of its own: order kept.
	if got := physicalFirst([]int{3, 1, 2}, t.TempDir()); !slices.Equal(got, []int{3, 1, 2}) {
		t.Errorf("physicalFirst without topology = %v", got)
	}
}
