package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/internal/control"
)

// counterStats is a daemon whose filter "acl" has hit 12 rules, rule i
// i*n times, and whose sample stage kept n of 10n.
func counterStats(n uint64) control.Stats {
	rule := counters.Decl{Name: "rule", Unit: "packets", Bytes: true, Label: "rule", Help: "Hits."}
	kept := counters.Decl{Name: "kept", Unit: "packets", Help: "Kept."}
	var hits []counters.KeyValue
	for i := range 12 {
		hits = append(hits, counters.KeyValue{Key: fmt.Sprint(i), Value: uint64(i+1) * n, Bytes: uint64(i+1) * n * 64})
	}
	return control.Stats{Pipeline: "demo",
		Stages: []control.StageStats{
			{Name: "acl", Kind: "filter", Counters: []counters.Group{{Decl: rule, Values: hits}}},
			{Name: "smp", Kind: "sample", Packets: 10 * n, File: "s.pcap", Counters: []counters.Group{{Decl: kept, Values: []counters.KeyValue{{Value: n}}}}},
		}}
}

// TestStatsStageCounters: the human view lists the busiest ten of a
// stage's counters, says how many more --json has, rates them against
// the previous sample, and shows the sample counts.
func TestStatsStageCounters(t *testing.T) {
	var buf bytes.Buffer
	prev := counterStats(100)
	printStats(&buf, counterStats(200), &prev, time.Second)
	out := buf.String()
	for _, want := range []string{"rule=11", "rule=2", "(2 more: stats --json)"} {
		if !strings.Contains(out, want) {
			t.Errorf("stats output lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^smp\s+kept\s+200\s+0\s+100pps$`).MatchString(out) {
		t.Errorf("stats output lacks the sample stage's kept packets, with their rate:\n%s", out)
	}
	for _, quiet := range []string{"rule=0 ", "rule=1 "} { // the two least busy
		if strings.Contains(out, quiet) {
			t.Errorf("stats output shows %q, not among the busiest ten:\n%s", quiet, out)
		}
	}
	// rule=11: 1200 -> 2400 in a second.
	if !strings.Contains(out, "1.2kpps") {
		t.Errorf("no rate for rule[11]:\n%s", out)
	}
}

// TestTopKeyRows: top's counter rows are the busiest by rate, with the
// sample stage's kept packets.
func TestTopKeyRows(t *testing.T) {
	prev, cur := counterStats(100), counterStats(200)
	m := &topModel{key: "rate"}
	m.update(prev, nil, time.Unix(100, 0))
	m.update(cur, nil, time.Unix(101, 0))
	rows := m.keyRows(3)
	if len(rows) != 3 || rows[0].key != "rule=11" || rows[1].key != "rule=10" || rows[2].key != "rule=9" || rows[0].rate != 1200 {
		t.Fatalf("key rows %+v", rows)
	}
	all := m.keyRows(100)
	if last := all[len(all)-1]; len(all) != 13 || last.stage != "smp" || last.key != "kept" || last.rate != 100 || last.packets != 200 {
		t.Fatalf("key rows %+v", all)
	}
	text := strings.Join(m.lines(), "\n")
	if !strings.Contains(text, "rule=11") {
		t.Fatalf("top shows no counter rows:\n%s", text)
	}
}

// TestStatsAbandoned: transmitted packets that never left (still on a TX
// ring when their port stopped) are named beside the accounting line, and
// a daemon with none says nothing of them.
func TestStatsAbandoned(t *testing.T) {
	s := control.Stats{Pipeline: "demo", Totals: control.Counts{Received: 10, Transmitted: 10, TXAbandoned: 4, Balanced: true}}
	var buf bytes.Buffer
	printStats(&buf, s, nil, 0)
	if !strings.Contains(buf.String(), "of the transmitted, 4 never left: tx_abandoned") {
		t.Errorf("stats output does not name the abandoned packets:\n%s", buf.String())
	}
	s.Totals.TXAbandoned = 0
	buf.Reset()
	printStats(&buf, s, nil, 0)
	if strings.Contains(buf.String(), "tx_abandoned") {
		t.Errorf("stats output names tx_abandoned with none:\n%s", buf.String())
	}
}

// TestStatsFramesLost: frames an output never gave back at stop are named
// under the accounting line (which still balances), and a daemon with
// none says nothing of them.
func TestStatsFramesLost(t *testing.T) {
	s := control.Stats{Pipeline: "demo", Totals: control.Counts{Received: 10, Transmitted: 10, FramesLost: 6, Balanced: true}}
	var buf bytes.Buffer
	printStats(&buf, s, nil, 0)
	out := buf.String()
	if !strings.Contains(out, "accounting OK: received 10 = transmitted 10") || !strings.Contains(out, "frames lost 6: frames_lost") {
		t.Errorf("stats output does not name the lost frames beside a balanced accounting line:\n%s", out)
	}
	s.Totals.FramesLost = 0
	buf.Reset()
	printStats(&buf, s, nil, 0)
	if strings.Contains(buf.String(), "frames_lost") {
		t.Errorf("stats output names frames_lost with none:\n%s", buf.String())
	}
}
