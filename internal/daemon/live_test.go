package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/vishvananda/netlink"
	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/control/client"
	"github.com/warpflow/warpflow/internal/lab"
	"github.com/warpflow/warpflow/pipelines"

	"github.com/warpflow/warpflow/internal/testwait"
)

// The live tests run warpflowd, built from this tree, inside a lab of
// their own (namespaces and veths made by internal/lab, removed at the
// end), and drive it with real external tools: tcpreplay sends from the
// generator namespace and tcpdump captures at the sink.

// requireLive skips unless root (failing instead when CI=true) and checks
// the external tools the test runs.
func requireLive(t *testing.T, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("live test needs root, and CI runs as root: not skipping under CI=true")
		}
		t.Skip("live test: needs root (network namespaces, veth, XDP, AF_XDP)")
	}
	for _, tool := range append([]string{"ip", "nsenter"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("live test needs %s (.ci/run installs it): %v", tool, err)
			}
			t.Skipf("live test: %s not installed", tool)
		}
	}
}

// builtBinary is one command of this module, built once per test binary.
type builtBinary struct {
	once sync.Once
	path string
	err  error
}

var daemonBin, ctlBinary builtBinary

// build builds pkg (a command of this module) into a temporary directory
// once; race also builds it with the race detector.
func (b *builtBinary) build(t *testing.T, pkg string, race bool) string {
	t.Helper()
	b.once.Do(func() {
		name := filepath.Base(pkg)
		dir, err := os.MkdirTemp("", name+"-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, name)
		args := []string{"build", "-o", b.path}
		if race {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, pkg)...).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", name, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// daemonBinary builds cmd/warpflowd once per test binary (with the race
// detector when the tests have it: the daemon's goroutines checked too).
func daemonBinary(t *testing.T) string {
	t.Helper()
	return daemonBin.build(t, "github.com/warpflow/warpflow/cmd/warpflowd", raceEnabled)
}

// newLab builds a lab with a prefix unique to this run and removes it at
// the end.
func newLab(t *testing.T) *lab.Topology { return newLabQueues(t, 1) }

// newLabQueues is newLab with queues rx and tx queues on every veth.
func newLabQueues(t *testing.T, queues int) *lab.Topology {
	t.Helper()
	var b [3]byte
	rand.Read(b[:])
	prefix := "d" + hex.EncodeToString(b[:])
	o := lab.DefaultOptions()
	o.Prefix = prefix
	o.Queues = queues
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

// socketDir is a private directory for a daemon's control socket, short
// enough for a unix socket's path limit.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "wf-ctl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// inNS returns a command that runs name in network namespace ns. nsenter
// rather than `ip netns exec`, which would remount /sys and hide bpffs.
func inNS(ns, name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + filepath.Join(lab.NamespaceDir, ns), "--", name}, args...)...)
}

// daemonProc is a running warpflowd and the JSON log lines it wrote.
type daemonProc struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []map[string]any
	raw   bytes.Buffer
	seen  chan struct{} // gets a token per line
	done  chan error
}

func startDaemon(t *testing.T, ns string, args ...string) *daemonProc {
	t.Helper()
	if !slices.Contains(args, "--socket") {
		// A control socket of its own: other daemons run on this machine.
		args = append(args, "--socket", filepath.Join(socketDir(t), "ctl.sock"))
	}
	if !slices.Contains(args, "--capture-dir") {
		// Captures of its own, never in the machine's capture_dir.
		args = append(args, "--capture-dir", filepath.Join(socketDir(t), "captures"))
	}
	return watchDaemon(t, inNS(ns, daemonBinary(t), append([]string{"--log-format", "json"}, args...)...))
}

