package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gdamore/tcell/v2"
	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/internal/control"
)

// topKeys are the sort keys of `top`, in the order 's' cycles through.
var topKeys = []string{"rate", "packets", "drops", "ns", "name"}

func newTopCommand() *cobra.Command {
	var o ctlOpts
	var sortKey string
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Live view of warpflowd: per-stage and per-queue rates, refreshed every second",
		Long: `top shows, like vppctl show runtime, every stage of the running pipeline
(summed over the queues) with its packet rate, totals, drops and ns/packet,
then each queue, refreshed every --interval. The split pipeline's kernel
rules show as rows of kind xdp (FILTER[RULE]: what the XDP program decided
by each, before any worker). Below, the busiest of the stages' own
counters, as each stage kind declares them (a filter's rules, a count
stage's keys, a sample stage's kept packets), with rates; then each queue
with its executor (the GPU's device and fallback shares). The header's
drop is every drop, the XDP program's kernel rules' share and the
workers' beside it. Keys:
  s          next sort key (rate, packets, drops, ns, name)
  r p d t n  sort by rate, packets, drops, ns/packet, name
  i          reverse the order
  q, Esc     quit

` + controlExitCodesHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !validTopKey(sortKey) {
				return failf(codeUsage, "--sort %q: want one of %s", sortKey, strings.Join(topKeys, ", "))
			}
			c := o.client()
			defer c.Close()
			fetch := func() (control.Stats, error) {
				ctx, cancel := o.ctx(cmd)
				defer cancel()
				return c.Stats(ctx)
			}
			if _, err := fetch(); err != nil {
				return ctlError(err)
			}
			scr, err := tcell.NewScreen()
			if err != nil {
				return failf(codeFailed, "terminal: %v", err)
			}
			if err := scr.Init(); err != nil {
				return failf(codeFailed, "terminal: %v", err)
			}
			defer scr.Fini()
			return runTop(scr, fetch, sortKey, interval)
		},
	}
	addCtlFlags(cmd, &o, false)
	cmd.Flags().StringVar(&sortKey, "sort", "rate", "sort key: "+strings.Join(topKeys, ", "))
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "refresh interval")
	return cmd
}

func validTopKey(k string) bool {
	for _, t := range topKeys {
		if t == k {
			return true
		}
	}
	return false
}

// topModel is what top shows: the last two samples and the sort order.
type topModel struct {
	cur, prev *control.Stats
	dt        time.Duration
	at        time.Time
	key       string
	reverse   bool
	err       error
}

// topRow is one stage summed over the queues.
type topRow struct {
	name, kind            string
	packets, bytes, drops uint64
	rate, ns              float64
}

func (m *topModel) rows() []topRow {
	if m.cur == nil {
		return nil
	}
	var rows []topRow
	index := map[string]int{}
	prevPackets := map[string]uint64{}
	if m.prev != nil {
		for _, st := range m.prev.Stages {
			prevPackets[st.Name] = st.Packets
		}
	}
	nanos := map[string]uint64{}
	for _, st := range m.cur.Stages {
		index[st.Name] = len(rows)
		r := topRow{name: st.Name, kind: st.Kind, packets: st.Packets, bytes: st.Bytes}
		for _, d := range st.Drops {
			r.drops += d.Packets
		}
		if st.Kind == "drop" {
			r.drops += st.Packets // a drop terminal drops what reaches it
		}
		nanos[st.Name] = st.Nanos
		rows = append(rows, r)
	}
	// The split's kernel rules, as rows of kind xdp (summed over the
	// interfaces; a rate only against the same rule set).
	type ruleKey struct {
		iface string
		gen   uint64
		rule  int
	}
	prevRule := map[ruleKey]uint64{}
	if m.prev != nil {
		for _, r := range m.prev.KernelRules {
			prevRule[ruleKey{r.Interface, r.Generation, r.Rule}] = r.Packets
		}
	}
	kernelPrev := map[string]uint64{}
	for _, kr := range m.cur.KernelRules {
		name := fmt.Sprintf("%s[%d]", kr.Filter, kr.Rule)
		i, ok := index["xdp "+name]
		if !ok {
			i = len(rows)
			index["xdp "+name] = i
			rows = append(rows, topRow{name: name, kind: "xdp"})
		}
		r := &rows[i]
		r.packets += kr.Packets
		r.bytes += kr.Bytes
		if strings.HasPrefix(kr.Action, "drop:") {
			r.drops += kr.Packets
		}
		if p, ok := prevRule[ruleKey{kr.Interface, kr.Generation, kr.Rule}]; ok {
			kernelPrev[name] += p
		} else {
			kernelPrev[name] += kr.Packets // a new rule set: no rate yet
		}
	}
	shown := rows[:0]
	for _, r := range rows {
		if r.kind != "drop" || r.packets > 0 { // drop terminals nothing reached
			shown = append(shown, r)
		}
	}
	rows = shown
	for i := range rows {
		r := &rows[i]
		pp := prevPackets[r.name]
		if r.kind == "xdp" {
			pp = kernelPrev[r.name]
		}
		if m.prev != nil && m.dt > 0 && r.packets >= pp {
			r.rate = float64(r.packets-pp) / m.dt.Seconds()
		}
		if r.packets > 0 {
			r.ns = float64(nanos[r.name]) / float64(r.packets)
		}
	}
	less := func(a, b topRow) bool {
		switch m.key {
		case "packets":
			return a.packets > b.packets
		case "drops":
			return a.drops > b.drops
		case "ns":
			return a.ns > b.ns
		case "name":
			return a.name < b.name
		}
		return a.rate > b.rate
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if m.reverse {
			return less(rows[j], rows[i])
		}
		return less(rows[i], rows[j])
	})
	return rows
}

