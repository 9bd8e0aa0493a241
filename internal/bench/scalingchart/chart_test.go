package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/internal/bench"
)

func testResult() bench.ScalingResult {
	return bench.ScalingResult{
		NumCPU: 16, Repeats: 3, PacketsPerUnit: 1 << 20, BatchSize: 64, Frames: 16384, Idle: "default",
		Points: []bench.ScalingPoint{
			{Shape: bench.ShapeWorkers, N: 1, Mpps: 20, MinMpps: 19, MaxMpps: 21},
			{Shape: bench.ShapeWorkers, N: 2, Mpps: 38, MinMpps: 35, MaxMpps: 40},
			{Shape: bench.ShapeWorkers, N: 4, Err: "failed"},
			{Shape: bench.ShapeEngines, N: 2, Mpps: 40, MinMpps: 40, MaxMpps: 41},
			{Shape: bench.ShapeEngines, N: 8, Mpps: 150, MinMpps: 140, MaxMpps: 155},
			{Shape: bench.ShapeIOCeiling, N: 8, Mpps: 90, MinMpps: 88, MaxMpps: 95},
		},
		CeilingMpps: 90,
	}
}

// TestChartSeries: the series hold the measured points only, with their
// ranges as error bars; the references start at the shape's smallest N.
func TestChartSeries(t *testing.T) {
	res := testResult()
	w := shapeSeries(res, bench.ShapeWorkers)
	if len(w.XYs) != 2 || w.XYs[1].X != 2 || w.XYs[1].Y != 38 || w.YErrors[1].Low != 3 || w.YErrors[1].High != 2 {
		t.Fatalf("workers series %+v", w)
	}
	if e := shapeSeries(res, bench.ShapeEngines); len(e.XYs) != 2 || e.XYs[0].X != 2 {
		t.Fatalf("engines series %+v", e)
	}
	if l := linear(res, bench.ShapeWorkers, 0.8, 14); len(l) != 2 || l[0].X != 1 || l[0].Y != 16 || l[1].X != 14 || l[1].Y != 20*14*0.8 {
		t.Fatalf("0.8x linear %v", l)
	}
	// The engines' base is N = 2: 20 Mpps per engine.
	if l := linear(res, bench.ShapeEngines, 1, 8); l[0].X != 2 || l[0].Y != 40 || l[1].Y != 160 {
		t.Fatalf("engines linear %v", l)
	}
	if l := linear(res, "none", 1, 8); l != nil {
		t.Fatalf("linear of a missing shape %v", l)
	}
	c := strings.Join(caption(res, "machine X"), "\n")
	for _, want := range []string{"median total rate of 3 repeats", "ceiling (90.0 Mpps)", "machine X"} {
		if !strings.Contains(c, want) {
			t.Errorf("caption %q lacks %q", c, want)
		}
	}
}

// TestChartDraws: a result drawn through the command's own path, from
// JSON, to PNG and SVG; a result with nothing measured is an error.
func TestChartDraws(t *testing.T) {
	dir := t.TempDir()
	data, _ := json.Marshal(testResult())
	in := filepath.Join(dir, "s.json")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{"s.png", "s.svg"} {
		path := filepath.Join(dir, out)
		if err := run(in, path, "note"); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() < 1000 {
			t.Fatalf("%s not written: %v", out, err)
		}
	}
	// Ceilings at several worker counts are drawn as a series.
	res := testResult()
	res.Points = append(res.Points, bench.ScalingPoint{Shape: bench.ShapeIOCeiling, N: 2, Mpps: 95, MinMpps: 90, MaxMpps: 99})
	if c := strings.Join(caption(res, ""), " "); !strings.Contains(c, "transmit-only pipeline (the workers idle)") {
		t.Errorf("caption %q", c)
	}
	if err := Chart(res, "", filepath.Join(dir, "c.png")); err != nil {
		t.Fatal(err)
	}
	empty := bench.ScalingResult{Points: []bench.ScalingPoint{{Shape: bench.ShapeWorkers, N: 1, Err: "x"}}}
	if err := Chart(empty, "", filepath.Join(dir, "e.png")); err == nil {
		t.Fatal("a result without measured points was drawn")
	}
}

// TestChartFromCommittedResults: the committed device runs draw.
func TestChartFromCommittedResults(t *testing.T) {
	for _, f := range []string{"bench-scaling.json", "bench-scaling-run1.json", "bench-scaling-batch256.json", "bench-scaling-spin.json"} {
		if err := run(filepath.Join("../../../docs", f), filepath.Join(t.TempDir(), "s.png"), ""); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
