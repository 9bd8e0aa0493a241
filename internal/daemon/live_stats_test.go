package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/gen"

	"github.com/warpflow/warpflow/internal/testwait"
)

// liveStatsPipeline drops UDP port 9 in the XDP program (the filter's
// first rule: the split moves it) and port 7 on the workers (the second
// rule leads to a stage, so the kernel's prefix ends before it), counts
// the rest by protocol and class and forwards it; %s is the name. The
// test's two pipelines differ only in their names, so a swap between them
// carries every counter.
const liveStatsPipeline = `name: %s
settings: {batch_size: 64, workers: 1}
stages:
  - {name: parse, type: parse}
  - name: acl
    type: filter
    default: flows
    rules:
      - {proto: udp, dst_port: 9, action: "drop:nine"}
      - {proto: tcp, dst_port: 22, action: flows}
      - {proto: udp, dst_port: 7, action: "drop:seven"}
  - {name: flows, type: count, by: [protocol, class]}
  - {name: rewrite, type: rewrite, src_mac: "02:77:66:00:00:03", dst_mac: "02:77:66:00:00:04"}
  - {name: out, type: tx, port: out0}
`

// liveStatsRate is the offered rate, and liveStatsReads the reads of
// `stats` taken under it, with a swap every liveStatsSwapEvery.
const (
	liveStatsRate      = 200_000
	liveStatsReads     = 5000
	liveStatsSwapEvery = 250
	liveStatsBatch     = 64
)

