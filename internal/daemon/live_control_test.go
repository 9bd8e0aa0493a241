package daemon_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/lab"

	"github.com/warpflow/warpflow/internal/testwait"
)

// The two pipelines the live swap test alternates between: each drops one
// UDP destination port and forwards the rest to the sink, so a packet that
// reaches the sink with port 7 was processed by A, one with port 9 by B.
const (
	liveSwapA = `name: a
settings: {batch_size: 64, workers: 0}
stages:
  - {name: parse, type: parse}
  - name: acl
    type: filter
    default: rewrite
    rules:
      - {proto: udp, dst_port: 9, action: "drop:a_nine"}
  - {name: rewrite, type: rewrite, src_mac: "02:77:66:00:00:03", dst_mac: "02:77:66:00:00:04"}
  - {name: out, type: tx, port: out0}
`
	liveSwapB = `name: b
settings: {batch_size: 64, workers: 0}
stages:
  - {name: parse, type: parse}
  - name: acl
    type: filter
    default: rewrite
    rules:
      - {proto: udp, dst_port: 7, action: "drop:b_seven"}
  - {name: rewrite, type: rewrite, src_mac: "02:77:66:00:00:03", dst_mac: "02:77:66:00:00:04"}
  - {name: out, type: tx, port: out0}
`
)

var liveDstPorts = []uint16{7, 9, 53, 80}

// swapBuffers sizes the swap tests' rings and UMEM so that the daemon
// may be descheduled for 400 ms at their 20 kpps (8192 frames on the fill
// ring) before the kernel drops a frame for want of one: on the shared
// 2-core dev machine a 175 ms stall with the defaults (2048 on the fill
// ring) was enough to lose frames to rx_fill_ring_empty, which is what
// the one-off "received 98,958 of 100,000" was. The tests stay strict: a
// kernel socket drop still fails them, and says so.
const swapBuffers = "umem: {frames: 16384, frame_size: 2048}\nrings: {rx: 8192, fill: 8192, tx: 2048, completion: 2048}\n"
const swapFrames = 16384

// swapStall reproduces a descheduled daemon: -swap.stall 300ms stops
// warpflowd (SIGSTOP) that long at the 50th swap; the test must still pass.
var swapStall = flag.Duration("swap.stall", 0, "TestLiveSwapUnderLoad: SIGSTOP warpflowd this long at the 50th swap (a descheduled daemon; 300ms passes)")

// seqOffset is where each test packet carries its sequence number: the
// UDP payload.
const liveSeqOffset = 42

// seqCapture writes n UDP packets carrying sequence numbers 0..n-1.
func seqCapture(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "seq.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(2048, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		pkt := make([]byte, 64)
		copy(pkt, []byte{0x02, 0x77, 0x66, 0, 0, 0x02, 0x02, 0x77, 0x66, 0, 0, 0x01, 0x08, 0x00})
		ip := pkt[14:34]
		copy(ip, []byte{0x45, 0, 0, 50, 0, 1, 0, 0, 64, 17, 0, 0, 10, 77, 0, 1, 10, 77, 0, 2})
		binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
		udp := pkt[34:42]
		binary.BigEndian.PutUint16(udp[0:], 40000)
		binary.BigEndian.PutUint16(udp[2:], liveDstPorts[i%len(liveDstPorts)])
		binary.BigEndian.PutUint16(udp[4:], 30)
		binary.BigEndian.PutUint64(pkt[liveSeqOffset:], uint64(i))
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(0, 0), CaptureLength: len(pkt), Length: len(pkt)}
		if err := w.WritePacket(ci, pkt); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func ipChecksum(h []byte) uint16 {
	var s uint32
	for i := 0; i < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}

// warpctlBinary builds cmd/warpctl once per test binary.
func warpctlBinary(t *testing.T) string {
	t.Helper()
	return ctlBinary.build(t, "github.com/warpflow/warpflow/cmd/warpctl", false)
}

