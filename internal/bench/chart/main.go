package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/warpflow/warpflow/internal/bench"
)

func main() {
	in := flag.String("in", "docs/bench.json", "bench result (warpctl bench --json)")
	out := flag.String("out", "docs/bench.png", "chart to write (.png or .svg)")
	rangesFile := flag.String("ranges", "", "per-row ranges recorded apart from the result (JSON: note, rows)")
	flag.Parse()
	if err := run(*in, *out, *rangesFile); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

func run(in, out, rangesFile string) error {
	var res bench.Result
	if err := readJSON(in, &res); err != nil {
		return err
	}
	var ranges *Ranges
	if rangesFile != "" {
		ranges = &Ranges{}
		if err := readJSON(rangesFile, ranges); err != nil {
			return err
		}
	}
	return Chart(res, ranges, out)
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
