package daemon_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
			t.Fatalf("received %d of %d in 10s (kernel drops %v)", s.Totals.Received, want, s.Totals.Kernel)
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

func setCounter(s control.Stats, stage, key string) uint64 {
	for _, set := range s.StageCounters {
		if set.Stage == stage {
			for _, c := range set.Counters {
				if c.Key == key {
					return c.Packets
				}
			}
		}
	}
	return 0
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
	if got := setCounter(s1, "acl", "rule[0]"); got != n/4 {
		t.Fatalf("phase 1: acl rule[0] = %d, want %d (every port 9 packet)", got, n/4)
	}
	// The sample stage kept every tenth candidate.
	if len(s1.Samples) != 1 || s1.Samples[0].Candidates != s1.Totals.Received || s1.Samples[0].Written != (s1.Totals.Received+9)/10 {
		t.Fatalf("phase 1 samples %+v, received %d", s1.Samples, s1.Totals.Received)
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
	if code != 0 || !strings.Contains(human, "rule[0]") || !strings.Contains(human, fmt.Sprintf("%d kept of %d", s1.Samples[0].Written, s1.Samples[0].Candidates)) {
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
	if s, _ := c.Stats(ctx); setCounter(s, "acl", "rule[0]") != n/4 || setCounter(s, "flows", "total") != s1.Totals.Received {
		t.Fatalf("right after the swap: acl rule[0] %d, flows total %d; before: %d, %d",
			setCounter(s, "acl", "rule[0]"), setCounter(s, "flows", "total"), n/4, s1.Totals.Received)
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
	if got := setCounter(s2, "acl", "rule[0]"); got != 2*n/4 {
		t.Fatalf("phase 2: acl rule[0] = %d, want %d (both phases' port 9 packets)", got, 2*n/4)
	}
	if sm := s2.Samples; len(sm) != 1 || sm[0].Candidates != s2.Totals.Received || sm[0].Written != s1.Samples[0].Written+(s2.Totals.Received-s1.Totals.Received+9)/10 {
		t.Fatalf("phase 2 samples %+v (phase 1 %+v), received %d", sm, s1.Samples, s2.Totals.Received)
	}
	checkCounterMetrics(t, topo.DP0.Namespace, metricsAddr, s2)

	// The capture took its count across the swap, into one file, only
	// packets acl let out: phase 1's 300 then phase 2's first 200.
	var ci control.CaptureInfo
	for deadline := time.Now().Add(5 * time.Second); ; {
		ci, _ = c.Capture(ctx)
		if !ci.Active || time.Now().After(deadline) {
			break
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
	if got := setCounter(s, "acl", "rule[0]"); got != s.Totals.Drops["a_nine"] || got == 0 {
		t.Errorf("acl rule[0] = %d, drops a_nine %d", got, s.Totals.Drops["a_nine"])
	}
	if got := setCounter(s, "acl", "rule[0]") + setCounter(s, "acl", "default"); got != aclIn {
		t.Errorf("acl rule[0] + default = %d, acl saw %d", got, aclIn)
	}
	if got := setCounter(s, "flows", "total"); got != flowsIn || got != s.Totals.Received {
		t.Errorf("flows total = %d, flows saw %d, received %d", got, flowsIn, s.Totals.Received)
	}
	if got := setCounter(s, "flows", "class=ok") + setCounter(s, "flows", "class=unparsed"); got != flowsIn {
		t.Errorf("flows class=ok = %d, flows saw %d (%v)", got, flowsIn, s.StageCounters)
	}
	for _, set := range s.StageCounters {
		sum := map[string]uint64{}
		for _, q := range s.Queues {
			for _, st := range q.Stages {
				if st.Name == set.Stage {
					for _, c := range st.Counters {
						sum[c.Key] += c.Packets
					}
				}
			}
		}
		for _, c := range set.Counters {
			if sum[c.Key] != c.Packets {
				t.Errorf("%s %s: total %d, queues sum to %d", set.Stage, c.Key, c.Packets, sum[c.Key])
			}
		}
	}
}

// checkCounterMetrics: /metrics carries the stage counters and sample
// counts that stats does.
func checkCounterMetrics(t *testing.T, ns, addr string, s control.Stats) {
	t.Helper()
	out, err := inNS(ns, "curl", "-sf", "http://"+addr+"/metrics").Output()
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	q := s.Queues[0]
	var want []string
	for _, st := range q.Stages {
		for _, c := range st.Counters {
			if strings.HasPrefix(c.Key, "proto=") && c.Key != "proto=udp" {
				continue
			}
			want = append(want, fmt.Sprintf(`warpflow_stage_key_packets_total{key=%q,kind=%q,queue=%q,stage=%q} %d`, c.Key, st.Kind, q.Queue, st.Name, c.Packets))
		}
		if sc := st.Sample; sc != nil {
			want = append(want, fmt.Sprintf(`warpflow_sample_candidate_packets_total{queue=%q,stage=%q} %d`, q.Queue, st.Name, sc.Candidates),
				fmt.Sprintf(`warpflow_sample_kept_packets_total{queue=%q,stage=%q} %d`, q.Queue, st.Name, sc.Written))
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
	if got := s.Totals.Ports["out0"].Packets; got != n || !s.Totals.Balanced {
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
