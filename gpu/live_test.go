package gpu

// The live measurements of the CUDA backend on the lab (issue 15): warpflowd
// with settings.backend cuda against the offline replay, and the N-queue
// table. They need root, a lab, warpflowd and warpctl binaries and, for the
// cuda rows, a GPU, so they run only when asked (WARPFLOW_GPU_LIVE=1), on
// the device machine, where there is no Go: the binaries come prebuilt.
//
//	WARPFLOW_GPU_LIVE=1            run them
//	WARPFLOW_LIVE_DAEMON=PATH      warpflowd (default: go build)
//	WARPFLOW_LIVE_WARPCTL=PATH     warpctl, the generator (default: go build)
//	WARPFLOW_LIVE_BACKENDS=cpu,cuda
//	WARPFLOW_LIVE_QUEUES=1,2,4     the N-queue table's queue counts
//	WARPFLOW_LIVE_MODES=rxonly,macswap
//	WARPFLOW_LIVE_WINDOW=2s        each case's generator run
//	WARPFLOW_LIVE_OUT=DIR          live-queues.json and the daemons' logs
//
// Everything runs in labs these tests make and remove; every run is
// bounded by a count and a duration.

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/internal/cpuaffinity"
	"github.com/warpflow/warpflow/internal/gen"
	"github.com/warpflow/warpflow/internal/lab"
	"github.com/warpflow/warpflow/pipelines"

	"github.com/warpflow/warpflow/internal/testwait"
)

// liveEnv skips unless WARPFLOW_GPU_LIVE=1 and root.
func liveEnv(t *testing.T) {
	t.Helper()
	if os.Getenv("WARPFLOW_GPU_LIVE") != "1" {
		t.Skip("set WARPFLOW_GPU_LIVE=1 to run (root, a lab, and a GPU for the cuda rows: the device machine)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("WARPFLOW_GPU_LIVE=1 needs root (network namespaces, XDP, AF_XDP)")
	}
}

func envList(name, def string) []string {
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	return strings.Split(v, ",")
}

// liveBinary is WARPFLOW_LIVE_<name> or a go build of pkg.
func liveBinary(t *testing.T, env, pkg string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s (or set %s): %v\n%s", pkg, env, err, b)
	}
	return out
}

// backendUsable says why a backend's rows cannot run here, or "".
func backendUsable(b string) string {
	if b == "cuda" {
		if err := Available(); err != nil {
			return err.Error()
		}
	}
	return ""
}

func liveLab(t *testing.T, queues int) *lab.Topology {
	t.Helper()
	var b [3]byte
	rand.Read(b[:])
	o := lab.DefaultOptions()
	o.Prefix = "g" + hex.EncodeToString(b[:])
	o.Queues = queues
	topo, err := lab.Up(o)
	if err != nil {
		t.Fatalf("lab up: %v", err)
	}
	t.Cleanup(func() {
		if err := lab.Down(o.Prefix); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	return topo
}

// liveDaemon is a warpflowd in the lab's dataplane namespace, logging JSON.
type liveDaemon struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []map[string]any
	raw   bytes.Buffer
	done  chan error
}

func startLiveDaemon(t *testing.T, topo *lab.Topology, bin, cfg string) *liveDaemon {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(bin, "--config", cfg, "--log-format", "json", "--socket", filepath.Join(dir, "ctl.sock"),
		"--capture-dir", filepath.Join(dir, "captures"), "--stats-interval", "100ms")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &liveDaemon{cmd: cmd, done: make(chan error, 1)}
	if err := lab.Start(topo.DP0.Namespace, cmd); err != nil {
		t.Fatalf("start warpflowd: %v", err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			d.mu.Lock()
			d.raw.Write(sc.Bytes())
			d.raw.WriteByte('\n')
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				d.lines = append(d.lines, m)
			}
			d.mu.Unlock()
		}
		d.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			testwait.Recv(t, d.done, "warpflowd to exit after SIGKILL (cleanup)", testwait.Deadline)
		}
	})
	return d
}

func (d *liveDaemon) last(msg string) map[string]any {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := len(d.lines) - 1; i >= 0; i-- {
		if d.lines[i]["msg"] == msg {
			return d.lines[i]
		}
	}
	return nil
}

