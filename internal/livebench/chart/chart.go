package main

import (
	"errors"
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/warpflow/warpflow/internal/livebench"
)

// errBars are the min..max ranges drawn over the median bars.
type errBars struct {
	xy     plotter.XYs
	lo, hi []float64
}

func (e errBars) Len() int                        { return len(e.xy) }
func (e errBars) XY(i int) (float64, float64)     { return e.xy[i].X, e.xy[i].Y }
func (e errBars) XError(i int) (float64, float64) { return e.xy[i].X - e.lo[i], e.hi[i] - e.xy[i].X }

var (
	colWarpflow = color.RGBA{R: 40, G: 110, B: 200, A: 255}
	colBefore   = color.RGBA{R: 150, G: 190, B: 235, A: 255}
	colTestpmd  = color.RGBA{R: 150, G: 150, B: 150, A: 255}
	colTarget   = color.RGBA{R: 210, G: 30, B: 30, A: 255}
)

// Chart draws every case as a horizontal bar at its median rate, with the
// min..max range of its repeats as an error bar and, where the case has a
// target, a red mark at the rate it must reach; saved to path (.png or
// .svg).
func Chart(res livebench.Result, path string) error {
	var crs []livebench.CaseResult
	for _, c := range res.Cases {
		if len(c.Samples) > c.Errors {
			crs = append(crs, c)
		}
	}
	if len(crs) == 0 {
		return errors.New("chart: no case measured")
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Live dataplane on veth, 64-byte frames: bar = median of %d interleaved runs, whisker = min..max, red = target", res.Options.Repeats)
	p.X.Label.Text = "Mpps from the kernel's counters (blue: warpflow; light blue: warpflow before the adaptive wait; grey: dpdk-testpmd net_af_xdp)"
	n := len(crs)
	vals := map[string]plotter.Values{livebench.PeerWarpflow: make(plotter.Values, n), livebench.PeerBefore: make(plotter.Values, n), livebench.PeerTestpmd: make(plotter.Values, n)}
	eb := errBars{}
	var targets plotter.XYs
	names := make([]string, n)
	maxX := 0.0
	for i, c := range crs {
		// The first case at the top.
		y := n - 1 - i
		names[y] = fmt.Sprintf("%s %s %s %s", c.Setup, c.Load, c.Mode, c.Peer)
		vals[c.Peer][y] = c.Median
		eb.xy = append(eb.xy, plotter.XY{X: c.Median, Y: float64(y)})
		eb.lo, eb.hi = append(eb.lo, c.Min), append(eb.hi, c.Max)
		maxX = max(maxX, c.Max)
		if t := livebench.TargetRate(crs, c); t > 0 {
			targets = append(targets, plotter.XY{X: t, Y: float64(y)})
			maxX = max(maxX, t)
		}
	}
	w := vg.Points(12)
	for _, g := range []struct {
		peer string
		c    color.Color
	}{{livebench.PeerTestpmd, colTestpmd}, {livebench.PeerBefore, colBefore}, {livebench.PeerWarpflow, colWarpflow}} {
		b, err := plotter.NewBarChart(vals[g.peer], w)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		b.Horizontal = true
		b.Color = g.c
		b.LineStyle.Width = 0
		p.Add(b)
	}
	e, err := plotter.NewXErrorBars(eb)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	e.LineStyle.Width = vg.Points(1.2)
	p.Add(e)
	if len(targets) > 0 {
		s, err := plotter.NewScatter(targets)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		s.GlyphStyle.Shape = draw.PyramidGlyph{}
		s.GlyphStyle.Color = colTarget
		s.GlyphStyle.Radius = vg.Points(4)
		p.Add(s)
	}
	p.NominalY(names...)
	p.X.Min, p.X.Max = 0, maxX*1.1
	p.Add(plotter.NewGrid())
	height := vg.Points(float64(40 + 18*n))
	if err := p.Save(11*vg.Inch, height, path); err != nil {
		return fmt.Errorf("chart %s: %w", path, err)
	}
	return nil
}
