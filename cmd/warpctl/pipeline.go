package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/pipelines"
)

func newPipelineCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pipeline",
		Short: "Validate pipelines offline; load, swap, list, show and remove them in a running warpflowd",
		Long: `pipeline validate checks configs offline (no daemon), with the same
messages the daemon gives. The other subcommands talk to warpflowd: load
stores a pipeline without running it, swap makes a stored pipeline the
running one live (no packet lost or processed twice), list and show read
the store, rm removes a pipeline that is not running.

` + controlExitCodesHelp,
	}
	validate := newValidateCommand()
	validate.Short = "Check pipeline configs offline and report every problem with file:line:column (also: warpctl validate)"
	cmd.AddCommand(validate, newPipelineLoad(), newPipelineSwap(), newPipelineList(), newPipelineShow(), newPipelineRm())
	return cmd
}

func newPipelineLoad() *cobra.Command {
	var o ctlOpts
	var name string
	cmd := &cobra.Command{
		Use:   "load FILE",
		Short: "Validate FILE and store it in warpflowd under its name (or --name), without running it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := pipelines.ReadConfigFile(args[0])
			if err != nil {
				return failf(codeFailed, "read pipeline: %v", err)
			}
			ctx, cancel := o.ctx(cmd)
			defer cancel()
			info, err := o.client().Load(ctx, control.LoadRequest{Name: name, File: args[0], Source: string(src)})
			if err != nil {
				return ctlError(err)
			}
			if o.json {
				return writeJSONOut(cmd.OutOrStdout(), info)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "loaded %q from %s: %d stages, ports %v, drop reasons %v (swap to it with: warpctl pipeline swap %s)\n",
				info.Name, info.File, info.Stages, info.Ports, info.Reasons, info.Name)
			return nil
		},
	}
	addCtlFlags(cmd, &o, true)
	cmd.Flags().StringVar(&name, "name", "", "store it under this name (default: the pipeline's own name)")
	return cmd
}

func newPipelineSwap() *cobra.Command {
	var o ctlOpts
	cmd := &cobra.Command{
		Use:   "swap NAME",
		Short: "Make the stored pipeline NAME the running one, live, on every queue",
		Long: `swap replaces the running pipeline on every queue at a batch boundary:
each batch is processed wholly by the old pipeline or wholly by the new
one, nothing is lost or processed twice. Counters carry on where stage
names and kinds match; the reply lists the stages that were reset. A
stage's own counters (rule hits, count keys, sample counts) carry on where
its configuration is also unchanged; the reply lists the stages whose own
counters restart. A pipeline with another worker count or batch size
changes the worker pool cleanly (the old pool finishes what it holds
first). A capture in progress follows the swap when the new pipeline has
its stage (and edge); otherwise it ends, and the reply says why.

` + controlExitCodesHelp,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completePipelines(&o),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.ctx(cmd)
			defer cancel()
			rep, err := o.client().Swap(ctx, args[0])
			if err != nil {
				return ctlError(err)
			}
			if o.json {
				return writeJSONOut(cmd.OutOrStdout(), rep)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "swapped %s -> %s on %d queues (generation %d", rep.From, rep.To, rep.Queues, rep.Generation)
			if rep.PoolChange {
				fmt.Fprint(w, ", new worker pool")
			}
			fmt.Fprintln(w, ")")
			var active []string
			for _, ns := range rep.ActiveAfterNs {
				if ns < 0 {
					active = append(active, "not taken up")
				} else {
					active = append(active, fmt.Sprintf("%.1fµs", float64(ns)/1e3))
				}
			}
			fmt.Fprintf(w, "  on the data path after: %s\n", strings.Join(active, ", "))
			tm := rep.Timing
			fmt.Fprintf(w, "  took %s: prepare %s, kernel load %s, flip %s\n", time.Duration(tm.TotalNs), time.Duration(tm.PrepareNs), time.Duration(tm.KernelLoadNs), time.Duration(tm.FlipNs))
			fmt.Fprintf(w, "  counters kept: %s\n", listOrNone(withoutImplicitDrops(rep.Kept)))
			if len(rep.Reset) > 0 {
				fmt.Fprintf(w, "  counters reset (same name, another kind): %s\n", strings.Join(rep.Reset, ", "))
			}
			if len(rep.CountersReset) > 0 {
				fmt.Fprintf(w, "  own counters reset (configuration changed): %s\n", strings.Join(rep.CountersReset, ", "))
			}
			if rep.Capture != "" {
				fmt.Fprintf(w, "  capture: %s\n", rep.Capture)
			}
			if len(rep.Added) > 0 {
				fmt.Fprintf(w, "  new stages: %s\n", strings.Join(rep.Added, ", "))
			}
			if len(rep.Removed) > 0 {
				fmt.Fprintf(w, "  stages gone: %s\n", strings.Join(rep.Removed, ", "))
			}
			return nil
		},
	}
	addCtlFlags(cmd, &o, true)
	return cmd
}

