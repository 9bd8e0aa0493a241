package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/internal/control"
)

// --all: a read command on every context of the contexts file, at most
// allParallel at a time, each under --timeout. The reply is one row per
// daemon that answered, a total over them, and one line per daemon that
// did not (unreachable, refused, timed out): those are listed, not fatal.
// The exit status is 0 when at least one answered, 4 (unreachable) when
// none did.

const allParallel = 16

// allReply is one daemon's answer to a read command.
type allReply[T any] struct {
	Context string `json:"context"`
	Target  string `json:"target"`
	Reply   T      `json:"reply"`
}

// allMissed is a daemon that did not answer.
type allMissed struct {
	Context string `json:"context"`
	Target  string `json:"target"`
	Error   string `json:"error"`
}

// allResult is --all's answer (its --json form).
type allResult[T any, Total any] struct {
	Daemons     []allReply[T] `json:"daemons"`
	Total       Total         `json:"total"`
	Unreachable []allMissed   `json:"unreachable"`
}

// askAll asks every context with ask and returns the answers and the
// misses, both in the file's order.
func askAll[T any](cmd *cobra.Command, o *ctlOpts, ask func(ctx context.Context, c *ctlOpts) (T, error)) ([]allReply[T], []allMissed) {
	type res struct {
		rep T
		err error
	}
	out := make([]res, len(o.contexts))
	sem := make(chan struct{}, allParallel)
	var wg sync.WaitGroup
	for i, c := range o.contexts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			one := *o
			one.contexts = nil
			one.tokenFile = ""
			one.use(c)
			ctx, cancel := one.ctx(cmd)
			defer cancel()
			out[i].rep, out[i].err = ask(ctx, &one)
		}()
	}
	wg.Wait()
	var reps []allReply[T]
	var missed []allMissed
	for i, c := range o.contexts {
		if out[i].err != nil {
			missed = append(missed, allMissed{Context: c.Name, Target: c.target(), Error: out[i].err.Error()})
			continue
		}
		reps = append(reps, allReply[T]{Context: c.Name, Target: c.target(), Reply: out[i].rep})
	}
	return reps, missed
}

// finishAll writes the unreachable lines and says what --all exits with.
func finishAll(w io.Writer, answered int, missed []allMissed) error {
	for _, m := range missed {
		fmt.Fprintf(w, "unreachable: %s (%s): %s\n", m.Context, m.Target, m.Error)
	}
	if answered == 0 {
		return failf(codeUnreachable, "--all: none of the %d daemons answered", len(missed))
	}
	return nil
}

// statsTotal sums the answering daemons' totals.
type statsTotal struct {
	Daemons     int    `json:"daemons"`
	Of          int    `json:"of"`
	Received    uint64 `json:"received"`
	Transmitted uint64 `json:"transmitted"`
	Dropped     uint64 `json:"dropped"`
	Passed      uint64 `json:"passed"`
	XDPDropped  uint64 `json:"xdp_dropped"`
	XDPPassed   uint64 `json:"xdp_passed"`
	Balanced    bool   `json:"balanced"`
}

