package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestChart(t *testing.T) {
	f := File{Device: "test", Repeats: 3, Rows: []Row{
		{Name: "cpu", Backend: "cpu", Rules: 10000, Batch: 256, Engines: 1, Workers: 16, Median: 65, Min: 60, Max: 70, Cores: 15},
		{Name: "cuda", Backend: "cuda", Rules: 10000, Batch: 256, Engines: 2, Workers: 1, Median: 120, Min: 110, Max: 125, Cores: 2},
		{Name: "kernel", Backend: "kernel", Rules: 10000, Batch: 256, Median: 130, Min: 128, Max: 135, Cores: 1},
		{Name: "cpu100k", Backend: "cpu", Rules: 100000, Batch: 256, Engines: 1, Workers: 16, Median: 30, Min: 28, Max: 31, Cores: 15},
		{Name: "cuda100k", Backend: "cuda", Rules: 100000, Batch: 256, Engines: 2, Workers: 1, Median: 95, Min: 90, Max: 99, Cores: 2},
	}}
	out := filepath.Join(t.TempDir(), "t.png")
	if err := Throughput(f, out); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(out); err != nil || st.Size() < 1000 {
		t.Fatalf("%s: %v, %v", out, st, err)
	}
	if err := Throughput(File{}, out); err == nil {
		t.Error("a chart of nothing: no error")
	}
}
