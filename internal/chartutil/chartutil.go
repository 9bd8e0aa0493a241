package chartutil

import (
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The charts' colours: Warpflow's rows blue, baselines grey, targets red.
var (
	Blue   = color.RGBA{R: 40, G: 110, B: 200, A: 255}
	Grey   = color.RGBA{R: 150, G: 150, B: 150, A: 255}
	Target = color.RGBA{R: 210, G: 30, B: 30, A: 255}
)

// Ranges are min..max whiskers around medians, one per row: a
// plotter.XErrorer.
type Ranges struct {
	xy     plotter.XYs
	lo, hi []float64
}

// Add appends a row's whisker: median x at row y, from lo to hi.
func (r *Ranges) Add(x, y, lo, hi float64) {
	r.xy = append(r.xy, plotter.XY{X: x, Y: y})
	r.lo, r.hi = append(r.lo, lo), append(r.hi, hi)
}

func (r Ranges) Len() int                        { return len(r.xy) }
func (r Ranges) XY(i int) (float64, float64)     { return r.xy[i].X, r.xy[i].Y }
func (r Ranges) XError(i int) (float64, float64) { return r.xy[i].X - r.lo[i], r.hi[i] - r.xy[i].X }

// AddHBars adds one horizontal bar per row (v[y] at row y; zero rows show
// nothing) of width w in colour c, without outlines.
func AddHBars(p *plot.Plot, v plotter.Values, w vg.Length, c color.Color) error {
	b, err := plotter.NewBarChart(v, w)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	b.Horizontal, b.Color, b.LineStyle.Width = true, c, 0
	p.Add(b)
	return nil
}

// AddRangesAndTargets adds the whiskers, a red mark at each target and a
// grid.
func AddRangesAndTargets(p *plot.Plot, r Ranges, targets plotter.XYs) error {
	e, err := plotter.NewXErrorBars(r)
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
		s.GlyphStyle.Shape, s.GlyphStyle.Color, s.GlyphStyle.Radius = draw.PyramidGlyph{}, Target, vg.Points(4)
		p.Add(s)
	}
	p.Add(plotter.NewGrid())
	return nil
}

// Wrap breaks each paragraph into lines of at most width bytes at spaces
// (a longer word stands alone) and returns all their lines in order: a
// caption under the chart's axis label.
func Wrap(width int, paragraphs ...string) []string {
	var lines []string
	for _, s := range paragraphs {
		line := ""
		for _, w := range strings.Fields(s) {
			if line != "" && len(line)+1+len(w) > width {
				lines = append(lines, line)
				line = ""
			}
			if line != "" {
				line += " "
			}
			line += w
		}
		if line != "" {
			lines = append(lines, line)
		}
	}
	return lines
}

// ReadJSON decodes the JSON file at path into v; a decoding error names
// the file.
func ReadJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
