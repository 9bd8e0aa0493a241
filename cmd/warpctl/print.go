package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/warpflow/warpflow/dataplane"
)

// printReport writes the human-readable report: per-stage table, verdicts
// and the accounting line.
func printReport(w io.Writer, name string, r dataplane.Report) {
	t := r.Timing
	fmt.Fprintf(w, "%s through pipeline %q (%s, batch %d): %d packets, %d bytes in %v (%.3f Mpps)\n\n",
		name, r.Pipeline, workerWord(t.Workers), t.BatchSize, r.Received, r.ReceivedBytes,
		time.Duration(t.ElapsedNs).Round(time.Microsecond), t.Mpps)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tKIND\tBATCHES\tPACKETS\tBYTES\tNS/PKT\tDROPS\t")
	for i, s := range r.Stages {
		ns := "-"
		if i < len(t.StageNs) && s.Packets > 0 && s.Calls > 0 && s.Kind != "tx" && s.Kind != "drop" && s.Kind != "pass" {
			ns = fmt.Sprintf("%.1f", t.StageNs[i])
		}
		var drops []string
		for _, d := range s.Drops {
			drops = append(drops, fmt.Sprintf("%s=%d", d.Reason, d.Packets))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t\n", s.Name, s.Kind, s.Calls, s.Packets, s.Bytes, ns, strings.Join(drops, " "))
		for _, c := range s.Counters {
			fmt.Fprintf(tw, "  %s\t\t\t%d\t%d\t\t\t\n", c.Key, c.Packets, c.Bytes)
		}
	}
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VERDICT\tPACKETS\tBYTES\t")
	for _, p := range r.Ports {
		fmt.Fprintf(tw, "tx %s\t%d\t%d\t\n", p.Port, p.Packets, p.Bytes)
	}
	for _, d := range r.Drops {
		fmt.Fprintf(tw, "drop %s\t%d\t%d\t\n", d.Reason, d.Packets, d.Bytes)
	}
	if r.Passed > 0 {
		fmt.Fprintf(tw, "pass\t%d\t%d\t\n", r.Passed, r.PassedBytes)
	}
	for _, d := range r.InputDrops {
		fmt.Fprintf(tw, "input drop %s\t%d\t-\t\n", d.Reason, d.Packets)
	}
	tw.Flush()
	for _, s := range r.Samples {
		fmt.Fprintf(w, "sample %s: kept %d of %d candidates in %s\n", s.Stage, s.Written, s.Candidates, s.File)
	}
	fmt.Fprintln(w, r.AccountingLine())
	fmt.Fprintln(w)
}

func workerWord(n int) string {
	switch n {
	case 0:
		return "inline, no workers"
	case 1:
		return "1 worker"
	}
	return fmt.Sprintf("%d workers", n)
}

// progressBar draws a one-line progress indicator on a terminal for inputs
// large enough to take a while; it draws nothing otherwise.
type progressBar struct {
	w       io.Writer
	name    string
	on      bool
	drawn   bool
	started time.Time
}

func newProgressBar(w io.Writer, name string, data []byte) *progressBar {
	p := &progressBar{w: w, name: name, started: time.Now()}
	f, ok := w.(*os.File)
	if !ok || data != nil {
		return p
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return p
	}
	if fi, err := os.Stat(name); err == nil && fi.Size() >= 4<<20 {
		p.on = true
	}
	return p
}

func (p *progressBar) update(pr dataplane.ReplayProgress) {
	received := pr.Received
	if !p.on {
		return
	}
	secs := time.Since(p.started).Seconds()
	rate := 0.0
	if secs > 0 {
		rate = float64(received) / secs / 1e6
	}
	fmt.Fprintf(p.w, "\r%s: %d packets, %.2f Mpps %s", p.name, received, rate, spinner(int(secs*5)))
	p.drawn = true
}

func spinner(i int) string { return string(`|/-\`[i%4]) }

func (p *progressBar) finish() {
	if p.drawn {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", len(p.name)+48))
	}
}
