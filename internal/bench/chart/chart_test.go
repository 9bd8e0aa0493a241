package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/internal/bench"
)

func testResult() bench.Result {
	return bench.Result{
		Capture: bench.EmbeddedCaptureName,
		Rows: []bench.Row{
			{Name: bench.RowGopacket, Baseline: true, Mpps: 9, MppsRuns: []float64{8, 9, 10}},
			{Name: bench.RowParse, Mpps: 30, MppsRuns: []float64{25, 30, 38}},
			{Name: bench.RowDefault1k, Mpps: 16, MppsRuns: []float64{15, 16, 17}},
		},
		Targets: []bench.Target{
			{Name: "parse", Row: bench.RowParse, Base: bench.RowGopacket, Want: 3, Ratio: 3.33, Met: true},
			{Name: "default", Row: bench.RowDefault1k, Base: bench.RowGopacket, Want: 2, Ratio: 1.78},
			{Name: "ref", Row: bench.RowParse, Base: bench.RowGopacket, Want: 3, Reference: true},
		},
	}
}

// TestChartDrawsRangesAndTargets: the chart is drawn, the ranges come from
// the repeats (or the ranges file), and the targets are marked at the rate
// they ask for, with their verdict.
func TestChartDrawsRangesAndTargets(t *testing.T) {
	res := testResult()
	out := filepath.Join(t.TempDir(), "bench.png")
	if err := Chart(res, nil, out); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(out); err != nil || fi.Size() < 1000 {
		t.Fatalf("chart not written: %v", err)
	}
	if lo, hi, ok := rowRange(res.Rows[1], nil); !ok || lo != 25 || hi != 38 {
		t.Fatalf("range %v %v %v", lo, hi, ok)
	}
	marks, labels := targetMarks(res, nil, map[string]int{bench.RowParse: 1, bench.RowDefault1k: 2})
	if len(marks) != 2 || marks[0].X != 27 || marks[0].Y != 1 || marks[1].X != 18 || labels[1] != "target 2x: missed by the medians" {
		t.Fatalf("marks %v %v", marks, labels)
	}
	if c := caption(res, nil); !strings.Contains(c[0], "median of 3 repeats") {
		t.Fatalf("caption %q", c)
	}
	// A result without repeats takes its ranges, and its caption, from the
	// ranges file.
	for i := range res.Rows {
		res.Rows[i].MppsRuns = nil
	}
	rg := &Ranges{Note: "Bars: run 5 of 5.", Rows: map[string][2]float64{bench.RowParse: {29, 38}}}
	if lo, hi, ok := rowRange(res.Rows[1], rg); !ok || lo != 29 || hi != 38 {
		t.Fatalf("range from file %v %v %v", lo, hi, ok)
	}
	if _, _, ok := rowRange(res.Rows[0], rg); ok {
		t.Fatal("a row without a recorded range got one")
	}
	if c := caption(res, rg); c[0] != rg.Note {
		t.Fatalf("caption %q", c)
	}
	rg.Targets = map[string]string{"default": "met in 1 of 5 runs"}
	if _, labels := targetMarks(res, rg, map[string]int{bench.RowParse: 1, bench.RowDefault1k: 2}); labels[1] != "target 2x: met in 1 of 5 runs" {
		t.Fatalf("labels %q", labels)
	}
	svg := filepath.Join(t.TempDir(), "bench.svg")
	if err := Chart(res, rg, svg); err != nil {
		t.Fatal(err)
	}
}

// TestChartFromCommittedResult: the committed docs/bench.json draws.
func TestChartFromCommittedResult(t *testing.T) {
	if err := run("../../../docs/bench.json", filepath.Join(t.TempDir(), "b.png"), ""); err != nil {
		t.Fatal(err)
	}
}

// TestChartTestpmdIORow: both testpmd rows get their short labels, and the
// io target is marked on the macswap row at the io row's rate.
func TestChartTestpmdIORow(t *testing.T) {
	for _, name := range []string{bench.RowGopacket, bench.RowGopacketSparse, bench.RowGopacketReader, bench.RowTestpmd,
		bench.RowTestpmdIO, bench.RowParse, bench.RowMacswap, bench.RowDefault1k} {
		if chartLabels[name] == "" {
			t.Errorf("row %q has no chart label", name)
		}
	}
	res := bench.Result{
		Capture: bench.EmbeddedCaptureName,
		Rows: []bench.Row{
			{Name: bench.RowMacswap, Mpps: 24, MppsRuns: []float64{23, 24, 25}},
			{Name: bench.RowTestpmd, Baseline: true, Mpps: 20},
			{Name: bench.RowTestpmdIO, Baseline: true, Mpps: 26},
		},
		Targets: []bench.Target{
			{Name: "macswap", Row: bench.RowMacswap, Base: bench.RowTestpmd, Want: 1, Ratio: 1.2, Met: true},
			{Name: "io", Row: bench.RowMacswap, Base: bench.RowTestpmdIO, Want: 1, Ratio: 24.0 / 26},
		},
	}
	marks, labels := targetMarks(res, nil, map[string]int{bench.RowMacswap: 0})
	if len(marks) != 2 || marks[1].X != 26 || marks[1].Y != 0 || labels[0] != "target 1x dpdk-testpmd macswap: met by the medians" || labels[1] != "target 1x dpdk-testpmd io: missed by the medians" {
		t.Fatalf("marks %v %q", marks, labels)
	}
	if err := Chart(res, nil, filepath.Join(t.TempDir(), "io.png")); err != nil {
		t.Fatal(err)
	}
}
