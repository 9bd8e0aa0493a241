package main

import (
	"errors"
	"fmt"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/warpflow/warpflow/internal/chartutil"
)

// Result is one row of a TestGPUBench run (its benchResult).
type Result struct {
	Backend   string  `json:"backend"`
	Rules     int     `json:"rules"`
	Batch     int     `json:"batch"`
	Mpps      float64 `json:"mpps"`
	HostCores float64 `json:"host_cores"`
	MedianUs  float64 `json:"median_us"`
	P99Us     float64 `json:"p99_us"`
}

// File is docs/gpu-bench.json: repeated runs of the benchmark.
type File struct {
	Device string     `json:"device"`
	Runs   [][]Result `json:"runs"`
}

// stat is a row's median over the runs and their range.
type stat struct {
	backend          string
	rules, batch     int
	med, lo, hi, p99 float64
	cores            float64
}

func stats(f File, latency bool) []stat {
	type key struct {
		b    string
		r, n int
	}
	var order []key
	vals := map[key][]Result{}
	for _, run := range f.Runs {
		for _, r := range run {
			if (r.Backend == "cuda-latency") != latency {
				continue
			}
			k := key{r.Backend, r.Rules, r.Batch}
			if _, ok := vals[k]; !ok {
				order = append(order, k)
			}
			vals[k] = append(vals[k], r)
		}
	}
	var out []stat
	for _, k := range order {
		rs := vals[k]
		v := func(r Result) float64 {
			if latency {
				return r.MedianUs
			}
			return r.Mpps
		}
		slices.SortFunc(rs, func(a, b Result) int {
			if v(a) < v(b) {
				return -1
			}
			if v(a) > v(b) {
				return 1
			}
			return 0
		})
		m := rs[len(rs)/2]
		out = append(out, stat{backend: k.b, rules: k.r, batch: k.n, med: v(m), lo: v(rs[0]), hi: v(rs[len(rs)-1]), p99: m.P99Us, cores: m.HostCores})
	}
	return out
}

// Throughput draws every throughput row as a horizontal bar at its median
// Mpps with the runs' range as a whisker; red marks: 100 Mpps for the
// CUDA rows at 10 000 rules, the CPU workers' median for those at 100 000.
func Throughput(f File, path string) error {
	st := stats(f, false)
	if len(st) == 0 {
		return errors.New("no throughput rows")
	}
	cpu := map[int]float64{}
	for _, s := range st {
		if s.backend == "cpu" {
			cpu[s.rules] = s.med
		}
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Classify 64-byte TCP/UDP frames: bar = median of %d runs, whisker = min..max, red = issue 9 target", len(f.Runs))
	p.X.Label.Text = "Mpps (blue: CUDA backend, one host goroutine; grey: CPU workers on every core)"
	n := len(st)
	cuda, cpuv := make(plotter.Values, n), make(plotter.Values, n)
	names := make([]string, n)
	var eb chartutil.Ranges
	var targets plotter.XYs
	maxX := 0.0
	for i, s := range st {
		y := n - 1 - i
		if s.backend == "cpu" {
			cpuv[y] = s.med
			names[y] = fmt.Sprintf("%d rules, CPU, %.1f cores", s.rules, s.cores)
		} else {
			cuda[y] = s.med
			names[y] = fmt.Sprintf("%d rules, CUDA batch %d, %.1f cores", s.rules, s.batch, s.cores)
			switch s.rules {
			case 10000:
				targets = append(targets, plotter.XY{X: 100, Y: float64(y)})
			case 100000:
				targets = append(targets, plotter.XY{X: cpu[s.rules], Y: float64(y)})
			}
		}
		eb.Add(s.med, float64(y), s.lo, s.hi)
		maxX = max(maxX, s.hi)
	}
	if err := chartutil.AddHBars(p, cpuv, vg.Points(12), chartutil.Grey); err != nil {
		return err
	}
	if err := chartutil.AddHBars(p, cuda, vg.Points(12), chartutil.Blue); err != nil {
		return err
	}
	if err := chartutil.AddRangesAndTargets(p, eb, targets); err != nil {
		return err
	}
	p.NominalY(names...)
	p.X.Min, p.X.Max = 0, maxX*1.1
	return save(p, n, path)
}

// Latency draws the handshake latency per batch size: the median of the
// runs' medians as a point, their range as a whisker, the p99 of the
// median run as a cross, on a log scale; red: the 5 us target at batch 1.
func Latency(f File, path string) error {
	st := stats(f, true)
	if len(st) == 0 {
		return errors.New("no latency rows")
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Slot handshake, one slot in flight, %d rules: dot = median of %d runs' medians, whisker = min..max, x = p99, red = target", st[0].rules, len(f.Runs))
	p.X.Label.Text = "microseconds from the ready store to the host seeing done (log scale)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	n := len(st)
	names := make([]string, n)
	var eb chartutil.Ranges
	var meds, p99s, targets plotter.XYs
	maxX := 0.0
	for i, s := range st {
		y := float64(n - 1 - i)
		names[n-1-i] = fmt.Sprintf("batch %d", s.batch)
		meds = append(meds, plotter.XY{X: s.med, Y: y})
		p99s = append(p99s, plotter.XY{X: s.p99, Y: y})
		eb.Add(s.med, y, s.lo, s.hi)
		maxX = max(maxX, s.p99, s.hi)
		if s.batch == 1 {
			targets = append(targets, plotter.XY{X: 5, Y: y})
		}
	}
	for _, g := range []struct {
		xy    plotter.XYs
		shape draw.GlyphDrawer
	}{{meds, draw.CircleGlyph{}}, {p99s, draw.CrossGlyph{}}} {
		s, err := plotter.NewScatter(g.xy)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		s.GlyphStyle.Shape, s.GlyphStyle.Color, s.GlyphStyle.Radius = g.shape, chartutil.Blue, vg.Points(4)
		p.Add(s)
	}
	if err := chartutil.AddRangesAndTargets(p, eb, targets); err != nil {
		return err
	}
	p.NominalY(names...)
	p.X.Min, p.X.Max = 2, maxX*1.5
	return save(p, n, path)
}

func save(p *plot.Plot, rows int, path string) error {
	if err := p.Save(11*vg.Inch, vg.Points(float64(70+22*rows)), path); err != nil {
		return fmt.Errorf("chart %s: %w", path, err)
	}
	return nil
}