// TestLiveStatsConsistent reads the daemon's stats 5,000 times while a
// generator offers 200 kpps (a quarter dropped by the XDP program's
// kernel rule, a quarter by the workers) and the pipeline is swapped
// every 250 reads, and checks every read: each queue's frame places sum
// to its UMEM's frame count and none is above it; no counter is below the
// read before it (the verdicts, the kernel's, each reason, port, stage,
// stage counter, socket and program counter); the balance, received =
// transmitted + dropped + passed + xdp_dropped + xdp_passed, holds in
// every read, per queue and in the totals, and so does the engine's own
// (what it read from the RX ring is transmitted, dropped or passed); the
// fill per batch is never above the batch size. At rest the balance holds
// with nothing in flight, and what the XDP program saw is received or
// one of the kernel's drops before the pipeline. `warpctl
// stats --json`'s keys are all snake_case, and `warpctl ports` is a
// table.
func TestLiveStatsConsistent(t *testing.T) {
	requireLive(t)
	dir := t.TempDir()
	p1 := writePipeline(t, dir, "s1", fmt.Sprintf(liveStatsPipeline, "s1"))
	p2 := writePipeline(t, dir, "s2", fmt.Sprintf(liveStatsPipeline, "s2"))
	topo := newLab(t)
	lc := startControlled(t, topo, p1, "offload: auto\n"+swapBuffers, p2)
	d, c, ctx := lc.d, lc.c, context.Background()
	if split := d.waitFor(t, "pipeline split", 10*time.Second); num(split, "kernel_rules") != 1 {
		t.Fatalf("the split: %v", split)
	}

	genCtx, stopGen := context.WithCancel(ctx)
	defer stopGen()
	o := gen.DefaultOptions()
	o.Netns, o.Interface, o.Capture = topo.Gen.Namespace, topo.Gen.Name, seqCapture(t, 4)
	o.Engine = gen.EngineAFXDP // a capture at speed (the live engine sends one per call)
	o.Rate, o.Count, o.Duration = liveStatsRate, 30*liveStatsRate, 30*time.Second
	genDone := make(chan gen.Result, 1)
	genErr := make(chan error, 1)
	go func() {
		r, err := gen.Run(genCtx, o)
		genDone <- r
		genErr <- err
	}()
	waitTraffic(t, c, 1000)

	var prev *control.Stats
	start := time.Now()
	swaps := 0
	for i := range liveStatsReads {
		s, err := c.Stats(ctx)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		checkSnapshot(t, i, &s)
		if prev != nil {
			checkNoneDown(t, i, prev, &s)
		}
		prev = &s
		if i > 0 && i%liveStatsSwapEvery == 0 {
			to := []string{"s2", "s1"}[swaps%2]
			if _, err := c.Swap(ctx, to); err != nil {
				t.Fatalf("swap %d to %s: %v", swaps, to, err)
			}
			swaps++
		}
	}
	reading := time.Since(start)
	if s, _ := c.Stats(ctx); s.Swaps != uint64(swaps) || s.Pipeline != []string{"s1", "s2"}[swaps%2] {
		t.Fatalf("after %d swaps: %d swaps, running %s", swaps, s.Swaps, s.Pipeline)
	}
	stopGen()
	res := testwait.Recv(t, genDone, "the generator to return after cancel", testwait.Deadline)
	err := <-genErr // sent right after genDone, into its buffer: not a wait
	if err != nil {
		t.Fatalf("generator: %v", err)
	}
	t.Logf("%d reads and %d swaps in %s under %.0f pps offered (%.0f pps sent, %d frames)", liveStatsReads, swaps, reading.Round(time.Millisecond), o.Rate, res.PPS, res.Sent)
	if res.PPS < 0.9*liveStatsRate {
		t.Errorf("the generator sent %.0f pps of the %d asked: the test did not run under its load", res.PPS, liveStatsRate)
	}

	// At rest: everything the XDP program saw is accounted for.
	var st control.Stats
	for deadline := time.Now().Add(10 * time.Second); ; {
		before, _ := c.Stats(ctx)
		time.Sleep(200 * time.Millisecond)
		st, _ = c.Stats(ctx)
		if st.Totals.Received == before.Totals.Received && st.Totals.Balanced {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no rest within 10 s: %+v", st.Totals)
		}
	}
	tot := st.Totals
	if tot.Received != tot.Transmitted+tot.Dropped+tot.Passed+tot.XDPDropped+tot.XDPPassed {
		t.Fatalf("at rest: received %d != transmitted %d + dropped %d + passed %d + xdp dropped %d + xdp passed %d",
			tot.Received, tot.Transmitted, tot.Dropped, tot.Passed, tot.XDPDropped, tot.XDPPassed)
	}
	if w, x := tot.Drop("nine"); tot.XDPDropped == 0 || x != tot.XDPDropped || w != 0 {
		t.Errorf("at rest: port 9 dropped by the kernel %d (xdp_dropped %d), by the workers %d", x, tot.XDPDropped, w)
	}
	if w, x := tot.Drop("seven"); w == 0 || x != 0 {
		t.Errorf("at rest: port 7 dropped by the workers %d, by the kernel %d", w, x)
	}
	if tot.EngineReceived+tot.XDPDropped+tot.XDPPassed != tot.Received {
		t.Errorf("at rest: the engine read %d, the kernel decided %d, received %d", tot.EngineReceived, tot.XDPDropped+tot.XDPPassed, tot.Received)
	}
	// The fill per batch is over what the engine batched, never the
	// kernel rules' verdicts (which are a quarter of received here).
	if tot.Batches == 0 || tot.BatchFill != float64(tot.EngineReceived)/float64(tot.Batches) || tot.EngineReceived >= tot.Received {
		t.Errorf("at rest: fill %.2f per batch, engine received %d in %d batches, received %d", tot.BatchFill, tot.EngineReceived, tot.Batches, tot.Received)
	}
	// What the XDP program saw is received, dropped by the kernel before
	// the pipeline, or passed on for want of a socket (docs/COUNTERS.md).
	for _, q := range st.Queues {
		ringFull, dropped := kernelDrop(&q.Counts, "rx_ring_full"), kernelDrop(&q.Counts, "rx_dropped")
		if q.Program.Packets != q.Received+ringFull+dropped+q.NoSocket+q.Program.RedirectFailed || q.Program.Redirected != q.EngineReceived+ringFull+dropped {
			t.Errorf("at rest, queue %s: the XDP program saw %d (redirected %d), received %d (engine %d), kernel drops rx_ring_full %d rx_dropped %d, no socket %d, redirect failed %d",
				q.Queue, q.Program.Packets, q.Program.Redirected, q.Received, q.EngineReceived, ringFull, dropped, q.NoSocket, q.Program.RedirectFailed)
		}
	}
	t.Logf("at rest: received %d = transmitted %d + dropped %d + xdp dropped %d; kernel drops %d, fill %.1f/batch",
		tot.Received, tot.Transmitted, tot.Dropped, tot.XDPDropped, tot.KernelDropped, tot.BatchFill)

	// stats --json: every key snake_case.
	js, stderr, code := warpctl(t, lc.sock, "stats", "--json")
	if code != 0 {
		t.Fatalf("stats --json: exit %d %s", code, stderr)
	}
	var doc any
	if err := json.Unmarshal([]byte(js), &doc); err != nil {
		t.Fatal(err)
	}
	keys := 0
	walkKeys(doc, "", func(path, key string) {
		keys++
		if !counters.Snake(key) {
			t.Errorf("stats --json: key %q at %s is not snake_case", key, path)
		}
	})
	if keys < 100 {
		t.Errorf("stats --json has %d keys: too few to have walked the whole of it", keys)
	}

	// ports: a table of the sockets with a column per declared counter,
	// no Go value printed.
	out, stderr, code := warpctl(t, lc.sock, "ports")
	if code != 0 {
		t.Fatalf("ports: exit %d %s", code, stderr)
	}
	if !regexp.MustCompile(`(?m)^\s*PORT\s+INTERFACE\s+QUEUE\s+BIND\s+RX\s+TX\s+COMPLETIONS\s+FILL_STARVED\s`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^\s*\S+\s+dp0\s+0\s+copy\s+[1-9]\d*\s+\d+`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^dp0\s+true\s+0\s+native \(`).MatchString(out) || strings.ContainsAny(out, "{}&") {
		t.Errorf("ports: not the table of interfaces and sockets:\n%s", out)
	}
}

