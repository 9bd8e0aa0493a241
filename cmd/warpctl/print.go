package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/pipelines"
)

// printReport writes the human-readable report: per-stage table, verdicts
// and the accounting line. written says whether outputs went to files, so
// that the report does not claim samples were kept in a file nobody wrote.
func printReport(w io.Writer, name string, r dataplane.Report, written bool) {
	t := r.Timing
	fmt.Fprintf(w, "%s through pipeline %q (%s, batch %d): %d packets, %d bytes in %v (%.3f Mpps)\n\n",
		name, r.Pipeline, workerWord(t.Workers), t.BatchSize, r.Received, r.ReceivedBytes,
		time.Duration(t.ElapsedNs).Round(time.Microsecond), t.Mpps)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tKIND\tBATCHES\tPACKETS\tBYTES\tNS/PKT\tDROPS\t")
	for i, s := range r.Stages {
		if s.Kind == "drop" && s.Packets == 0 && strings.HasPrefix(s.Name, "drop:internal_") {
			continue // an engine safety net that caught nothing
		}
		ns := "-"
		if i < len(t.StageNs) && s.Packets > 0 && s.Calls > 0 && s.Kind != "tx" && s.Kind != "drop" && s.Kind != "pass" {
			ns = fmt.Sprintf("%.1f", t.StageNs[i])
		}
		var drops []string
		for _, d := range s.Drops {
			drops = append(drops, fmt.Sprintf("%s=%d", d.Reason, d.Packets))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t\n", s.Name, s.Kind, s.Calls, s.Packets, s.Bytes, ns, strings.Join(drops, " "))
		for _, g := range s.Counters {
			for _, kv := range g.Values {
				if kv.Value != 0 || kv.Bytes != 0 {
					fmt.Fprintf(tw, "  %s\t\t\t%d\t%d\t\t\t\n", g.Text(kv), kv.Value, kv.Bytes)
				}
			}
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
	for _, s := range r.Stages {
		if s.File == "" {
			continue // not a sample stage
		}
		kept := s.Counters[pipelines.SampleKept].Values[0].Value
		if written {
			fmt.Fprintf(w, "sample %s: kept %d of %d candidates in %s\n", s.Name, kept, s.Packets, s.File)
		} else {
			fmt.Fprintf(w, "sample %s: chose %d of %d candidates (not written: no --out)\n", s.Name, kept, s.Packets)
		}
	}
	if r.Cut > 0 {
		fmt.Fprintf(w, "cut by the capture: %d packets shorter than on the wire (small snaplen), parsed as far as their bytes go\n", r.Cut)
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
// large enough to take a while, as pv and tcpreplay do: the part done, the
// rate and the time left; it draws nothing otherwise.
type progressBar struct {
	w       io.Writer
	name    string
	on      bool
	drawn   int // length of the last line drawn
	started time.Time
}

// progressMinBytes is the input size (all loops) from which a bar is drawn.
const progressMinBytes = 4 << 20

func newProgressBar(w io.Writer, name string, data []byte, loops int) *progressBar {
	p := &progressBar{w: w, name: name, started: time.Now()}
	f, ok := w.(*os.File)
	if !ok {
		return p
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return p
	}
	size := int64(len(data))
	if data == nil {
		fi, err := os.Stat(name)
		if name == dataplane.StdinName {
			fi, err = os.Stdin.Stat()
		}
		if err == nil && !fi.Mode().IsRegular() {
			p.on = true // a pipe or a live stream: its size is unknown
			return p
		}
		if err == nil {
			size = fi.Size()
		}
	}
	p.on = size*int64(max(loops, 1)) >= progressMinBytes
	return p
}

func (p *progressBar) update(pr dataplane.ReplayProgress) {
	if !p.on {
		return
	}
	line := progressLine(p.name, pr, time.Since(p.started))
	pad := max(p.drawn-len(line), 0)
	fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", pad))
	p.drawn = len(line)
}

// progressLine renders one progress update: percentage and time left when
// the input's size is known, packets and rate always.
func progressLine(name string, pr dataplane.ReplayProgress, elapsed time.Duration) string {
	secs := elapsed.Seconds()
	rate := 0.0
	if secs > 0 {
		rate = float64(pr.Received) / secs / 1e6
	}
	line := fmt.Sprintf("%s: %d packets, %.2f Mpps", name, pr.Received, rate)
	if pr.Fraction >= 0 {
		line = fmt.Sprintf("%s: %5.1f%%  %d packets, %.2f Mpps", name, 100*pr.Fraction, pr.Received, rate)
		if pr.Fraction > 0.01 && pr.Fraction < 1 {
			left := time.Duration(float64(elapsed) * (1 - pr.Fraction) / pr.Fraction)
			line += ", ETA " + left.Round(time.Second).String()
		}
	}
	return line
}

func (p *progressBar) finish() {
	if p.drawn > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.drawn))
	}
}
