package main

import (
	"fmt"
	"image/color"
	"math"
	"strings"

	"github.com/warpflow/warpflow/internal/bench"
	"github.com/warpflow/warpflow/internal/chartutil"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

var (
	blue   = color.RGBA{R: 40, G: 110, B: 200, A: 255}
	orange = color.RGBA{R: 230, G: 120, B: 20, A: 255}
	grey   = color.RGBA{R: 120, G: 120, B: 120, A: 255}
	red    = color.RGBA{R: 200, A: 255}
)

// series is one shape's points: medians and ranges.
type series struct {
	plotter.XYs
	plotter.YErrors
}

// shapeSeries collects the measured points of shape, in N order as run.
func shapeSeries(res bench.ScalingResult, shape string) series {
	var s series
	for _, p := range res.Points {
		if p.Shape != shape || p.Err != "" {
			continue
		}
		s.XYs = append(s.XYs, plotter.XY{X: float64(p.N), Y: p.Mpps})
		s.YErrors = append(s.YErrors, struct{ Low, High float64 }{math.Max(p.Mpps-p.MinMpps, 0), math.Max(p.MaxMpps-p.Mpps, 0)})
	}
	return s
}

// linear is the line through the shape's smallest N at slope per-unit rate
// times k (k = 1: linear scaling; 0.8: the target), over [1, maxN].
func linear(res bench.ScalingResult, shape string, k float64, maxN float64) plotter.XYs {
	var base *bench.ScalingPoint
	for i := range res.Points {
		p := &res.Points[i]
		if p.Shape == shape && p.Err == "" && (base == nil || p.N < base.N) {
			base = p
		}
	}
	if base == nil {
		return nil
	}
	unit := base.Mpps / float64(base.N)
	return plotter.XYs{{X: float64(base.N), Y: unit * float64(base.N) * k}, {X: maxN, Y: unit * maxN * k}}
}

// caption says what the chart shows.
func caption(res bench.ScalingResult, note string) []string {
	lines := []string{
		fmt.Sprintf("Points: median total rate of %d repeats; error bars: range over the repeats. %d packets per worker or engine per measurement, batch %d, %d preloaded frames per engine, idle policy %s, %s.",
			res.Repeats, res.PacketsPerUnit, res.BatchSize, res.Frames, res.Idle, res.GoVersion),
		"Workers: one I/O loop on its own core feeding N pinned workers. Engines: N engines side by side, each inline on its own core over its own copy of the capture. Dashed: linear and 0.8x linear from one worker.",
	}
	if n := len(shapeSeries(res, bench.ShapeIOCeiling).XYs); n > 1 {
		lines = append(lines, "Dotted with triangles: one I/O loop feeding N workers with a transmit-only pipeline (the workers idle): what the I/O loop alone can hand out.")
	} else if res.CeilingMpps > 0 {
		lines = append(lines, fmt.Sprintf("Dotted: one I/O loop's ceiling (%.1f Mpps), measured with a transmit-only pipeline.", res.CeilingMpps))
	}
	if note != "" {
		lines = append(lines, note)
	}
	return lines
}

// Chart draws res to path (.png or .svg by extension).
func Chart(res bench.ScalingResult, note, path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Default pipeline (parse, 1000-rule filter, SNAT + MAC swap, count), %d CPUs: total Mpps, higher is better", res.NumCPU)
	p.Y.Label.Text = "Mpps (total)"
	// Bottom right: under the flat one-I/O-loop line and right of where
	// every shape starts, the emptiest corner of a scaling chart.
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.YOffs = vg.Points(6)
	maxN, maxY := 1.0, 0.0
	for _, pt := range res.Points {
		if pt.Err == "" {
			maxN = math.Max(maxN, float64(pt.N))
			maxY = math.Max(maxY, pt.MaxMpps)
		}
	}
	drawn := 0
	for _, sh := range []struct {
		shape, label string
		c            color.Color
		glyph        draw.GlyphDrawer
	}{
		{bench.ShapeWorkers, "N workers behind one I/O loop", blue, draw.CircleGlyph{}},
		{bench.ShapeEngines, "N engines side by side", orange, draw.SquareGlyph{}},
	} {
		s := shapeSeries(res, sh.shape)
		if len(s.XYs) == 0 {
			continue
		}
		drawn++
		l, pts, err := plotter.NewLinePoints(s.XYs)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		l.Color, l.Width = sh.c, vg.Points(1.5)
		pts.Color, pts.Shape, pts.Radius = sh.c, sh.glyph, vg.Points(3.5)
		eb, err := plotter.NewYErrorBars(s)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		eb.Color, eb.Width, eb.CapWidth = sh.c, vg.Points(1.2), vg.Points(7)
		p.Add(l, pts, eb)
		p.Legend.Add(sh.label, l, pts)
		labels := plotter.XYLabels{XYs: s.XYs}
		for _, xy := range s.XYs {
			labels.Labels = append(labels.Labels, fmt.Sprintf(" %.0f", xy.Y))
		}
		lb, err := plotter.NewLabels(labels)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		for i := range lb.TextStyle {
			lb.TextStyle[i].Color = sh.c
			lb.TextStyle[i].Font.Size = vg.Points(8)
		}
		p.Add(lb)
	}
	if drawn == 0 {
		return fmt.Errorf("chart: no measured points")
	}
	for _, ref := range []struct {
		k     float64
		label string
		c     color.Color
	}{{1, "linear (N x one worker)", grey}, {bench.ScalingTargetEfficiency, "0.8x linear (the target up to 8 workers)", red}} {
		xy := linear(res, bench.ShapeWorkers, ref.k, maxN)
		if xy == nil {
			continue
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		l.Color, l.Dashes = ref.c, []vg.Length{vg.Points(5), vg.Points(4)}
		p.Add(l)
		p.Legend.Add(ref.label, l)
	}
	// The ceiling: a level line when measured at one worker count, else
	// its own dotted series (it moves with the number of idle workers).
	if ceil := shapeSeries(res, bench.ShapeIOCeiling); len(ceil.XYs) > 1 {
		l, pts, err := plotter.NewLinePoints(ceil.XYs)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		l.Color, l.Dashes = blue, []vg.Length{vg.Points(1.5), vg.Points(3)}
		pts.Color, pts.Shape, pts.Radius = blue, draw.TriangleGlyph{}, vg.Points(3)
		eb, err := plotter.NewYErrorBars(ceil)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		eb.Color, eb.CapWidth = blue, vg.Points(5)
		p.Add(l, pts, eb)
		p.Legend.Add("one I/O loop, transmit-only pipeline, N idle workers", l, pts)
	} else if res.CeilingMpps > 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: 1, Y: res.CeilingMpps}, {X: maxN, Y: res.CeilingMpps}})
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		l.Color, l.Dashes = blue, []vg.Length{vg.Points(1.5), vg.Points(3)}
		p.Add(l)
		p.Legend.Add("one I/O loop's ceiling (transmit-only pipeline)", l)
		maxY = math.Max(maxY, res.CeilingMpps)
	}
	// Linear may run far above the data (its lines are clipped): keep the
	// measured points readable.
	p.Y.Min, p.Y.Max = 0, maxY*1.15
	p.X.Min, p.X.Max = 0, maxN+1
	var ticks []plot.Tick
	seen := map[int]bool{}
	for _, pt := range res.Points {
		if !seen[pt.N] {
			seen[pt.N] = true
			ticks = append(ticks, plot.Tick{Value: float64(pt.N), Label: fmt.Sprint(pt.N)})
		}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	lines := chartutil.Wrap(120, caption(res, note)...)
	p.X.Label.Text = "N (workers or engines)\n" + strings.Join(lines, "\n")
	p.X.Label.TextStyle.Font.Size = vg.Points(9)
	if err := p.Save(10*vg.Inch, 6*vg.Inch+vg.Length(len(lines))*vg.Points(12), path); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return nil
}