// kernelDrop is c's kernel drops for reason.
func kernelDrop(c *control.Counts, reason string) uint64 {
	for _, d := range c.KernelDrops {
		if d.Reason == reason {
			return d.Packets
		}
	}
	return 0
}

// checkSnapshot checks what holds in every read.
func checkSnapshot(t *testing.T, i int, s *control.Stats) {
	t.Helper()
	for _, q := range s.Queues {
		sum := 0
		for _, p := range q.Frames.Places {
			if p.Frames < 0 || p.Frames > swapFrames {
				t.Fatalf("read %d: queue %s: %d frames in %s, of %d", i, q.Queue, p.Frames, p.Place, swapFrames)
			}
			sum += p.Frames
		}
		if sum != swapFrames || q.Frames.Total != swapFrames {
			t.Fatalf("read %d: queue %s: the places sum to %d (total %d), the UMEM has %d: %+v", i, q.Queue, sum, q.Frames.Total, swapFrames, q.Frames.Places)
		}
		if !q.Balanced || q.Received != q.Transmitted+q.Dropped+q.Passed+q.XDPDropped+q.XDPPassed {
			t.Fatalf("read %d: queue %s: received %d, transmitted %d + dropped %d + passed %d + xdp dropped %d + xdp passed %d (balanced %v)",
				i, q.Queue, q.Received, q.Transmitted, q.Dropped, q.Passed, q.XDPDropped, q.XDPPassed, q.Balanced)
		}
		if q.EngineReceived != q.Transmitted+q.Dropped+q.Passed {
			t.Fatalf("read %d: queue %s: the engine read %d, transmitted %d + dropped %d + passed %d", i, q.Queue, q.EngineReceived, q.Transmitted, q.Dropped, q.Passed)
		}
		if q.BatchFill > liveStatsBatch || q.Batches > 0 && q.EngineReceived > liveStatsBatch*q.Batches {
			t.Fatalf("read %d: queue %s: fill %.1f per batch (%d in %d batches), batches of %d", i, q.Queue, q.BatchFill, q.EngineReceived, q.Batches, liveStatsBatch)
		}
	}
	if !s.Totals.Balanced {
		t.Fatalf("read %d: the totals do not balance: %+v", i, s.Totals)
	}
	if s.Totals.BatchFill > liveStatsBatch {
		t.Fatalf("read %d: fill %.1f per batch, batches of %d", i, s.Totals.BatchFill, liveStatsBatch)
	}
	if f := s.Totals.Frames; f.Total != swapFrames*len(s.Queues) {
		t.Fatalf("read %d: the totals' frames %d", i, f.Total)
	}
}

