package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/pipelines"
)

// counterStats is a daemon whose filter "acl" has hit 12 rules, rule[i]
// i*n times, and whose sample stage kept n of 10n.
func counterStats(n uint64) control.Stats {
	var rules []pipelines.Counter
	for i := range 12 {
		rules = append(rules, pipelines.Counter{Key: fmt.Sprintf("rule[%d]", i), Packets: uint64(i+1) * n, Bytes: uint64(i+1) * n * 64})
	}
	return control.Stats{Pipeline: "demo",
		StageCounters: []control.StageCounterSet{{Stage: "acl", Kind: "filter", Counters: rules}},
		Samples:       []dataplane.SampleCount{{Stage: "smp", File: "s.pcap", Candidates: 10 * n, Written: n}}}
}

// TestStatsStageCounters: the human view lists the busiest ten of a
// stage's counters, says how many more --json has, rates them against
// the previous sample, and shows the sample counts.
func TestStatsStageCounters(t *testing.T) {
	var buf bytes.Buffer
	prev := counterStats(100)
	printStats(&buf, counterStats(200), &prev, time.Second)
	out := buf.String()
	for _, want := range []string{"rule[11]", "rule[2]", "(2 more: stats --json)", "200 kept of 2000"} {
		if !strings.Contains(out, want) {
			t.Errorf("stats output lacks %q:\n%s", want, out)
		}
	}
	for _, quiet := range []string{"rule[0] ", "rule[1] "} { // the two least busy
		if strings.Contains(out, quiet) {
			t.Errorf("stats output shows %q, not among the busiest ten:\n%s", quiet, out)
		}
	}
	// rule[11]: 1200 -> 2400 in a second.
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
	if len(rows) != 4 || rows[0].key != "rule[11]" || rows[1].key != "rule[10]" || rows[2].key != "rule[9]" || rows[3].key != "sample kept" {
		t.Fatalf("key rows %+v", rows)
	}
	if rows[0].rate != 1200 || rows[3].rate != 100 || rows[3].packets != 200 {
		t.Fatalf("rates %+v", rows)
	}
	text := strings.Join(m.lines(), "\n")
	if !strings.Contains(text, "rule[11]") || !strings.Contains(text, "sample kept") {
		t.Fatalf("top shows no counter rows:\n%s", text)
	}
}