// watchDaemon starts cmd, a warpflowd logging JSON to stderr (perhaps
// through wrappers that exec it), collects its log lines, and kills it at
// cleanup if it still runs.
func watchDaemon(t *testing.T, cmd *exec.Cmd) *daemonProc {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &daemonProc{cmd: cmd, seen: make(chan struct{}, 1024), done: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			line := sc.Bytes()
			d.mu.Lock()
			d.raw.Write(line)
			d.raw.WriteByte('\n')
			if json.Unmarshal(line, &m) == nil {
				d.lines = append(d.lines, m)
			}
			d.mu.Unlock()
			select {
			case d.seen <- struct{}{}:
			default:
			}
		}
		d.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		defer func() { // also when the wait below gives up (Fatalf)
			if t.Failed() {
				t.Logf("warpflowd log:\n%s", d.log())
			}
		}()
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			testwait.Recv(t, d.done, "warpflowd to exit after SIGKILL (cleanup)", testwait.Deadline)
		}
	})
	return d
}

func (d *daemonProc) log() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.raw.String()
}

// waitFor waits until a log line has msg (and, when set, key=value),
// or the daemon exits, or timeout.
func (d *daemonProc) waitFor(t *testing.T, msg string, timeout time.Duration) map[string]any {
	t.Helper()
	deadline := time.After(timeout)
	for {
		if m := d.find(msg); m != nil {
			return m
		}
		select {
		case <-d.seen:
		case err := <-d.done:
			d.done <- err
			if m := d.find(msg); m != nil {
				return m
			}
			t.Fatalf("warpflowd exited (%v) before logging %q:\n%s", err, msg, d.log())
		case <-deadline:
			t.Fatalf("warpflowd did not log %q within %v:\n%s", msg, timeout, d.log())
		}
	}
}

func (d *daemonProc) find(msg string) map[string]any {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range d.lines {
		if m["msg"] == msg {
			return m
		}
	}
	return nil
}

func (d *daemonProc) all(msg string) []map[string]any {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []map[string]any
	for _, m := range d.lines {
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// stop sends sig and waits for the exit code.
func (d *daemonProc) stop(t *testing.T, sig syscall.Signal, timeout time.Duration) int {
	t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal warpflowd: %v", err)
	}
	return d.wait(t, timeout)
}

func (d *daemonProc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case err := <-d.done:
		d.done <- err
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("warpflowd: %v", err)
		}
		return 0
	case <-time.After(timeout):
		t.Fatalf("warpflowd did not exit within %v:\n%s", timeout, d.log())
		return -1
	}
}

// labConfig writes a daemon config for the lab: dp0 receives, dp1
// transmits, the pipeline's out0 goes to dp1.
func labConfig(t *testing.T, pipeline string, extra string) string {
	t.Helper()
	abs, err := filepath.Abs(pipeline)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`pipeline: %s
interfaces:
  - {name: dp0, attach: native, bind: auto}
  - {name: dp1, receive: false, bind: auto}
ports: {out0: dp1}
stats_interval: 0s
%s`, abs, extra)
	if !strings.Contains(extra, "workers_per_queue:") {
		cfg += "workers_per_queue: 0\n"
	}
	path := filepath.Join(t.TempDir(), "warpflowd.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// sinkCapture runs tcpdump on the sink's interface until stopped.
type sinkCapture struct {
	cmd    *exec.Cmd
	exited <-chan struct{} // closed once tcpdump's stderr was read to its end and cmd.Wait returned
	file   string
	mu     sync.Mutex
	stderr strings.Builder
}

func startSinkCapture(t *testing.T, topo *lab.Topology) *sinkCapture {
	t.Helper()
	file := filepath.Join(t.TempDir(), "sink.pcap")
	// -B 32 MiB: a daemon that was descheduled for a while forwards its
	// backlog in one burst, and tcpdump's default 2 MiB buffer (a few
	// thousand small frames) then overflowed on the loaded machine.
	cmd := inNS(topo.Sink.Namespace, "tcpdump", "-Z", "root", "--immediate-mode", "-B", "32768", "-i", topo.Sink.Name, "-Q", "in", "-n", "-U", "-s", "0", "-w", file)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{}) // closed by the stderr reader below, once it read all and Wait returned
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			testwait.Recv(t, exited, "tcpdump at the sink to exit after SIGKILL (cleanup)", testwait.Deadline)
		}
	})
	ready := make(chan struct{})
	s := &sinkCapture{cmd: cmd, exited: exited, file: file}
	go func() {
		sc := bufio.NewScanner(stderr)
		once := false
		for sc.Scan() {
			s.mu.Lock()
			s.stderr.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
			if !once && strings.Contains(sc.Text(), "listening on") {
				once = true
				close(ready)
			}
		}
		// Wait only after the last line was read: Wait closes the pipe,
		// and stop reads tcpdump's drop count from those lines.
		cmd.Wait()
		close(exited)
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("tcpdump at the sink did not start listening within 10s")
	}
	t.Cleanup(func() {
		if t.Failed() {
			s.mu.Lock()
			t.Logf("tcpdump at the sink:\n%s", s.stderr.String())
			s.mu.Unlock()
		}
	})
	return s
}

