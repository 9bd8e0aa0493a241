package livebench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/warpflow/warpflow/internal/lab"
)

// A peer is one dataplane under test, run as its own process inside the
// lab's dataplane namespace.
type peer interface {
	// start launches it for mode and returns once it forwards (its
	// program attached, its socket bound), or an error.
	start(ctx context.Context, mode Mode) error
	// granted is the bind mode the peer's socket got ("copy", "zerocopy").
	granted() string
	// stop ends it (bounded) and returns its own closing report, kept for
	// the record only.
	stop() (string, error)
}

// proc runs one command and collects its combined output.
type proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	out   strings.Builder
	ready chan struct{} // closed at the first line matching readyRE
	done  chan struct{} // closed when output ends
	// readyRE marks readiness in the output.
	readyRE *regexp.Regexp
	once    sync.Once
}

func startProc(ns string, readyRE *regexp.Regexp, name string, args ...string) (*proc, error) {
	p := &proc{readyRE: readyRE, ready: make(chan struct{}), done: make(chan struct{})}
	p.cmd = exec.Command(name, args...)
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		pr.Close()
		pw.Close()
		return nil, err
	}
	// The child inherits the namespace of the thread that starts it.
	if ns == "" {
		err = p.cmd.Start()
	} else {
		err = lab.Do(ns, func() error { return p.cmd.Start() })
	}
	pw.Close()
	if err != nil {
		pr.Close()
		return nil, fmt.Errorf("start %s in %s: %w", name, ns, err)
	}
	go func() {
		defer close(p.done)
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.out.WriteString(line + "\n")
			p.mu.Unlock()
			if p.readyRE.MatchString(line) {
				p.once.Do(func() { close(p.ready) })
			}
		}
	}()
	return p, nil
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// waitReady waits for the ready line, the process's end, or the timeout.
func (p *proc) waitReady(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.ready:
		return nil
	case <-p.done:
		p.cmd.Wait()
		return fmt.Errorf("%s exited before it was ready: %s", filepath.Base(p.cmd.Path), tail(p.output()))
	case <-t.C:
		p.kill()
		return fmt.Errorf("%s not ready after %s: %s", filepath.Base(p.cmd.Path), timeout, lastLines(p.output(), 8))
	case <-ctx.Done():
		p.kill()
		return ctx.Err()
	}
}

// end waits (bounded) for the process to exit after it was asked to, and
// kills it past the bound.
func (p *proc) end(timeout time.Duration) error {
	exited := make(chan error, 1)
	go func() {
		<-p.done
		exited <- p.cmd.Wait()
	}()
	select {
	case err := <-exited:
		return err
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-exited
		return fmt.Errorf("%s did not stop within %s; killed", filepath.Base(p.cmd.Path), timeout)
	}
}

func (p *proc) kill() {
	p.cmd.Process.Kill()
	go p.end(time.Second) // reap
}