func (d *liveDaemon) log() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.raw.String()
}

// waitFor waits for a line with msg (and ok, when set), failing at the
// deadline or when the daemon exits first.
func (d *liveDaemon) waitFor(t *testing.T, msg string, timeout time.Duration, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if m := d.last(msg); m != nil && (ok == nil || ok(m)) {
			return m
		}
		select {
		case err := <-d.done:
			d.done <- err
			t.Fatalf("warpflowd exited (%v) before logging %q:\n%s", err, msg, tail(d.log(), 3000))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("warpflowd did not log %q within %v:\n%s", msg, timeout, tail(d.log(), 3000))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop sends SIGTERM and returns the final stats line.
func (d *liveDaemon) stop(t *testing.T) map[string]any {
	t.Helper()
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		d.done <- err
		if err != nil {
			t.Fatalf("warpflowd: %v:\n%s", err, tail(d.log(), 3000))
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("warpflowd did not exit within 20s of SIGTERM:\n%s", tail(d.log(), 3000))
	}
	st := d.last("final stats")
	if st == nil {
		t.Fatalf("no final stats line:\n%s", tail(d.log(), 3000))
	}
	return st
}

// cpuSeconds is the process's user + system time (/proc/PID/stat).
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from 3 on
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / 100, nil // USER_HZ is 100 on Linux
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
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

// withBackend is a pipeline's YAML with settings.backend set.
func withBackend(t *testing.T, src []byte, backend string) []byte {
	t.Helper()
	const s = "settings: {"
	if !bytes.Contains(src, []byte(s)) {
		t.Fatal("pipeline has no one-line settings to add the backend to")
	}
	return bytes.Replace(src, []byte(s), []byte(s+"backend: "+backend+", "), 1)
}

func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// runGen runs warpctl gen in the lab's generator namespace with its every
// thread on cpu (veth puts a frame sent by XDP on the peer's receive queue
// cpu % queues), and returns what it sent.
func runGen(t *testing.T, ctl string, topo *lab.Topology, cpu int, args ...string) (gen.Result, error) {
	cmd := exec.Command(ctl, append([]string{"gen", "--netns", topo.Gen.Namespace, "--iface", topo.Gen.Name, "--json"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		return gen.Result{}, err
	}
	// Threads made later inherit the mask of their maker: pin every
	// thread as it appears for the first 300 ms. Errors are ignored: the
	// process may exit, or a thread vanish, while we pin.
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); {
		_ = cpuaffinity.PinProcess(cmd.Process.Pid, cpu)
		time.Sleep(5 * time.Millisecond)
	}
	err := cmd.Wait()
	var r gen.Result
	if err == nil {
		err = json.Unmarshal(out.Bytes(), &r)
	}
	if err != nil {
		return r, fmt.Errorf("warpctl gen: %v\n%s%s", err, out.String(), errb.String())
	}
	return r, nil
}

// linkStats reads iface's kernel counters in ns.
func linkStats(t *testing.T, ns, iface string) netlink.LinkStatistics {
	t.Helper()
	var st netlink.LinkStatistics
	if err := lab.Do(ns, func() error {
		l, err := netlink.LinkByName(iface)
		if err != nil {
			return err
		}
		st = *l.Attrs().Statistics
		return nil
	}); err != nil {
		t.Fatalf("counters of %s in %s: %v", iface, ns, err)
	}
	return st
}

// sinkCapture reads every frame that arrives on the sink's interface
// through a packet socket (no tcpdump on the device machine).
type sinkCapture struct {
	fd     int
	frames [][]byte
	stop   chan struct{}
	done   chan error
}

func startSinkCapture(t *testing.T, topo *lab.Topology) *sinkCapture {
	t.Helper()
	s := &sinkCapture{stop: make(chan struct{}), done: make(chan error, 1)}
	const ethPAll = 0x0300 // htons(ETH_P_ALL)
	err := lab.Do(topo.Sink.Namespace, func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, ethPAll)
		if err != nil {
			return err
		}
		s.fd = fd
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
		// The kernel takes a VLAN tag off into the skb's metadata; the
		// auxiliary data gives it back (as tcpdump puts it back).
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
			return err
		}
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 50000})
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: ethPAll, Ifindex: topo.Sink.Ifindex})
	})
	if err != nil {
		t.Fatalf("packet socket on %s: %v", topo.Sink.Name, err)
	}
	go func() {
		buf := make([]byte, 65536)
		oob := make([]byte, 256)
		for {
			select {
			case <-s.stop:
				s.done <- nil
				return
			default:
			}
			n, oobn, _, from, err := unix.Recvmsg(s.fd, buf, oob, 0)
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				s.done <- err
				return
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				continue // the sink's own replies
			}
			s.frames = append(s.frames, withVLAN(buf[:n], oob[:oobn]))
		}
	}()
	t.Cleanup(func() { unix.Close(s.fd) })
	return s
}