var tcpdumpDropped = regexp.MustCompile(`(\d+) packets? dropped by kernel`)

// stop ends the capture and returns the frames captured, in order. A
// capture that tcpdump says it dropped packets from (its buffer was full:
// the frames reached the sink, not the file) fails the test as the test
// harness's loss, before anyone compares its frames with the counters.
func (s *sinkCapture) stop(t *testing.T) [][]byte {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGINT)
	testwait.Recv(t, s.exited, "tcpdump at the sink to exit after SIGINT", testwait.Deadline)
	s.mu.Lock()
	m := tcpdumpDropped.FindStringSubmatch(s.stderr.String())
	s.mu.Unlock()
	if m != nil && m[1] != "0" {
		t.Fatalf("the sink's capture lost %s packets (tcpdump: dropped by kernel, its buffer overflowed): test-side, the daemon is not to blame", m[1])
	}
	return readFrames(t, s.file)
}

func readFrames(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	var out [][]byte
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		out = append(out, append([]byte(nil), data...))
	}
}

var tcpreplaySent = regexp.MustCompile(`Successful packets:\s+(\d+)`)

// tcpreplay sends capture out of the generator's interface at pps and
// returns how many packets it says it sent.
func tcpreplay(t *testing.T, topo *lab.Topology, capture string, pps int) int {
	t.Helper()
	out, err := inNS(topo.Gen.Namespace, "tcpreplay", "-i", topo.Gen.Name, "--pps", strconv.Itoa(pps), capture).CombinedOutput()
	if err != nil {
		t.Fatalf("tcpreplay: %v\n%s", err, out)
	}
	m := tcpreplaySent.FindSubmatch(out)
	if m == nil {
		t.Fatalf("tcpreplay printed no packet count:\n%s", out)
	}
	n, _ := strconv.Atoi(string(m[1]))
	if bytes.Contains(out, []byte("Failed packets:")) && !bytes.Contains(out, []byte("Failed packets:          0")) {
		t.Logf("tcpreplay:\n%s", out)
	}
	return n
}

// replayOracle replays capture through pipeline offline and returns the
// report and the frames it wrote to out0.
func replayOracle(t *testing.T, pipeline, capture string) (dataplane.Report, [][]byte) {
	t.Helper()
	g, err := pipelines.LoadFile(pipeline)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rep, err := dataplane.Replay(dataplane.ReplayConfig{Capture: capture, Graph: g, OutDir: dir, Engine: dataplane.DefaultOptions()})
	if err != nil {
		t.Fatalf("offline replay: %v", err)
	}
	return rep, readFrames(t, filepath.Join(dir, "out0.pcap"))
}

func num(m map[string]any, path ...string) uint64 {
	var v any = m
	for _, k := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return 0
		}
		v = mm[k]
	}
	f, _ := v.(float64)
	return uint64(f)
}

// linkCounters describes iface's packet counters, for failure messages.
func linkCounters(t *testing.T, ns, iface string) string {
	var desc string
	lab.Do(ns, func() error {
		l, err := netlink.LinkByName(iface)
		if err != nil {
			desc = err.Error()
			return nil
		}
		s := l.Attrs().Statistics
		desc = fmt.Sprintf("rx %d (dropped %d), tx %d (dropped %d)", s.RxPackets, s.RxDropped, s.TxPackets, s.TxDropped)
		return nil
	})
	return desc
}

