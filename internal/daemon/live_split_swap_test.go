package daemon_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/lab"
)

// The two pipelines the kernel/workers swap test alternates between. Both
// drop UDP port 9 (reason nine) and forward everything else, so every
// packet has one verdict whichever of the two decides it. In K the drop is
// the filter's first rule, which the XDP program runs; in W a rule that
// leads to a stage comes first, which the kernel cannot run, so it stops
// the prefix and the same drop runs on the workers. Each swap K <-> W
// moves the drop between the kernel and the workers.
const (
	liveSplitK = `name: k
settings: {batch_size: 64, workers: 0}
stages:
  - {name: parse, type: parse}
  - name: acl
    type: filter
    default: rewrite
    rules:
      - {proto: udp, dst_port: 9, action: "drop:nine"}
  - {name: rewrite, type: rewrite, src_mac: "02:77:66:00:00:03", dst_mac: "02:77:66:00:00:04"}
  - {name: out, type: tx, port: out0}
`
	liveSplitW = `name: w
settings: {batch_size: 64, workers: 0}
stages:
  - {name: parse, type: parse}
  - name: acl
    type: filter
    default: rewrite
    rules:
      - {proto: tcp, dst_port: 22, action: rewrite}
      - {proto: udp, dst_port: 9, action: "drop:nine"}
  - {name: rewrite, type: rewrite, src_mac: "02:77:66:00:00:03", dst_mac: "02:77:66:00:00:04"}
  - {name: out, type: tx, port: out0}
`
)

// linkDrops returns iface's tx_dropped and rx_dropped in ns (on veth, a
// frame the peer's receive ring had no room for is the sender's
// tx_dropped).
func linkDrops(t *testing.T, ns, iface string) (tx, rx uint64) {
	t.Helper()
	if err := lab.Do(ns, func() error {
		l, err := netlink.LinkByName(iface)
		if err != nil {
			return err
		}
		tx, rx = l.Attrs().Statistics.TxDropped, l.Attrs().Statistics.RxDropped
		return nil
	}); err != nil {
		t.Fatalf("counters of %s in %s: %v", iface, ns, err)
	}
	return tx, rx
}

// xdpSeen sums what the queues' XDP programs saw.
func xdpSeen(s control.Stats) uint64 {
	var n uint64
	for _, q := range s.Queues {
		n += q.Program.Packets
	}
	return n
}

