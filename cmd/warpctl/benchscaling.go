package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/internal/bench"
)

func newBenchScalingCommand() *cobra.Command {
	o := bench.DefaultScalingOptions()
	var jsonOut, cpus, workersList, enginesList, ceilingList string
	var millions float64
	cmd := &cobra.Command{
		Use:   "scaling [flags]",
		Short: "Measure how the default pipeline scales with workers behind one I/O loop and with engines side by side",
		Long: `Scaling replays a capture preloaded into memory through the default shape
(parse, 1000-rule filter, SNAT + MAC swap, count, to a null port) in two
shapes:

  workers   one engine whose I/O loop is pinned to --io-cpu hands batches to
            N workers pinned to the first N of --cpus
  engines   N engines side by side, each inline on its own core of --cpus,
            each over its own preloaded copy of the capture (one engine per
            receive queue, as on the live path)

and, with --io-ceiling, the workers shape at the largest N with a pipeline
that only transmits: the rate one I/O loop can hand out and complete.

The defaults depend on the machine: the I/O loop on the first CPU this
process may use, the workers and engines on the others in order (one
thread of every physical core before any core's second), and the counts
of 1, 2, 4, 8 and 14 that fit.

Each worker or engine gets --mpackets million packets per measurement, so
a point with N of them replays N times as many; the rate is every packet
counted over one wall clock from the common start to the last engine's end.
Each point is measured --repeats times, round-robin across the points; the
median, the range and the efficiency against the smallest N (linear = 1.0)
are printed. --json writes everything; draw it with
  go run ./internal/bench/scalingchart -in FILE -out docs/bench-scaling.png`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if millions <= 0 {
				return failf(codeUsage, "--mpackets %g: must be positive", millions)
			}
			o.Packets = uint64(millions * 1e6)
			var err error
			if o.Workers, err = parseCounts(workersList); err != nil {
				return failf(codeUsage, "--workers: %v", err)
			}
			if o.Engines, err = parseCounts(enginesList); err != nil {
				return failf(codeUsage, "--engines: %v", err)
			}
			if o.CeilingWorkers, err = parseCounts(ceilingList); err != nil {
				return failf(codeUsage, "--io-ceiling-workers: %v", err)
			}
			if cmd.Flags().Changed("cpus") {
				list, err := bench.ParseCPUList(cpus)
				if err != nil {
					return failf(codeUsage, "--cpus: %v", err)
				}
				o.CPUs = list
			}
			res, err := bench.RunScaling(cmd.Context(), o, cmd.ErrOrStderr())
			if err != nil {
				return failf(codeFailed, "bench scaling: %v", err)
			}
			printBenchScaling(cmd, res)
			if jsonOut != "" {
				data, _ := json.MarshalIndent(res, "", "  ")
				if err := os.WriteFile(jsonOut, append(data, '\n'), 0o644); err != nil {
					return failf(codeFailed, "write %s: %v", jsonOut, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "results written to %s; draw them with: go run ./internal/bench/scalingchart -in %s -out docs/bench-scaling.png\n", jsonOut, jsonOut)
			}
			// A point that could not be measured (a CPU the process may not
			// run on, a setup error) fails the run after the rest is shown.
			failed := 0
			var first string
			for _, p := range res.Points {
				if p.Err != "" {
					if failed == 0 {
						first = fmt.Sprintf("%s %d: %s", p.Shape, p.N, p.Err)
					}
					failed++
				}
			}
			if failed > 0 {
				return failf(codeFailed, "bench scaling: %d of %d points not measured (first: %s)", failed, len(res.Points), first)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Capture, "capture", o.Capture, "capture to replay (default: the embedded copy of testdata/captures/bench-64.pcap)")
	fl.Float64Var(&millions, "mpackets", float64(o.Packets)/1e6, "million packets per worker or engine per measurement")
	fl.IntVar(&o.Repeats, "repeats", o.Repeats, "measurements per point (median and range reported)")
	fl.StringVar(&workersList, "workers", formatCounts(o.Workers), "worker counts behind one I/O loop (empty: leave the shape out)")
	fl.StringVar(&enginesList, "engines", formatCounts(o.Engines), "engine counts side by side (empty: leave the shape out)")
	fl.IntVar(&o.IOCPU, "io-cpu", o.IOCPU, "CPU of the I/O loop in the workers shape (-1: not pinned)")
	fl.StringVar(&cpus, "cpus", bench.FormatCPUList(o.CPUs), "CPUs of worker or engine i, in order (a list such as 1-15; empty: not pinned)")
	fl.IntVar(&o.Frames, "frames", o.Frames, "frames each engine's capture is preloaded into (0: enough for the largest worker count)")
	fl.IntVar(&o.BatchSize, "batch", o.BatchSize, "batch size (0: the pipeline's)")
	fl.BoolVar(&o.Spin, "spin", o.Spin, "idle workers busy-poll instead of the default spin, yield, park policy")
	fl.BoolVar(&o.IOCeiling, "io-ceiling", o.IOCeiling, "also measure one I/O loop with a transmit-only pipeline at the largest worker count")
	fl.StringVar(&ceilingList, "io-ceiling-workers", "", "worker counts to measure the I/O ceiling at (empty: the largest of --workers)")
	fl.StringVar(&jsonOut, "json", "", "write the results as JSON to this file")
	return cmd
}

func printBenchScaling(cmd *cobra.Command, res bench.ScalingResult) {
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "%s\n", res.Machine)
	fmt.Fprintf(w, "capture %s, pipeline %s, batch %d, %d frames per engine, idle %s, %d CPUs, %s\n",
		res.Capture, res.Pipeline, res.BatchSize, res.Frames, res.Idle, res.NumCPU, res.GoVersion)
	fmt.Fprintf(w, "%d packets per worker or engine per measurement, %d repeats\n\n", res.PacketsPerUnit, res.Repeats)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHAPE\tN\tMPPS\tMIN\tMAX\tPER UNIT\tEFFICIENCY\tPACKETS\tALLOCS\tCPUS\tSLOTS FULL/BATCH\tIDLE POLLS/BATCH\t")
	for _, p := range res.Points {
		cpus := bench.FormatCPUList(p.CPUs)
		if p.Shape != bench.ShapeEngines && p.IOCPU >= 0 {
			cpus = fmt.Sprintf("io %d, %s", p.IOCPU, cpus)
		}
		if p.Err != "" {
			fmt.Fprintf(tw, "%s\t%d\t-\t-\t-\t-\t-\t-\t-\t%s\t-\t-\t(%s)\n", p.Shape, p.N, cpus, p.Err)
			continue
		}
		eff := "-"
		if p.Efficiency > 0 {
			eff = fmt.Sprintf("%.2f (%.2f-%.2f)", p.Efficiency, p.EfficiencyRange[0], p.EfficiencyRange[1])
		}
		full, idle := "-", "-"
		if p.Shape != bench.ShapeEngines {
			full, idle = fmt.Sprintf("%.2f", p.ExecutorFullPerBatch), fmt.Sprintf("%.1f", p.WorkerIdlePerBatch)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%d\t%d\t%s\t%s\t%s\t\n", p.Shape, p.N, p.Mpps, p.MinMpps, p.MaxMpps,
			p.PerUnitMpps, eff, p.Packets, p.Allocs, cpus, full, idle)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, t := range res.Targets {
		state := targetState(t.Met)
		kind := "target"
		if t.Reference {
			kind = "reference"
		}
		fmt.Fprintf(w, "%-9s %-40s efficiency %.2f (want >= %.1f): %s\n", kind, t.Name, t.Ratio, t.Want, state)
	}
	measured := 0
	for _, p := range res.Points {
		if p.Shape == bench.ShapeWorkers && p.Err == "" {
			measured++
		}
	}
	switch {
	case measured < 2:
		fmt.Fprintf(w, "one I/O loop: %d worker count(s) measured, too few to say where it saturates", measured)
	case res.SaturatesAt > 0:
		fmt.Fprintf(w, "one I/O loop: efficiency falls under %.1f at %d workers (%.2f Mpps)", bench.ScalingTargetEfficiency, res.SaturatesAt, res.SaturatedMpps)
	default:
		fmt.Fprintf(w, "one I/O loop: efficiency stays at or above %.1f for every worker count measured", bench.ScalingTargetEfficiency)
	}
	if res.CeilingMpps > 0 {
		fmt.Fprintf(w, "; its ceiling with a transmit-only pipeline at the most workers: %.2f Mpps", res.CeilingMpps)
	}
	fmt.Fprintln(w)
}

// parseCounts parses a comma-separated list of counts ("1,2,4"); empty is
// an empty list.
func parseCounts(s string) ([]int, error) {
	var ns []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("count %q: want a positive integer", f)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

func formatCounts(ns []int) string {
	var parts []string
	for _, n := range ns {
		parts = append(parts, strconv.Itoa(n))
	}
	return strings.Join(parts, ",")
}