// key applies a key press; it reports false to quit.
func (m *topModel) keyPress(ev *tcell.EventKey) bool {
	switch ev.Key() {
	case tcell.KeyEscape, tcell.KeyCtrlC:
		return false
	case tcell.KeyRune:
	default:
		return true
	}
	switch ev.Rune() {
	case 'q':
		return false
	case 's':
		for i, k := range topKeys {
			if k == m.key {
				m.key = topKeys[(i+1)%len(topKeys)]
				break
			}
		}
	case 'r':
		m.key = "rate"
	case 'p':
		m.key = "packets"
	case 'd':
		m.key = "drops"
	case 't':
		m.key = "ns"
	case 'n':
		m.key = "name"
	case 'i':
		m.reverse = !m.reverse
	}
	return true
}

// lines renders the model as text lines (what the screen shows).
func (m *topModel) lines() []string {
	var out []string
	if m.cur == nil {
		return []string{"warpctl top: waiting for warpflowd..."}
	}
	s := m.cur
	t := s.Totals
	order := m.key
	if m.reverse {
		order += ", reversed"
	}
	out = append(out, fmt.Sprintf("warpflowd  pipeline %s (gen %d, %d swaps)  up %s  %s",
		s.Pipeline, s.Generation, s.Swaps, time.Duration(s.UptimeNs).Round(time.Second), m.at.Format("15:04:05")))
	var rx, tx, drop string
	if m.prev != nil {
		rx, tx, drop = rate(t.Received, m.prev.Totals.Received, m.dt), rate(t.Transmitted, m.prev.Totals.Transmitted, m.dt), rate(t.Dropped, m.prev.Totals.Dropped, m.dt)
	}
	var xdrop string
	if m.prev != nil {
		xdrop = rate(t.XDPDropped, m.prev.Totals.XDPDropped, m.dt)
	}
	dropped := t.Dropped + t.XDPDropped
	if m.prev != nil {
		drop = rate(dropped, m.prev.Totals.Dropped+m.prev.Totals.XDPDropped, m.dt)
	}
	out = append(out, fmt.Sprintf("rx %s (%s)  tx %s (%s)  drop %s (%s): xdp %s (%s) workers %s  pass %s (xdp %s)  kernel drop %s  fill %.1f/batch",
		fmtCount(t.Received), orDash(rx), fmtCount(t.Transmitted), orDash(tx), fmtCount(dropped), orDash(drop), fmtCount(t.XDPDropped), orDash(xdrop),
		fmtCount(t.Dropped), fmtCount(t.Passed), fmtCount(t.XDPPassed), fmtCount(t.KernelDropped), t.BatchFill))
	if m.err != nil {
		out = append(out, "error: "+m.err.Error())
	} else {
		out = append(out, "")
	}
	out = append(out, fmt.Sprintf("%-22s %-8s %12s %12s %12s %10s   [sort: %s]", "STAGE", "KIND", "RATE/s", "PACKETS", "DROPS", "NS/PKT", order))
	for _, r := range m.rows() {
		ns := "-"
		if r.ns > 0 {
			ns = fmt.Sprintf("%.1f", r.ns)
		}
		out = append(out, fmt.Sprintf("%-22s %-8s %12.0f %12d %12d %10s", trunc(r.name, 22), trunc(r.kind, 8), r.rate, r.packets, r.drops, ns))
	}
	if keys := m.keyRows(topKeyRows); len(keys) > 0 {
		out = append(out, "", fmt.Sprintf("%-22s %-18s %12s %12s", "STAGE", "KEY", "RATE/s", "PACKETS"))
		for _, k := range keys {
			out = append(out, fmt.Sprintf("%-22s %-18s %12.0f %12d", trunc(k.stage, 22), trunc(k.key, 18), k.rate, k.packets))
		}
	}
	out = append(out, "", fmt.Sprintf("%-22s %12s %12s %12s %12s %10s %-9s %s", "QUEUE", "RX", "TX", "DROP", "XDP DROP", "FILL", "EXECUTOR", "FRAMES"))
	for _, q := range s.Queues {
		out = append(out, fmt.Sprintf("%-22s %12d %12d %12d %12d %10.1f %-9s %s", trunc(q.Queue, 22), q.Received, q.Transmitted, q.Dropped, q.XDPDropped, q.BatchFill,
			trunc(q.Executor.Backend, 9), framesLine(q.Frames)))
		if line := groupsLine(q.Executor.Counters); line != "" {
			out = append(out, "  "+q.Executor.Backend+": "+line)
		}
	}
	out = append(out, "", "keys: s next sort  r/p/d/t/n rate/packets/drops/ns/name  i reverse  q quit")
	return out
}

