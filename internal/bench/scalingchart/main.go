package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/warpflow/warpflow/internal/bench"
	"github.com/warpflow/warpflow/internal/chartutil"
)

func main() {
	in := flag.String("in", "docs/bench-scaling.json", "scaling result (warpctl bench scaling --json)")
	out := flag.String("out", "docs/bench-scaling.png", "chart to write (.png or .svg)")
	note := flag.String("note", "", "a line naming the machine, printed under the chart")
	flag.Parse()
	if err := run(*in, *out, *note); err != nil {
		fmt.Fprintln(os.Stderr, "scalingchart:", err)
		os.Exit(1)
	}
}

func run(in, out, note string) error {
	var res bench.ScalingResult
	if err := chartutil.ReadJSON(in, &res); err != nil {
		return err
	}
	return Chart(res, note, out)
}
