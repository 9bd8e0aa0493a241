package daemon_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/control/client"
	"github.com/warpflow/warpflow/internal/lab"

	"github.com/warpflow/warpflow/internal/testwait"
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
	if nsent := testwait.Recv(t, sent, fmt.Sprintf("tcpreplay to send %d packets at %d pps", n, pps), replayWithin(n, pps)); nsent != n {
		t.Fatalf("tcpreplay sent %d of %d", nsent, n)
	}
	st := statsAfterReplay(t, c, topo, n)
	if st.Generation != swaps+1 || st.Swaps != swaps || st.Pipeline != "k" {
		t.Fatalf("after %d swaps: generation %d, swaps %d, pipeline %s", swaps, st.Generation, st.Swaps, st.Pipeline)
	}
	tot := st.Totals
	lostBefore := checkArrivals(t, topo, st, n)
	workerDrops, kernelDrops := tot.Drop("nine")
	if !tot.Balanced || tot.Received != tot.Transmitted+tot.Dropped+tot.Passed+tot.XDPDropped+tot.XDPPassed || tot.Passed+tot.XDPPassed != 0 || tot.Dropped != workerDrops || tot.XDPDropped != kernelDrops || len(tot.Drops) != 1 {
		t.Fatalf("received %d: transmitted %d, dropped %d and in xdp %d %v, passed %d, balanced %v", tot.Received, tot.Transmitted, tot.Dropped, tot.XDPDropped, tot.Drops, tot.Passed, tot.Balanced)
	}
	q := st.Queues[0]
	if qw, _ := q.Drop("nine"); tot.XDPDropped == 0 || workerDrops == 0 || qw != workerDrops || q.XDPDropped != tot.XDPDropped {
		t.Fatalf("drops: kernel %d, workers %d (queue %d): both sides must drop, and the two add up", tot.XDPDropped, workerDrops, qw)
	}
	if f := tot.Frames; f.Total != swapFrames || f.Get("lost") != 0 || f.Get("unreported") != 0 {
		t.Fatalf("frames: %+v", f)
	}
	t.Logf("nine dropped %d times: %d in the kernel, %d on the workers", dropped(tot, "nine"), tot.XDPDropped, workerDrops)

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
	if missing+nines != dropped(tot, "nine")+lostBefore || dropped(tot, "nine") > nines || atSink+missing+nines != n {
		t.Fatalf("sink: %d forwarded, %d forwardable ones missing, %d port-9 sent, %d dropped; %d never reached the XDP program",
			atSink, missing, nines, dropped(tot, "nine"), lostBefore)
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

// The large pipelines of TestLiveSplitSwapAtOnce. In K the filter's
// first rule drops UDP port 9 and the XDP program runs it (with the next
// 63 rules: the kernel's table holds 64); in W a rule that leads to a
// stage comes first, so nothing moves to the kernel, and the workers drop
// UDP port 7; D drops all UDP in the kernel. Every other packet K and W
// forward, each with a source MAC of its own, so every sequence number
// says which pipeline decided it, and where: port 9 missing, K (the
// kernel); at the sink with K's MAC, K's workers; with W's MAC, or port 7
// missing, W's workers; port 9, 53 or 80 missing, D (the kernel). The
// big rules (TCP, which the test never sends) are what the old swap
// parsed again for the kernel half on every swap: W's 50,000 took 1.7 s
// of Graph compile on the 2-core dev box, K's 12,000 (all that fit in the control
// API's old 1 MiB body cap) 0.4 s.
const (
	atOnceKRules           = 12000
	atOnceMACK, atOnceMACW = "02:77:66:00:00:0b", "02:77:66:00:00:0c"
)

// atOnceWRules is W's rule count (BENCHMARKS.md's swap timing used 100,000).
var atOnceWRules = flag.Int("atonce.rules", 50000, "TestLiveSplitSwapAtOnce: the big rules of W, the startup pipeline (BENCHMARKS.md used 100000)")

func atOncePipeline(name string, big int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\nsettings: {batch_size: 64, workers: 0}\nstages:\n  - {name: parse, type: parse}\n  - name: acl\n    type: filter\n    default: rewrite\n    rules:\n", name)
	mac := atOnceMACK
	switch name {
	case "k":
		b.WriteString("    - {proto: udp, dst_port: 9, action: \"drop:nine\"}\n")
	case "w":
		b.WriteString("    - {proto: tcp, dst_port: 22, action: rewrite}\n    - {proto: udp, dst_port: 7, action: \"drop:seven\"}\n")
		mac = atOnceMACW
	case "d":
		b.WriteString("    - {proto: udp, action: \"drop:discard\"}\n")
	}
	for i := range big {
		fmt.Fprintf(&b, "    - {proto: tcp, src_port: %d, dst_port: %d, action: \"drop:big\"}\n", 1+i/60000, 1+i%60000)
	}
	fmt.Fprintf(&b, "  - {name: rewrite, type: rewrite, src_mac: %q, dst_mac: \"02:77:66:00:00:04\"}\n  - {name: out, type: tx, port: out0}\n", mac)
	return b.String()
}

// seqSender sends sequence-numbered UDP frames (liveDstPorts cycling, the
// sequence number at liveSeqOffset) out of the generator's veth through a
// packet socket, paced, from one goroutine, so the XDP program sees them
// in sequence order. A frame the veth had no room for (ENOBUFS: veth
// counts it as tx_dropped) is sent again, so every sequence number up to
// the count reaches the program once. Pause parks it between two frames.
type seqSender struct {
	fd      int
	ifindex int
	pps     float64
	next    atomic.Uint64 // the sequence number being sent (or next)
	pause   atomic.Bool
	parked  atomic.Bool
	stop    atomic.Bool
	done    chan error
}

func startSeqSender(t *testing.T, topo *lab.Topology, pps float64, max uint64) *seqSender {
	t.Helper()
	s := &seqSender{ifindex: topo.Gen.Ifindex, pps: pps, done: make(chan error, 1)}
	// The socket belongs to the namespace it was made in: make it there.
	if err := lab.Do(topo.Gen.Namespace, func() error {
		fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, 0)
		s.fd = fd
		return err
	}); err != nil {
		t.Fatalf("packet socket in %s: %v", topo.Gen.Namespace, err)
	}
	go func() { s.done <- s.run(max) }()
	t.Cleanup(func() {
		if s.stop.CompareAndSwap(false, true) {
			testwait.Recv(t, s.done, "the sequence sender to stop (cleanup)", testwait.Deadline)
		}
		syscall.Close(s.fd) // not reached when the wait gave up: the sender may still use it
	})
	return s
}

