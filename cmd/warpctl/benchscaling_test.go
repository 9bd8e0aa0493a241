package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/internal/bench"
)

// TestBenchScalingCommand runs `warpctl bench scaling` on a tiny sweep,
// unpinned, and reads its JSON back: the points asked for, each counting
// what it replayed, and the table on stdout.
func TestBenchScalingCommand(t *testing.T) {
	out := filepath.Join(t.TempDir(), "s.json")
	stdout, stderr, code := run(t, "bench", "scaling", "--workers", "1,2", "--engines", "1", "--mpackets", "0.01",
		"--repeats", "2", "--io-cpu", "-1", "--cpus", "", "--json", out)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"SHAPE", "EFFICIENCY", "target    2 workers >= 0.8x linear", "one I/O loop:", "results written to"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res bench.ScalingResult
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Points) != 4 || res.Repeats != 2 || res.PacketsPerUnit < 10000 {
		t.Fatalf("result %+v", res)
	}
	for _, p := range res.Points {
		if p.Err != "" || p.Packets != uint64(p.N)*res.PacketsPerUnit || p.Replayed != p.Packets || len(p.MppsRuns) != 2 || p.CPUs != nil {
			t.Errorf("point %+v", p)
		}
	}
}

// TestBenchScalingUnmeasured: a point that cannot run (its I/O loop on a
// CPU the process may not use) is shown with its error, the run exits
// 1 naming it, and the summary claims nothing about saturation.
func TestBenchScalingUnmeasured(t *testing.T) {
	stdout, stderr, code := run(t, "bench", "scaling", "--workers", "1", "--engines", "", "--io-ceiling=false",
		"--mpackets", "0.01", "--repeats", "1", "--io-cpu", "4095", "--cpus", "")
	if code != codeFailed {
		t.Fatalf("exit %d, want %d\n%s\n%s", code, codeFailed, stdout, stderr)
	}
	if !strings.Contains(stderr, "1 of 1 points not measured (first: workers 1: pin to cpu 4095") {
		t.Errorf("stderr does not name the failed point: %s", stderr)
	}
	if !strings.Contains(stdout, "too few to say where it saturates") || strings.Contains(stdout, "stays at or above") {
		t.Errorf("summary claims a result nothing measured:\n%s", stdout)
	}
}

func TestBenchScalingUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--mpackets", "0"},
		{"--cpus", "3-1"},
		{"--workers", "x"},
		{"--engines", "1,0"},
	} {
		_, stderr, code := run(t, append([]string{"bench", "scaling"}, args...)...)
		if code != codeUsage {
			t.Errorf("%v: exit %d, want %d (usage): %s", args, code, codeUsage, stderr)
		}
	}
	// A worker count beyond the CPUs given fails before measuring.
	_, stderr, code := run(t, "bench", "scaling", "--workers", "3", "--engines", "", "--io-cpu", "0", "--cpus", "1,2")
	if code != codeFailed || !strings.Contains(stderr, "workers 3: only 2 cpus") {
		t.Errorf("exit %d: %s", code, stderr)
	}
}

// TestBenchTargetStates: the bench reports print a met target MET, a
// missed one MISSED and one not measured with its note.
func TestBenchTargetStates(t *testing.T) {
	var out strings.Builder
	cmd := &cobra.Command{}
	cmd.SetOut(&out)
	printBench(cmd, bench.Result{Targets: []bench.Target{
		{Name: "a met", Met: true}, {Name: "a missed"}, {Name: "unmeasured", Note: "no baseline"}}})
	printBenchScaling(cmd, bench.ScalingResult{Targets: []bench.Target{{Name: "s met", Met: true}, {Name: "s missed"}}})
	for _, re := range []string{`a met +ratio .*: MET\n`, `a missed +ratio .*: MISSED\n`, `unmeasured +ratio .*: NOT MEASURED \(no baseline\)\n`,
		`s met +efficiency .*: MET\n`, `s missed +efficiency .*: MISSED\n`} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("output lacks %s:\n%s", re, out.String())
		}
	}
}
