package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/internal/control"
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
stage's own counters, live, as each stage kind declares them (a filter's
hits per rule, a count stage's keys, a rewrite's exceptions, a sample
stage's kept packets; the busiest 10 per stage here, all of them with
--json); the sample files the daemon writes; per queue the executor
(cpu workers' batches and packets, or the GPU's device and fallback
shares); batch fill; the kernel's drops before the pipeline; the split
pipeline's kernel rules (what the XDP program dropped or passed, in
total, per queue and per rule: in received, and as xdp dropped and xdp
passed beside the workers' dropped and passed); and where every frame is.
--watch repeats it every --interval, with rates.

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

// printStats writes the human view; with prev, rates over dt. Its first
// lines are where an operator looks first: the balance, then every drop
// with the kernel's share (the XDP program's rules, which no worker sees)
// beside the workers'.
func printStats(w io.Writer, s control.Stats, prev *control.Stats, dt time.Duration) {
	t := s.Totals
	verdict := "OK"
	if !t.Balanced {
		verdict = "MISMATCH (counts in flight)"
	}
	fmt.Fprintf(w, "pipeline %s (generation %d, %d swaps), up %s\n", s.Pipeline, s.Generation, s.Swaps, time.Duration(s.UptimeNs).Round(time.Second))
	fmt.Fprintf(w, "accounting %s: received %d = transmitted %d + dropped %d + passed %d", verdict, t.Received, t.Transmitted, t.Dropped, t.Passed)
	kernelRules := t.XDPDropped+t.XDPPassed > 0 || len(s.KernelRules) > 0
	if kernelRules {
		fmt.Fprintf(w, " + xdp dropped %d + xdp passed %d", t.XDPDropped, t.XDPPassed)
	}
	fmt.Fprintln(w)
	if t.TXAbandoned > 0 {
		// Counted as transmitted (a port accepted them), but still on a
		// TX ring when the port stopped: they never left.
		fmt.Fprintf(w, "of the transmitted, %d never left: tx_abandoned (on a TX ring, not completed, when its port stopped)\n", t.TXAbandoned)
	}
	if t.FramesLost > 0 {
		// Frames, not verdicts: counted as transmitted when an output
		// that owns its frames took them, never given back by it.
		fmt.Fprintf(w, "frames lost %d: frames_lost (taken by an output, transmitted, never given back within the drain at stop; the accounting above still holds)\n", t.FramesLost)
	}
	if kernelRules {
		fmt.Fprintf(w, "dropped %d in all: %d by the XDP program's kernel rules (no worker saw them), %d by the workers\n", t.Dropped+t.XDPDropped, t.XDPDropped, t.Dropped)
	}
	if prev != nil {
		p := prev.Totals
		fmt.Fprintf(w, "rate: rx %s  tx %s  drop %s", rate(t.Received, p.Received, dt), rate(t.Transmitted, p.Transmitted, dt), rate(t.Dropped+t.XDPDropped, p.Dropped+p.XDPDropped, dt))
		if kernelRules {
			fmt.Fprintf(w, " (xdp %s)", orDash(rate(t.XDPDropped, p.XDPDropped, dt)))
		}
		fmt.Fprintln(w)
	}
	if line := dropsLine(t.Drops); line != "" {
		fmt.Fprintf(w, "drops: %s\n", line)
	}
	fmt.Fprintf(w, "kernel drops (before the pipeline, not received): %d", t.KernelDropped)
	if line := dropsLine(t.KernelDrops); line != "" {
		fmt.Fprintf(w, " (%s)", line)
	}
	if t.FillRingEmpty > 0 {
		fmt.Fprintf(w, "; fill ring found empty %d times", t.FillRingEmpty)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "batches %d (fill %.1f packets/batch), xdp redirected %d, no socket %d\n", t.Batches, t.BatchFill, t.Redirected, t.NoSocket)
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
	for _, f := range s.SampleFiles {
		fmt.Fprintf(w, "sample %s -> %s: %d written, %d missed, %d bytes, %d rotations", f.Stage, f.File, f.Written, f.Missed, f.Bytes, f.Rotations)
		if f.Error != "" {
			fmt.Fprintf(w, " (stopped: %s)", f.Error)
		}
		fmt.Fprintln(w)
	}
	if s.Watch != nil {
		printWatch(w, s.Watch)
	}
	printStageCounters(w, s, prev, dt)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "QUEUE\tRX\tTX\tDROP\tPASS\tXDP DROP\tXDP PASS\tKERNEL DROP\tFILL\tBIND\tATTACH\tEXECUTOR\t")
	for _, q := range s.Queues {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%s\t%s\t%s\t\n", q.Queue, q.Received, q.Transmitted, q.Dropped, q.Passed, q.XDPDropped, q.XDPPassed, q.KernelDropped, q.BatchFill, q.Bind, q.Attach, q.Executor.Backend)
	}
	tw.Flush()
	for qi, q := range s.Queues {
		fmt.Fprintf(w, "\nqueue %s: frames %s\n", q.Queue, framesLine(q.Frames))
		if len(q.Ports) > 0 {
			var ports []string
			for _, pc := range q.Ports {
				ports = append(ports, fmt.Sprintf("%s %d pkts %d bytes", pc.Port, pc.Packets, pc.Bytes))
			}
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
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", st.Name, st.Kind, st.Packets, st.Bytes, st.Calls, ns, r, dropsLine(st.Drops))
		}
		tw.Flush()
		x := q.Executor
		fmt.Fprintf(w, "  executor %s", x.Backend)
		if line := groupsLine(x.Counters); line != "" {
			fmt.Fprintf(w, ": %s", line)
		}
		fmt.Fprintln(w)
		for i, wk := range x.Workers {
			fmt.Fprintf(w, "  worker %d: %d batches, %d packets, %d parks\n", i, wk.Batches, wk.Packets, wk.Parks)
		}
	}
}

