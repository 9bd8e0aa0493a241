package daemon_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/warpflow/warpflow/internal/gen"
	"github.com/warpflow/warpflow/internal/lab"
	"github.com/warpflow/warpflow/internal/testwait"
)

var (
	floodDuration = flag.Duration("flood.duration", time.Second, "TestLiveFloodSplit: length of each phase (BENCHMARKS.md used 5s)")
	floodRepeats  = flag.Int("flood.repeats", 1, "TestLiveFloodSplit: rounds of the three phases, interleaved")
	floodStall    = flag.Duration("flood.stall", 0, "TestLiveFloodSplit: stop the daemon (SIGSTOP) for this long at the end of each phase's traffic and send SIGTERM while it is stopped, as a starved core did: its RX ring full and the fill ring empty when it stops")
	floodNAPI     = flag.String("flood.napi", "default", "TestLiveFloodSplit: lab NAPI, default (dp0's softirq on the sender's core) or threaded (dp0's NAPI thread pinned to the daemon's core; dp1 has no NAPI thread: the daemon attaches no XDP program to a transmit-only interface and the lab leaves its GRO off)")
)

// floodPipeline drops flows 0-8 of the generator's ten (UDP source ports
// 1024-1032) by its first rule and forwards flow 9 (port 1033), MACs
// rewritten for the sink.
const floodPipeline = `name: flood
settings: {batch_size: 64, workers: 0}
stages:
  - {name: parse, type: parse}
  - name: acl
    type: filter
    default: accept
    rules:
      - {proto: udp, src_port: 1024-1032, action: "drop:flood"}
  - name: rewrite
    type: rewrite
    src_mac: "02:77:66:00:00:03"
    dst_mac: "02:77:66:00:00:04"
  - {name: out, type: tx, port: out0}
`

// linkRX returns iface's received packet count in ns (the kernel's
// counter).
func linkRX(t *testing.T, ns, iface string) uint64 {
	t.Helper()
	var n uint64
	if err := lab.Do(ns, func() error {
		l, err := netlink.LinkByName(iface)
		if err != nil {
			return err
		}
		n = l.Attrs().Statistics.RxPackets
		return nil
	}); err != nil {
		t.Fatalf("counters of %s in %s: %v", iface, ns, err)
	}
	return n
}

// floodPhase is one measured phase.
type floodPhase struct {
	name               string
	offered            float64 // frames per second the generator sent
	goodOffered        float64 // of which the forwarded flow's
	forwarded          float64 // frames per second the sink received (sink0 rx counter)
	xdpDropped, frames uint64
	stats              map[string]any
}

func (p floodPhase) loss() float64 {
	if p.goodOffered == 0 {
		return 0
	}
	return 1 - p.forwarded/p.goodOffered
}

