package main

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/pipelines"
)

// conntrackFilters are the filter flags of the conntrack commands.
type conntrackFilters struct {
	stage, proto, src, dst, addr, state string
	port, sport, dport                  int
}

func (f *conntrackFilters) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.stage, "stage", "", "the conntrack stage (when the pipeline has more than one)")
	fl.StringVarP(&f.proto, "proto", "p", "", "protocol: tcp, udp, icmp, icmpv6, sctp, gre, udplite or a number")
	fl.StringVarP(&f.src, "src", "s", "", "original source address or prefix")
	fl.StringVarP(&f.dst, "dst", "d", "", "original destination address or prefix")
	fl.StringVar(&f.addr, "addr", "", "either address of either direction (NAT addresses included)")
	fl.IntVar(&f.port, "port", 0, "either port of either direction")
	fl.IntVar(&f.sport, "sport", 0, "original source port")
	fl.IntVar(&f.dport, "dport", 0, "original destination port")
	fl.StringVar(&f.state, "state", "", "TCP state (ESTABLISHED, TIME_WAIT, ...) or unreplied, replied, assured")
}

// query checks the filters the way the daemon does (a bad value is a
// usage error here, not a round trip).
func (f *conntrackFilters) query(limit int, flush bool) (control.ConntrackQuery, bool, error) {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("stage", f.stage)
	set("proto", f.proto)
	set("src", f.src)
	set("dst", f.dst)
	set("addr", f.addr)
	set("state", f.state)
	for _, p := range []struct {
		k string
		n int
	}{{"port", f.port}, {"sport", f.sport}, {"dport", f.dport}} {
		if p.n != 0 {
			v.Set(p.k, strconv.Itoa(p.n))
		}
	}
	filtered := len(v) > 0 && !(len(v) == 1 && v.Has("stage"))
	if !flush {
		v.Set("limit", strconv.Itoa(limit))
	}
	q, err := control.ParseConntrackQuery(v)
	if err != nil {
		return q, false, failf(codeUsage, "%v", err)
	}
	q.Flush = flush
	return q, filtered, nil
}

func newConntrackCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "conntrack",
		Short: "List, count or flush warpflowd's tracked flows (the conntrack stage's tables)",
		Long: `conntrack reads the flow tables of the running pipeline's conntrack
stage on every queue and worker, without pausing traffic: the workers
serve the request a chunk of their table at a time, between batches.
Filters select flows by protocol, address, port and state, like
conntrack -L of conntrack-tools.

` + controlExitCodesHelp,
	}
	cmd.AddCommand(newConntrackListCommand(false), newConntrackListCommand(true), newConntrackFlushCommand())
	return cmd
}

func newConntrackListCommand(count bool) *cobra.Command {
	var o ctlOpts
	var f conntrackFilters
	limit := 1000
	use, short := "list", "List tracked flows (at most --limit)"
	if count {
		use, short = "count", "Count tracked flows (and the tables' size and memory)"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n := limit
			if count {
				n = 0
			}
			q, _, err := f.query(n, false)
			if err != nil {
				return err
			}
			c := o.client()
			defer c.Close()
			ctx, cancel := o.ctx(cmd)
			defer cancel()
			rep, err := c.Conntrack(ctx, q)
			if err != nil {
				return ctlError(err)
			}
			if o.json {
				return writeJSONOut(cmd.OutOrStdout(), rep)
			}
			printConntrack(cmd.OutOrStdout(), rep, !count)
			return nil
		},
	}
	addCtlFlags(cmd, &o, true)
	f.add(cmd)
	if !count {
		cmd.Flags().IntVar(&limit, "limit", limit, fmt.Sprintf("most flows to list (0 to %d)", control.MaxConntrackList))
	}
	return cmd
}

