package daemon_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/control/client"
)

// waitCapture waits (5 s at most) until the capture took want packets
// and ended, and returns its state.
func waitCaptureEnd(t *testing.T, c *client.Client, want uint64) control.CaptureInfo {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		ci, err := c.Capture(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !ci.Active && ci.Written == want {
			return ci
		}
		if time.Now().After(deadline) {
			t.Fatalf("capture: %+v, want it ended with %d written", ci, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// showSplit is `pipeline show NAME --json`'s split.
func showSplit(t *testing.T, sock, name string) *control.Split {
	t.Helper()
	js, stderr, code := warpctl(t, sock, "pipeline", "show", name, "--json")
	var pd control.PipelineDetail
	if code != 0 || json.Unmarshal([]byte(js), &pd) != nil || pd.Split == nil {
		t.Fatalf("pipeline show %s --json: exit %d %s\n%s", name, code, stderr, js)
	}
	return pd.Split
}

// waitKernelBack waits (5 s at most) until the running pipeline's kernel
// rules are in the XDP program again.
func waitKernelBack(t *testing.T, sock, name string, rules int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		sp := showSplit(t, sock, name)
		if sp.InForce && sp.KernelRules == rules && sp.Why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the kernel rules did not come back after the capture: split %+v", sp)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLiveCaptureSeesKernelDecided: a capture on a stage the split
// pipeline's kernel rules come before sees the frames the XDP program
// would decide (the README's walk-through captured nothing after its swap
// to a pipeline that drops the generator's port in the kernel). While it
// runs the workers run those rules (every port-9 packet is dropped on the
// workers, none by the program, and `capture status` and `pipeline show`
// say so); when it ends they go back into the program, which drops port 9
// again. A capture that follows a swap to a pipeline whose kernel rules
// hide frames from it takes them for its length too, and gives them back
// at capture stop.
func TestLiveCaptureSeesKernelDecided(t *testing.T) {
	requireLive(t, "tcpreplay")
	dir := t.TempDir()
	pk, pw := writePipeline(t, dir, "k", liveSplitK), writePipeline(t, dir, "w", liveSplitW)
	const n = 400 // one in four is UDP port 9
	capture := seqCapture(t, n)
	topo := newLab(t)
	lc := startControlled(t, topo, pk, "offload: auto\n", pw)
	d, sock, c, ctx := lc.d, lc.sock, lc.c, context.Background()
	d.waitFor(t, "pipeline split", 10*time.Second)

	// 1. The drop edge of the kernel's one rule: only frames the kernel
	// decides leave acl by it.
	out, stderr, code := warpctl(t, sock, "capture", "start", "--stage", "acl", "--edge", "drop:nine", "--count", "100", "--file", "nine.pcap")
	if code != 0 || !strings.Contains(out, "the kernel rules run on the workers while it runs") {
		t.Fatalf("capture start: exit %d %s\n%s", code, stderr, out)
	}
	if sp := showSplit(t, sock, "k"); sp.KernelRules != 0 || !strings.Contains(sp.Why, "run on the workers while the capture runs") {
		t.Fatalf("pipeline show k during the capture: split %+v", sp)
	}
	if sent := tcpreplay(t, topo, capture, 5000); sent != n {
		t.Fatalf("tcpreplay sent %d of %d", sent, n)
	}
	ci := waitCaptureEnd(t, c, n/4)
	frames := readFrames(t, filepath.Join(captureDirOf(d), "nine.pcap"))
	if len(frames) != n/4 {
		t.Fatalf("capture of acl's drop edge: %d packets in the file, want %d (every port-9 packet): %+v", len(frames), n/4, ci)
	}
	for i, f := range frames {
		if port, seq := binary.BigEndian.Uint16(f[36:]), binary.BigEndian.Uint64(f[liveSeqOffset:]); port != 9 || seq != uint64(4*i+1) {
			t.Fatalf("captured packet %d: port %d sequence %d, want port 9 sequence %d", i, port, seq, 4*i+1)
		}
	}
	s1 := statsAtRest(t, c, n)
	if w, x := s1.Totals.Drop("nine"); s1.Totals.XDPDropped != 0 || x != 0 || w != n/4 || !s1.Totals.Balanced {
		t.Fatalf("during the capture: kernel drops %d, drops %+v (want all %d on the workers), balanced %v", s1.Totals.XDPDropped, s1.Totals.Drops, n/4, s1.Totals.Balanced)
	}

	// 2. The capture took its count: the rules go back, and the program
	// drops port 9 again.
	waitKernelBack(t, sock, "k", 1)
	if ci, _ := c.Capture(ctx); ci.KernelRulesOnWorkers {
		t.Fatalf("ended capture still says the kernel rules are on the workers: %+v", ci)
	}
	if sent := tcpreplay(t, topo, capture, 5000); sent != n {
		t.Fatalf("tcpreplay sent %d of %d", sent, n)
	}
	s2 := statsAtRest(t, c, 2*n)
	if w, x := s2.Totals.Drop("nine"); s2.Totals.XDPDropped != n/4 || x != n/4 || w+x != n/2 || !s2.Totals.Balanced {
		t.Fatalf("after the capture: kernel drops %d (want %d), drops %+v, balanced %v", s2.Totals.XDPDropped, n/4, s2.Totals.Drops, s2.Totals.Balanced)
	}

	// 3. A capture of every packet arriving at acl, started on w (whose
	// drop runs on the workers: nothing to take), follows a swap to k:
	// there it takes k's rules, so it still sees the port-9 packets.
	if _, stderr, code := warpctl(t, sock, "pipeline", "swap", "w"); code != 0 {
		t.Fatalf("swap to w: exit %d %s", code, stderr)
	}
	out, stderr, code = warpctl(t, sock, "capture", "start", "--stage", "acl", "--count", "100000", "--file", "acl.pcap")
	if code != 0 || strings.Contains(out, "kernel rules") {
		t.Fatalf("capture start on w: exit %d %s\n%s", code, stderr, out)
	}
	out, stderr, code = warpctl(t, sock, "pipeline", "swap", "k")
	if code != 0 || !strings.Contains(out, "capture: follows") {
		t.Fatalf("swap to k: exit %d %s\n%s", code, stderr, out)
	}
	if ci, _ := c.Capture(ctx); !ci.Active || !ci.KernelRulesOnWorkers {
		t.Fatalf("capture after following the swap to k: %+v", ci)
	}
	if sent := tcpreplay(t, topo, capture, 5000); sent != n {
		t.Fatalf("tcpreplay sent %d of %d", sent, n)
	}
	s3 := statsAtRest(t, c, 3*n)
	for deadline := time.Now().Add(5 * time.Second); ; {
		if ci, _ = c.Capture(ctx); ci.Written >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("capture of acl after the swap to k: %d of %d written within 5s: %+v", ci.Written, n, ci)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ci.Written != n || s3.Totals.XDPDropped != n/4 {
		t.Fatalf("capture of acl after the swap to k: %d written (want %d, port 9 included), kernel drops %d (want still %d)", ci.Written, n, s3.Totals.XDPDropped, n/4)
	}
	if _, stderr, code := warpctl(t, sock, "capture", "stop"); code != 0 {
		t.Fatalf("capture stop: exit %d %s", code, stderr)
	}
	waitKernelBack(t, sock, "k", 1)
	if frames := readFrames(t, filepath.Join(captureDirOf(d), "acl.pcap")); len(frames) != n {
		t.Fatalf("acl.pcap has %d packets, want %d", len(frames), n)
	}
}