// checkNoneDown checks that no counter of cur is below prev's.
func checkNoneDown(t *testing.T, i int, prev, cur *control.Stats) {
	t.Helper()
	p, c := counterValues(prev), counterValues(cur)
	for k, v := range p {
		if c[k] < v {
			t.Fatalf("read %d: %s went down from %d to %d", i, k, v, c[k])
		}
	}
}

// counterValues is every counter (never a gauge) of s, by a name made of
// where it is.
func counterValues(s *control.Stats) map[string]uint64 {
	m := map[string]uint64{}
	counts := func(at string, c *control.Counts) {
		for k, v := range map[string]uint64{"received": c.Received, "received_bytes": c.ReceivedBytes, "transmitted": c.Transmitted,
			"dropped": c.Dropped, "passed": c.Passed, "xdp_dropped": c.XDPDropped, "xdp_passed": c.XDPPassed, "engine_received": c.EngineReceived,
			"batches": c.Batches, "xdp_redirected": c.Redirected, "xdp_no_socket": c.NoSocket, "kernel_dropped": c.KernelDropped, "rx_fill_ring_empty": c.FillRingEmpty} {
			m[at+k] = v
		}
		for _, d := range c.Drops {
			m[at+"drop "+d.Reason] = d.Packets
			m[at+"xdp drop "+d.Reason] = d.XDPPackets
		}
		for _, d := range c.KernelDrops {
			m[at+"kernel drop "+d.Reason] = d.Packets
		}
		for _, p := range c.Ports {
			m[at+"port "+p.Port] = p.Packets
		}
	}
	groups := func(at string, gs []counters.Group) {
		for _, g := range gs {
			if g.Kind != counters.Counter {
				continue
			}
			for _, kv := range g.Values {
				m[at+g.Text(kv)] = kv.Value
			}
		}
	}
	stages := func(at string, sts []control.StageStats) {
		for _, st := range sts {
			m[at+"stage "+st.Name] = st.Packets
			for _, d := range st.Drops {
				m[at+"stage "+st.Name+" drop "+d.Reason] = d.Packets
			}
			groups(at+"stage "+st.Name+" ", st.Counters)
		}
	}
	counts("totals ", &s.Totals)
	stages("", s.Stages)
	for _, q := range s.Queues {
		at := "queue " + q.Queue + " "
		counts(at, &q.Counts)
		stages(at, q.Stages)
		for _, so := range q.Sockets {
			groups(at+"socket "+so.Port+" ", so.Counters)
		}
		pc := q.Program
		for k, v := range map[string]uint64{"packets": pc.Packets, "redirected": pc.Redirected, "no_socket": pc.NoSocket,
			"dropped": pc.Dropped, "passed": pc.Passed} {
			m[at+"program "+k] = v
		}
	}
	return m
}

// walkKeys calls fn with every object key in v (decoded JSON) and where
// it is.
func walkKeys(v any, path string, fn func(path, key string)) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			fn(path, k)
			walkKeys(e, path+"."+k, fn)
		}
	case []any:
		for i, e := range x {
			walkKeys(e, fmt.Sprintf("%s[%d]", path, i), fn)
		}
	}
}