// tail is the end of a tool's output, or the start of its panic.
func tail(out string) string {
	if i := strings.Index(out, "panic:"); i >= 0 {
		lines := strings.SplitN(out[i:], "\n", 12)
		return strings.Join(lines[:min(len(lines), 11)], " | ")
	}
	return lastLines(out, 8)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// warpflowd runs the daemon with a generated config.
type warpflowd struct {
	bin, dir string
	ns       string
	cpu      int
	rings    Rings
	p        *proc
	bind     string
}

var (
	wfReadyRE = regexp.MustCompile(`msg=running`)
	wfBindRE  = regexp.MustCompile(`msg="queue up".* attach=(\S+) bind=(\S+)`)
	wfFinalRE = regexp.MustCompile(`msg="final stats".*`)
)

func (w *warpflowd) start(ctx context.Context, mode Mode) error {
	pipe := filepath.Join(w.dir, "bench-"+mode.String()+".yaml")
	src := rxdropPipeline
	ports := ""
	extra := "" // interfaces beside dp0
	switch mode {
	case MacSwap:
		src, ports = macswapPipeline, "ports: {out0: dp0}\n"
	case Stateful:
		// Out of dp1 to the sink (stateful.go).
		src, ports = statefulPipeline, "ports: {out0: "+lab.DP1Iface+"}\n"
		extra = "  - {name: " + lab.DP1Iface + ", receive: false}\n"
	}
	if err := os.WriteFile(pipe, src, 0o644); err != nil {
		return err
	}
	r := w.rings
	cfg := fmt.Sprintf(`pipeline: %s
interfaces:
  - {name: %s, attach: native, bind: auto}
%s%sumem: {frames: %d, frame_size: 2048}
rings: {rx: %d, tx: %d, fill: %d, completion: %d}
workers_per_queue: 0
cpus: [%d]
stats_interval: 0s
`, pipe, lab.DP0Iface, extra, ports, r.Frames, r.RX, r.TX, r.Fill, r.Completion, w.cpu)
	path := filepath.Join(w.dir, "warpflowd-"+mode.String()+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return err
	}
	args := []string{"--config", path}
	if hasSocketFlag(w.bin) {
		// Its own control socket, so a daemon already serving the default
		// path (or a before-binary run beside) does not refuse it.
		args = append(args, "--socket", filepath.Join(w.dir, "warpflowd-"+mode.String()+".sock"))
	}
	p, err := startProc(w.ns, wfReadyRE, w.bin, args...)
	if err != nil {
		return err
	}
	w.p = p
	if err := p.waitReady(ctx, 20*time.Second); err != nil {
		return err
	}
	w.bind = "?"
	if m := wfBindRE.FindStringSubmatch(p.output()); m != nil {
		w.bind = m[2]
	}
	return nil
}

func (w *warpflowd) granted() string { return w.bind }

func (w *warpflowd) stop() (string, error) {
	if w.p == nil {
		return "", nil
	}
	w.p.cmd.Process.Signal(syscall.SIGINT)
	err := w.p.end(10 * time.Second)
	out := w.p.output()
	w.p = nil
	rep := wfFinalRE.FindString(out)
	if err != nil {
		return rep, fmt.Errorf("warpflowd: %w: %s", err, lastLines(out, 6))
	}
	return rep, nil
}

// testpmd runs dpdk-testpmd with its AF_XDP driver on dp0.
type testpmd struct {
	bin    string
	ns     string
	cpus   [2]int // main lcore, forwarding lcore
	prefix string
	p      *proc
}

var (
	tpReadyRE = regexp.MustCompile(`Press enter to exit`)
	tpRXRE    = regexp.MustCompile(`RX-packets: *(\d+) *RX-dropped: *(\d+) *RX-total: *(\d+)`)
)

// testpmdArgs is the command line of nsenter: stdbuf -oL (so that "Press
// enter to exit" arrives when printed, not at exit), EAL on the two lcores,
// no hugepages, the AF_XDP vdev on dp0, forwarding mode rxonly or macswap.
func testpmdArgs(bin, ns string, cpus [2]int, prefix string, mode Mode) []string {
	return []string{"--net=" + filepath.Join(lab.NamespaceDir, ns), "stdbuf", "-oL", bin,
		"-l", fmt.Sprintf("%d,%d", cpus[0], cpus[1]),
		"--no-huge", "-m", "1024", "--no-pci", "--no-shconf", "--file-prefix", prefix,
		"--vdev", "net_af_xdp0,iface=" + lab.DP0Iface,
		"--", "--forward-mode=" + mode.String(), "--nb-cores=1"}
}

func (t *testpmd) start(ctx context.Context, mode Mode) error {
	// nsenter --net, as an operator would; stdin stays a pipe so that a
	// newline stops it.
	p, err := startProc("", tpReadyRE, "nsenter", testpmdArgs(t.bin, t.ns, t.cpus, t.prefix, mode)...)
	if err != nil {
		return err
	}
	t.p = p
	return p.waitReady(ctx, 60*time.Second)
}

// granted: veth has no AF_XDP zero-copy, so the kernel can only have given
// testpmd copy mode (this kernel has no xsk_diag to read it back).
func (t *testpmd) granted() string { return "copy" }

func (t *testpmd) stop() (string, error) {
	if t.p == nil {
		return "", nil
	}
	io.WriteString(t.p.stdin, "\n")
	t.p.stdin.Close()
	err := t.p.end(20 * time.Second)
	out := t.p.output()
	t.p = nil
	rep := ""
	if m := tpRXRE.FindAllString(out, -1); len(m) > 0 {
		rep = m[len(m)-1]
	}
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return rep, fmt.Errorf("testpmd: %w: %s", err, lastLines(out, 6))
		}
	}
	return rep, nil
}

// hasSocketFlag reports whether a warpflowd binary has the control plane's
// --socket flag (a before-binary built from an older revision may not).
func hasSocketFlag(bin string) bool {
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	return strings.Contains(string(out), "--socket")
}
