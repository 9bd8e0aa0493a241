// Command chart draws a `warpctl bench live --json` result: every case's
// median rate as a bar, the range over its repeats as an error bar, and
// the targets as red marks. It lives apart from warpctl so that warpctl
// does not pull in the plotting modules.
//
//	go run ./internal/livebench/chart -in docs/bench-live.json -out docs/bench-live.png
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/warpflow/warpflow/internal/livebench"
)

func main() {
	in := flag.String("in", "docs/bench-live.json", "result (warpctl bench live --json)")
	out := flag.String("out", "docs/bench-live.png", "chart to write (.png or .svg)")
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
	var res livebench.Result
	if err := json.Unmarshal(data, &res); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	return Chart(res, out)
}