// withoutImplicitDrops leaves out the implicit drop terminals ("drop:REASON"),
// which every pipeline has a few of.
func withoutImplicitDrops(l []string) []string {
	var out []string
	for _, s := range l {
		if !strings.HasPrefix(s, "drop:") {
			out = append(out, s)
		}
	}
	return out
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

func newPipelineList() *cobra.Command {
	var o ctlOpts
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the pipelines stored in warpflowd, the running one marked",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.all {
				return runAllPipelines(cmd, &o)
			}
			ctx, cancel := o.ctx(cmd)
			defer cancel()
			l, err := o.client().Pipelines(ctx)
			if err != nil {
				return ctlError(err)
			}
			if o.json {
				return writeJSONOut(cmd.OutOrStdout(), l)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "\tNAME\tPIPELINE\tSTAGES\tPORTS\tWORKERS\tBATCH\tLOADED\tBY\tFILE")
			for _, p := range l.Pipelines {
				mark := ""
				if p.Running {
					mark = "*"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\t%s\n", mark, p.Name, p.Pipeline, p.Stages, strings.Join(p.Ports, ","),
					p.Workers, p.Batch, p.LoadedAt.Format("15:04:05"), p.LoadedBy, p.File)
			}
			tw.Flush()
			fmt.Fprintf(cmd.OutOrStdout(), "running: %s (generation %d)\n", l.Running, l.Generation)
			return nil
		},
	}
	o.allowsAll = true
	addCtlFlags(cmd, &o, true)
	return cmd
}

func newPipelineShow() *cobra.Command {
	var o ctlOpts
	var dot, source bool
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a stored pipeline's compiled graph and its split between the XDP program and the workers (--dot: as Graphviz)",
		Long: `show prints a stored pipeline's stages with their edges and where each
runs: "xdp+workers" for the stages the XDP program runs part of (the entry
parse, the split filter and the terminals of its kernel rules; the workers
still run them on every frame the kernel steers on), "workers" for the
rest. Then the split: each rule of the split filter, kernel or workers,
the rule that stopped the kernel's prefix and why; for the running
pipeline the split in force, with what the kernel decided by each rule.
For a stored pipeline, the split a swap to it would load.

` + controlExitCodesHelp,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completePipelines(&o),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.ctx(cmd)
			defer cancel()
			d, err := o.client().Show(ctx, args[0])
			if err != nil {
				return ctlError(err)
			}
			w := cmd.OutOrStdout()
			switch {
			case o.json:
				return writeJSONOut(w, d)
			case dot:
				fmt.Fprint(w, d.DOT)
				return nil
			case source:
				fmt.Fprint(w, d.Source)
				return nil
			}
			state := "stored"
			if d.Running {
				state = "running"
			}
			fmt.Fprintf(w, "%s (pipeline %q from %s, %s; workers %d, batch %d)\n", d.Name, d.Pipeline, d.File, state, d.Workers, d.Batch)
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "STAGE\tKIND\tRUNS IN\tEDGES")
			for _, n := range d.Graph {
				edges := ""
				for i, e := range n.Edges {
					if i > 0 {
						edges += "  "
					}
					edges += fmt.Sprintf("%d->%s", i, e)
				}
				if n.Target != "" {
					edges = n.Kind + " " + n.Target
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n.Name, n.Kind, orDash(n.RunsIn), edges)
			}
			tw.Flush()
			printSplit(w, d.Split)
			return nil
		},
	}
	addCtlFlags(cmd, &o, true)
	cmd.Flags().BoolVar(&dot, "dot", false, "print the graph as Graphviz DOT (pipe to `dot -Tsvg`)")
	cmd.Flags().BoolVar(&source, "source", false, "print the pipeline's source as loaded")
	return cmd
}

func newPipelineRm() *cobra.Command {
	var o ctlOpts
	cmd := &cobra.Command{
		Use:               "rm NAME",
		Short:             "Remove a stored pipeline (refused for the running one)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completePipelines(&o),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.ctx(cmd)
			defer cancel()
			if err := o.client().Remove(ctx, args[0]); err != nil {
				return ctlError(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %q\n", args[0])
			return nil
		},
	}
	addCtlFlags(cmd, &o, false)
	return cmd
}

// printSplit writes which of the split filter's rules run in the kernel
// (the XDP program) and which on the workers, and what stopped the prefix.
func printSplit(w io.Writer, sp *control.Split) {
	if sp == nil {
		return
	}
	state := "a swap to it would load"
	if sp.InForce {
		state = "in force"
		if sp.Generation != 0 {
			state += fmt.Sprintf(", kernel rule set generation %d", sp.Generation)
		}
	}
	fmt.Fprintf(w, "\nsplit (offload %s, %s): ", sp.Mode, state)
	switch {
	case sp.Why != "":
		fmt.Fprintf(w, "nothing runs in the kernel: %s\n", sp.Why)
		return
	case len(sp.Rules) == 0:
		fmt.Fprintf(w, "filter %q has no rules: nothing runs in the kernel\n", sp.Filter)
		return
	}
	fmt.Fprintf(w, "filter %q: %d of %d rules run in the kernel (XDP), the rest, its default and the stages after it on the workers\n",
		sp.Filter, sp.KernelRules, len(sp.Rules))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "  RULE\tLINE\tRUNS IN\tACTION"
	if sp.InForce {
		head += "\tKERNEL PACKETS"
	}
	fmt.Fprintln(tw, head)
	for _, r := range sp.Rules {
		where := "workers"
		if r.Kernel {
			where = "kernel"
			if r.Idle {
				where = "kernel (fires on the workers: no frame the kernel decides matches it)"
			}
		}
		line := fmt.Sprintf("  %d\t%d\t%s\t%s", r.Index, r.Line, where, r.Action)
		if sp.InForce {
			n := "-"
			if r.Kernel {
				n = strconv.FormatUint(r.Packets, 10)
			}
			line += "\t" + n
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	if sp.StopReason != "" {
		fmt.Fprintf(w, "  rule %d stops the kernel's prefix: %s\n", sp.KernelRules, sp.StopReason)
	}
	if sp.After != "" {
		fmt.Fprintf(w, "  the split ends there: %s\n", sp.After)
	}
}
