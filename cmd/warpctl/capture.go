package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/internal/control"
)

func newCaptureCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "capture",
		Short: "Tap a pipeline stage (or one of its edges) into a pcap file on the daemon's host",
		Long: `capture start copies the packets that arrive at a stage (or, with --edge,
leave it by that edge: the edge's target stage or its number) into a pcap
file written by warpflowd, at most --count packets cut to --snaplen bytes.
The copy happens on the data path only while the tap is on; the file is
written by another goroutine. When the tap's buffer is full packets are
counted as missed, never waited for. --file is a name, not a path: the
daemon makes the file in its capture_dir (default ` + control.DefaultCaptureDir + `,
mode 0640, readable by the socket group when one is configured) and says
where; a name with '/', one starting with '.', or one that exists there is
refused. capture stop ends it early. A swap
to a pipeline that has the same stage (and an edge to the same target
stage) keeps the capture going, into the same file, with no batch missed;
a swap to one that lacks it ends the capture, and capture status says why.
A tap on a stage the split pipeline's kernel rules come before (the parse
stage, the split filter, the terminal of a rule the XDP program runs) would
miss the frames the program decides, so while it runs those rules run on
the workers instead (no verdict changes), and they go back when it ends.

` + controlExitCodesHelp,
	}
	cmd.AddCommand(newCaptureStart(), newCaptureStop(), newCaptureStatus())
	return cmd
}

func printCapture(cmd *cobra.Command, o *ctlOpts, ci control.CaptureInfo) error {
	if o.json {
		return writeJSONOut(cmd.OutOrStdout(), ci)
	}
	w := cmd.OutOrStdout()
	if ci.Stage == "" {
		fmt.Fprintln(w, "no capture")
		return nil
	}
	at := ci.Stage
	if ci.Edge != "" {
		at += " edge " + ci.Edge
	}
	state := "running"
	if !ci.Active {
		state = "ended: " + ci.Stopped
	}
	fmt.Fprintf(w, "capture of %s to %s (count %d, snaplen %d): %d written, %d missed; %s\n", at, ci.File, ci.Count, ci.Snaplen, ci.Written, ci.Missed, state)
	if ci.KernelRulesOnWorkers {
		fmt.Fprintln(w, "  the kernel rules run on the workers while it runs, so it sees the frames the XDP program would decide")
	}
	return nil
}

func newCaptureStart() *cobra.Command {
	var o ctlOpts
	var r control.CaptureRequest
	cmd := &cobra.Command{
		Use:   "start --stage S [--edge E] [--count N] [--snaplen L] --file F",
		Short: "Start a tap",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// --file is a name in the daemon's capture_dir, sent as
			// given: never resolved against this directory.
			if err := r.Validate(); err != nil {
				return failf(codeUsage, "%v", err)
			}
			ctx, cancel := o.ctx(cmd)
			defer cancel()
			ci, err := o.client().CaptureStart(ctx, r)
			if err != nil {
				return ctlError(err)
			}
			return printCapture(cmd, &o, ci)
		},
	}
	addCtlFlags(cmd, &o, true)
	f := cmd.Flags()
	f.StringVar(&r.Stage, "stage", "", "the stage to tap (required)")
	f.StringVar(&r.Edge, "edge", "", "tap only the packets leaving the stage by this edge (its target, or its number)")
	f.IntVar(&r.Count, "count", 1000, "stop after this many packets")
	f.IntVar(&r.Snaplen, "snaplen", 65535, "keep at most this many bytes of each packet")
	f.StringVar(&r.File, "file", "", "name of the pcap file the daemon makes in its capture_dir (no '/'; must not exist; required); the reply says where")
	cmd.MarkFlagRequired("stage")
	cmd.MarkFlagRequired("file")
	return cmd
}

func newCaptureStop() *cobra.Command {
	var o ctlOpts
	cmd := &cobra.Command{
		Use:   "stop",
		Short: "Stop the tap and report what it wrote",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := o.ctx(cmd)
			defer cancel()
			ci, err := o.client().CaptureStop(ctx)
			if err != nil {
				return ctlError(err)
			}
			return printCapture(cmd, &o, ci)
		},
	}
	addCtlFlags(cmd, &o, true)
	return cmd
}

func newCaptureStatus() *cobra.Command {
	var o ctlOpts
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the tap's state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := o.ctx(cmd)
			defer cancel()
			ci, err := o.client().Capture(ctx)
			if err != nil {
				return ctlError(err)
			}
			return printCapture(cmd, &o, ci)
		},
	}
	addCtlFlags(cmd, &o, true)
	return cmd
}
