package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/internal/livebench"
)

func newBenchLiveCommand() *cobra.Command {
	o := livebench.DefaultOptions()
	var modes []string
	var jsonOut string
	cmd := &cobra.Command{
		Use:   "live [flags]",
		Short: "Measure warpflowd beside dpdk-testpmd (net_af_xdp) on a lab veth, from the kernel's counters",
		Long: `Live builds a lab (namespaces PREFIX-gen, PREFIX-dp, PREFIX-sink), and for
each setup measures, interleaved and --repeats times, warpflowd and
dpdk-testpmd's net_af_xdp driver receiving 64-byte frames on dp0 from the
XDP live-frame generator in the generator namespace: rxonly (receive and
drop) and macswap (swap MACs, send back out of dp0). Rates come from the
kernel's counters (ethtool -S on dp0 and gen0), never from the tools.

Setup A is veth's default NAPI (the receive softirq runs on the generator's
core); setup B is threaded NAPI with dp0's NAPI thread pinned to the
dataplane's core, at a controlled load and under a flood. Needs root. The
lab is removed at the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Modes = nil
			for _, m := range modes {
				mode, err := livebench.ParseMode(m)
				if err != nil {
					return failf(codeUsage, "--modes: %v", err)
				}
				o.Modes = append(o.Modes, mode)
			}
			o.Log = cmd.ErrOrStderr()
			res, err := livebench.Run(cmd.Context(), o)
			if len(res.Cases) > 0 {
				printBenchLive(cmd, res)
				if jsonOut != "" {
					data, _ := json.MarshalIndent(res, "", "  ")
					if werr := os.WriteFile(jsonOut, append(data, '\n'), 0o644); werr != nil {
						return failf(codeFailed, "write %s: %v", jsonOut, werr)
					}
				}
			}
			if err != nil {
				return failf(codeFailed, "bench live: %v", err)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Prefix, "prefix", o.Prefix, "lab to build for the run (removed at the end)")
	fl.StringSliceVar(&o.Setups, "setups", o.Setups, "setups: A (default NAPI), B (threaded NAPI pinned to the dataplane's CPU)")
	fl.StringSliceVar(&modes, "modes", []string{"rxonly", "macswap"}, "modes: rxonly, macswap, stateful (conntrack, ct filter, SNAT out of dp1, beside an nftables router)")
	fl.IntVar(&o.Repeats, "repeats", o.Repeats, "measurements of every case, interleaved")
	fl.DurationVar(&o.Warmup, "warmup", o.Warmup, "traffic before each window")
	fl.DurationVar(&o.Window, "window", o.Window, "measured window")
	fl.IntVar(&o.GenCPU, "gen-cpu", o.GenCPU, "CPU of the generator (and of this process, and testpmd's main lcore)")
	fl.IntVar(&o.DPCPU, "dp-cpu", o.DPCPU, "CPU of the dataplane's loop (and of dp0's NAPI thread in setup B)")
	fl.Float64Var(&o.ControlledRate, "controlled-rate", o.ControlledRate, "setup B's controlled load, frames per second")
	fl.IntVar(&o.ControlledBurst, "controlled-burst", o.ControlledBurst, "frames per generator call at the controlled load")
	fl.Float64Var(&o.FloodRate, "flood-rate", o.FloodRate, "the flood's rate (0: as fast as the generator goes)")
	fl.IntVar(&o.Flows, "flows", o.Flows, "UDP flows the generator cycles through")
	fl.StringVar(&o.Warpflowd, "warpflowd", o.Warpflowd, "warpflowd binary to measure")
	fl.StringVar(&o.Before, "before", "", "a second warpflowd binary measured beside it in setup B (before/after a change)")
	fl.StringVar(&o.Testpmd, "testpmd", o.Testpmd, "dpdk-testpmd binary ('' leaves testpmd out)")
	fl.IntVar(&o.Rings.Frames, "frames", o.Rings.Frames, "warpflowd UMEM frames (2048 bytes each)")
	fl.IntVar(&o.Rings.RX, "rx-ring", o.Rings.RX, "warpflowd RX ring size")
	fl.IntVar(&o.Rings.Fill, "fill-ring", o.Rings.Fill, "warpflowd fill ring size")
	fl.StringVar(&jsonOut, "json", "", "write the results as JSON to this file (go run ./internal/livebench/chart draws it)")
	return cmd
}

func printBenchLive(cmd *cobra.Command, res livebench.Result) {
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "%s\nkernel %s, %s\ngenerator: %s\n\n", res.Machine, res.Kernel, res.GoVersion, res.Generator)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SETUP\tLOAD\tMODE\tPEER\tMPPS MEDIAN\tMIN\tMAX\tOFFERED\tDP CPU BUSY\tATTACH/BIND\tN\t")
	for _, c := range res.Cases {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.0f%%\t%s/%s\t%d\t", c.Setup, c.Load, c.Mode, c.Peer,
			c.Median, c.Min, c.Max, c.OfferedMedian, 100*c.DPBusyMedian, c.Attach, c.Bind, len(c.Samples)-c.Errors)
		if c.Errors > 0 {
			fmt.Fprintf(tw, "(%d errors)", c.Errors)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, t := range res.Targets {
		if t.Want == 0 { // a comparison the issue gives no target for
			fmt.Fprintf(w, "%-48s ratio %.2f (range %.2f - %.2f): %s\n", t.Name, t.Ratio, t.Low, t.High, t.Note)
			continue
		}
		state := targetState(t.Met)
		if t.Note != "" {
			state = strings.ToLower(state) + " (" + t.Note + ")"
		}
		fmt.Fprintf(w, "%-48s ratio %.2f (range %.2f - %.2f, want >= %.1f): %s\n", t.Name, t.Ratio, t.Low, t.High, t.Want, state)
	}
}
