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
