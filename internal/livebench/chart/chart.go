package main

import (
	"errors"
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/warpflow/warpflow/internal/chartutil"
	"github.com/warpflow/warpflow/internal/livebench"
)

// colBefore is the light blue of warpflow's rows before a change.
var colBefore = color.RGBA{R: 150, G: 190, B: 235, A: 255}

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
	var eb chartutil.Ranges
	var targets plotter.XYs
	names := make([]string, n)
	maxX := 0.0
	for i, c := range crs {
		// The first case at the top.
		y := n - 1 - i
		names[y] = fmt.Sprintf("%s %s %s %s", c.Setup, c.Load, c.Mode, c.Peer)
		vals[c.Peer][y] = c.Median
		eb.Add(c.Median, float64(y), c.Min, c.Max)
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
	}{{livebench.PeerTestpmd, chartutil.Grey}, {livebench.PeerBefore, colBefore}, {livebench.PeerWarpflow, chartutil.Blue}} {
		if err := chartutil.AddHBars(p, vals[g.peer], w, g.c); err != nil {
			return err
		}
	}
	if err := chartutil.AddRangesAndTargets(p, eb, targets); err != nil {
		return err
	}
	p.NominalY(names...)
	p.X.Min, p.X.Max = 0, maxX*1.1
	height := vg.Points(float64(40 + 18*n))
	if err := p.Save(11*vg.Inch, height, path); err != nil {
		return fmt.Errorf("chart %s: %w", path, err)
	}
	return nil
}