func newConntrackFlushCommand() *cobra.Command {
	var o ctlOpts
	var f conntrackFilters
	var all bool
	cmd := &cobra.Command{
		Use:   "flush",
		Short: "Delete the tracked flows the filters match (--all for every flow)",
		Long: `flush deletes tracked flows: their next packet is a new flow again
(and, for TCP without loose pickup, invalid mid-stream). Without a
filter it needs --all. Over TCP it needs the control token, like every
command that changes the daemon.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q, filtered, err := f.query(0, true)
			if err != nil {
				return err
			}
			if !filtered && !all {
				return failf(codeUsage, "flush without a filter deletes every flow: give a filter or --all")
			}
			if filtered && all {
				return failf(codeUsage, "--all with filters: give one or the other")
			}
			c := o.client()
			defer c.Close()
			ctx, cancel := o.ctx(cmd)
			defer cancel()
			rep, err := c.Conntrack(ctx, q)
			if err != nil {
				return ctlError(err)
			}
			if o.json {
				return writeJSONOut(cmd.OutOrStdout(), rep)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "flushed %d flows of %s (%d left)\n", rep.Matched, rep.Stage, rep.Entries)
			return nil
		},
	}
	addCtlFlags(cmd, &o, true)
	f.add(cmd)
	cmd.Flags().BoolVar(&all, "all", false, "flush every flow")
	return cmd
}

func printConntrack(w io.Writer, rep control.ConntrackReply, list bool) {
	fmt.Fprintf(w, "pipeline %s, stage %s: %d flows in %d queue(s), tables of %d flows, %d bytes (%.1f per flow)\n",
		rep.Pipeline, rep.Stage, rep.Entries, rep.Queues, rep.Capacity, rep.TableBytes, rep.BytesPerFlow)
	fmt.Fprintf(w, "%d matched\n", rep.Matched)
	if !list || len(rep.Flows) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tPROTO\tSTATE\tORIGINAL\tREPLY\tFLAGS\tEXPIRES")
	for _, fl := range rep.Flows {
		flags := ""
		switch {
		case fl.Assured:
			flags = "assured"
		case !fl.Replied:
			flags = "unreplied"
		}
		if fl.SNAT {
			flags += " snat"
		}
		if fl.DNAT {
			flags += " dnat"
		}
		orig, reply := flowEndpoints(fl)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.1fs\n", fl.Queue, fl.ProtoName, fl.State, orig, reply,
			flags, float64(fl.ExpiresMs)/1000)
	}
	tw.Flush()
	if rep.Truncated {
		fmt.Fprintf(w, "(%d more not listed: raise --limit or narrow the filters)\n", rep.Matched-len(rep.Flows))
	}
}

// flowEndpoints renders a flow's two directions as conntrack -L reads:
// addresses and ports ([v6]:port), ICMP's type, code and identifier
// (stored as ports: sport id and dport type<<8|code in the original
// direction, reversed in the reply), addresses alone for a protocol
// without ports.
func flowEndpoints(fl control.ConntrackFlow) (orig, reply string) {
	switch fl.Proto {
	case 6, 17, 33, 132, 136: // tcp, udp, dccp, sctp, udplite
		return hostPort(fl.Src, fl.SrcPort) + " > " + hostPort(fl.Dst, fl.DstPort),
			hostPort(fl.ReplySrc, fl.ReplySrcPort) + " > " + hostPort(fl.ReplyDst, fl.ReplyDstPort)
	case 1, 58: // icmp, icmpv6: the reply's type is the request's pair
		t, c := uint8(fl.DstPort>>8), uint8(fl.DstPort)
		rt, ok := pipelines.ICMPReplyType(t, fl.Proto == 58)
		if !ok {
			rt = t
		}
		return fmt.Sprintf("%s > %s type=%d code=%d id=%d", fl.Src, fl.Dst, t, c, fl.SrcPort),
			fmt.Sprintf("%s > %s type=%d code=%d id=%d", fl.ReplySrc, fl.ReplyDst, rt, c, fl.ReplyDstPort)
	}
	return fl.Src + " > " + fl.Dst, fl.ReplySrc + " > " + fl.ReplyDst
}

func hostPort(addr string, port uint16) string {
	return net.JoinHostPort(addr, strconv.Itoa(int(port)))
}