// runFloodPhase starts warpflowd with offload mode, sends flows flows
// (source ports from srcPort) at rate (0: top rate) for d, and reads the
// sink's kernel counter.
func runFloodPhase(t *testing.T, topo *lab.Topology, pipeline, name, mode string, flows int, srcPort uint16, rate float64, d time.Duration) floodPhase {
	t.Helper()
	threads := napiThreads(t)
	dm := startDaemon(t, topo.DP0.Namespace, "--config", labConfig(t, pipeline, "offload: "+mode+"\ncpus: [1]\n"), "--stats-interval", "0s")
	dm.waitFor(t, "running", 10*time.Second)
	if topo.NAPI == lab.NAPIThreaded.String() {
		pinNewNAPIThreads(t, threads, 1)
	}
	before := linkRX(t, topo.Sink.Namespace, topo.Sink.Name)
	dp1DropsBefore, _ := linkDrops(t, topo.DP1.Namespace, topo.DP1.Name)
	var stalled chan struct{}
	if *floodStall > 0 {
		stalled = make(chan struct{})
		go func() {
			defer close(stalled)
			time.Sleep(d - *floodStall)
			dm.cmd.Process.Signal(syscall.SIGSTOP)
		}()
	}
	res := runGen(t, name, topo, flows, srcPort, rate, d)
	if stalled != nil {
		<-stalled // not a wait for a condition: the goroutine sleeps a fixed time, then signals
		dm.cmd.Process.Signal(syscall.SIGTERM)
		dm.cmd.Process.Signal(syscall.SIGCONT)
	}
	// Stopped at once: the frames still on dp0's RX ring when it stops are
	// in its final frame account (rx), and what it transmitted before is
	// counted at the sink after it exited, so how soon a descheduled daemon
	// works off its backlog decides nothing below.
	if code := dm.stop(t, syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("%s: warpflowd exited %d", name, code)
	}
	st := dm.find("final stats")
	if st == nil {
		t.Fatalf("%s: no final stats:\n%s", name, dm.log())
	}
	tx := num(st, "transmitted")
	// The sink's rx counter moves when its NAPI polls, after dp1's
	// transmit returned: wait (2 s at most) until it and dp1's tx_dropped
	// (the veth's drop when the sink's ring is full) account for what the
	// daemon transmitted; the check below fails on any shortfall or excess.
	var got, dp1Dropped uint64
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got = linkRX(t, topo.Sink.Namespace, topo.Sink.Name) - before
		drops, _ := linkDrops(t, topo.DP1.Namespace, topo.DP1.Name)
		dp1Dropped = drops - dp1DropsBefore
		if got+dp1Dropped >= tx || time.Now().After(deadline) {
			break
		}
	}
	secs := res.Elapsed.Seconds()
	p := floodPhase{name: name, offered: float64(res.Sent) / secs, forwarded: float64(got) / secs,
		xdpDropped: num(st, "xdp_dropped"), frames: res.Sent, stats: st}
	p.goodOffered = p.offered / float64(flows)
	// The accounting holds under the flood, kernel drops included: the
	// daemon's counts balance, what it transmitted is what the sink got
	// (or dp1 dropped, counted by the kernel), and every frame the program
	// decided is one the daemon received, the kernel dropped (socket
	// drops), or still on the RX ring when the daemon stopped.
	if b, _ := st["balanced"].(bool); !b {
		t.Errorf("%s: daemon not balanced: %v", name, st)
	}
	if got+dp1Dropped != tx {
		t.Errorf("%s: daemon transmitted %d; the sink received %d and dp1 dropped %d (%s)", name, tx, got, dp1Dropped, linkCounters(t, topo.DP1.Namespace, topo.DP1.Name))
	}
	onRX := num(st, "frames", "rx")
	if r, x, k := num(st, "received"), num(st, "xdp_redirected"), num(st, "xdp_dropped"); x+k != r+kernelLost(st)+onRX {
		t.Errorf("%s: received %d, XDP redirected %d and dropped %d (socket drops %v, %d frames left on the RX ring)", name, r, x, k, st["kernel_drops"], onRX)
	}
	if onRX > 0 {
		t.Logf("%s: %d frames were still on dp0's RX ring when the daemon stopped (it was behind: socket drops %v)", name, onRX, st["kernel_drops"])
	}
	return p
}

// napiThreads lists the pids of the kernel's dp0/dp1 NAPI threads
// (napi/dpN-ID) that exist now.
func napiThreads(t *testing.T) map[int]string {
	t.Helper()
	out := map[int]string{}
	dirs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		name := strings.TrimSpace(string(b))
		if strings.HasPrefix(name, "napi/dp0-") || strings.HasPrefix(name, "napi/dp1-") {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			out[pid] = name
		}
	}
	return out
}

// pinNewNAPIThreads pins the NAPI threads that appeared since before (the
// ones our daemon's XDP program created: other labs on this machine have
// dp0/dp1 too) to cpu. dp0's must appear (2 s at most); dp1's is pinned
// only if it exists by then: dp1 has a NAPI instance (and so a thread) only
// with an XDP program or GRO, and the daemon attaches no program to an
// interface it only transmits on while the lab leaves GRO off, so on the
// lab (the dev VM included) there is none.
func pinNewNAPIThreads(t *testing.T, before map[int]string, cpu int) {
	t.Helper()
	var pinned []string
	dp0 := false
	for deadline := time.Now().Add(2 * time.Second); !dp0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("threaded NAPI: no new napi/dp0 thread appeared within 2s of the daemon running (pinned so far: %v)", pinned)
		}
		for pid, name := range napiThreads(t) {
			if _, old := before[pid]; old || slices.Contains(pinned, name) {
				continue
			}
			if out, err := exec.Command("taskset", "-p", "-c", strconv.Itoa(cpu), strconv.Itoa(pid)).CombinedOutput(); err != nil {
				t.Fatalf("pin %s (%d): %v\n%s", name, pid, err, out)
			}
			pinned = append(pinned, name)
			dp0 = dp0 || strings.HasPrefix(name, "napi/dp0-")
		}
	}
	t.Logf("pinned %v to CPU %d", pinned, cpu)
}

