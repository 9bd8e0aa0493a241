package main

import (
	"errors"
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/warpflow/warpflow/internal/chartutil"
)

// Run is one measurement of a row (the benchmark's benchRun).
type Run struct {
	Mpps      float64 `json:"mpps"`
	HostCores float64 `json:"host_cores"`
}

// Row is one configuration with its summary (the benchmark's summary).
type Row struct {
	Name    string  `json:"name"`
	Backend string  `json:"backend"` // cpu, cuda, kernel
	Rules   int     `json:"rules"`
	Batch   int     `json:"batch"`
	Engines int     `json:"engines"`
	Workers int     `json:"workers"`
	Median  float64 `json:"Median"`
	Min     float64 `json:"Min"`
	Max     float64 `json:"Max"`
	Cores   float64 `json:"Cores"`
	Runs    []Run   `json:"runs"`
}

// File is docs/gpu-bench.json: one TestGPUBench run.
type File struct {
	Device  string  `json:"device"`
	Repeats int     `json:"repeats"`
	Rows    []Row   `json:"rows"`
	P50     float64 `json:"latency_p50_us"`
	P99     float64 `json:"latency_p99_us"`
}

// Throughput draws every row as a horizontal bar at its median Mpps with
// the repeats' range as a whisker; red marks the targets: 100 Mpps for the
// CUDA rows at 10 000 rules, three times the 16 CPU workers' median for
// those at 100 000.
func Throughput(f File, path string) error {
	if len(f.Rows) == 0 {
		return errors.New("no rows")
	}
	cpu := map[int]float64{}
	for _, r := range f.Rows {
		if r.Backend == "cpu" {
			cpu[r.Rules] = r.Median
		}
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("End to end, 64-byte frames, bench shape + balance: bar = median of %d repeats, whisker = min..max, red = target", f.Repeats)
	p.X.Label.Text = "Mpps (blue: CUDA backend through the engine; green: the kernel alone; grey: 16 CPU workers)"
	n := len(f.Rows)
	cuda, cpuv, kern := make(plotter.Values, n), make(plotter.Values, n), make(plotter.Values, n)
	names := make([]string, n)
	var eb chartutil.Ranges
	var targets plotter.XYs
	maxX := 0.0
	for i, r := range f.Rows {
		y := n - 1 - i
		switch r.Backend {
		case "cpu":
			cpuv[y] = r.Median
			names[y] = fmt.Sprintf("%dk rules, CPU %d workers, %.1f cores", r.Rules/1000, r.Workers, r.Cores)
		case "kernel":
			kern[y] = r.Median
			names[y] = fmt.Sprintf("%dk rules, kernel alone, batch %d, %.1f cores", r.Rules/1000, r.Batch, r.Cores)
		default:
			cuda[y] = r.Median
			names[y] = fmt.Sprintf("%dk rules, CUDA %d I/O loops, batch %d, %.1f cores", r.Rules/1000, r.Engines, r.Batch, r.Cores)
			switch r.Rules {
			case 10000:
				targets = append(targets, plotter.XY{X: 100, Y: float64(y)})
			case 100000:
				targets = append(targets, plotter.XY{X: 3 * cpu[r.Rules], Y: float64(y)})
			}
		}
		eb.Add(r.Median, float64(y), r.Min, r.Max)
		maxX = max(maxX, r.Max, 3*cpu[r.Rules])
	}
	for _, b := range []struct {
		v plotter.Values
		c color.Color
	}{{cpuv, chartutil.Grey}, {cuda, chartutil.Blue}, {kern, color.RGBA{R: 60, G: 150, B: 80, A: 255}}} {
		if err := chartutil.AddHBars(p, b.v, vg.Points(12), b.c); err != nil {
			return err
		}
	}
	if err := chartutil.AddRangesAndTargets(p, eb, targets); err != nil {
		return err
	}
	p.NominalY(names...)
	p.X.Min, p.X.Max = 0, maxX*1.1
	return save(p, n, path)
}

func save(p *plot.Plot, rows int, path string) error {
	if err := p.Save(11*vg.Inch, vg.Points(float64(70+22*rows)), path); err != nil {
		return fmt.Errorf("chart %s: %w", path, err)
	}
	return nil
}
