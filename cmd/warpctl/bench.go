package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/internal/bench"
)

func newBenchCommand() *cobra.Command {
	o := bench.DefaultOptions()
	var jsonOut, cpuProfile string
	var millions float64
	cmd := &cobra.Command{
		Use:   "bench [flags]",
		Short: "Measure replay throughput on one pinned core next to gopacket and dpdk-testpmd baselines",
		Long: `Bench replays a capture (64-byte packets by default) preloaded into memory
through several pipelines, inline on one pinned core, to a null port, and
measures in the same run the idiomatic gopacket program (pcapgo +
DecodingLayerParser) and dpdk-testpmd forwarding the same capture
(net_pcap infinite_rx to net_null) in macswap mode and in io mode (which
touches no packet byte), one run each. Each in-process row is the median
of --repeats measurements, taken round-robin across the rows so that every
row sees the same mix of the machine's fast and slow moments. Compare ratios
between rows: absolute rates on a shared machine move from run to run.

The stateful rows' own core writes their packets too (a generator port):
their rates are what one core does generating and processing. A reference
row measures the stateful row again with the packets written by a thread
on --generator-cpu, as a NIC's DMA would write them (-1 leaves it out):
the row's core then only processes them, and reads every packet from
another core's cache.

With no --capture it replays an embedded copy of the bench capture, so it
runs from any directory. --json writes every repeat's rate; the chart is
drawn from that file by a separate program (so that warpctl does not carry
the plotting modules): go run ./internal/bench/chart -in FILE -out docs/bench.png`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if millions <= 0 {
				return failf(codeUsage, "--mpackets %g: must be positive", millions)
			}
			o.Packets = uint64(millions * 1e6)
			if !cmd.Flags().Changed("generator-cpu") {
				o.GeneratorCPU = bench.DefaultGeneratorCPU(o.CPU)
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return failf(codeFailed, "cpu profile: %v", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return failf(codeFailed, "cpu profile: %v", err)
				}
				defer pprof.StopCPUProfile()
			}
			res, err := bench.Run(cmd.Context(), o, cmd.ErrOrStderr())
			if err != nil {
				return failf(codeFailed, "%v", err)
			}
			printBench(cmd, res)
			if jsonOut != "" {
				data, _ := json.MarshalIndent(res, "", "  ")
				if err := os.WriteFile(jsonOut, append(data, '\n'), 0o644); err != nil {
					return failf(codeFailed, "write %s: %v", jsonOut, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "results written to %s; draw them with: go run ./internal/bench/chart -in %s -out docs/bench.png\n", jsonOut, jsonOut)
			}
			return nil
		},
	}
	cmd.AddCommand(newBenchLiveCommand(), newBenchScalingCommand())
	fl := cmd.Flags()
	fl.StringVar(&o.Capture, "capture", o.Capture, "capture to replay (default: the embedded copy of testdata/captures/bench-64.pcap)")
	fl.Float64Var(&millions, "mpackets", float64(o.Packets)/1e6, "million packets per measurement")
	fl.IntVar(&o.Repeats, "repeats", o.Repeats, "measurements per row (median reported)")
	fl.IntVar(&o.CPU, "cpu", o.CPU, "CPU to pin the in-process rows to (-1: no pinning)")
	fl.BoolVar(&o.Testpmd, "testpmd", o.Testpmd, "also measure dpdk-testpmd (needs Debian's dpdk packages and root)")
	fl.IntVar(&o.TestpmdSeconds, "testpmd-seconds", o.TestpmdSeconds, "each testpmd run's length")
	fl.IntVar(&o.TestpmdCPUs[1], "testpmd-cpu", o.TestpmdCPUs[1], "testpmd's forwarding lcore")
	fl.IntVar(&o.TestpmdCPUs[0], "testpmd-main-cpu", o.TestpmdCPUs[0], "testpmd's main lcore")
	fl.Uint64Var(&o.StatefulFlows, "stateful-flows", o.StatefulFlows, "concurrent flows of the stateful rows (conntrack table of as many, ~123 bytes each; 0: no stateful rows)")
	fl.IntVar(&o.GeneratorCPU, "generator-cpu", o.GeneratorCPU, "CPU on which a thread writes the reference stateful row's packets, as a NIC would (-1: no such row; default: the CPU before --cpu)")
	fl.StringVar(&jsonOut, "json", "", "write the results as JSON to this file")
	fl.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the in-process rows to this file (go tool pprof)")
	return cmd
}

func printBench(cmd *cobra.Command, res bench.Result) {
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "%s\ncapture %s, in-process rows pinned to CPU %d, %s\n\n", res.Machine, res.Capture, res.CPU, res.GoVersion)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ROW\tMPPS\tNS/PKT\tPACKETS\tALLOCS\t")
	for _, r := range res.Rows {
		if r.Err != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t(%s)\n", r.Name, r.Err)
			continue
		}
		allocs := "-"
		if !r.Baseline {
			allocs = fmt.Sprint(r.Allocs)
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.1f\t%d\t%s\t\n", r.Name, r.Mpps, r.NsPerPacket, r.Packets, allocs)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, t := range res.Targets {
		state := targetState(t.Met)
		if t.Note != "" {
			state = "NOT MEASURED (" + t.Note + ")"
		}
		kind := "target"
		if t.Reference {
			kind = "reference"
			if t.Unit != "" {
				state = strings.ToLower(state) + " (for comparison)"
			} else {
				state = strings.ToLower(state) + " (stricter baseline than the issue's, for comparison)"
			}
		}
		if t.Unit != "" {
			op := ">="
			if t.Max {
				op = "<="
			}
			fmt.Fprintf(w, "%-9s %-60s %.3g %s (want %s %g): %s\n", kind, t.Name, t.Ratio, t.Unit, op, t.Want, state)
			continue
		}
		fmt.Fprintf(w, "%-9s %-60s ratio %.2f (want >= %.1f): %s\n", kind, t.Name, t.Ratio, t.Want, state)
	}
	for _, r := range res.Rows {
		if r.Flows > 0 {
			fmt.Fprintf(w, "%s: %d flows in the conntrack table, %.1f bytes of table per flow\n", r.Name, r.Flows, r.TableBytesPerFlow)
		}
		switch {
		case r.Generator == "in-core":
			fmt.Fprintf(w, "%s: packets written by the row's own core\n", r.Name)
		case r.Generator != "":
			fmt.Fprintf(w, "%s: packets written by a NIC thread on %s; the row waited for it in %.2f%% of its batches\n", r.Name, r.Generator, 100*r.GeneratorWaits)
		}
	}
}

// targetState is how the bench reports print a target's verdict.
func targetState(met bool) string {
	if met {
		return "MET"
	}
	return "MISSED"
}
