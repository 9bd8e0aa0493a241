package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/pipelines"
)

func newStatsCommand() *cobra.Command {
	var o ctlOpts
	var watch bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Show warpflowd's counters: totals, per queue, per stage, per worker, frame accounting",
		Long: `stats reads every counter without pausing the data path: packets and
bytes received, transmitted per port, dropped by reason, passed; per stage
packets, bytes, drops and ns/packet (with warpflowd --timing); each
stage's own counters, live (a filter's hits per rule, a count stage's keys,
a rewrite's exceptions, a sample stage's kept and candidate packets; the
busiest 10 per stage here, all of them with --json); per worker
batches and packets; batch fill; the kernel's drops; the split pipeline's
kernel rules (what the XDP program dropped or passed, in total, per queue
and per rule: counted in received, dropped and passed too); and where
every frame is. --watch repeats it every --interval, with rates.

` + controlExitCodesHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.all {
				if watch {
					return failf(codeUsage, "--all and --watch: use one")
				}
				return runAllStats(cmd, &o)
			}
			c := o.client()
			defer c.Close()
			var prev *control.Stats
			var prevAt time.Time
			for {
				ctx, cancel := o.ctx(cmd)
				s, err := c.Stats(ctx)
				cancel()
				if err != nil {
					return ctlError(err)
				}
				now := time.Now()
				if o.json {
					if err := writeJSONOut(cmd.OutOrStdout(), s); err != nil {
						return err
					}
				} else {
					if watch {
						fmt.Fprintf(cmd.OutOrStdout(), "--- %s\n", now.Format("15:04:05.000"))
					}
					printStats(cmd.OutOrStdout(), s, prev, now.Sub(prevAt))
				}
				if !watch {
					return nil
				}
				prev, prevAt = &s, now
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(interval):
				}
			}
		},
	}
	o.allowsAll = true
	addCtlFlags(cmd, &o, true)
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "repeat every --interval (with rates) until interrupted")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "--watch interval")
	return cmd
}

func rate(cur, prev uint64, dt time.Duration) string {
	if dt <= 0 || cur < prev {
		return ""
	}
	r := float64(cur-prev) / dt.Seconds()
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.2fMpps", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1fkpps", r/1e3)
	}
	return fmt.Sprintf("%.0fpps", r)
}

