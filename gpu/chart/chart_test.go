package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCharts(t *testing.T) {
	f := File{Device: "test", Runs: [][]Result{
		{{Backend: "cpu", Rules: 10000, Batch: 256, Mpps: 60}, {Backend: "cuda", Rules: 10000, Batch: 1024, Mpps: 300}, {Backend: "cuda-latency", Rules: 10000, Batch: 1, MedianUs: 12, P99Us: 15}},
		{{Backend: "cpu", Rules: 10000, Batch: 256, Mpps: 70}, {Backend: "cuda", Rules: 10000, Batch: 1024, Mpps: 250}, {Backend: "cuda-latency", Rules: 10000, Batch: 1, MedianUs: 11, P99Us: 16}},
		{{Backend: "cpu", Rules: 10000, Batch: 256, Mpps: 65}, {Backend: "cuda", Rules: 10000, Batch: 1024, Mpps: 350}, {Backend: "cuda-latency", Rules: 10000, Batch: 1, MedianUs: 13, P99Us: 17}},
	}}
	st := stats(f, false)
	if len(st) != 2 || st[0].med != 65 || st[0].lo != 60 || st[0].hi != 70 || st[1].med != 300 {
		t.Fatalf("stats: %+v", st)
	}
	if l := stats(f, true); len(l) != 1 || l[0].med != 12 || l[0].p99 != 15 {
		t.Fatalf("latency stats: %+v", l)
	}
	dir := t.TempDir()
	out, lat := filepath.Join(dir, "t.png"), filepath.Join(dir, "l.png")
	if err := Throughput(f, out); err != nil {
		t.Fatal(err)
	}
	if err := Latency(f, lat); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{out, lat} {
		if st, err := os.Stat(p); err != nil || st.Size() < 1000 {
			t.Fatalf("%s: %v, %v", p, st, err)
		}
	}
	if err := Throughput(File{}, out); err == nil {
		t.Error("a chart of nothing: no error")
	}
}