// statsTopKeys is how many of a stage's own counters the human view
// shows (the busiest); --json has them all.
const statsTopKeys = 10

// printStageCounters writes the stages' own counters summed over the
// queues (a filter's rule hits, a count stage's keys, a rewrite's
// exceptions, a sample stage's kept packets: the busiest statsTopKeys of
// each), as their kinds declare them.
func printStageCounters(w io.Writer, s control.Stats, prev *control.Stats, dt time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := false
	for _, st := range s.Stages {
		all := control.TopCounters(st.Counters, -1)
		list := control.TopCounters(st.Counters, statsTopKeys)
		if len(list) == 0 {
			continue
		}
		if !header {
			fmt.Fprintln(tw, "STAGE\tCOUNTER\tVALUE\tBYTES\tRATE")
			header = true
		}
		for _, c := range list {
			r := ""
			if c.Kind == counters.Counter {
				if p, ok := prevCounter(prev, st.Name, c.Text); ok {
					r = rate(c.Value, p, dt)
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", st.Name, c.Text, c.Value, c.Bytes, r)
		}
		if more := len(all) - len(list); more > 0 {
			fmt.Fprintf(tw, "%s\t(%d more: stats --json)\t\t\t\n", st.Name, more)
		}
	}
	tw.Flush()
}

// prevCounter finds stage's counter text (as TopCounters names it) in an
// earlier sample.
func prevCounter(prev *control.Stats, stage, text string) (uint64, bool) {
	if prev == nil {
		return 0, false
	}
	st := prev.Stage(stage)
	if st == nil {
		return 0, false
	}
	for _, c := range control.TopCounters(st.Counters, -1) {
		if c.Text == text {
			return c.Value, true
		}
	}
	return 0, false
}

// dropsLine is reason=packets for every reason that dropped something,
// with the kernel rules' share where they had one.
func dropsLine(list []control.DropCount) string {
	var parts []string
	for _, d := range list {
		switch {
		case d.XDPPackets > 0:
			parts = append(parts, fmt.Sprintf("%s=%d (xdp %d, workers %d)", d.Reason, d.Packets+d.XDPPackets, d.XDPPackets, d.Packets))
		case d.Packets > 0:
			parts = append(parts, fmt.Sprintf("%s=%d", d.Reason, d.Packets))
		}
	}
	return strings.Join(parts, " ")
}

// groupsLine writes declared counters as people read them: a family of
// one counter as name=value, a keyed family's counters each with its
// share of the family (the GPU's device and fallback packets).
func groupsLine(groups []counters.Group) string {
	var parts []string
	for _, g := range groups {
		if g.Label == "" {
			parts = append(parts, fmt.Sprintf("%s=%d", g.Name, g.Values[0].Value))
			continue
		}
		var sum uint64
		for _, kv := range g.Values {
			sum += kv.Value
		}
		keys := []string{g.Name + " by " + g.Label + ":"}
		for _, kv := range g.Values {
			keys = append(keys, fmt.Sprintf("%s=%d (%.1f%%)", kv.Key, kv.Value, 100*float64(kv.Value)/float64(max(sum, 1))))
		}
		parts = append(parts, strings.Join(keys, " "))
	}
	return strings.Join(parts, ", ")
}

// framesLine is a frame account's non-zero places, in order, and its
// total.
func framesLine(f control.Frames) string {
	var parts []string
	for _, p := range f.Places {
		if p.Frames != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", p.Place, p.Frames))
		}
	}
	return fmt.Sprintf("total %d (%s)", f.Total, strings.Join(parts, " "))
}