func (s *seqSender) run(max uint64) error {
	frame := make([]byte, 64)
	copy(frame, []byte{0x02, 0x77, 0x66, 0, 0, 0x02, 0x02, 0x77, 0x66, 0, 0, 0x01, 0x08, 0x00})
	ip := frame[14:34]
	copy(ip, []byte{0x45, 0, 0, 50, 0, 1, 0, 0, 64, 17, 0, 0, 10, 77, 0, 1, 10, 77, 0, 2})
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	binary.BigEndian.PutUint16(frame[34:], 40000)
	binary.BigEndian.PutUint16(frame[38:], 30)
	to := &syscall.SockaddrLinklayer{Ifindex: s.ifindex, Protocol: 0x0008} // ETH_P_IP, network order
	base, sentAtBase := time.Now(), uint64(0)
	for seq := uint64(0); seq < max; {
		if s.stop.Load() {
			return nil
		}
		if s.pause.Load() {
			s.parked.Store(true)
			for s.pause.Load() && !s.stop.Load() {
				time.Sleep(100 * time.Microsecond)
			}
			s.parked.Store(false)
			base, sentAtBase = time.Now(), seq // no catching up on the pause
		}
		if due := sentAtBase + uint64(time.Since(base).Seconds()*s.pps); seq >= due {
			time.Sleep(200 * time.Microsecond)
			continue
		}
		binary.BigEndian.PutUint16(frame[36:], liveDstPorts[seq%uint64(len(liveDstPorts))])
		binary.BigEndian.PutUint64(frame[liveSeqOffset:], seq)
		s.next.Store(seq)
		for tries := 0; ; tries++ {
			err := syscall.Sendto(s.fd, frame, 0, to)
			if err == nil {
				break
			}
			if err != syscall.ENOBUFS && err != syscall.EAGAIN && err != syscall.EINTR || tries > 100000 {
				return fmt.Errorf("send sequence %d: %w (after %d tries)", seq, err, tries)
			}
			time.Sleep(20 * time.Microsecond)
		}
		seq++
		s.next.Store(seq)
	}
	return nil
}