// runGen runs `warpctl gen` (the XDP live-frame engine) pinned to CPU 0,
// the daemon being on CPU 1, and returns its JSON summary.
func runGen(t *testing.T, name string, topo *lab.Topology, flows int, srcPort uint16, rate float64, d time.Duration) gen.Result {
	t.Helper()
	ctlBin := warpctlBinary(t)
	args := []string{"-c", "0", ctlBin, "gen", "--netns", topo.Gen.Namespace, "--iface", topo.Gen.Name,
		"--flows", strconv.Itoa(flows), "--src-port", strconv.Itoa(int(srcPort)), "--rate", strconv.FormatFloat(rate, 'f', 0, 64),
		"--count", "500000000", "--duration", d.String(), "--json"}
	// The context ends a generator that outlives its --duration.
	ctx, cancel := context.WithTimeout(context.Background(), d+testwait.Deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, "taskset", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ctx.Err() != nil {
		t.Fatalf("%s: warpctl gen of a %v run did not exit within %v:\n%s", name, d, d+testwait.Deadline, stderr.String())
	}
	if err != nil {
		t.Fatalf("%s: warpctl gen: %v\n%s", name, err, stderr.String())
	}
	var res gen.Result
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%s: warpctl gen output: %v\n%s", name, err, out)
	}
	return res
}

// kernelLost is what the kernel dropped between the program's redirect
// and the RX ring (socket XDP_STATISTICS): rx_dropped, which counts the
// frames that found the fill ring empty too, and rx_ring_full.
func kernelLost(st map[string]any) uint64 {
	return num(st, "kernel_drops", "rx_dropped") + num(st, "kernel_drops", "rx_ring_full") + num(st, "kernel_drops", "rx_invalid_descs")
}