// topKeyRows is how many stage counters top shows: the busiest.
const topKeyRows = 8

// keyRow is one of a stage's own counters (summed over the queues).
type keyRow struct {
	stage, key string
	packets    uint64
	rate       float64
}

// keyRows returns the n busiest stage counters (by rate, then value),
// summed over the queues.
func (m *topModel) keyRows(n int) []keyRow {
	if m.cur == nil {
		return nil
	}
	var rows []keyRow
	for _, st := range m.cur.Stages {
		for _, c := range control.TopCounters(st.Counters, -1) {
			r := keyRow{stage: st.Name, key: c.Text, packets: c.Value}
			if p, ok := prevCounter(m.prev, st.Name, c.Text); ok && m.dt > 0 && c.Value >= p && c.Kind == counters.Counter {
				r.rate = float64(c.Value-p) / m.dt.Seconds()
			}
			rows = append(rows, r)
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].rate != rows[j].rate {
			return rows[i].rate > rows[j].rate
		}
		return rows[i].packets > rows[j].packets
	})
	if len(rows) > n {
		rows = rows[:n]
	}
	return rows
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n-1] + "~"
	}
	return s
}

func (m *topModel) update(s control.Stats, err error, now time.Time) {
	m.err = err
	if err != nil {
		return
	}
	if m.cur != nil {
		m.prev, m.dt = m.cur, now.Sub(m.at)
	}
	m.cur, m.at = &s, now
}

func drawTop(scr tcell.Screen, m *topModel) {
	scr.Clear()
	w, h := scr.Size()
	for y, line := range m.lines() {
		if y >= h {
			break
		}
		style := tcell.StyleDefault
		if y == 3 {
			style = style.Reverse(true)
		}
		if len(line) > w {
			line = line[:w]
		}
		scr.PutStrStyled(0, y, line, style)
	}
	scr.Show()
}

// runTop drives the view on scr until q: a sample every interval, keys at
// once.
func runTop(scr tcell.Screen, fetch func() (control.Stats, error), key string, interval time.Duration) error {
	m := &topModel{key: key}
	events := make(chan tcell.Event, 16)
	quit := make(chan struct{})
	go scr.ChannelEvents(events, quit)
	defer close(quit)
	samples := make(chan control.Stats, 1)
	errs := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			s, err := fetch()
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			} else {
				select {
				case samples <- s:
				case <-stop:
					return
				}
			}
			select {
			case <-t.C:
			case <-stop:
				return
			}
		}
	}()
	drawTop(scr, m)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return nil
			}
			switch ev := ev.(type) {
			case *tcell.EventKey:
				if !m.keyPress(ev) {
					return nil
				}
			case *tcell.EventResize:
				scr.Sync()
			}
		case s := <-samples:
			m.update(s, nil, time.Now())
		case err := <-errs:
			m.update(control.Stats{}, err, time.Now())
		}
		drawTop(scr, m)
	}
}
