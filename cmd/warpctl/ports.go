package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
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
their counters, and where each of the queue's UMEM frames is.

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
			w := cmd.OutOrStdout()
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
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "  PORT\tINTERFACE\tQUEUE\tBIND\tCOUNTERS")
				for _, s := range q.Sockets {
					fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%+v\n", s.Port, s.Interface, s.Queue, s.Bind, s.Counters)
				}
				tw.Flush()
			}
			return nil
		},
	}
	o.allowsAll = true
	addCtlFlags(cmd, &o, true)
	return cmd
}