// xdpAttached reports whether iface in ns has an XDP program.
func xdpAttached(t *testing.T, ns, iface string) bool {
	t.Helper()
	var attached bool
	err := lab.Do(ns, func() error {
		l, err := netlink.LinkByName(iface)
		if err != nil {
			return err
		}
		attached = l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
		return nil
	})
	if err != nil {
		t.Fatalf("look at %s in %s: %v", iface, ns, err)
	}
	return attached
}

// TestLiveForwardMatchesReplay is the live dataplane end to end: warpflowd
// on the lab forwards, drops by ACL and rewrites what tcpreplay sends, and
// the sink must capture exactly what the offline replay of the same
// pipeline over the same capture writes to out0, in order, byte for byte;
// the daemon's counters must match the replay's and balance, and its frame
// accounting must sum to the frame count with every frame home.
func TestLiveForwardMatchesReplay(t *testing.T) {
	t.Run("shared umem", func(t *testing.T) { testForward(t, 0, false) })
	// The fallback for kernels that refuse to share a UMEM across
	// devices, forced: dp1 copies each packet into a UMEM of its own, and
	// counts it.
	t.Run("copying output", func(t *testing.T) { testForward(t, 0, true) })
	// The same through a worker pool: the I/O loop hands each batch to a
	// worker slot and completes it in order.
	t.Run("one worker", func(t *testing.T) { testForward(t, 1, false) })
}

func testForward(t *testing.T, workers int, txCopy bool) {
	requireLive(t, "tcpreplay", "tcpdump")
	const pipeline = "../../testdata/live/lab-forward.yaml"
	const capture = "../../testdata/captures/mixed.pcap"
	want, wantFrames := replayOracle(t, pipeline, capture)
	if len(wantFrames) == 0 || want.Dropped == 0 {
		t.Fatalf("oracle forwards %d and drops %d: the test needs both", len(wantFrames), want.Dropped)
	}

	topo := newLab(t)
	sink := startSinkCapture(t, topo)
	d := startDaemon(t, topo.DP0.Namespace, "--config", labConfig(t, pipeline, fmt.Sprintf("track_frames: true\ntx_copy: %v\nworkers_per_queue: %d\n", txCopy, workers)), "--stats-interval", "50ms")
	up := d.waitFor(t, "queue up", 10*time.Second)
	if up["attach"] != "native" || up["bind"] != "copy" {
		t.Errorf("veth granted attach=%v bind=%v, want native and copy (veth has no zero-copy)", up["attach"], up["bind"])
	}
	if n := num(up, "workers"); n != uint64(workers) {
		t.Errorf("queue up with %d workers, want %d", n, workers)
	}
	d.waitFor(t, "running", 5*time.Second)

	// Before any packet every frame is on the free stack or the fill ring,
	// and the account says so.
	idle := d.waitFor(t, "stats", 5*time.Second)
	if num(idle, "frames", "total") != 4096 || num(idle, "frames", "free")+num(idle, "frames", "fill") != 4096 {
		t.Errorf("frame accounting before traffic: %v", idle["frames"])
	}
	sent := tcpreplay(t, topo, capture, 20000)
	if sent != int(want.Received) {
		t.Fatalf("tcpreplay sent %d packets, the capture has %d", sent, want.Received)
	}
	waitReceived(t, d, uint64(sent))
	// The last frames cross the sink's veth in microseconds; give tcpdump
	// a moment to write them before it is stopped.
	time.Sleep(100 * time.Millisecond)
	if code := d.stop(t, syscall.SIGTERM, 10*time.Second); code != 0 {
		t.Fatalf("warpflowd exited %d after SIGTERM, want 0", code)
	}
	got := sink.stop(t)

	st := d.find("final stats")
	if st == nil {
		t.Fatalf("no final stats line:\n%s", d.log())
	}
	if r, x, k := num(st, "received"), num(st, "xdp_redirected"), num(st, "xdp_dropped")+num(st, "xdp_passed"); r != want.Received || x+k != want.Received {
		t.Errorf("daemon received %d, its XDP program redirected %d and decided %d; sent %d", r, x, k, want.Received)
	}
	if tx, dr, ps := num(st, "transmitted"), num(st, "dropped")+num(st, "xdp_dropped"), num(st, "passed")+num(st, "xdp_passed"); tx != want.Transmitted || dr != want.Dropped || ps != 0 {
		t.Errorf("daemon transmitted %d, dropped %d, passed %d; replay: %d, %d, %d", tx, dr, ps, want.Transmitted, want.Dropped, want.Passed)
	}
	for _, dc := range want.Drops {
		if n := num(st, "drops", dc.Reason) + num(st, "xdp_drops", dc.Reason); n != dc.Packets {
			t.Errorf("drops[%s] = %d, replay counted %d", dc.Reason, n, dc.Packets)
		}
	}
	if c := num(st, "tx_copied"); (txCopy && c != want.Transmitted) || (!txCopy && c != 0) {
		t.Errorf("tx_copied %d with tx_copy %v (transmitted %d)", c, txCopy, want.Transmitted)
	}
	if txCopy && d.find("output copies packets") == nil {
		t.Error("no log line says that dp1 copies packets")
	}
	if b, ok := st["balanced"].(bool); !ok || !b {
		t.Errorf("daemon reports balanced=%v", st["balanced"])
	}
	frames := num(st, "frames", "total")
	if frames != 4096 || num(st, "frames", "free")+num(st, "frames", "fill") != frames {
		t.Errorf("frame accounting at the end: %v, want all 4096 frames free or on the fill ring", st["frames"])
	}

	if len(got) != len(wantFrames) {
		t.Fatalf("sink captured %d frames, replay wrote %d (link counters: dp1 %s, sink0 %s)", len(got), len(wantFrames),
			linkCounters(t, topo.DP1.Namespace, topo.DP1.Name), linkCounters(t, topo.Sink.Namespace, topo.Sink.Name))
	}
	for i := range got {
		if !bytes.Equal(got[i], wantFrames[i]) {
			t.Fatalf("frame %d differs:\nsink   %x\nreplay %x", i, got[i], wantFrames[i])
		}
	}
	if xdpAttached(t, topo.DP0.Namespace, topo.DP0.Name) {
		t.Error("an XDP program is still attached to dp0 after a clean exit")
	}
}