// printStats writes the human view; with prev, rates over dt.
func printStats(w io.Writer, s control.Stats, prev *control.Stats, dt time.Duration) {
	t := s.Totals
	verdict := "OK"
	if !t.Balanced {
		verdict = "MISMATCH (counts in flight)"
	}
	fmt.Fprintf(w, "pipeline %s (generation %d, %d swaps), up %s\n", s.Pipeline, s.Generation, s.Swaps, time.Duration(s.UptimeNs).Round(time.Second))
	fmt.Fprintf(w, "accounting %s: received %d = transmitted %d + dropped %d + passed %d\n", verdict, t.Received, t.Transmitted, t.Dropped, t.Passed)
	if t.XDPDropped+t.XDPPassed > 0 || len(s.KernelRules) > 0 {
		fmt.Fprintf(w, "  of which the XDP program's kernel rules: dropped %d, passed %d (the workers never saw them)\n", t.XDPDropped, t.XDPPassed)
	}
	if prev != nil {
		fmt.Fprintf(w, "rate: rx %s  tx %s  drop %s\n", rate(t.Received, prev.Totals.Received, dt), rate(t.Transmitted, prev.Totals.Transmitted, dt), rate(t.Dropped, prev.Totals.Dropped, dt))
	}
	fmt.Fprintf(w, "batches %d (fill %.1f packets/batch), xdp redirected %d, no socket %d\n", t.Batches, t.BatchFill, t.Redirected, t.NoSocket)
	if len(t.Drops) > 0 {
		fmt.Fprintf(w, "drops: %s\n", kv(t.Drops))
	}
	if len(t.Kernel) > 0 {
		fmt.Fprintf(w, "kernel drops: %s\n", kv(t.Kernel))
	}
	for _, r := range s.KernelRules {
		fmt.Fprintf(w, "kernel rule %s/%s rule[%d] (line %d, %s, set %d on %s): %d packets %d bytes", r.Pipeline, r.Filter, r.Rule, r.Line, r.Action, r.Generation, r.Interface, r.Packets, r.Bytes)
		if prev != nil {
			for _, p := range prev.KernelRules {
				if p.Interface == r.Interface && p.Generation == r.Generation && p.Rule == r.Rule {
					fmt.Fprintf(w, " %s", rate(r.Packets, p.Packets, dt))
				}
			}
		}
		fmt.Fprintln(w)
	}
	if s.Capture != nil {
		c := s.Capture
		state := "active"
		if !c.Active {
			state = "ended: " + c.Stopped
		}
		fmt.Fprintf(w, "capture %s %s -> %s: %d written, %d missed (%s)\n", c.Stage, c.Edge, c.File, c.Written, c.Missed, state)
	}
	if s.Watch != nil {
		printWatch(w, s.Watch)
	}
	printStageCounters(w, s, prev, dt)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "QUEUE\tRX\tTX\tDROP\tPASS\tXDP DROP\tXDP PASS\tFILL\tBIND\tATTACH\t")
	for _, q := range s.Queues {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%s\t%s\t\n", q.Queue, q.Received, q.Transmitted, q.Dropped, q.Passed, q.XDPDropped, q.XDPPassed, q.BatchFill, q.Bind, q.Attach)
	}
	tw.Flush()
	for qi, q := range s.Queues {
		fmt.Fprintf(w, "\nqueue %s: frames %s\n", q.Queue, framesLine(q.Frames))
		if len(q.Counts.Ports) > 0 {
			var ports []string
			for name, pc := range q.Counts.Ports {
				ports = append(ports, fmt.Sprintf("%s %d pkts %d bytes", name, pc.Packets, pc.Bytes))
			}
			sort.Strings(ports)
			fmt.Fprintf(w, "  tx ports: %s\n", strings.Join(ports, "; "))
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  STAGE\tKIND\tPACKETS\tBYTES\tCALLS\tNS/PKT\tRATE\tDROPS")
		for _, st := range q.Stages {
			if st.Kind == "drop" && st.Packets == 0 {
				continue // an implicit drop terminal nothing reached
			}
			r := ""
			if prev != nil && qi < len(prev.Queues) {
				for _, ps := range prev.Queues[qi].Stages {
					if ps.Name == st.Name {
						r = rate(st.Packets, ps.Packets, dt)
					}
				}
			}
			ns := "-"
			if st.NsPerPacket > 0 {
				ns = fmt.Sprintf("%.1f", st.NsPerPacket)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", st.Name, st.Kind, st.Packets, st.Bytes, st.Calls, ns, r, kv(st.Drops))
		}
		tw.Flush()
		for i, wk := range q.Workers {
			fmt.Fprintf(w, "  worker %d: %d batches, %d packets, %d parks\n", i, wk.Batches, wk.Packets, wk.Parks)
		}
	}
}

// statsTopKeys is how many of a stage's own counters the human view
// shows (the busiest); --json has them all.
const statsTopKeys = 10

// printStageCounters writes the stages' own counters summed over the
// queues (a filter's rule hits, a count stage's keys, a rewrite's
// exceptions; the busiest statsTopKeys of each) and the sample counts.
func printStageCounters(w io.Writer, s control.Stats, prev *control.Stats, dt time.Duration) {
	if len(s.StageCounters) == 0 && len(s.Samples) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tKEY\tPACKETS\tBYTES\tRATE")
	for _, set := range s.StageCounters {
		list := topCounters(set.Counters, statsTopKeys)
		for _, c := range list {
			r := ""
			if p, ok := prevCounter(prev, set.Stage, c.Key); ok {
				r = rate(c.Packets, p, dt)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", set.Stage, c.Key, c.Packets, c.Bytes, r)
		}
		if more := len(set.Counters) - len(list); more > 0 {
			fmt.Fprintf(tw, "%s\t(%d more: stats --json)\t\t\t\n", set.Stage, more)
		}
	}
	for _, sc := range s.Samples {
		fmt.Fprintf(tw, "%s\tsample %s\t%d kept of %d\t\t\n", sc.Stage, sc.File, sc.Written, sc.Candidates)
	}
	tw.Flush()
}

// topCounters returns the n busiest counters of list (by packets, then
// in list order), in list order.
func topCounters(list []pipelines.Counter, n int) []pipelines.Counter {
	if len(list) <= n {
		return list
	}
	idx := make([]int, len(list))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return list[idx[a]].Packets > list[idx[b]].Packets })
	idx = idx[:n]
	sort.Ints(idx)
	out := make([]pipelines.Counter, 0, n)
	for _, i := range idx {
		out = append(out, list[i])
	}
	return out
}

// prevCounter finds stage's key in an earlier sample.
func prevCounter(prev *control.Stats, stage, key string) (uint64, bool) {
	if prev == nil {
		return 0, false
	}
	for _, set := range prev.StageCounters {
		if set.Stage != stage {
			continue
		}
		for _, c := range set.Counters {
			if c.Key == key {
				return c.Packets, true
			}
		}
	}
	return 0, false
}

func kv(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

func framesLine(f control.Frames) string {
	a := f.FrameAccount
	var parts []string
	for _, p := range []struct {
		name string
		n    int
	}{
		{"free", a.Free}, {"fill", a.Fill}, {"kernel_rx", a.KernelRX}, {"rx", a.RX}, {"port", a.Port},
		{"engine", a.Engine}, {"tx", a.TX}, {"kernel_tx", a.KernelTX}, {"completion", a.Completion},
		{"output", a.Output}, {"lost", a.Lost}, {"unreported", a.Unreported},
	} {
		if p.n != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", p.name, p.n))
		}
	}
	return fmt.Sprintf("total %d (%s)", f.Total, strings.Join(parts, " "))
}