// withVLAN copies frame with the VLAN tag the kernel moved into the
// auxiliary data (struct tpacket_auxdata) put back after the MACs.
func withVLAN(frame, oob []byte) []byte {
	msgs, _ := unix.ParseSocketControlMessage(oob)
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_PACKET || m.Header.Type != unix.PACKET_AUXDATA || len(m.Data) < 20 || len(frame) < 12 {
			continue
		}
		status := binary.LittleEndian.Uint32(m.Data[0:])
		if status&unix.TP_STATUS_VLAN_VALID == 0 {
			break
		}
		tci, tpid := binary.LittleEndian.Uint16(m.Data[16:]), binary.LittleEndian.Uint16(m.Data[18:])
		if status&unix.TP_STATUS_VLAN_TPID_VALID == 0 {
			tpid = 0x8100
		}
		out := make([]byte, 0, len(frame)+4)
		out = append(out, frame[:12]...)
		out = binary.BigEndian.AppendUint16(out, tpid)
		out = binary.BigEndian.AppendUint16(out, tci)
		return append(out, frame[12:]...)
	}
	return append([]byte(nil), frame...)
}

func (s *sinkCapture) finish(t *testing.T) [][]byte {
	t.Helper()
	close(s.stop)
	// The reader sees stop between reads, each bounded by the socket's
	// 50 ms receive timeout.
	if err := testwait.Recv(t, s.done, "the sink capture's reader to stop", testwait.Deadline); err != nil {
		t.Fatalf("sink capture: %v", err)
	}
	return s.frames
}

func readPcap(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out [][]byte
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, append([]byte(nil), data...))
	}
}