// waitReceived waits (up to 5s) until one of the daemon's periodic stats
// lines says it has received and dealt with want packets.
func waitReceived(t *testing.T, d *daemonProc, want uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		lines := d.all("stats")
		if n := len(lines); n > 0 && num(lines[n-1], "received") >= want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("warpflowd's stats did not reach %d received packets within 5s:\n%s", want, d.log())
}

// TestLiveMultiQueue: with two receive queues the daemon opens one socket,
// UMEM and engine per queue (each transmitting on the same queue of dp1),
// and the sink still gets exactly the replay's frames (as a multiset: the
// two queues' orders interleave), with the counters summed over queues.
func TestLiveMultiQueue(t *testing.T) {
	t.Run("umem per queue", func(t *testing.T) { testMultiQueue(t, "") })
	t.Run("shared umem", func(t *testing.T) { testMultiQueue(t, "umem: {frames: 4096, frame_size: 4096, shared: true}\n") })
}

func testMultiQueue(t *testing.T, extra string) {
	requireLive(t, "tcpreplay", "tcpdump")
	const pipeline = "../../testdata/live/lab-forward.yaml"
	const capture = "../../testdata/captures/mixed.pcap"
	want, wantFrames := replayOracle(t, pipeline, capture)
	topo := newLabQueues(t, 2)
	sink := startSinkCapture(t, topo)
	d := startDaemon(t, topo.DP0.Namespace, "--config", labConfig(t, pipeline, extra+"track_frames: true\n"), "--stats-interval", "50ms", "--log-level", "debug")
	d.waitFor(t, "running", 10*time.Second)
	ups := d.all("queue up")
	if len(ups) != 2 || num(ups[0], "queue") != 0 || num(ups[1], "queue") != 1 {
		t.Fatalf("queue up lines %v, want queues 0 and 1 of dp0", ups)
	}
	wantUMEM := "own"
	if strings.Contains(extra, "shared: true") {
		wantUMEM = "shared"
	}
	for _, up := range ups {
		if up["umem"] != wantUMEM {
			t.Errorf("queue %v: umem %v, want %s", up["queue"], up["umem"], wantUMEM)
		}
	}
	sent := tcpreplay(t, topo, capture, 20000)
	waitReceived(t, d, uint64(sent))
	time.Sleep(100 * time.Millisecond) // settle, not a wait for a condition: the last frames through the sink's veth to tcpdump
	if code := d.stop(t, syscall.SIGTERM, 10*time.Second); code != 0 {
		t.Fatalf("warpflowd exited %d after SIGTERM", code)
	}
	got := sink.stop(t)
	st := d.find("final stats")
	if st == nil {
		t.Fatal("no final stats line")
	}
	if num(st, "received") != want.Received || num(st, "transmitted") != want.Transmitted || num(st, "dropped")+num(st, "xdp_dropped") != want.Dropped {
		t.Errorf("totals %v; replay received %d, transmitted %d, dropped %d", st, want.Received, want.Transmitted, want.Dropped)
	}
	if num(st, "frames", "total") != 2*4096 {
		t.Errorf("frame total %d, want two queues of 4096", num(st, "frames", "total"))
	}
	// The 88 flows of the capture spread over both queues.
	var perQueue []uint64
	for _, q := range d.all("final stats (queue)") {
		perQueue = append(perQueue, num(q, "stats", "received"))
	}
	if len(perQueue) != 2 || perQueue[0] == 0 || perQueue[1] == 0 || perQueue[0]+perQueue[1] != want.Received {
		t.Errorf("received per queue %v, want both non-zero, summing to %d", perQueue, want.Received)
	}
	count := map[string]int{}
	for _, f := range wantFrames {
		count[string(f)]++
	}
	for _, f := range got {
		count[string(f)]--
	}
	for f, n := range count {
		if n != 0 {
			t.Fatalf("frame %x: sink has %d more than the replay (sink %d frames, replay %d)", f, -n, len(got), len(wantFrames))
		}
	}
}

