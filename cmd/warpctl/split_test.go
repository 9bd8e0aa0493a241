package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/warpflow/warpflow/internal/control"
)

// kernelStats is a daemon whose split's kernel rule 0 dropped xdp of the
// received packets on queue dp0/0 (the workers saw the rest: tx of them
// transmitted, one dropped by acl).
func kernelStats(xdp, tx uint64) control.Stats {
	q := control.QueueStats{Queue: "dp0/0", Counts: control.Counts{Received: xdp + tx + 1, Transmitted: tx, Dropped: 1, XDPDropped: xdp,
		Drops: []control.DropCount{{Reason: "acl", Packets: 1}}, Balanced: true}}
	return control.Stats{Pipeline: "a", Generation: 2, Queues: []control.QueueStats{q},
		Totals: control.Counts{Received: xdp + tx + 1, Transmitted: tx, Dropped: 1, XDPDropped: xdp, Balanced: true,
			Drops: []control.DropCount{{Reason: "acl", Packets: 1}, {Reason: "flood", XDPPackets: xdp}}},
		KernelRules: []control.KernelRuleStats{{Interface: "dp0", Pipeline: "a", Generation: 2, Filter: "acl", Rule: 0, Line: 7,
			Action: "drop:flood", Packets: xdp, Bytes: 64 * xdp}}}
}

// TestStatsShowsKernel: `warpctl stats` says what the kernel rules
// decided, first: in the balance line, every drop with the kernel's share
// beside the workers', per reason, per queue and per rule (with its
// rate).
func TestStatsShowsKernel(t *testing.T) {
	var b bytes.Buffer
	prev := kernelStats(1000, 10)
	printStats(&b, kernelStats(3000, 20), &prev, time.Second)
	out := b.String()
	for _, want := range []string{
		"accounting OK: received 3021 = transmitted 20 + dropped 1 + passed 0 + xdp dropped 3000 + xdp passed 0\n",
		"dropped 3001 in all: 3000 by the XDP program's kernel rules (no worker saw them), 1 by the workers\n",
		"rate: rx 2.0kpps  tx 10pps  drop 2.0kpps (xdp 2.0kpps)\n",
		"kernel rule a/acl rule[0] (line 7, drop:flood, set 2 on dp0): 3000 packets 192000 bytes 2.0kpps",
		"drops: acl=1 flood=3000 (xdp 3000, workers 0)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stats lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^\s*dp0/0\s+3021\s+20\s+1\s+0\s+3000\s+0\s`).MatchString(out) {
		t.Errorf("queue row lacks the xdp drop column:\n%s", out)
	}
}

// TestTopShowsKernel: top shows the kernel rules as rows of kind xdp,
// with their rate, and the xdp drops in the header and per queue.
func TestTopShowsKernel(t *testing.T) {
	m := &topModel{key: "rate"}
	now := time.Now()
	m.update(kernelStats(1000, 10), nil, now)
	m.update(kernelStats(3000, 20), nil, now.Add(time.Second))
	var row *topRow
	for _, r := range m.rows() {
		if r.name == "acl[0]" && r.kind == "xdp" {
			row = &r
		}
	}
	if row == nil || row.packets != 3000 || row.drops != 3000 || row.rate < 1999 || row.rate > 2001 {
		t.Fatalf("xdp row %+v in %+v", row, m.rows())
	}
	text := strings.Join(m.lines(), "\n")
	if !strings.Contains(text, "drop 3001 (2.0kpps): xdp 3000 (2.0kpps) workers 1  pass 0 (xdp 0)") || !regexp.MustCompile(`dp0/0\s+3021\s+20\s+1\s+3000\s`).MatchString(text) {
		t.Fatalf("top:\n%s", text)
	}
	// A new rule set (a swap) has no rate against the old one's counts.
	next := kernelStats(50, 30)
	next.KernelRules[0].Generation = 3
	m.update(next, nil, now.Add(2*time.Second))
	for _, r := range m.rows() {
		if r.kind == "xdp" && r.rate != 0 {
			t.Fatalf("rate across rule sets: %+v", r)
		}
	}
}

// TestPrintSplit: `pipeline show` lists each rule of the split filter with
// where it runs, the kernel's hits when in force, and what stopped the
// prefix; a split that planned nothing says why.
func TestPrintSplit(t *testing.T) {
	var b bytes.Buffer
	printSplit(&b, &control.Split{Mode: "auto", InForce: true, Generation: 4, Filter: "acl", KernelRules: 2,
		StopReason: `its action rewrite leads to stage "rewrite", which runs on the workers`,
		Rules: []control.SplitRule{
			{Index: 0, Line: 8, Action: "drop:nine", Kernel: true, Packets: 123},
			{Index: 1, Line: 9, Action: "drop:arp", Kernel: true, Idle: true},
			{Index: 2, Line: 10, Action: "rewrite"},
		}})
	out := b.String()
	for _, re := range []string{
		`split \(offload auto, in force, kernel rule set generation 4\): filter "acl": 2 of 3 rules run in the kernel`,
		`(?m)^\s+0\s+8\s+kernel\s+drop:nine\s+123$`,
		`(?m)^\s+1\s+9\s+kernel \(fires on the workers`,
		`(?m)^\s+2\s+10\s+workers\s+rewrite\s+-$`,
		`rule 2 stops the kernel's prefix: its action rewrite leads to stage "rewrite"`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("show lacks %s:\n%s", re, out)
		}
	}
	b.Reset()
	printSplit(&b, &control.Split{Mode: "none", Why: "offload: none: the XDP program only steers frames to the workers"})
	if !strings.Contains(b.String(), "split (offload none, a swap to it would load): nothing runs in the kernel: offload: none") {
		t.Errorf("show of offload none: %s", b.String())
	}
}