func runAllStats(cmd *cobra.Command, o *ctlOpts) error {
	reps, missed := askAll(cmd, o, func(ctx context.Context, c *ctlOpts) (control.Stats, error) {
		cl := c.client()
		defer cl.Close()
		return cl.Stats(ctx)
	})
	tot := statsTotal{Daemons: len(reps), Of: len(o.contexts), Balanced: true}
	for _, r := range reps {
		t := r.Reply.Totals
		tot.Received += t.Received
		tot.Transmitted += t.Transmitted
		tot.Dropped += t.Dropped
		tot.Passed += t.Passed
		tot.XDPDropped += t.XDPDropped
		tot.XDPPassed += t.XDPPassed
		tot.Balanced = tot.Balanced && t.Balanced
	}
	w := cmd.OutOrStdout()
	if o.json {
		if err := writeJSONOut(w, allResult[control.Stats, statsTotal]{Daemons: reps, Total: tot, Unreachable: nonNil(missed)}); err != nil {
			return err
		}
		return finishAll(io.Discard, len(reps), missed)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTEXT\tTARGET\tPIPELINE\tGEN\tSWAPS\tRX\tTX\tDROP\tPASS\tXDP DROP\tXDP PASS\tACCOUNTING\tUP\tWATCH")
	for _, r := range reps {
		s, t := r.Reply, r.Reply.Totals
		watch := "-"
		if s.Watch != nil {
			watch = map[bool]string{true: "in sync", false: "NOT in sync"}[s.Watch.InSync]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", r.Context, r.Target, s.Pipeline, s.Generation, s.Swaps,
			t.Received, t.Transmitted, t.Dropped, t.Passed, t.XDPDropped, t.XDPPassed, balanced(t.Balanced), time.Duration(s.UptimeNs).Round(time.Second), watch)
	}
	fmt.Fprintf(tw, "TOTAL\t%d of %d daemons\t\t\t\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\t\n", tot.Daemons, tot.Of, tot.Received, tot.Transmitted, tot.Dropped, tot.Passed, tot.XDPDropped, tot.XDPPassed, balanced(tot.Balanced))
	tw.Flush()
	return finishAll(w, len(reps), missed)
}

func balanced(ok bool) string {
	if ok {
		return "OK"
	}
	return "MISMATCH"
}

// pipelinesTotal counts the answering daemons by running pipeline.
type pipelinesTotal struct {
	Daemons int            `json:"daemons"`
	Of      int            `json:"of"`
	Running map[string]int `json:"running"`
}

func runAllPipelines(cmd *cobra.Command, o *ctlOpts) error {
	reps, missed := askAll(cmd, o, func(ctx context.Context, c *ctlOpts) (control.PipelineList, error) {
		cl := c.client()
		defer cl.Close()
		return cl.Pipelines(ctx)
	})
	tot := pipelinesTotal{Daemons: len(reps), Of: len(o.contexts), Running: map[string]int{}}
	for _, r := range reps {
		tot.Running[runningOf(r.Reply)]++
	}
	w := cmd.OutOrStdout()
	if o.json {
		if err := writeJSONOut(w, allResult[control.PipelineList, pipelinesTotal]{Daemons: reps, Total: tot, Unreachable: nonNil(missed)}); err != nil {
			return err
		}
		return finishAll(io.Discard, len(reps), missed)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTEXT\tTARGET\tRUNNING\tPIPELINE\tGEN\tSTORED")
	for _, r := range reps {
		var names []string
		for _, p := range r.Reply.Pipelines {
			names = append(names, p.Name)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", r.Context, r.Target, r.Reply.Running, runningOf(r.Reply), r.Reply.Generation, strings.Join(names, ","))
	}
	var running []string
	for p, n := range tot.Running {
		running = append(running, fmt.Sprintf("%s on %d", p, n))
	}
	sort.Strings(running)
	fmt.Fprintf(tw, "TOTAL\t%d of %d daemons\t\t%s\t\t\n", tot.Daemons, tot.Of, strings.Join(running, ", "))
	tw.Flush()
	return finishAll(w, len(reps), missed)
}

// runningOf is the running pipeline's own name (the stored name may be
// the watch's watch-HASH).
func runningOf(l control.PipelineList) string {
	for _, p := range l.Pipelines {
		if p.Running {
			return p.Pipeline
		}
	}
	return l.Running
}

// portsTotal sums the answering daemons' interfaces, queues and frames.
type portsTotal struct {
	Daemons    int `json:"daemons"`
	Of         int `json:"of"`
	Interfaces int `json:"interfaces"`
	Queues     int `json:"queues"`
	Frames     int `json:"frames"`
}

func runAllPorts(cmd *cobra.Command, o *ctlOpts) error {
	reps, missed := askAll(cmd, o, func(ctx context.Context, c *ctlOpts) (control.PortsReply, error) {
		cl := c.client()
		defer cl.Close()
		return cl.Ports(ctx)
	})
	tot := portsTotal{Daemons: len(reps), Of: len(o.contexts)}
	w := cmd.OutOrStdout()
	type row struct{ ifaces, binds string }
	rows := make([]row, len(reps))
	for i, r := range reps {
		tot.Interfaces += len(r.Reply.Interfaces)
		tot.Queues += len(r.Reply.Queues)
		var ifs, binds []string
		for _, in := range r.Reply.Interfaces {
			attach := in.Attach
			if attach == "" {
				attach = "tx only"
			}
			ifs = append(ifs, in.Name+" ("+attach+")")
		}
		seen := map[string]bool{}
		for _, q := range r.Reply.Queues {
			tot.Frames += q.Frames.Total
			for _, s := range q.Sockets {
				if !seen[s.Bind] {
					seen[s.Bind] = true
					binds = append(binds, s.Bind)
				}
			}
		}
		rows[i] = row{strings.Join(ifs, ", "), strings.Join(binds, ",")}
	}
	if o.json {
		if err := writeJSONOut(w, allResult[control.PortsReply, portsTotal]{Daemons: reps, Total: tot, Unreachable: nonNil(missed)}); err != nil {
			return err
		}
		return finishAll(io.Discard, len(reps), missed)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTEXT\tTARGET\tINTERFACES (attach)\tQUEUES\tBIND\tFRAMES")
	for i, r := range reps {
		frames := 0
		for _, q := range r.Reply.Queues {
			frames += q.Frames.Total
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\n", r.Context, r.Target, rows[i].ifaces, len(r.Reply.Queues), rows[i].binds, frames)
	}
	fmt.Fprintf(tw, "TOTAL\t%d of %d daemons\t%d interfaces\t%d\t\t%d\n", tot.Daemons, tot.Of, tot.Interfaces, tot.Queues, tot.Frames)
	tw.Flush()
	return finishAll(w, len(reps), missed)
}

func nonNil(m []allMissed) []allMissed {
	if m == nil {
		return []allMissed{}
	}
	return m
}
