package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/internal/control"
)

func newPortsCommand() *cobra.Command {
	var o ctlOpts
	cmd := &cobra.Command{
		Use:   "ports",
		Short: "List warpflowd's interfaces and queues: attach and bind modes granted, sockets, frame accounting",
		Args:  cobra.NoArgs,
		Long: `ports lists every configured interface with the XDP attach mode asked
for and granted, the queues served, each queue's AF_XDP sockets with the
bind mode the kernel granted (copy on veth: there is no zero-copy there),
a table of their counters (one column per counter the sockets declare:
packets taken from the RX ring and put on the TX ring, completions, fill
starvation, a full TX ring, wake-up syscalls, polls), and where each of
the queue's UMEM frames is.

` + controlExitCodesHelp,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.all {
				return runAllPorts(cmd, &o)
			}
			ctx, cancel := o.ctx(cmd)
			defer cancel()
			r, err := o.client().Ports(ctx)
			if err != nil {
				return ctlError(err)
			}
			if o.json {
				return writeJSONOut(cmd.OutOrStdout(), r)
			}
			printPorts(cmd.OutOrStdout(), r)
			return nil
		},
	}
	o.allowsAll = true
	addCtlFlags(cmd, &o, true)
	return cmd
}

// printPorts writes the interfaces and, per queue, a table of its sockets
// with one column per counter the sockets declare.
func printPorts(w io.Writer, r control.PortsReply) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INTERFACE\tRECEIVES\tQUEUES\tATTACH (asked)\tBIND (asked)")
	for _, in := range r.Interfaces {
		var qs []string
		for _, q := range in.Queues {
			qs = append(qs, fmt.Sprint(q))
		}
		attach := in.Attach
		if attach == "" {
			attach = "-"
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s (%s)\t(%s)\n", in.Name, in.Receives, strings.Join(qs, ","), attach, in.AttachAsked, in.BindAsked)
	}
	tw.Flush()
	for _, q := range r.Queues {
		fmt.Fprintf(w, "\nqueue %s: UMEM %d frames of %d bytes (headroom %d); frames %s\n", q.Queue, q.UMEM.Frames, q.UMEM.FrameSize, q.UMEM.Headroom, framesLine(q.Frames))
		// The columns: every counter any socket of the queue declares,
		// in the order they declare them.
		var cols []string
		for _, so := range q.Sockets {
			for _, c := range control.TopCounters(so.Counters, -1) {
				if !slices.Contains(cols, c.Text) {
					cols = append(cols, c.Text)
				}
			}
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "PORT\tINTERFACE\tQUEUE\tBIND\t")
		for _, c := range cols {
			fmt.Fprintf(tw, "%s\t", strings.ToUpper(c))
		}
		fmt.Fprintln(tw)
		for _, so := range q.Sockets {
			vals := map[string]uint64{}
			for _, c := range control.TopCounters(so.Counters, -1) {
				vals[c.Text] = c.Value
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t", so.Port, so.Interface, so.Queue, so.Bind)
			for _, c := range cols {
				fmt.Fprintf(tw, "%d\t", vals[c])
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
	}
}
