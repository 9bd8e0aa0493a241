package bench

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Chart draws the run's rows as horizontal bars of Mpps, baselines in grey
// and Warpflow in blue, and saves it to path (.svg or .png by extension).
func Chart(res Result, path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Mpps, one pinned core, %s (higher is better)", shortName(res.Capture))
	p.X.Label.Text = "million packets per second"
	p.X.Min = 0

	var names []string
	var ours, base plotter.Values
	for _, r := range res.Rows {
		if r.Err != "" {
			continue
		}
		names = append(names, r.Name)
		if r.Baseline {
			base = append(base, r.Mpps)
			ours = append(ours, 0)
		} else {
			ours = append(ours, r.Mpps)
			base = append(base, 0)
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("chart: no measured rows")
	}
	w := vg.Points(14)
	bb, err := plotter.NewBarChart(base, w)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	bb.Horizontal = true
	bb.Color = color.RGBA{R: 150, G: 150, B: 150, A: 255}
	bb.LineStyle.Width = 0
	bo, err := plotter.NewBarChart(ours, w)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	bo.Horizontal = true
	bo.Color = color.RGBA{R: 40, G: 110, B: 200, A: 255}
	bo.LineStyle.Width = 0
	p.Add(bb, bo)
	p.NominalY(names...)
	p.Legend.Add("baseline (same run)", bb)
	p.Legend.Add("warpflow", bo)
	p.Legend.Top = true
	p.Y.Tick.Label.Font.Size = vg.Points(9)
	height := vg.Length(len(names))*vg.Points(28) + vg.Points(90)
	if err := p.Save(9*vg.Inch, height, path); err != nil {
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
