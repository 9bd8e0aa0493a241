package daemon_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/control/client"
)

// liveCounted is a pipeline with a count, a sample and a filter stage
// (its one rule drops UDP port 9 on the workers: the config turns the
// split off), named %s; liveCountedC lacks the filter.
const (
	liveCounted = `name: %s
stages:
  - {name: parse, type: parse}
  - {name: flows, type: count, by: [protocol, class]}
  - {name: smp, type: sample, every: 10, file: s.pcap}
  - name: acl
    type: filter
    default: rewrite
    rules:
      - {proto: udp, dst_port: 9, action: "drop:a_nine"}
  - {name: rewrite, type: rewrite, src_mac: "02:77:66:00:00:03", dst_mac: "02:77:66:00:00:04"}
  - {name: out, type: tx, port: out0}
`
	liveCountedC = `name: c
stages:
  - {name: parse, type: parse}
  - {name: flows, type: count, by: [protocol, class]}
  - {name: rewrite, type: rewrite, src_mac: "02:77:66:00:00:03", dst_mac: "02:77:66:00:00:04"}
  - {name: out, type: tx, port: out0}
`
)

// statsAtRest waits until the daemon received want packets and then
// for the counters to settle (the last partial batches published).
func statsAtRest(t *testing.T, c *client.Client, want uint64) control.Stats {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := c.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.Totals.Received >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d in 10s (kernel drops %v)", s.Totals.Received, want, s.Totals.KernelDrops)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	s, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLiveStageCountersAndCaptureAcrossSwaps runs warpflowd on the lab
// and reads, while it runs, the filter's rule hits, the count stage's
// keys and the sample counts through `stats --json`, the human `stats`
// and /metrics, against the verdict counters; swaps to an equally
// configured pipeline with a capture running: the counters carry on and
// the capture goes on recording the same tap point into the same file
// until its count; then a capture on a stage the next pipeline lacks
// ends at the swap with the reason.
func TestLiveStageCountersAndCaptureAcrossSwaps(t *testing.T) {
	requireLive(t, "tcpreplay", "curl")
	dir := t.TempDir()
	pa, pa2 := writePipeline(t, dir, "a", fmt.Sprintf(liveCounted, "a")), writePipeline(t, dir, "a2", fmt.Sprintf(liveCounted, "a2"))
	pc := writePipeline(t, dir, "c", liveCountedC)
	const n = 400
	capture := seqCapture(t, n)

	topo := newLab(t)
	lc := startControlled(t, topo, pa, "offload: none\n", pa2, pc)
	d, metricsAddr, sock, c, ctx := lc.d, lc.metricsAddr, lc.sock, lc.c, context.Background()
	capFile := filepath.Join(captureDirOf(d), "acl.pcap")
	const capCount = 500 // more than the 300 the first pipeline lets out of acl
	if _, stderr, code := warpctl(t, sock, "capture", "start", "--stage", "acl", "--edge", "rewrite", "--count", fmt.Sprint(capCount), "--file", "acl.pcap"); code != 0 {
		t.Fatalf("capture start: exit %d %s", code, stderr)
	}

	// Phase 1, pipeline a: the live counters agree with the verdicts.
	if sent := tcpreplay(t, topo, capture, 5000); sent != n {
		t.Fatalf("tcpreplay sent %d of %d", sent, n)
	}
	s1 := statsAtRest(t, c, n)
	checkStageCounters(t, s1)
	if got := stageCounter(s1, "acl", "rule=0"); got != n/4 {
		t.Fatalf("phase 1: acl rule[0] = %d, want %d (every port 9 packet)", got, n/4)
	}
	// The sample stage kept every tenth candidate, and the daemon wrote
	// them to its file under capture_dir.
	cand1, kept1 := sampleCounts(s1, "smp")
	if cand1 != s1.Totals.Received || kept1 != (s1.Totals.Received+9)/10 {
		t.Fatalf("phase 1 samples: %d kept of %d candidates, received %d", kept1, cand1, s1.Totals.Received)
	}
	sampleFile := filepath.Join(captureDirOf(d), "samples", "s.pcap")
	for deadline := time.Now().Add(5 * time.Second); ; {
		s, _ := c.Stats(ctx)
		if len(s.SampleFiles) == 1 && s.SampleFiles[0].Written == kept1 {
			if f := s.SampleFiles[0]; f.Stage != "smp" || f.File != sampleFile || f.Missed != 0 || f.Error != "" {
				t.Fatalf("sample file %+v, want %s", f, sampleFile)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sample files %+v: want %d written to %s", s.SampleFiles, kept1, sampleFile)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := readFrames(t, sampleFile); uint64(len(got)) != kept1 || binary.BigEndian.Uint64(got[1][liveSeqOffset:]) != 10 {
		t.Fatalf("%s has %d packets, want %d, the second sequence number 10", sampleFile, len(got), kept1)
	}
	// The writer drains the tap every 20 ms: wait for it (bounded).
	for deadline := time.Now().Add(5 * time.Second); ; {
		ci, _ := c.Capture(ctx)
		if ci.Active && ci.Written == n-n/4 {
			break
		}
		if !ci.Active || ci.Written > n-n/4 || time.Now().After(deadline) {
			t.Fatalf("phase 1 capture: %+v, want active with %d written", ci, n-n/4)
		}
		time.Sleep(10 * time.Millisecond)
	}
	human, stderr, code := warpctl(t, sock, "stats")
	if code != 0 || !strings.Contains(human, "rule=0") || !regexp.MustCompile(fmt.Sprintf(`(?m)^smp\s+kept\s+%d\s`, kept1)).MatchString(human) ||
		!strings.Contains(human, fmt.Sprintf("sample smp -> %s: %d written, 0 missed", sampleFile, kept1)) {
		t.Fatalf("warpctl stats: exit %d %s\n%s", code, stderr, human)
	}

	// Swap to the equally configured a2: nothing resets, the capture
	// follows.
	js, stderr, code := warpctl(t, sock, "pipeline", "swap", "a2", "--json")
	var rep control.SwapReply
	if code != 0 || json.Unmarshal([]byte(js), &rep) != nil {
		t.Fatalf("swap to a2: exit %d %s\n%s", code, stderr, js)
	}
	if rep.Capture != "follows" || len(rep.CountersReset) != 0 {
		t.Fatalf("swap to a2: capture %q, counters reset %v", rep.Capture, rep.CountersReset)
	}
	if s, _ := c.Stats(ctx); stageCounter(s, "acl", "rule=0") != n/4 || stageCounter(s, "flows", "total") != s1.Totals.Received {
		t.Fatalf("right after the swap: acl rule[0] %d, flows total %d; before: %d, %d",
			stageCounter(s, "acl", "rule=0"), stageCounter(s, "flows", "total"), n/4, s1.Totals.Received)
	}

	// Phase 2, pipeline a2: the counters went on from phase 1's.
	if sent := tcpreplay(t, topo, capture, 5000); sent != n {
		t.Fatalf("tcpreplay sent %d of %d", sent, n)
	}
	s2 := statsAtRest(t, c, 2*n)
	if s2.Pipeline != "a2" {
		t.Fatalf("running %q", s2.Pipeline)
	}
	checkStageCounters(t, s2)
	if got := stageCounter(s2, "acl", "rule=0"); got != 2*n/4 {
		t.Fatalf("phase 2: acl rule[0] = %d, want %d (both phases' port 9 packets)", got, 2*n/4)
	}
	if cand, kept := sampleCounts(s2, "smp"); cand != s2.Totals.Received || kept != kept1+(s2.Totals.Received-s1.Totals.Received+9)/10 {
		t.Fatalf("phase 2 samples: %d kept of %d (phase 1 %d of %d), received %d", kept, cand, kept1, cand1, s2.Totals.Received)
	}
	checkCounterMetrics(t, topo.DP0.Namespace, metricsAddr, s2)

	// The capture took its count across the swap, into one file, only
	// packets acl let out: phase 1's 300 then phase 2's first 200.
	var ci control.CaptureInfo
	for deadline := time.Now().Add(5 * time.Second); ; {
		ci, _ = c.Capture(ctx)
		if !ci.Active {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the capture did not end within 5s of the swap (count %d): %+v", capCount, ci)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ci.Active || ci.Written != capCount || !strings.Contains(ci.Stopped, fmt.Sprintf("count %d", capCount)) {
		t.Fatalf("capture after the swap: %+v", ci)
	}
	tapped := readFrames(t, capFile)
	if len(tapped) != capCount {
		t.Fatalf("capture file has %d packets, want %d", len(tapped), capCount)
	}
	for i, f := range tapped {
		seq := binary.BigEndian.Uint64(f[liveSeqOffset:])
		want := uint64(i/3*4 + i%3) // the sequence numbers acl accepts: not 1 mod 4
		if i >= 300 {
			want = uint64((i-300)/3*4 + (i-300)%3)
		}
		if want%4 >= 1 {
			want++
		}
		if port := binary.BigEndian.Uint16(f[36:]); port == 9 || seq != want {
			t.Fatalf("captured packet %d: sequence number %d port %d, want %d (not port 9)", i, seq, port, want)
		}
	}

	// A capture on acl, then a swap to c, which has no acl: the capture
	// ends at the swap and says why; the swap reply too.
	if _, stderr, code := warpctl(t, sock, "capture", "start", "--stage", "acl", "--count", "10", "--file", "acl2.pcap"); code != 0 {
		t.Fatalf("capture start: exit %d %s", code, stderr)
	}
	out, stderr, code := warpctl(t, sock, "pipeline", "swap", "c")
	if code != 0 || !strings.Contains(out, `capture: ended`) || !strings.Contains(out, `no stage "acl"`) {
		t.Fatalf("swap to c: exit %d %s\n%s", code, stderr, out)
	}
	if ci, _ := c.Capture(ctx); ci.Active || !strings.Contains(ci.Stopped, `swapped to "c"`) || !strings.Contains(ci.Stopped, `no stage "acl"`) {
		t.Fatalf("capture after a swap to a pipeline without its stage: %+v", ci)
	}
	if code := d.stop(t, syscall.SIGTERM, 10*time.Second); code != 0 {
		t.Fatalf("warpflowd exited %d", code)
	}
}

// checkStageCounters: at rest the filter's rule and default hits add up
// to what reached it, rule[0]'s to its drop reason, and the count stage's
// total and class keys to what reached it; the per-queue counters sum to
// the totals' sets.
func checkStageCounters(t *testing.T, s control.Stats) {
	t.Helper()
	if !s.Totals.Balanced {
		t.Fatalf("not balanced: %+v", s.Totals)
	}
	var aclIn, flowsIn uint64
	for _, q := range s.Queues {
		for _, st := range q.Stages {
			switch st.Name {
			case "acl":
				aclIn += st.Packets
			case "flows":
				flowsIn += st.Packets
			}
		}
	}
	if got := stageCounter(s, "acl", "rule=0"); got != dropped(s.Totals, "a_nine") || got == 0 {
		t.Errorf("acl rule=0 = %d, drops a_nine %d", got, dropped(s.Totals, "a_nine"))
	}
	if got := stageCounter(s, "acl", "rule=0") + stageCounter(s, "acl", "rule=default"); got != aclIn {
		t.Errorf("acl rule=0 + default = %d, acl saw %d", got, aclIn)
	}
	if got := stageCounter(s, "flows", "total"); got != flowsIn || got != s.Totals.Received {
		t.Errorf("flows total = %d, flows saw %d, received %d", got, flowsIn, s.Totals.Received)
	}
	if got := stageCounter(s, "flows", "class=ok") + stageCounter(s, "flows", "class=unparsed"); got != flowsIn {
		t.Errorf("flows class=ok = %d, flows saw %d (%+v)", got, flowsIn, s.Stage("flows"))
	}
	for _, st := range s.Stages {
		sum := map[string]uint64{}
		for _, q := range s.Queues {
			for _, qs := range q.Stages {
				if qs.Name == st.Name {
					for _, c := range control.TopCounters(qs.Counters, -1) {
						sum[c.Text] += c.Value
					}
				}
			}
		}
		for _, c := range control.TopCounters(st.Counters, -1) {
			if sum[c.Text] != c.Value {
				t.Errorf("%s %s: total %d, queues sum to %d", st.Name, c.Text, c.Value, sum[c.Text])
			}
		}
	}
}

// checkCounterMetrics: /metrics carries the stage counters and sample
// counts that stats does.
func checkCounterMetrics(t *testing.T, ns, addr string, s control.Stats) {
	t.Helper()
	out, err := inNS(ns, "curl", "-sf", "--max-time", "10", "http://"+addr+"/metrics").Output()
	if err != nil {
		t.Fatalf("scrape %s (10 s at most): %v", addr, err)
	}
	q := s.Queues[0]
	var want []string
	for _, st := range q.Stages {
		for _, g := range st.Counters {
			for _, kv := range g.Values {
				if g.StatsOnly || kv.Folded {
					continue
				}
				labels := map[string]string{"queue": q.Queue, "stage": st.Name}
				if g.Label != "" {
					labels[g.Label] = kv.Key
				}
				var pairs []string
				for _, k := range slices.Sorted(maps.Keys(labels)) { // the exposition sorts them
					pairs = append(pairs, fmt.Sprintf("%s=%q", k, labels[k]))
				}
				want = append(want, fmt.Sprintf(`%s{%s} %d`, g.Metric(st.Kind), strings.Join(pairs, ","), kv.Value))
			}
		}
	}
	if len(want) < 5 {
		t.Fatalf("stats has too few stage counters to check: %v", want)
	}
	for _, w := range want {
		if !strings.Contains(string(out), w+"\n") {
			t.Errorf("scrape lacks %s", w)
		}
	}
}

// TestLiveSwapToUnusedOutput starts warpflowd with a pipeline that only
// sends packets back out of dp0, with dp1 configured as a transmit-only
// interface its startup pipeline does not use; a swap to a pipeline that
// forwards to dp1 works (the daemon opened dp1's transmit sockets at
// start), and the packets reach the sink behind dp1.
func TestLiveSwapToUnusedOutput(t *testing.T) {
	requireLive(t, "tcpreplay", "tcpdump")
	dir := t.TempDir()
	ph, pf := filepath.Join(dir, "h.yaml"), filepath.Join(dir, "f.yaml")
	os.WriteFile(ph, []byte("name: h\nstages:\n  - {name: parse, type: parse}\n  - {name: back, type: tx, port: back}\n"), 0o644)
	os.WriteFile(pf, []byte(`name: f
stages:
  - {name: parse, type: parse}
  - {name: rewrite, type: rewrite, src_mac: "02:77:66:00:00:03", dst_mac: "02:77:66:00:00:04"}
  - {name: out, type: tx, port: out0}
`), 0o644)
	cfg := filepath.Join(dir, "warpflowd.yaml")
	os.WriteFile(cfg, fmt.Appendf(nil, `pipeline: %s
interfaces:
  - {name: dp0, attach: native, bind: auto}
  - {name: dp1, receive: false, bind: auto}
ports: {back: dp0, out0: dp1}
workers_per_queue: 0
stats_interval: 0s
`, ph), 0o644)
	const n = 200
	capture := seqCapture(t, n)
	topo := newLab(t)
	sink := startSinkCapture(t, topo)
	d := startDaemon(t, topo.DP0.Namespace, "--config", cfg)
	d.waitFor(t, "running", 10*time.Second)
	sock := socketOf(d)
	c := client.New(sock)
	if _, stderr, code := warpctl(t, sock, "pipeline", "load", pf); code != 0 {
		t.Fatalf("load of a pipeline to dp1, which the startup one does not use: exit %d %s", code, stderr)
	}
	if out, stderr, code := warpctl(t, sock, "pipeline", "swap", "f"); code != 0 {
		t.Fatalf("swap to f: exit %d %s%s", code, out, stderr)
	}
	if sent := tcpreplay(t, topo, capture, 5000); sent != n {
		t.Fatalf("tcpreplay sent %d of %d", sent, n)
	}
	s := statsAtRest(t, c, n)
	if got := s.Totals.Port("out0").Packets; got != n || !s.Totals.Balanced {
		t.Fatalf("transmitted on out0 %d of %d (totals %+v)", got, n, s.Totals)
	}
	time.Sleep(200 * time.Millisecond) // the last frames through the sink's veth to tcpdump
	if code := d.stop(t, syscall.SIGTERM, 10*time.Second); code != 0 {
		t.Fatalf("warpflowd exited %d", code)
	}
	frames := sink.stop(t)
	got := 0
	for _, f := range frames {
		if len(f) >= liveSeqOffset+8 && binary.BigEndian.Uint16(f[12:]) == 0x0800 && f[0] == 0x02 && f[5] == 0x04 {
			got++
		}
	}
	if got != n {
		t.Fatalf("the sink behind dp1 got %d of %d forwarded frames (%d frames in all)", got, n, len(frames))
	}
}

// TestLiveSwapRefusesUnopenedOutput: with two receiving interfaces and no
// ports map, dp0's queue has no transmit socket on dp1 (only dp1's own
// queue transmits there), so a pipeline with port dp1 is refused at load
// and the message names the port, the interface, the queue and the fix;
// a port on no configured interface is refused the same way.
func TestLiveSwapRefusesUnopenedOutput(t *testing.T) {
	requireLive(t)
	dir := t.TempDir()
	ph, pf, pg := filepath.Join(dir, "h.yaml"), filepath.Join(dir, "f.yaml"), filepath.Join(dir, "g.yaml")
	os.WriteFile(ph, []byte("name: h\nstages:\n  - {name: parse, type: parse}\n  - {name: d, type: drop}\n"), 0o644)
	os.WriteFile(pf, []byte("name: f\nstages:\n  - {name: parse, type: parse}\n  - {name: out, type: tx, port: dp1}\n"), 0o644)
	os.WriteFile(pg, []byte("name: g\nstages:\n  - {name: parse, type: parse}\n  - {name: out, type: tx, port: gen0}\n"), 0o644)
	cfg := filepath.Join(dir, "warpflowd.yaml")
	os.WriteFile(cfg, fmt.Appendf(nil, "pipeline: %s\ninterfaces:\n  - {name: dp0, attach: native, bind: auto}\n  - {name: dp1, attach: native, bind: auto}\nworkers_per_queue: 0\nstats_interval: 0s\n", ph), 0o644)
	topo := newLab(t)
	d := startDaemon(t, topo.DP0.Namespace, "--config", cfg)
	d.waitFor(t, "running", 10*time.Second)
	sock := socketOf(d)
	_, stderr, code := warpctl(t, sock, "pipeline", "load", pf)
	t.Logf("load f: %s", stderr)
	for _, want := range []string{`port "dp1"`, "interface dp1", "dp0", "`ports: {dp1: dp1}`", "restart"} {
		if code != 5 || !strings.Contains(stderr, want) {
			t.Fatalf("load of a pipeline to dp1: exit %d, message lacks %q:\n%s", code, want, stderr)
		}
	}
	_, stderr, code = warpctl(t, sock, "pipeline", "load", pg)
	if code != 5 || !strings.Contains(stderr, `port "gen0"`) || !strings.Contains(stderr, "no configured interface (gen0)") {
		t.Fatalf("load of a pipeline to gen0: exit %d:\n%s", code, stderr)
	}
	if out, _, _ := warpctl(t, sock, "pipeline", "list"); strings.Contains(out, " f ") || strings.Contains(out, "\nf") {
		t.Fatalf("a refused pipeline was stored:\n%s", out)
	}
	if code := d.stop(t, syscall.SIGTERM, 10*time.Second); code != 0 {
		t.Fatalf("warpflowd exited %d", code)
	}
}
