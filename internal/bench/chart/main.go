package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/warpflow/warpflow/internal/bench"
	"github.com/warpflow/warpflow/internal/chartutil"
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
	if err := chartutil.ReadJSON(in, &res); err != nil {
		return err
	}
	var ranges *Ranges
	if rangesFile != "" {
		ranges = &Ranges{}
		if err := chartutil.ReadJSON(rangesFile, ranges); err != nil {
			return err
		}
	}
	return Chart(res, ranges, out)
}