// TestLiveSplitSwapUnderLoad swaps 40 times between K (the drop in the
// kernel) and W (the same drop on the workers) while sequence-numbered
// packets flow, and checks that every packet sent was forwarded or
// dropped exactly once: no port-9 packet reached the sink and every other
// one did, once; drops by reason equal the kernel's drops plus the
// workers', and both sides dropped; received = transmitted + dropped +
// passed with the kernel's decisions included; every frame is back. Over
// the quiesced daemon, `pipeline show` marks K's drop as the kernel's (text
// and --json, with its hits) and W's as the workers' with the rule that
// stopped the prefix, and /metrics agrees with `stats --json`.
func TestLiveSplitSwapUnderLoad(t *testing.T) {
	requireLive(t, "tcpreplay", "tcpdump", "curl")
	dir := t.TempDir()
	pk, pw := writePipeline(t, dir, "k", liveSplitK), writePipeline(t, dir, "w", liveSplitW)
	const n, pps, swaps = 80000, 20000, 40 // 4 s of traffic
	capture := seqCapture(t, n)

	topo := newLab(t)
	sink := startSinkCapture(t, topo)
	lc := startControlled(t, topo, pk, "offload: auto\n"+swapBuffers, pw)
	d, sock, c, ctx := lc.d, lc.sock, lc.c, context.Background()
	if split := d.waitFor(t, "pipeline split", 10*time.Second); num(split, "kernel_rules") != 1 {
		t.Fatalf("K's split: %v", split)
	}

	sent := make(chan int, 1)
	go func() { sent <- tcpreplay(t, topo, capture, pps) }()
	waitTraffic(t, c, 1000)
	for i := range swaps {
		to := "w"
		if i%2 == 1 {
			to = "k"
		}
		if _, err := c.Swap(ctx, to); err != nil {
			t.Fatalf("swap %d to %s: %v", i, to, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s, _ := c.Stats(ctx); s.Totals.Received >= n {
		t.Fatalf("the traffic ended before the last swap (%d received): the swaps were not under load", s.Totals.Received)
	}
	if nsent := <-sent; nsent != n {
		t.Fatalf("tcpreplay sent %d of %d", nsent, n)
	}
	st := statsAfterReplay(t, c, n)
	if st.Generation != swaps+1 || st.Swaps != swaps || st.Pipeline != "k" {
		t.Fatalf("after %d swaps: generation %d, swaps %d, pipeline %s", swaps, st.Generation, st.Swaps, st.Pipeline)
	}
	tot := st.Totals
	lostBefore := checkArrivals(t, topo, st, n)
	if !tot.Balanced || tot.Received != tot.Transmitted+tot.Dropped+tot.Passed || tot.Passed != 0 || tot.Dropped != tot.Drops["nine"] || len(tot.Drops) != 1 {
		t.Fatalf("received %d: transmitted %d, dropped %d %v, passed %d, balanced %v", tot.Received, tot.Transmitted, tot.Dropped, tot.Drops, tot.Passed, tot.Balanced)
	}
	q := st.Queues[0]
	workerDrops := q.Drops["nine"]
	if tot.XDPDropped == 0 || workerDrops == 0 || tot.XDPDropped+workerDrops != tot.Drops["nine"] || q.XDPDropped != tot.XDPDropped {
		t.Fatalf("drops: kernel %d, workers %d, by reason %d: both sides must drop, and the two add up", tot.XDPDropped, workerDrops, tot.Drops["nine"])
	}
	if f := tot.Frames; f.Total != swapFrames || f.Lost != 0 || f.Unreported != 0 {
		t.Fatalf("frames: %+v", f)
	}
	t.Logf("nine dropped %d times: %d in the kernel, %d on the workers", tot.Drops["nine"], tot.XDPDropped, workerDrops)

	checkShowSplit(t, sock, st)
	checkMetricsMatchStats(t, topo.DP0.Namespace, lc.metricsAddr, sock)

	frames := stopWithSink(t, d, sink, topo)
	seenAt := make([]bool, n)
	var atSink, missing uint64
	for _, f := range frames {
		if len(f) < liveSeqOffset+8 || binary.BigEndian.Uint16(f[12:]) != 0x0800 || f[23] != 17 {
			continue
		}
		s := binary.BigEndian.Uint64(f[liveSeqOffset:])
		if s >= n || seenAt[s] {
			t.Fatalf("sequence %d reached the sink twice or is out of range", s)
		}
		if port := binary.BigEndian.Uint16(f[36:]); port == 9 {
			t.Fatalf("sequence %d (port 9) reached the sink: both pipelines drop it", s)
		}
		seenAt[s] = true
		atSink++
	}
	var nines uint64
	for s, ok := range seenAt {
		switch {
		case liveDstPorts[s%len(liveDstPorts)] == 9:
			nines++
		case !ok:
			missing++
		}
	}
	if atSink != tot.Transmitted {
		t.Fatalf("%d packets at the sink, %d transmitted", atSink, tot.Transmitted)
	}
	// Port 9 is one packet in four: each dropped once, the rest each
	// forwarded once (but for what never reached the XDP program).
	if missing+nines != tot.Drops["nine"]+lostBefore || tot.Drops["nine"] > nines || atSink+missing+nines != n {
		t.Fatalf("sink: %d forwarded, %d forwardable ones missing, %d port-9 sent, %d dropped; %d never reached the XDP program",
			atSink, missing, nines, tot.Drops["nine"], lostBefore)
	}
}

// checkShowSplit checks `pipeline show` of the running K and the stored W
// against the stats (st) read just before, the daemon quiesced.
func checkShowSplit(t *testing.T, sock string, st control.Stats) {
	t.Helper()
	out, stderr, code := warpctl(t, sock, "pipeline", "show", "k")
	if code != 0 {
		t.Fatalf("pipeline show k: exit %d %s", code, stderr)
	}
	t.Logf("warpctl pipeline show k:\n%s", out)
	var kernelHits uint64
	for _, r := range st.KernelRules {
		kernelHits += r.Packets
	}
	for _, re := range []string{
		`(?m)^parse\s+parse\s+xdp\+workers\s+0->acl$`,
		`(?m)^acl\s+filter\s+xdp\+workers\s`,
		`(?m)^rewrite\s+rewrite\s+workers\s`,
		`(?m)^drop:nine\s+drop\s+xdp\+workers\s`,
		`split \(offload auto, in force, kernel rule set generation \d+\): filter "acl": 1 of 1 rules run in the kernel`,
		`(?m)^\s+0\s+9\s+kernel\s+drop:nine\s+` + regexp.QuoteMeta(strings.TrimSpace(jsonNum(kernelHits))) + `$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("show k lacks %s:\n%s", re, out)
		}
	}
	js, stderr, code := warpctl(t, sock, "pipeline", "show", "w", "--json")
	var w control.PipelineDetail
	if code != 0 || json.Unmarshal([]byte(js), &w) != nil || w.Split == nil {
		t.Fatalf("pipeline show w --json: exit %d %s\n%s", code, stderr, js)
	}
	sp := w.Split
	if sp.InForce || sp.KernelRules != 0 || len(sp.Rules) != 2 || sp.Rules[1].Kernel || sp.Rules[1].Action != "drop:nine" || !strings.Contains(sp.StopReason, `stage "rewrite"`) {
		t.Errorf("show w: split %+v", sp)
	}
	for _, n := range w.Graph {
		if n.RunsIn != control.RunsOnWorkers {
			t.Errorf("show w: stage %s runs in %q", n.Name, n.RunsIn)
		}
	}
	js, _, _ = warpctl(t, sock, "pipeline", "show", "k", "--json")
	var k control.PipelineDetail
	if json.Unmarshal([]byte(js), &k) != nil || k.Split == nil || !k.Split.InForce || k.Split.KernelRules != 1 || k.Split.Rules[0].Packets != kernelHits || kernelHits == 0 {
		t.Errorf("show k --json: split %+v, stats' kernel rules %+v", k.Split, st.KernelRules)
	}
}

func jsonNum(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
