package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
)

func main() {
	in := flag.String("in", "docs/gpu-bench.json", "a TestGPUBench run (WARPFLOW_BENCH_OUT's gpubench.json)")
	out := flag.String("out", "docs/gpu-bench.png", "throughput chart (.png or .svg)")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	data, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var f File
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	return Throughput(f, out)
}