// TestLiveMatchesReplay is the live-equals-replay test through warpflowd
// with each backend (settings.backend: cuda gives every queue the CUDA
// executor, its UMEM registered with the device): the capture sent into
// the lab in order, the sink must receive exactly what the offline replay
// of the same pipeline writes to out0, in order, byte for byte, and the
// daemon's counters must be the replay's.
func TestLiveMatchesReplay(t *testing.T) {
	liveEnv(t)
	daemon := liveBinary(t, "WARPFLOW_LIVE_DAEMON", "github.com/warpflow/warpflow/cmd/warpflowd")
	ctl := liveBinary(t, "WARPFLOW_LIVE_WARPCTL", "github.com/warpflow/warpflow/cmd/warpctl")
	const pipeline = "../testdata/live/lab-forward.yaml"
	const capture = "../testdata/captures/mixed.pcap"
	g, err := pipelines.LoadFile(pipeline)
	if err != nil {
		t.Fatal(err)
	}
	odir := t.TempDir()
	want, err := dataplane.Replay(dataplane.ReplayConfig{Capture: capture, Graph: g, OutDir: odir, Engine: dataplane.DefaultOptions()})
	if err != nil {
		t.Fatal(err)
	}
	wantFrames := readPcap(t, filepath.Join(odir, "out0.pcap"))
	if len(wantFrames) == 0 || want.Dropped == 0 {
		t.Fatalf("oracle forwards %d, drops %d: the test needs both", len(wantFrames), want.Dropped)
	}
	src, err := os.ReadFile(pipeline)
	if err != nil {
		t.Fatal(err)
	}
	for _, backend := range envList("WARPFLOW_LIVE_BACKENDS", "cpu,cuda") {
		t.Run(backend, func(t *testing.T) {
			if why := backendUsable(backend); why != "" {
				t.Skip(why)
			}
			topo := liveLab(t, 1)
			dir := t.TempDir()
			pipe := writeFile(t, dir, "p.yaml", withBackend(t, src, backend))
			cfg := writeFile(t, dir, "d.yaml", []byte(fmt.Sprintf(`pipeline: %s
interfaces:
  - {name: dp0, attach: native, bind: auto}
  - {name: dp1, receive: false, bind: auto}
ports: {out0: dp1}
workers_per_queue: 0
`, pipe)))
			sink := startSinkCapture(t, topo)
			d := startLiveDaemon(t, topo, daemon, cfg)
			d.waitFor(t, "running", 20*time.Second, nil)
			// The generator ends by its --duration; one that does not is
			// left running when this fails.
			type genRun struct {
				res gen.Result
				err error
			}
			ran := make(chan genRun, 1)
			go func() {
				res, err := runGen(t, ctl, topo, runtime.NumCPU()-1, "--engine", "afxdp", "--pcap", capture,
					"--count", strconv.FormatUint(want.Received, 10), "--rate", "20000", "--duration", "20s")
				ran <- genRun{res, err}
			}()
			r := testwait.Recv(t, ran, "warpctl gen of a 20s run to return", 20*time.Second+testwait.Deadline)
			res, err := r.res, r.err
			if err != nil {
				t.Fatal(err)
			}
			if res.Sent != want.Received {
				t.Fatalf("the generator sent %d frames, the capture has %d", res.Sent, want.Received)
			}
			d.waitFor(t, "stats", 10*time.Second, func(m map[string]any) bool { return num(m, "received") >= want.Received })
			time.Sleep(200 * time.Millisecond) // settle, not a wait for a condition: the last frames through the sink's veth to tcpdump
			st := d.stop(t)
			got := sink.finish(t)
			t.Logf("%s: sent %d, daemon received %d, transmitted %d, dropped %d (and %d by the XDP program); sink got %d, replay wrote %d",
				backend, res.Sent, num(st, "received"), num(st, "transmitted"), num(st, "dropped"), num(st, "xdp_dropped"), len(got), len(wantFrames))
			if r := num(st, "received"); r != want.Received {
				t.Errorf("daemon received %d, sent %d", r, want.Received)
			}
			// The pipeline's first rules run in the XDP program (the
			// kernel half): what they drop the stats line counts apart,
			// as xdp_dropped and xdp_drops; the replay ran them all.
			if tx, dr := num(st, "transmitted"), num(st, "dropped")+num(st, "xdp_dropped"); tx != want.Transmitted || dr != want.Dropped {
				t.Errorf("daemon transmitted %d, dropped %d (by the engine and the XDP program); replay %d, %d", tx, dr, want.Transmitted, want.Dropped)
			}
			for _, dc := range want.Drops {
				if n := num(st, "drops", dc.Reason) + num(st, "xdp_drops", dc.Reason); n != dc.Packets {
					t.Errorf("drops[%s] = %d (engine and XDP program), replay %d", dc.Reason, n, dc.Packets)
				}
			}
			if b, _ := st["balanced"].(bool); !b {
				t.Errorf("daemon not balanced: %v", st)
			}
			if len(got) != len(wantFrames) {
				t.Fatalf("sink got %d frames, replay wrote %d", len(got), len(wantFrames))
			}
			for i := range got {
				if !bytes.Equal(got[i], wantFrames[i]) {
					t.Fatalf("frame %d differs:\nsink   %x\nreplay %x", i, got[i], wantFrames[i])
				}
			}
			if backend == "cuda" && !strings.Contains(d.log(), "cuda") {
				t.Logf("daemon log names no cuda executor:\n%s", tail(d.log(), 2000))
			}
		})
	}
}

// The N-queue table's pipelines: receive and drop, or swap the MACs and
// send back out of dp0 (out0 is mapped to dp0).
const (
	liveRXDrop = `name: live-rxdrop
settings: {batch_size: 256, workers: 0}
stages:
  - {name: parse, type: parse}
  - {name: sink, type: drop, reason: bench}
`
	liveMacSwap = `name: live-macswap
settings: {batch_size: 256, workers: 0}
stages:
  - {name: parse, type: parse}
  - {name: swap, type: rewrite, swap_macs: true}
  - {name: out, type: tx, port: out0}
`
)