// parkAt pauses the sender and returns how many frames it sent (all of
// them whole: it is parked between two).
func (s *seqSender) parkAt(t *testing.T) uint64 {
	t.Helper()
	s.pause.Store(true)
	for deadline := time.Now().Add(5 * time.Second); !s.parked.Load(); {
		select {
		case err := <-s.done:
			t.Fatalf("the sender ended: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the sender did not pause within 5s")
		}
		time.Sleep(50 * time.Microsecond)
	}
	return s.next.Load()
}

func (s *seqSender) resume() { s.pause.Store(false) }

// waitProcessed waits (10 s at most) until the daemon accounted for every
// one of n frames sent: the XDP program saw n and the daemon received
// (completed, or decided in the kernel) all it saw.
func waitProcessed(t *testing.T, c *client.Client, n uint64) control.Stats {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		st, err := c.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if seen := xdpSeen(st); seen == n && st.Totals.Received == n {
			return st
		} else if seen > n || time.Now().After(deadline) {
			t.Fatalf("of %d frames sent, the XDP program saw %d and the daemon received %d (kernel socket drops %v)", n, seen, st.Totals.Received, st.Totals.KernelDrops)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// atOnceSwap is one swap of TestLiveSplitSwapAtOnce: from, to, the
// sender's count when it was requested (the daemon had processed every
// frame before it) and the first sequence number sent after the reply.
type atOnceSwap struct {
	from, to string
	s0, s1   uint64
	rep      control.SwapReply
	took     time.Duration
}

// The verdicts TestLiveSplitSwapAtOnce can see per sequence number, and
// which pipelines give them: atOnceK, atOnceW, atOnceD bits, and whether
// the pipeline's XDP program decided it.
const (
	atOnceK = 1 << iota
	atOnceW
	atOnceD
)

// atOnceSeen is what the sink saw of one sequence number.
type atOnceSeen struct {
	at  bool
	mac string
}

// whoGives returns the pipelines whose verdict seen is for a packet to
// port, and those among them whose XDP program gives it.
func whoGives(port uint16, seen atOnceSeen) (who, kernel int) {
	switch {
	case seen.at && seen.mac == atOnceMACK && port != 9:
		return atOnceK, 0
	case seen.at && seen.mac == atOnceMACW && port != 7:
		return atOnceW, 0
	case seen.at:
		return 0, 0
	case port == 9:
		return atOnceK | atOnceD, atOnceK | atOnceD
	case port == 7:
		return atOnceW | atOnceD, atOnceD
	}
	return atOnceD, atOnceD
}

func pipelineBit(name string) int {
	return map[string]int{"k": atOnceK, "w": atOnceW, "d": atOnceD}[name]
}

// TestLiveSplitSwapAtOnce swaps, under load, between large pipelines
// whose drop runs in the kernel (K, D) and one whose drop runs on the
// workers (W), and checks per sequence number that each swap flipped
// both halves at once: every packet processed before a swap was
// requested got the old pipeline's verdict, every one sent after its
// reply the new one's, and in between the two halves changed at one
// point: no packet got the old pipeline's verdict from the workers after
// one got the new pipeline's, and the old kernel rules decided packets
// after the workers' switch only for frames already past the program
// when it flipped (those in the socket's RX ring, at most its 8192 plus a
// NAPI batch of 64). The swap's reply says when each queue took the new
// plan up (never -1: D drops everything in the kernel, so on a swap from
// D no packet reaches the workers before the flip), and how long it
// took: no parsing (the old swap parsed W's 50,000 rules again, 1.7 s,
// with K's kernel rules in force and W's on the workers).
func TestLiveSplitSwapAtOnce(t *testing.T) {
	requireLive(t, "tcpdump")
	dir := t.TempDir()
	pw := writePipeline(t, dir, "w", atOncePipeline("w", *atOnceWRules))
	pk := writePipeline(t, dir, "k", atOncePipeline("k", atOnceKRules))
	pd := writePipeline(t, dir, "d", atOncePipeline("d", 0))
	if body, _ := json.Marshal(control.LoadRequest{File: pk, Source: atOncePipeline("k", atOnceKRules)}); len(body) >= control.MaxRequestBytes {
		t.Fatalf("K's load request is %d bytes, over the control API's %d", len(body), control.MaxRequestBytes)
	}
	const pps, period = 20000, 150 * time.Millisecond
	const inFlight = 8192 + 64 // the RX ring (swapBuffers) and a NAPI batch
	topo := newLab(t)
	sink := startSinkCapture(t, topo)
	t0 := time.Now()
	lc := startControlled(t, topo, pw, "offload: auto\n"+swapBuffers, pk, pd)
	t.Logf("daemon up on W (%d rules) with K (%d) and D loaded in %v", *atOnceWRules, atOnceKRules, time.Since(t0).Round(time.Millisecond))
	d, c, ctx := lc.d, lc.c, context.Background()

	snd := startSeqSender(t, topo, pps, 1<<40)
	var swaps []atOnceSwap
	from := "w"
	for _, to := range []string{"k", "w", "k", "w", "d", "w", "k", "w"} {
		time.Sleep(period) // under load on `from`
		s0 := snd.parkAt(t)
		waitProcessed(t, c, s0)
		snd.resume()
		begin := time.Now()
		rep, err := c.Swap(ctx, to)
		s1 := snd.next.Load() + 1 // the frame being sent now may have started before the reply
		if err != nil {
			t.Fatalf("swap %s -> %s: %v", from, to, err)
		}
		swaps = append(swaps, atOnceSwap{from: from, to: to, s0: s0, s1: s1, rep: rep, took: time.Since(begin)})
		from = to
	}
	time.Sleep(period)
	n := snd.parkAt(t)
	st := waitProcessed(t, c, n)
	tot := st.Totals
	if !tot.Balanced || tot.KernelDropped != 0 || tot.Received != tot.Transmitted+tot.Dropped+tot.XDPDropped || tot.Dropped+tot.XDPDropped != dropped(tot, "nine")+dropped(tot, "seven")+dropped(tot, "discard") {
		t.Fatalf("received %d: transmitted %d, dropped %d and in xdp %d %v, kernel socket drops %v, balanced %v", tot.Received, tot.Transmitted, tot.Dropped, tot.XDPDropped, tot.Drops, tot.KernelDrops, tot.Balanced)
	}
	if st.Swaps != uint64(len(swaps)) || st.Pipeline != "w" {
		t.Fatalf("after %d swaps: %d swaps, running %s", len(swaps), st.Swaps, st.Pipeline)
	}
	time.Sleep(200 * time.Millisecond) // the last frames through dp1 to tcpdump
	frames := stopWithSink(t, d, sink, topo)

	seen := make([]atOnceSeen, n)
	var atSink uint64
	for _, f := range frames {
		if len(f) < liveSeqOffset+8 || binary.BigEndian.Uint16(f[12:]) != 0x0800 || f[23] != 17 {
			continue
		}
		q := binary.BigEndian.Uint64(f[liveSeqOffset:])
		if q >= n || seen[q].at {
			t.Fatalf("sequence %d reached the sink twice or is beyond the %d sent", q, n)
		}
		seen[q] = atOnceSeen{at: true, mac: net.HardwareAddr(f[6:12]).String()}
		atSink++
	}
	if atSink != tot.Transmitted {
		t.Fatalf("%d frames at the sink, %d transmitted", atSink, tot.Transmitted)
	}
	port := func(q uint64) uint16 { return liveDstPorts[q%uint64(len(liveDstPorts))] }

	// Between swaps: every packet has the running pipeline's verdict.
	stable := func(name string, lo, hi uint64) {
		for q := lo; q < hi; q++ {
			if who, _ := whoGives(port(q), seen[q]); who&pipelineBit(name) == 0 {
				t.Errorf("sequence %d (port %d, %+v) between swaps with %s running: not %s's verdict", q, port(q), seen[q], name, name)
				return
			}
		}
	}
	lo := uint64(0)
	for i, sw := range swaps {
		stable(sw.from, lo, sw.s0)
		lo = sw.s1
		p, q := pipelineBit(sw.from), pipelineBit(sw.to)
		// The window: each packet the old pipeline's or the new one's;
		// a the first that only the new one's verdict explains, z the
		// last that only the old one's does.
		a, z := sw.s1, sw.s0
		for s := sw.s0; s < sw.s1; s++ {
			who, _ := whoGives(port(s), seen[s])
			switch {
			case who&(p|q) == 0:
				t.Errorf("swap %d (%s -> %s): sequence %d (port %d, %+v) has neither pipeline's verdict", i, sw.from, sw.to, s, port(s), seen[s])
			case who&(p|q) == q && a == sw.s1:
				a = s
			}
			if who&(p|q) == p {
				z = s + 1
			}
		}
		var lateOld, mixed uint64
		for s := a; s < z; s++ {
			who, kernel := whoGives(port(s), seen[s])
			switch {
			case who&(p|q) == p && kernel&p == 0:
				lateOld++ // the old pipeline's workers after the new one's
			case who&(p|q) != p:
				mixed++ // the new pipeline's, between the two halves' switches
			}
		}
		if lateOld > 0 {
			t.Errorf("swap %d (%s -> %s): %d packets got %s's verdict from its workers after sequence %d got %s's: the workers' switch is not one point", i, sw.from, sw.to, lateOld, sw.from, a, sw.to)
		}
		if mixed > inFlight {
			t.Errorf("swap %d (%s -> %s): %s's kernel rules still decided packets up to sequence %d while %s's plan had taken over at %d: %d packets between, more than the %d the socket's ring and a NAPI batch can hold in flight: the two halves did not switch at once",
				i, sw.from, sw.to, sw.from, z-1, sw.to, a, mixed, inFlight)
		}
		r := sw.rep
		tm := r.Timing
		if len(r.ActiveAfterNs) != 1 || r.ActiveAfterNs[0] < 0 || tm.TotalNs <= 0 || tm.PrepareNs+tm.KernelLoadNs+tm.FlipNs > tm.TotalNs || time.Duration(tm.TotalNs) > sw.took {
			t.Errorf("swap %d (%s -> %s): reply active_after_ns %v, timing %+v, the client waited %v", i, sw.from, sw.to, r.ActiveAfterNs, tm, sw.took)
		}
		t.Logf("swap %d %s -> %s: %v at the client; prepare %v, kernel load %v, flip %v, total %v; window %d packets, %d between the two halves' switches",
			i, sw.from, sw.to, sw.took.Round(time.Microsecond), time.Duration(tm.PrepareNs), time.Duration(tm.KernelLoadNs), time.Duration(tm.FlipNs), time.Duration(tm.TotalNs), sw.s1-sw.s0, mixed)
	}
	stable("w", lo, n)
}