// newFloodLab is newLab with a NAPI mode.
func newFloodLab(t *testing.T, napi lab.NAPIMode) *lab.Topology {
	t.Helper()
	var b [3]byte
	rand.Read(b[:])
	prefix := "of" + hex.EncodeToString(b[:])
	o := lab.DefaultOptions()
	o.Prefix, o.NAPI = prefix, napi
	topo, err := lab.Up(o)
	if err != nil {
		t.Fatalf("lab up: %v", err)
	}
	t.Cleanup(func() {
		if err := lab.Down(prefix); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	return topo
}

// TestLiveFloodSplit floods the lab's dataplane with 64-byte frames from
// the XDP live-frame generator at its top rate, 90% of them matching the
// pipeline's first (drop) rule, with the split (offload: auto) and
// without it (offload: none), and then offers the forwarded flow alone at
// its share of the flood's rate (no flood); the forwarded rate of each is
// the sink's kernel rx counter. It checks what must hold at any speed:
// accounting balances with the kernel's drops included, the kernel drops
// the flood with the split (about 9 in 10 of what it saw) and none without
// it. The rates it logs are the figures of BENCHMARKS.md ("Flood with and
// without the split"); with -flood.duration 5s -flood.repeats 3 it is
// that run.
func TestLiveFloodSplit(t *testing.T) {
	requireLive(t)
	pipeline := filepath.Join(t.TempDir(), "flood.yaml")
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Fatalf("taskset (util-linux) is needed to pin the generator: %v", err)
	}
	if err := os.WriteFile(pipeline, []byte(floodPipeline), 0o644); err != nil {
		t.Fatal(err)
	}
	napi, err := lab.ParseNAPIMode(*floodNAPI)
	if err != nil {
		t.Fatal(err)
	}
	topo := newFloodLab(t, napi)
	// The sink drops what it receives in XDP (its rx counter still counts
	// each frame), so its stack's work on the forwarded frames (UDP to a
	// closed port) does not load the dataplane's core.
	if err := lab.DetachXDP(topo.Sink.Namespace, topo.Sink.Name); err != nil {
		t.Fatal(err)
	}
	if err := lab.AttachDrop(topo.Sink.Namespace, topo.Sink.Name); err != nil {
		t.Fatal(err)
	}
	d := *floodDuration
	var rounds [][3]floodPhase
	for r := 0; r < *floodRepeats; r++ {
		on := runFloodPhase(t, topo, pipeline, "flood, split on", "auto", 10, 1024, 0, d)
		off := runFloodPhase(t, topo, pipeline, "flood, split off", "none", 10, 1024, 0, d)
		// The forwarded flow alone at the rate it had in the floods.
		rate := (on.offered + off.offered) / 2 / 10
		base := runFloodPhase(t, topo, pipeline, "no flood", "auto", 1, 1033, rate, d)
		rounds = append(rounds, [3]floodPhase{on, off, base})

		// Of the frames the program saw (veth drops some before it under
		// a flood), the kernel dropped the flood's 9 in 10.
		seen := on.xdpDropped + num(on.stats, "xdp_redirected")
		if frac := float64(on.xdpDropped) / float64(seen); frac < 0.85 || frac > 0.95 {
			t.Errorf("split on: the kernel dropped %d of the %d frames its program saw (%.2f), want about 0.9", on.xdpDropped, seen, frac)
		}
		if off.xdpDropped != 0 || base.xdpDropped != 0 {
			t.Errorf("kernel drops without a flood or with offload none: %d, %d", off.xdpDropped, base.xdpDropped)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "NAPI %s; %d round(s) of %v phases, 64-byte frames, 10 flows (9 dropped by rule 0), XDP live-frame generator at top rate:\n", topo.NAPI, len(rounds), d)
	// "reached XDP" is the share of the offered frames the XDP program saw:
	// what the veth dropped ahead of dp0's NAPI never reached it, so no
	// kernel rule could sort it, and it hits every flow alike.
	fmt.Fprintf(&b, "%-18s %12s %14s %14s %8s %12s %12s  %s\n", "phase", "offered pps", "fwd offered", "forwarded pps", "loss", "xdp_dropped", "reached XDP", "socket drops")
	for _, r := range rounds {
		for _, p := range r {
			seen := num(p.stats, "xdp_redirected") + num(p.stats, "xdp_dropped") + num(p.stats, "xdp_passed") + num(p.stats, "xdp_no_socket")
			reached := 0.0
			if p.frames > 0 {
				reached = 100 * float64(seen) / float64(p.frames)
			}
			fmt.Fprintf(&b, "%-18s %12.0f %14.0f %14.0f %7.1f%% %12d %11.1f%%  %v\n", p.name, p.offered, p.goodOffered, p.forwarded, 100*p.loss(), p.xdpDropped, reached, p.stats["kernel_drops"])
		}
		fmt.Fprintf(&b, "split on / no flood: %.2fx   split off / no flood: %.2fx\n", r[0].forwarded/r[2].forwarded, r[1].forwarded/r[2].forwarded)
	}
	stat := func(f func(r [3]floodPhase) float64) string {
		var v []float64
		for _, r := range rounds {
			v = append(v, f(r))
		}
		slices.Sort(v)
		return fmt.Sprintf("%.0f / %.0f / %.0f", v[0], v[len(v)/2], v[len(v)-1])
	}
	statx := func(f func(r [3]floodPhase) float64) string {
		var v []float64
		for _, r := range rounds {
			v = append(v, f(r))
		}
		slices.Sort(v)
		return fmt.Sprintf("%.2f / %.2f / %.2f", v[0], v[len(v)/2], v[len(v)-1])
	}
	fmt.Fprintf(&b, "min / median / max over %d rounds:\n", len(rounds))
	for i, name := range []string{"flood, split on", "flood, split off", "no flood"} {
		fmt.Fprintf(&b, "  %-17s offered %s pps, forwarded %s pps\n", name, stat(func(r [3]floodPhase) float64 { return r[i].offered }), stat(func(r [3]floodPhase) float64 { return r[i].forwarded }))
	}
	fmt.Fprintf(&b, "  forwarded, split on / no flood %sx; split off / no flood %sx\n",
		statx(func(r [3]floodPhase) float64 { return r[0].forwarded / r[2].forwarded }), statx(func(r [3]floodPhase) float64 { return r[1].forwarded / r[2].forwarded }))
	t.Log(b.String())
}
