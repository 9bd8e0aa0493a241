// Command scalingchart draws a `warpctl bench scaling --json` result: the
// total rate of each shape (workers behind one I/O loop, engines side by
// side) against N, as the median with the range over the repeats as error
// bars, with linear and 0.8x-linear references from the smallest N and the
// I/O loop's ceiling. Like internal/bench/chart it lives apart from warpctl
// so that warpctl does not pull in the plotting modules.
//
//	go run ./internal/bench/scalingchart -in docs/bench-scaling.json -out docs/bench-scaling.png
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/warpflow/warpflow/internal/bench"
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
	data, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var res bench.ScalingResult
	if err := json.Unmarshal(data, &res); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	return Chart(res, note, out)
}
