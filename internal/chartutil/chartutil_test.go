package chartutil

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// TestRanges: a whisker reaches from lo to hi around its median.
func TestRanges(t *testing.T) {
	var r Ranges
	r.Add(10, 0, 7, 15)
	r.Add(3, 1, 3, 3)
	if r.Len() != 2 {
		t.Fatalf("len %d", r.Len())
	}
	if x, y := r.XY(0); x != 10 || y != 0 {
		t.Fatalf("XY(0) = %v, %v", x, y)
	}
	if lo, hi := r.XError(0); lo != 3 || hi != 5 {
		t.Fatalf("XError(0) = %v, %v, want 3, 5", lo, hi)
	}
	if lo, hi := r.XError(1); lo != 0 || hi != 0 {
		t.Fatalf("XError(1) = %v, %v, want 0, 0", lo, hi)
	}
}

// TestDraw: bars, whiskers, targets and grid make a chart that saves.
func TestDraw(t *testing.T) {
	p := plot.New()
	var r Ranges
	r.Add(2, 0, 1, 3)
	r.Add(5, 1, 4, 6)
	if err := AddHBars(p, plotter.Values{2, 0}, vg.Points(12), Grey); err != nil {
		t.Fatal(err)
	}
	if err := AddHBars(p, plotter.Values{0, 5}, vg.Points(12), Blue); err != nil {
		t.Fatal(err)
	}
	if err := AddRangesAndTargets(p, r, plotter.XYs{{X: 4, Y: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := AddHBars(p, plotter.Values{}, vg.Points(12), Blue); err == nil {
		t.Fatal("no rows: no error")
	}
	path := filepath.Join(t.TempDir(), "c.png")
	if err := p.Save(4*vg.Inch, 2*vg.Inch, path); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		t.Fatalf("chart not written: %v", err)
	}
}

// TestWrap: each paragraph breaks at spaces within the width, a longer
// word stands alone, and the paragraphs' lines follow one another.
func TestWrap(t *testing.T) {
	got := Wrap(10, "aaa bbb ccc dddddddddddd e", "", "ff  gg")
	want := []string{"aaa bbb", "ccc", "dddddddddddd", "e", "ff gg"}
	if len(got) != len(want) {
		t.Fatalf("Wrap = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Wrap = %q, want %q", got, want)
		}
	}
}

// TestReadJSON: a file decodes; a bad one's error names it; a missing one
// is the open error.
func TestReadJSON(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.json"), filepath.Join(dir, "bad.json")
	os.WriteFile(good, []byte(`{"n": 3}`), 0o644)
	os.WriteFile(bad, []byte(`{"n": `), 0o644)
	var v struct{ N int }
	if err := ReadJSON(good, &v); err != nil || v.N != 3 {
		t.Fatalf("good: %v, %+v", err, v)
	}
	if err := ReadJSON(bad, &v); err == nil || !strings.Contains(err.Error(), bad+":") {
		t.Fatalf("bad: %v", err)
	}
	if err := ReadJSON(filepath.Join(dir, "none.json"), &v); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
}
