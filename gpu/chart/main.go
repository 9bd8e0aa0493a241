// Command chart draws the GPU benchmark (docs/gpu-bench.json, the runs of
// TestGPUBench in gpu/bench_test.go): throughput of the CUDA backend and
// of CPU workers per rule count, and the slot handshake latency per batch
// size, each as the median over the repeated runs with their min..max
// range, and the targets as red marks.
//
//	go run ./gpu/chart -in docs/gpu-bench.json -out docs/gpu-bench.png -latency docs/gpu-latency.png
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
)

func main() {
	in := flag.String("in", "docs/gpu-bench.json", "benchmark runs")
	out := flag.String("out", "docs/gpu-bench.png", "throughput chart (.png or .svg)")
	lat := flag.String("latency", "docs/gpu-latency.png", "latency chart (.png or .svg)")
	flag.Parse()
	if err := run(*in, *out, *lat); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

func run(in, out, lat string) error {
	data, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var f File
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if err := Throughput(f, out); err != nil {
		return err
	}
	return Latency(f, lat)
}
