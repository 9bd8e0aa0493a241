package bench

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// chartLabels are the short names rows carry on the chart's axis.
var chartLabels = map[string]string{
	RowGopacket:       "gopacket decode (baseline)",
	RowGopacketSparse: "gopacket decode, sparse (baseline)",
	RowGopacketReader: "gopacket read+decode (baseline)",
	RowTestpmd:        "dpdk-testpmd macswap (baseline)",
	RowParse:          "warpflow parse",
	RowMacswap:        "warpflow parse+macswap",
	RowDefault1k:      "warpflow default, 1000 rules",
}

// Chart draws the run's rows as horizontal bars of Mpps, baselines in grey
// and Warpflow in blue, each labelled with its rate, and saves it to path
// (.svg or .png by extension).
func Chart(res Result, path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Mpps on one pinned core, %s, higher is better", shortName(res.Capture))
	p.X.Label.Text = "Mpps (grey: baselines measured in the same run)"

	var names []string
	var ours, base plotter.Values
	var labels plotter.XYLabels
	maxMpps := 0.0
	for _, r := range res.Rows {
		if r.Err != "" {
			continue
		}
		y := float64(len(names))
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
		labels.XYs = append(labels.XYs, plotter.XY{X: r.Mpps, Y: y})
		labels.Labels = append(labels.Labels, fmt.Sprintf(" %.1f", r.Mpps))
		maxMpps = max(maxMpps, r.Mpps)
	}
	if len(names) == 0 {
		return fmt.Errorf("chart: no measured rows")
	}
	p.X.Min, p.X.Max = 0, maxMpps*1.15
	w := vg.Points(16)
	for _, bars := range []struct {
		v plotter.Values
		c color.Color
	}{{base, color.RGBA{R: 150, G: 150, B: 150, A: 255}}, {ours, color.RGBA{R: 40, G: 110, B: 200, A: 255}}} {
		b, err := plotter.NewBarChart(bars.v, w)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		b.Horizontal = true
		b.Color = bars.c
		b.LineStyle.Width = 0
		p.Add(b)
	}
	l, err := plotter.NewLabels(labels)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	for i := range l.TextStyle {
		l.TextStyle[i].YAlign = -0.5
	}
	p.Add(l)
	p.NominalY(names...)
	height := vg.Length(len(names))*vg.Points(30) + vg.Points(80)
	if err := p.Save(8*vg.Inch, height, path); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return nil
}

func shortName(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '/' {
			return path[i+1:]
		}
	}
	return path
}
