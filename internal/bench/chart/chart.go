package main

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strings"

	"github.com/warpflow/warpflow/internal/bench"
	"github.com/warpflow/warpflow/internal/chartutil"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// chartLabels are the short names rows carry on the chart's axis.
var chartLabels = map[string]string{
	bench.RowGopacket:       "gopacket decode (baseline)",
	bench.RowGopacketSparse: "gopacket decode, sparse (baseline)",
	bench.RowGopacketReader: "gopacket read+decode (baseline)",
	bench.RowTestpmd:        "dpdk-testpmd macswap (baseline)",
	bench.RowTestpmdIO:      "dpdk-testpmd io (baseline)",
	bench.RowParse:          "warpflow parse",
	bench.RowMacswap:        "warpflow parse+macswap",
	bench.RowDefault1k:      "warpflow default, 1000 rules",
}

// Ranges are per-row rate ranges recorded apart from a bench result (for a
// result written before rows kept every repeat's rate), with a note that
// says where they come from; the chart prints the note as its caption.
type Ranges struct {
	Note string                `json:"note"`
	Rows map[string][2]float64 `json:"rows"`
	// Targets maps a target's name to its verdict over all the runs
	// ("met in 1 of 5 runs"), shown instead of the one run's verdict.
	Targets map[string]string `json:"targets,omitempty"`
}

// rowRange is the low and high rate of row r: from its repeats, else from
// ranges, else none (ok false).
func rowRange(r bench.Row, ranges *Ranges) (lo, hi float64, ok bool) {
	if len(r.MppsRuns) > 1 {
		return slices.Min(r.MppsRuns), slices.Max(r.MppsRuns), true
	}
	if ranges != nil {
		if v, found := ranges.Rows[r.Name]; found {
			return v[0], v[1], true
		}
	}
	return 0, 0, false
}

// caption says what the chart shows, as drawn.
func caption(res bench.Result, ranges *Ranges) []string {
	runs := 0
	for _, r := range res.Rows {
		runs = max(runs, len(r.MppsRuns))
	}
	var lines []string
	switch {
	case runs > 1:
		lines = append(lines, fmt.Sprintf("Bars: median of %d repeats per row (testpmd: one run); error bars: range over the repeats.", runs))
	case ranges != nil:
		lines = append(lines, ranges.Note)
	default:
		lines = append(lines, "Bars: one measurement per row; no range was recorded.")
	}
	lines = append(lines, "Red triangles: the targets (the rate a row must reach: ratio x its baseline in the same run).")
	return lines
}

// targetMarks returns, per row index, the rates the row's targets ask for.
func targetMarks(res bench.Result, ranges *Ranges, index map[string]int) (plotter.XYs, []string) {
	var pts plotter.XYs
	var labels []string
	// A row with two targets (parse + macswap against both testpmd modes)
	// names each one's baseline, so the two marks can be told apart.
	perRow := map[string]int{}
	for _, t := range res.Targets {
		if !t.Reference && t.Note == "" {
			perRow[t.Row]++
		}
	}
	for _, t := range res.Targets {
		if t.Reference || t.Note != "" {
			continue
		}
		y, ok := index[t.Row]
		if !ok {
			continue
		}
		var base float64
		for _, r := range res.Rows {
			if r.Name == t.Base && r.Err == "" {
				base = r.Mpps
			}
		}
		if base == 0 {
			continue
		}
		pts = append(pts, plotter.XY{X: t.Want * base, Y: float64(y)})
		verdict := "met"
		if !t.Met {
			verdict = "missed"
		}
		if ranges != nil && ranges.Targets[t.Name] != "" {
			verdict = ranges.Targets[t.Name]
		} else if len(res.Rows) > 0 {
			verdict += " by the medians"
		}
		against := ""
		if perRow[t.Row] > 1 {
			name := chartLabels[t.Base]
			if name == "" {
				name = t.Base
			}
			against = " " + strings.TrimSuffix(name, " (baseline)")
		}
		labels = append(labels, fmt.Sprintf("target %.3gx%s: %s", t.Want, against, verdict))
	}
	return pts, labels
}

// errPoints are the error bars: a bar's rate and its range around it.
type errPoints struct {
	plotter.XYs
	plotter.XErrors
}

