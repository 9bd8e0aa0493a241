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