// TestLiveKillLeavesNothingAttached: the XDP program is attached through a
// bpf_link, so SIGKILL leaves nothing on the interface, and a restarted
// daemon attaches cleanly.
func TestLiveKillLeavesNothingAttached(t *testing.T) {
	requireLive(t)
	topo := newLab(t)
	cfg := labConfig(t, "../../testdata/live/lab-forward.yaml", "")
	d := startDaemon(t, topo.DP0.Namespace, "--config", cfg)
	d.waitFor(t, "running", 10*time.Second)
	if !xdpAttached(t, topo.DP0.Namespace, topo.DP0.Name) {
		t.Fatal("no XDP program on dp0 while warpflowd runs")
	}
	if code := d.stop(t, syscall.SIGKILL, 5*time.Second); code != -1 && code != 137 {
		t.Logf("exit code after SIGKILL: %d", code)
	}
	deadline := time.Now().Add(2 * time.Second)
	for xdpAttached(t, topo.DP0.Namespace, topo.DP0.Name) {
		if time.Now().After(deadline) {
			t.Fatal("an XDP program is still attached to dp0 2s after warpflowd was killed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	d2 := startDaemon(t, topo.DP0.Namespace, "--config", cfg)
	d2.waitFor(t, "running", 10*time.Second)
	if code := d2.stop(t, syscall.SIGTERM, 10*time.Second); code != 0 {
		t.Fatalf("restarted warpflowd exited %d after SIGTERM", code)
	}
}

// TestLiveSecondDaemonRefused: a second daemon asking for the same
// interface and queue gets one clear error line and exit 1, and the first
// keeps running.
func TestLiveSecondDaemonRefused(t *testing.T) {
	requireLive(t)
	topo := newLab(t)
	cfg := labConfig(t, "../../testdata/live/lab-forward.yaml", "")
	d := startDaemon(t, topo.DP0.Namespace, "--config", cfg)
	d.waitFor(t, "running", 10*time.Second)

	// A second daemon that is not refused would run on: the timer ends it.
	second := inNS(topo.DP0.Namespace, daemonBinary(t), "--config", cfg)
	timer := time.AfterFunc(10*time.Second, func() { second.Process.Kill() })
	out, err := second.CombinedOutput()
	if !timer.Stop() {
		t.Fatalf("second warpflowd still ran 10s after it started, want it refused at once; output:\n%s", out)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("second warpflowd: err %v, want exit 1; output:\n%s", err, out)
	}
	msg := string(out)
	if !strings.Contains(msg, "dp0") || !strings.Contains(msg, "already attached") {
		t.Errorf("second warpflowd's error does not name the interface and the cause:\n%s", msg)
	}
	if n := strings.Count(strings.TrimSpace(msg), "\n"); n > 0 {
		t.Errorf("second warpflowd printed %d lines, want one:\n%s", n+1, msg)
	}
	if !xdpAttached(t, topo.DP0.Namespace, topo.DP0.Name) {
		t.Error("the refused daemon detached the first one's program")
	}
	if code := d.stop(t, syscall.SIGTERM, 10*time.Second); code != 0 {
		t.Fatalf("first warpflowd exited %d after SIGTERM", code)
	}
}

// TestLiveInterfaceDeletion: deleting an interface the daemon uses is
// noticed within a second, logged with its name and counted, and under
// on_link_loss: exit the daemon drains and exits 1 with nothing attached.
func TestLiveInterfaceDeletion(t *testing.T) {
	requireLive(t)
	topo := newLab(t)
	cfg := labConfig(t, "../../testdata/live/lab-forward.yaml", "on_link_loss: exit\n")
	d := startDaemon(t, topo.DP0.Namespace, "--config", cfg)
	d.waitFor(t, "running", 10*time.Second)

	deleted := time.Now()
	err := lab.Do(topo.DP1.Namespace, func() error {
		l, err := netlink.LinkByName(topo.DP1.Name)
		if err != nil {
			return err
		}
		return netlink.LinkDel(l)
	})
	if err != nil {
		t.Fatalf("delete dp1: %v", err)
	}
	lost := d.waitFor(t, "interface lost", 3*time.Second)
	noticed := time.Since(deleted)
	if lost["interface"] != topo.DP1.Name || num(lost, "link_losses") != 1 {
		t.Errorf("interface lost line: %v", lost)
	}
	if noticed > time.Second {
		t.Errorf("deletion noticed after %v, want within 1s", noticed)
	}
	if code := d.wait(t, 10*time.Second); code != 1 {
		t.Errorf("warpflowd exited %d after losing dp1 under on_link_loss: exit, want 1", code)
	}
	if xdpAttached(t, topo.DP0.Namespace, topo.DP0.Name) {
		t.Error("an XDP program is still attached to dp0 after the daemon exited")
	}
}

// TestSetupErrors: each setup failure is one line naming the cause and the
// fix, with exit 1 (2 for a bad pipeline or config), and nothing attached.
func TestSetupErrors(t *testing.T) {
	requireLive(t, "setpriv")
	bin := daemonBinary(t)
	pipeline := "../../testdata/live/lab-forward.yaml"
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: x\nstages: [{name: a, type: nope}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cmd  *exec.Cmd
		code int
		want []string
	}{
		{"missing interface", exec.Command(bin, "--pipeline", pipeline, "--iface", "nosuch0", "--port", "out0=nosuch0"),
			1, []string{"nosuch0", "not found", "ip link"}},
		{"no permission", exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
			bin, "--pipeline", pipeline, "--iface", "nosuch1", "--port", "out0=nosuch1"),
			1, []string{"CAP_NET_ADMIN", "CAP_BPF", "operation not permitted"}},
		{"bad pipeline", exec.Command(bin, "--pipeline", bad, "--iface", "nosuch1"), 2, []string{"bad.yaml:2:", `unknown stage type "nope"`}},
		{"pass on AF_XDP", exec.Command(bin, "--pipeline", "../../pipelines/default.yaml", "--iface", "nosuch1"), 1, []string{"to-kernel", "pass: drop"}},
		{"bad flag value", exec.Command(bin, "--pipeline", pipeline, "--iface", "nosuch1", "--attach", "fast"), 2, []string{`attach "fast"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// No case may get as far as attaching (they name no real
			// interface); the timer ends one that would run regardless.
			timer := time.AfterFunc(10*time.Second, func() { tc.cmd.Process.Kill() })
			defer timer.Stop()
			out, err := tc.cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tc.code {
				t.Fatalf("err %v, want exit %d; output:\n%s", err, tc.code, out)
			}
			msg := strings.TrimSpace(string(out))
			if strings.Contains(msg, "\n") {
				t.Errorf("more than one line:\n%s", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("output lacks %q:\n%s", w, msg)
				}
			}
		})
	}
}

// writePipeline writes a pipeline's text to dir/name.yaml and returns the
// path.
func writePipeline(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// liveControl is a running warpflowd reached through its control socket,
// with /metrics on.
type liveControl struct {
	d           *daemonProc
	metricsAddr string
	sock        string
	c           *client.Client
}

// startControlled starts warpflowd in dp0's namespace on pipeline (extra:
// more config lines) with /metrics on, waits until it runs and serves
// metrics, and loads the pipelines in load through warpctl.
func startControlled(t *testing.T, topo *lab.Topology, pipeline, extra string, load ...string) liveControl {
	t.Helper()
	d := startDaemon(t, topo.DP0.Namespace, "--config", labConfig(t, pipeline, extra), "--metrics-addr", "127.0.0.1:0")
	d.waitFor(t, "running", 10*time.Second)
	m := d.waitFor(t, "metrics", 5*time.Second)
	lc := liveControl{d: d, sock: socketOf(d)}
	lc.metricsAddr, _ = m["listen"].(string)
	lc.c = client.New(lc.sock)
	for _, p := range load {
		if _, stderr, code := warpctl(t, lc.sock, "pipeline", "load", p); code != 0 {
			t.Fatalf("pipeline load %s: exit %d: %s", p, code, stderr)
		}
	}
	return lc
}

// waitTraffic waits (10 s at most) until the daemon received more than n
// packets.
func waitTraffic(t *testing.T, c *client.Client, n uint64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		s, err := c.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if s.Totals.Received > n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no traffic reached the daemon")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// statsAfterReplay waits (5 s at most) until the XDP programs saw n
// packets and the daemon received all they saw, gives the last frames
// time to pass the sink's veth to tcpdump, and returns the stats then.
// At the deadline it fails, unless the daemon received all the programs
// saw and the frames they did not see are within gen0's tx_dropped: the
// loss before the XDP program that checkArrivals accounts for, which
// only the deadline can tell from frames still on their way.
func statsAfterReplay(t *testing.T, c *client.Client, topo *lab.Topology, n int) control.Stats {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(5 * time.Second); ; {
		st, err := c.Stats(ctx)
		seen := xdpSeen(st)
		if err == nil && seen >= uint64(n) && st.Totals.Received >= seen {
			break
		}
		if time.Now().After(deadline) {
			txDropped, _ := linkDrops(t, topo.Gen.Namespace, topo.Gen.Name)
			if err != nil || st.Totals.Received < seen || seen > uint64(n) || uint64(n)-seen > txDropped {
				t.Fatalf("after 5s the XDP programs saw %d of %d frames sent (gen0 tx_dropped %d) and the daemon received %d (kernel socket drops %v, stats error %v)",
					seen, n, txDropped, st.Totals.Received, st.Totals.KernelDrops, err)
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the last frames through the sink's veth to tcpdump
	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatalf("stats after the replay: %v", err)
	}
	return st
}

// stopWithSink stops d with SIGTERM (it must exit 0), then the sink's
// capture, logs the links' counters and returns the sink's frames.
func stopWithSink(t *testing.T, d *daemonProc, sink *sinkCapture, topo *lab.Topology) [][]byte {
	t.Helper()
	if code := d.stop(t, syscall.SIGTERM, 10*time.Second); code != 0 {
		t.Fatalf("warpflowd exited %d", code)
	}
	frames := sink.stop(t)
	t.Logf("links after the run (a frame the sink's ring had no room for is dp1's tx_dropped): dp1 %s, sink0 %s",
		linkCounters(t, topo.DP1.Namespace, topo.DP1.Name), linkCounters(t, topo.Sink.Namespace, topo.Sink.Name))
	return frames
}