// warpctl runs the CLI against sock and returns its stdout, stderr and
// exit code.
func warpctl(t *testing.T, sock string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(warpctlBinary(t), append(args, "--socket", sock)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// socketOf is the --socket a daemon was started with.
func socketOf(d *daemonProc) string { return argOf(d, "--socket") }

// captureDirOf is the --capture-dir a daemon was started with.
func captureDirOf(d *daemonProc) string { return argOf(d, "--capture-dir") }

func argOf(d *daemonProc, flag string) string {
	for i, a := range d.cmd.Args {
		if a == flag && i+1 < len(d.cmd.Args) {
			return d.cmd.Args[i+1]
		}
	}
	return ""
}

// TestLiveSwapUnderLoad runs warpflowd on the lab with AF_XDP, sends
// sequence-numbered packets with tcpreplay, and swaps between two
// pipelines 100 times through the control API while they flow. Then:
// received = transmitted + dropped by reason (+ passed, none), every
// sequence number reached the sink at most once, every one the two
// pipelines forward (ports 53 and 80) reached it, a missing one was
// dropped by the pipeline that drops its port, each packet at the sink
// was forwarded by a pipeline that forwards it, and the counters say the
// same. Over the quiesced daemon, /metrics agrees with `warpctl stats
// --json`; an invalid load is refused with the precise error and leaves
// everything as it was; a capture tap writes what passed its stage.
func TestLiveSwapUnderLoad(t *testing.T) {
	requireLive(t, "tcpreplay", "tcpdump", "curl")
	dir := t.TempDir()
	pa, pb := writePipeline(t, dir, "a", liveSwapA), writePipeline(t, dir, "b", liveSwapB)
	const n = 100000 // 5 s at 20 kpps: time for 100 swaps even with a -race daemon
	capture := seqCapture(t, n)

	topo := newLab(t)
	sink := startSinkCapture(t, topo)
	lc := startControlled(t, topo, pa, swapBuffers, pb)
	d, sock, c, ctx := lc.d, lc.sock, lc.c, context.Background()

	sent := make(chan int, 1)
	go func() { sent <- tcpreplay(t, topo, capture, 20000) }()
	// Wait for traffic, then swap 100 times while it flows.
	waitTraffic(t, c, 1000)
	var activeNs []int64
	for i := range 100 {
		to := "b"
		if i%2 == 1 {
			to = "a"
		}
		rep, err := c.Swap(ctx, to)
		if err != nil {
			t.Fatalf("swap %d to %s: %v", i, to, err)
		}
		activeNs = append(activeNs, rep.ActiveAfterNs...)
		if i == 50 && *swapStall > 0 {
			d.cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(*swapStall)
			d.cmd.Process.Signal(syscall.SIGCONT)
		}
		time.Sleep(8 * time.Millisecond)
	}
	s, _ := c.Stats(ctx)
	if s.Totals.Received >= n {
		t.Fatalf("the traffic ended before the 100th swap (%d received): the swaps were not under load", s.Totals.Received)
	}
	nsent := testwait.Recv(t, sent, fmt.Sprintf("tcpreplay to send %d packets at 20 kpps", n), replayWithin(n, 20000))
	if nsent != n {
		t.Fatalf("tcpreplay sent %d of %d", nsent, n)
	}
	st := statsAfterReplay(t, c, topo, n)
	if st.Generation != 101 || st.Swaps != 100 || st.Pipeline != "a" {
		t.Fatalf("after 100 swaps: generation %d, swaps %d, pipeline %s", st.Generation, st.Swaps, st.Pipeline)
	}
	tot := st.Totals
	lostBefore := checkArrivals(t, topo, st, n)
	if !tot.Balanced || tot.Received != tot.Transmitted+dropped(tot, "a_nine")+dropped(tot, "b_seven")+tot.Passed+tot.XDPPassed {
		t.Fatalf("received %d of %d: transmitted %d, drops %v, passed %d, balanced %v", tot.Received, n, tot.Transmitted, tot.Drops, tot.Passed, tot.Balanced)
	}
	// The quiesced daemon: /metrics and `warpctl stats --json` agree.
	checkMetricsMatchStats(t, topo.DP0.Namespace, lc.metricsAddr, sock)

	// An invalid load: refused with the precise error, nothing changed.
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("name: bad\nstages:\n  - {name: parse, type: parse, next: nowhere}\n"), 0o644)
	_, stderr, code := warpctl(t, sock, "pipeline", "load", bad)
	if code != 5 || !strings.Contains(stderr, bad+":3:") || !strings.Contains(stderr, "nowhere") {
		t.Fatalf("invalid load: exit %d, %s", code, stderr)
	}
	offlineOut, _ := exec.Command(warpctlBinary(t), "pipeline", "validate", bad).CombinedOutput()
	offline := string(offlineOut)
	if first := strings.SplitN(strings.TrimSpace(offline), "\n", 2)[0]; !strings.Contains(stderr, first) {
		t.Fatalf("daemon's message %q lacks the offline one %q", stderr, first)
	}
	after, _ := c.Stats(ctx)
	if after.Generation != st.Generation || after.Totals.Received != st.Totals.Received || after.Totals.Transmitted != st.Totals.Transmitted || after.Pipeline != "a" {
		t.Fatalf("the refused load changed the daemon: %+v -> %+v", st.Totals, after.Totals)
	}
	if _, stderr, code := warpctl(t, sock, "pipeline", "rm", "a"); code != 5 || !strings.Contains(stderr, "running") {
		t.Fatalf("rm of the running pipeline: exit %d %s", code, stderr)
	}

	// ports: what the kernel granted, and the frame account.
	pj, stderr, code := warpctl(t, sock, "ports", "--json")
	var pr control.PortsReply
	if code != 0 || json.Unmarshal([]byte(pj), &pr) != nil || len(pr.Interfaces) != 2 || pr.Interfaces[0].Attach != "native" ||
		len(pr.Queues) != 1 || len(pr.Queues[0].Sockets) == 0 || pr.Queues[0].Sockets[0].Bind != "copy" || pr.Queues[0].Frames.Total != swapFrames {
		t.Fatalf("ports --json: exit %d %s\n%s", code, stderr, pj)
	}

	// A capture of the acl stage's packets to rewrite, 40 of them.
	// A name, made in the daemon's capture_dir; the reply says where.
	capFile := filepath.Join(captureDirOf(d), "tap.pcap")
	if out, stderr, code := warpctl(t, sock, "capture", "start", "--stage", "acl", "--edge", "rewrite", "--count", "40", "--file", "tap.pcap"); code != 0 || !strings.Contains(out, " to "+capFile+" ") {
		t.Fatalf("capture start: exit %d %s\n%s", code, stderr, out)
	}
	small := seqCapture(t, 200)
	tcpreplay(t, topo, small, 5000)
	for deadline := time.Now().Add(5 * time.Second); ; {
		ci, _ := c.Capture(ctx)
		if !ci.Active {
			if ci.Written != 40 || !strings.Contains(ci.Stopped, "count 40") {
				t.Fatalf("capture ended: %+v", ci)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("capture still active: %+v", ci)
		}
		time.Sleep(20 * time.Millisecond)
	}
	tapped := readFrames(t, capFile)
	if len(tapped) != 40 {
		t.Fatalf("tap file has %d packets", len(tapped))
	}
	for i, f := range tapped {
		// A forwards everything but port 9, in order: 0 (7), 2 (53), 3 (80), 4 (7) ...
		if port := binary.BigEndian.Uint16(f[36:]); port == 9 {
			t.Fatalf("tapped packet %d has port 9, which acl drops", i)
		}
	}

	frames := stopWithSink(t, d, sink, topo)
	checkSwapSink(t, frames, n, tot, lostBefore)
	var maxActive int64
	for _, ns := range activeNs {
		maxActive = max(maxActive, ns)
	}
	t.Logf("100 swaps under %d pps: swap to the first batch on the new plan: max %v", 20000, time.Duration(maxActive))
}

// checkSwapSink checks the sink's frames of the swap phase (sequence
// numbers below n) against the counters; lostBefore frames never reached
// the XDP program (the kernel's veth dropped them), so as many sequence
// numbers may be missing besides the pipelines' drops.
func checkSwapSink(t *testing.T, frames [][]byte, n int, tot control.Counts, lostBefore uint64) {
	t.Helper()
	seen := make([]int8, n) // 1: forwarded by A, 2: by B, 3: either
	var atSink uint64
	for _, f := range frames {
		if len(f) < liveSeqOffset+8 || binary.BigEndian.Uint16(f[12:]) != 0x0800 || f[23] != 17 {
			continue
		}
		q := binary.BigEndian.Uint64(f[liveSeqOffset:])
		if q >= uint64(n) {
			t.Fatalf("sequence %d beyond %d", q, n)
		}
		if seen[q] != 0 {
			// The capture phase resends 0..199: count those once.
			if q < 200 {
				continue
			}
			t.Fatalf("sequence %d reached the sink twice", q)
		}
		owner := int8(3)
		switch binary.BigEndian.Uint16(f[36:]) {
		case 7:
			owner = 1 // B drops 7
		case 9:
			owner = 2 // A drops 9
		}
		seen[q] = owner
		atSink++
	}
	var miss7, miss9, missBoth uint64
	changes, last := 0, int8(0)
	for q, s := range seen {
		switch {
		case s == 0 && liveDstPorts[q%4] == 7:
			miss7++
		case s == 0 && liveDstPorts[q%4] == 9:
			miss9++
		case s == 0:
			if missBoth++; missBoth > lostBefore {
				t.Fatalf("sequence %d (port %d, forwarded by both) never reached the sink (%d lost before the XDP program)", q, liveDstPorts[q%4], lostBefore)
			}
		case s != 3:
			if last != 0 && s != last {
				changes++
			}
			last = s
		}
	}
	if lostBefore > 0 {
		// Which of the missing ones the veth lost is unknown: count them.
		if miss7+miss9+missBoth != dropped(tot, "b_seven")+dropped(tot, "a_nine")+lostBefore || miss7 < dropped(tot, "b_seven") || miss9 < dropped(tot, "a_nine") {
			t.Fatalf("missing at the sink: port 7 %d, port 9 %d, others %d; counted b_seven %d, a_nine %d, lost before XDP %d",
				miss7, miss9, missBoth, dropped(tot, "b_seven"), dropped(tot, "a_nine"), lostBefore)
		}
	} else if miss7 != dropped(tot, "b_seven") || miss9 != dropped(tot, "a_nine") {
		t.Fatalf("missing at the sink: port 7 %d, port 9 %d; counted b_seven %d, a_nine %d", miss7, miss9, dropped(tot, "b_seven"), dropped(tot, "a_nine"))
	}
	if atSink != tot.Transmitted {
		t.Fatalf("%d swap-phase packets at the sink, %d transmitted", atSink, tot.Transmitted)
	}
	if changes == 0 || changes > 100 {
		t.Fatalf("the forwarding pipeline changed %d times along the sequence, want 1..100", changes)
	}
	t.Logf("sink: %d packets, the pipeline changed %d times along the sequence", atSink, changes)
}

var metricLine = regexp.MustCompile(`^(warpflow_[a-z_]+)\{([^}]*)\} (\S+)$`)

// checkMetricsMatchStats scrapes /metrics (from inside the daemon's
// namespace: it listens on loopback there) and compares it with `warpctl
// stats --json` read right after, the daemon being quiesced.
func checkMetricsMatchStats(t *testing.T, ns, addr, sock string) {
	t.Helper()
	out, err := inNS(ns, "curl", "-sf", "--max-time", "10", "http://"+addr+"/metrics").Output()
	if err != nil {
		t.Fatalf("scrape %s (10 s at most): %v", addr, err)
	}
	js, stderr, code := warpctl(t, sock, "stats", "--json")
	if code != 0 {
		t.Fatalf("warpctl stats --json: exit %d %s", code, stderr)
	}
	var s control.Stats
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, line := range strings.Split(string(out), "\n") {
		if mm := metricLine.FindStringSubmatch(line); mm != nil {
			v, _ := strconv.ParseFloat(mm[3], 64)
			got[mm[1]+"{"+mm[2]+"}"] = v
		}
	}
	q := s.Queues[0]
	want := map[string]uint64{
		fmt.Sprintf(`warpflow_received_packets_total{queue=%q}`, q.Queue):                         q.Received,
		fmt.Sprintf(`warpflow_received_bytes_total{queue=%q}`, q.Queue):                           q.ReceivedBytes,
		fmt.Sprintf(`warpflow_transmitted_packets_total{port="out0",queue=%q}`, q.Queue):          q.Ports[0].Packets,
		fmt.Sprintf(`warpflow_xdp_redirected_packets_total{queue=%q}`, q.Queue):                   q.Redirected,
		fmt.Sprintf(`warpflow_batches_total{queue=%q}`, q.Queue):                                  q.Batches,
		fmt.Sprintf(`warpflow_stage_packets_total{kind="parse",queue=%q,stage="parse"}`, q.Queue): q.Stages[0].Packets,
		`warpflow_pipeline_swaps_total{}`:                                                         s.Swaps,
		fmt.Sprintf(`warpflow_xdp_dropped_packets_total{queue=%q}`, q.Queue):                      q.XDPDropped,
		fmt.Sprintf(`warpflow_xdp_passed_packets_total{queue=%q}`, q.Queue):                       q.XDPPassed,
		fmt.Sprintf(`warpflow_passed_packets_total{queue=%q}`, q.Queue):                           q.Passed,
		fmt.Sprintf(`warpflow_batched_packets_total{queue=%q}`, q.Queue):                          q.EngineReceived,
	}
	for _, d := range q.Drops {
		want[fmt.Sprintf(`warpflow_dropped_packets_total{queue=%q,reason=%q}`, q.Queue, d.Reason)] = d.Packets
	}
	for _, d := range s.Totals.Drops {
		if d.XDPPackets > 0 {
			want[fmt.Sprintf(`warpflow_dropped_in_xdp_packets_total{reason=%q}`, d.Reason)] = d.XDPPackets
		}
	}
	for _, r := range s.KernelRules {
		want[fmt.Sprintf(`warpflow_xdp_rule_packets_total{action=%q,interface=%q,pipeline=%q,rule="%d"}`, r.Action, r.Interface, r.Pipeline, r.Rule)] = r.Packets
	}
	for k, v := range want {
		name := k
		if strings.HasSuffix(k, "{}") {
			name = strings.TrimSuffix(k, "{}")
			for _, line := range strings.Split(string(out), "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[0] == name {
					got[k], _ = strconv.ParseFloat(f[1], 64)
				}
			}
		}
		if g, ok := got[k]; !ok || uint64(g) != v {
			t.Errorf("metric %s = %v (present %v), stats --json says %d", name, g, ok, v)
		}
	}
	// `stats --json` balances with the kernel's decisions included: in
	// total, by reason and per queue, where what the queue received is
	// what the program steered to its socket plus what it decided.
	var byReason uint64
	for _, d := range s.Totals.Drops {
		byReason += d.Packets + d.XDPPackets
	}
	if tot := s.Totals; !tot.Balanced || tot.Received != tot.Transmitted+tot.Dropped+tot.Passed+tot.XDPDropped+tot.XDPPassed || byReason != tot.Dropped+tot.XDPDropped || tot.XDPDropped != q.XDPDropped {
		t.Errorf("stats --json totals: received %d, transmitted %d, dropped %d (by reason %v: %d), passed %d, xdp dropped %d, balanced %v",
			tot.Received, tot.Transmitted, tot.Dropped, tot.Drops, byReason, tot.Passed, tot.XDPDropped, tot.Balanced)
	}
	if !q.Balanced || q.KernelDropped == 0 && q.Received != q.Redirected+q.XDPDropped+q.XDPPassed {
		t.Errorf("stats --json queue %s: balanced %v, received %d, redirected %d, xdp dropped %d passed %d", q.Queue, q.Balanced, q.Received, q.Redirected, q.XDPDropped, q.XDPPassed)
	}
	// The frames the split's kernel rules decided never reach a stage.
	if q.Stages[0].Packets != q.Received-q.XDPDropped-q.XDPPassed {
		t.Errorf("stage parse counted %d of %d received (%d decided in the kernel) across 100 swaps", q.Stages[0].Packets, q.Received, q.XDPDropped+q.XDPPassed)
	}
}

// checkArrivals places every one of the n frames tcpreplay sent: the XDP
// program saw it, and the daemon received what the program saw (steered
// and decided), with no kernel socket drops (RX ring full, fill ring
// empty: the daemon did not keep up). The one loss it lets through, and
// returns, is before the XDP program: the sender's veth found no room in
// dp0's ring (its receive softirq starved on a loaded machine), which the
// kernel counts as gen0's tx_dropped. tcpreplay retries most of those
// (ENOBUFS), so tx_dropped only bounds that loss from above.
func checkArrivals(t *testing.T, topo *lab.Topology, st control.Stats, n int) uint64 {
	t.Helper()
	txDropped, _ := linkDrops(t, topo.Gen.Namespace, topo.Gen.Name)
	seen, tot := xdpSeen(st), st.Totals
	var before uint64
	if seen < uint64(n) {
		before = uint64(n) - seen
	}
	if seen > uint64(n) || before > txDropped || tot.Received != seen || tot.KernelDropped != 0 {
		t.Fatalf("of %d sent: the XDP program saw %d (gen0 tx_dropped %d), the daemon received %d, kernel socket drops %v",
			n, seen, txDropped, tot.Received, tot.KernelDrops)
	}
	if before > 0 {
		t.Logf("%d frames never reached the XDP program: the sender's veth dropped them (gen0 tx_dropped %d; the machine's receive softirq starved): not the daemon's, accounted for", before, txDropped)
	}
	return before
}