// Chart draws the result's rows as horizontal bars of Mpps (baselines grey,
// Warpflow blue), each with its range over the runs as an error bar and
// its rate as a label, the targets as red marks on the rows they are set
// for, and a caption saying what is drawn; it saves it to path (.svg or
// .png by extension).
func Chart(res bench.Result, ranges *Ranges, path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Mpps on one pinned core, %s, higher is better", shortName(res.Capture))
	p.X.Label.Text = "Mpps"
	var names []string
	var ours, base plotter.Values
	var labels plotter.XYLabels
	var bars errPoints
	index := map[string]int{}
	maxMpps := 0.0
	for _, r := range res.Rows {
		if r.Err != "" {
			continue
		}
		y := float64(len(names))
		index[r.Name] = len(names)
		name := chartLabels[r.Name]
		if name == "" {
			name = r.Name
		}
		names = append(names, name)
		if r.Baseline {
			base, ours = append(base, r.Mpps), append(ours, 0)
		} else {
			ours, base = append(ours, r.Mpps), append(base, 0)
		}
		hi := r.Mpps
		if lo, h, ok := rowRange(r, ranges); ok {
			bars.XYs = append(bars.XYs, plotter.XY{X: r.Mpps, Y: y})
			bars.XErrors = append(bars.XErrors, struct{ Low, High float64 }{math.Max(r.Mpps-lo, 0), math.Max(h-r.Mpps, 0)})
			hi = math.Max(hi, h)
		}
		labels.XYs = append(labels.XYs, plotter.XY{X: hi, Y: y})
		labels.Labels = append(labels.Labels, fmt.Sprintf("  %.1f", r.Mpps))
		maxMpps = math.Max(maxMpps, hi)
	}
	if len(names) == 0 {
		return fmt.Errorf("chart: no measured rows")
	}
	w := vg.Points(16)
	if err := chartutil.AddHBars(p, base, w, chartutil.Grey); err != nil {
		return err
	}
	if err := chartutil.AddHBars(p, ours, w, chartutil.Blue); err != nil {
		return err
	}
	if len(bars.XYs) > 0 {
		eb, err := plotter.NewXErrorBars(bars)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		eb.LineStyle.Width = vg.Points(1.5)
		eb.CapWidth = vg.Points(8)
		p.Add(eb)
	}
	marks, markLabels := targetMarks(res, ranges, index)
	if len(marks) > 0 {
		sc, err := plotter.NewScatter(marks)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		sc.GlyphStyle = draw.GlyphStyle{Shape: draw.TriangleGlyph{}, Radius: vg.Points(5), Color: color.RGBA{R: 210, A: 255}}
		p.Add(sc)
		ml, err := plotter.NewLabels(plotter.XYLabels{XYs: marks, Labels: markLabels})
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		onRow := map[float64]int{}
		for i := range ml.TextStyle {
			ml.TextStyle[i].Color = color.RGBA{R: 210, A: 255}
			ml.TextStyle[i].YAlign = 0.9
			ml.TextStyle[i].XAlign = -0.5
			// A row's second target is labelled under its bar, so the
			// two labels do not overprint.
			if onRow[marks[i].Y]++; onRow[marks[i].Y] > 1 {
				ml.TextStyle[i].YAlign = -1.5
			}
		}
		p.Add(ml)
		for _, m := range marks {
			maxMpps = math.Max(maxMpps, m.X)
		}
	}
	l, err := plotter.NewLabels(labels)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	for i := range l.TextStyle {
		l.TextStyle[i].YAlign = -0.5
	}
	p.Add(l)
	p.X.Min, p.X.Max = 0, maxMpps*1.2
	p.NominalY(names...)
	// The caption goes under the axis label, wrapped to the chart's width.
	lines := chartutil.Wrap(110, caption(res, ranges)...)
	p.X.Label.Text = "Mpps\n" + strings.Join(lines, "\n")
	p.X.Label.TextStyle.Font.Size = vg.Points(9)
	height := vg.Length(len(names))*vg.Points(34) + vg.Points(100) + vg.Length(len(lines))*vg.Points(12)
	if err := p.Save(9*vg.Inch, height, path); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return nil
}

func shortName(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '/' || path[i] == ':' {
			return path[i+1:]
		}
	}
	return path
}