// liveRow is one case of the N-queue table.
type liveRow struct {
	Backend     string            `json:"backend"`
	Mode        string            `json:"mode"`
	Queues      int               `json:"queues"`
	Window      float64           `json:"window_s"`
	OfferedMpps float64           `json:"offered_mpps"`     // the generators' sent frames (kernel-counted)
	RedirMpps   float64           `json:"redirect_mpps"`    // dp0's XDP program redirected to the sockets
	RecvMpps    float64           `json:"received_mpps"`    // the sockets' RX rings delivered to warpflowd
	TxMpps      float64           `json:"transmitted_mpps"` // warpflowd put on the TX ring and saw completed
	FwdMpps     float64           `json:"forwarded_mpps"`   // gen0's received frames (what came back)
	Dropped     uint64            `json:"dropped"`          // warpflowd's drops, all reasons
	Drops       map[string]uint64 `json:"drops,omitempty"`  // by reason
	KernelLost  uint64            `json:"kernel_lost"`      // XDP_STATISTICS: rx_ring_full + rx_dropped
	Cores       float64           `json:"dataplane_cores"`
	Balanced    bool              `json:"balanced"`
	Error       string            `json:"error,omitempty"`
}

// TestLiveQueues is the N-queue table: per queue count, backend and mode,
// warpflowd serves N queues of dp0 (I/O loops on CPUs 1..N) while N
// generators (XDP live frames, as fast as they go, one per queue on a CPU
// that veth maps to that queue) flood it for the window. Rates are the
// kernel's counters (the generators' sent frames, dp0's XDP program's
// redirects and the sockets' losses, gen0's received frames for the
// forwarded ones) over the generators' window; cores are warpflowd's
// user + system time over it (/proc). It writes live-queues.json.
func TestLiveQueues(t *testing.T) {
	liveEnv(t)
	daemon := liveBinary(t, "WARPFLOW_LIVE_DAEMON", "github.com/warpflow/warpflow/cmd/warpflowd")
	ctl := liveBinary(t, "WARPFLOW_LIVE_WARPCTL", "github.com/warpflow/warpflow/cmd/warpctl")
	window, err := time.ParseDuration(envOr("WARPFLOW_LIVE_WINDOW", "2s"))
	if err != nil {
		t.Fatal(err)
	}
	var qs []int
	maxQ := 1
	for _, s := range envList("WARPFLOW_LIVE_QUEUES", "1,2,4") {
		q, err := strconv.Atoi(s)
		if err != nil || q < 1 {
			t.Fatalf("WARPFLOW_LIVE_QUEUES: %q", s)
		}
		qs = append(qs, q)
		maxQ = max(maxQ, q)
	}
	if ncpu := runtime.NumCPU(); ncpu < maxQ+1 {
		t.Fatalf("%d CPUs: %d queues need %d (I/O loops on CPUs 1..N, generators on CPU 0 and above N)", ncpu, maxQ, maxQ+1)
	}
	topo := liveLab(t, maxQ)
	out := os.Getenv("WARPFLOW_LIVE_OUT")
	var rows []liveRow
	save := func() {
		if out == "" {
			return
		}
		b, _ := json.MarshalIndent(rows, "", "  ")
		os.WriteFile(filepath.Join(out, "live-queues.json"), b, 0o644)
	}
	for _, q := range qs {
		for _, backend := range envList("WARPFLOW_LIVE_BACKENDS", "cpu,cuda") {
			if why := backendUsable(backend); why != "" {
				t.Logf("%s rows skipped: %s", backend, why)
				continue
			}
			for _, mode := range envList("WARPFLOW_LIVE_MODES", "rxonly,macswap") {
				r := liveCase(t, topo, daemon, ctl, backend, mode, q, maxQ, window)
				rows = append(rows, r)
				save()
				t.Logf("%-4s %-7s %d queues: offered %6.2f, redirected %6.2f, received %6.2f, transmitted %6.2f, forwarded %6.2f Mpps; kernel lost %d, dropped %d; %.2f cores; balanced %v %s",
					r.Backend, r.Mode, r.Queues, r.OfferedMpps, r.RedirMpps, r.RecvMpps, r.TxMpps, r.FwdMpps, r.KernelLost, r.Dropped, r.Cores, r.Balanced, r.Error)
			}
		}
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func liveCase(t *testing.T, topo *lab.Topology, daemon, ctl, backend, mode string, q, labQueues int, window time.Duration) (row liveRow) {
	row = liveRow{Backend: backend, Mode: mode, Queues: q}
	dir := t.TempDir()
	src, ports := liveRXDrop, ""
	if mode == "macswap" {
		src, ports = liveMacSwap, "ports: {out0: dp0}\n"
	} else if mode != "rxonly" {
		row.Error = "mode: want rxonly or macswap"
		return row
	}
	var qlist, cpus []string
	for i := range q {
		qlist = append(qlist, strconv.Itoa(i))
		cpus = append(cpus, strconv.Itoa(1+i))
	}
	pipe := writeFile(t, dir, "p.yaml", withBackend(t, []byte(src), backend))
	cfg := writeFile(t, dir, "d.yaml", []byte(fmt.Sprintf(`pipeline: %s
interfaces:
  - {name: dp0, attach: native, bind: auto, queues: [%s]}
%sworkers_per_queue: 0
cpus: [%s]
`, pipe, strings.Join(qlist, ", "), ports, strings.Join(cpus, ", "))))
	d := startLiveDaemon(t, topo, daemon, cfg)
	defer func() {
		if out := os.Getenv("WARPFLOW_LIVE_OUT"); out != "" && (row.Error != "" || t.Failed()) {
			f, err := os.OpenFile(filepath.Join(out, "daemon-errors.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
			if err == nil {
				fmt.Fprintf(f, "=== %s %s %d queues: %s\n%s\n", backend, mode, q, row.Error, tail(d.log(), 20000))
				f.Close()
			}
		}
	}()
	d.waitFor(t, "running", 20*time.Second, nil)
	gen0 := linkStats(t, topo.Gen.Namespace, topo.Gen.Name)
	c0, err := cpuSeconds(d.cmd.Process.Pid)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	// One generator per queue i on the highest CPU that veth maps to i
	// (cpu % labQueues) and no I/O loop uses.
	var wg sync.WaitGroup
	results := make([]gen.Result, q)
	errs := make([]error, q)
	for i := range q {
		cpu := -1
		for c := runtime.NumCPU() - 1; c >= 0; c-- {
			if c%labQueues == i && (c == 0 || c > q) {
				cpu = c
				break
			}
		}
		if cpu < 0 {
			row.Error = fmt.Sprintf("no CPU for queue %d's generator", i)
			return row
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = runGen(t, ctl, topo, cpu, "--count", "2000000000", "--duration", window.String())
		}()
	}
	// Each generator ends by its --duration; a generator that does not
	// is left running when this fails.
	testwait.Group(t, &wg, fmt.Sprintf("%d generators of a %v window to return", q, window), window+testwait.Deadline)
	c1, _ := cpuSeconds(d.cmd.Process.Pid)
	gen1 := linkStats(t, topo.Gen.Namespace, topo.Gen.Name)
	time.Sleep(100 * time.Millisecond) // settle, not a wait for a condition: the last frames through the daemon before its final stats
	st := d.stop(t)
	var sent uint64
	var secs float64
	for i := range q {
		if errs[i] != nil {
			row.Error = errs[i].Error()
			return row
		}
		sent += results[i].Sent
		secs = max(secs, results[i].Elapsed.Seconds())
	}
	if secs == 0 {
		row.Error = "the generators ran for no time"
		return row
	}
	mpps := func(n uint64) float64 { return float64(n) / secs / 1e6 }
	lost := num(st, "kernel_drops", "rx_ring_full") + num(st, "kernel_drops", "rx_dropped")
	row.Window = secs
	row.OfferedMpps = mpps(sent)
	row.RedirMpps = mpps(num(st, "xdp_redirected"))
	row.RecvMpps = mpps(num(st, "received"))
	row.KernelLost = lost
	row.Cores = (c1 - c0) / secs
	row.Balanced, _ = st["balanced"].(bool)
	row.FwdMpps = mpps(gen1.RxPackets - gen0.RxPackets)
	row.TxMpps = mpps(num(st, "transmitted"))
	row.Dropped = num(st, "dropped")
	if m, ok := st["drops"].(map[string]any); ok {
		row.Drops = map[string]uint64{}
		for k := range m {
			row.Drops[k] = num(m, k)
		}
	}
	return row
}
