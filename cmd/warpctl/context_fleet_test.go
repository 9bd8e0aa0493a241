package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warpflow/warpflow/internal/lab"

	"github.com/warpflow/warpflow/internal/testwait"
)

// fleetDaemon is one warpflowd on a lab of its own.
type fleetDaemon struct {
	name, sock string
	cmd        *exec.Cmd
	done       chan error
}

// startFleetDaemon starts warpflowd (bin) in lab topo's dp namespace with
// a control socket of its own, and waits (10 s at most) for it to run.
func startFleetDaemon(t *testing.T, bin, name string, topo *lab.Topology) *fleetDaemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "wf-fleet-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	pipeline, _ := filepath.Abs("../../testdata/live/lab-forward.yaml")
	cfg := filepath.Join(dir, "warpflowd.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`pipeline: %s
interfaces:
  - {name: dp0, attach: native}
  - {name: dp1, receive: false}
ports: {out0: dp1}
workers_per_queue: 0
stats_interval: 0s
`, pipeline)), 0o644)
	d := &fleetDaemon{name: name, sock: filepath.Join(dir, "ctl.sock"), done: make(chan error, 1)}
	d.cmd = exec.Command("nsenter", "--net="+filepath.Join(lab.NamespaceDir, topo.DP0.Namespace), "--", bin,
		"--config", cfg, "--socket", d.sock, "--capture-dir", filepath.Join(dir, "captures"), "--log-format", "json")
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			d.cmd.Process.Kill()
			testwait.Recv(t, d.done, "warpflowd "+name+" to exit after SIGKILL (cleanup)", testwait.Deadline)
		}
	})
	running := make(chan struct{})
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		once := false
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if !once && strings.Contains(sc.Text(), `"msg":"running"`) {
				once = true
				close(running)
			}
		}
		d.done <- d.cmd.Wait()
	}()
	select {
	case <-running:
	case err := <-d.done:
		d.done <- err
		t.Fatalf("warpflowd %s exited (%v) before running", name, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("warpflowd %s did not run within 10s", name)
	}
	return d
}

func (d *fleetDaemon) stop(t *testing.T) {
	t.Helper()
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		d.done <- err
		if err != nil {
			t.Fatalf("warpflowd %s after SIGTERM: %v", d.name, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("warpflowd %s did not stop within 10s", d.name)
	}
}

// TestFleetAllStats: three warpflowd on three labs on this machine, named
// in a contexts file; one is stopped. `warpctl --all stats` prints two
// rows, a total of what the two received, and one unreachable line, and
// exits 0; --all pipeline list and ports answer the same way.
func TestFleetAllStats(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root, and CI=true forbids skipping")
		}
		t.Skip("needs root (netns, veth, XDP, AF_XDP)")
	}
	bin := filepath.Join(t.TempDir(), "warpflowd")
	if out, err := exec.Command("go", "build", "-o", bin, "../warpflowd").CombinedOutput(); err != nil {
		t.Fatalf("go build warpflowd: %v\n%s", err, out)
	}
	var ds []*fleetDaemon
	var ctxs strings.Builder
	ctxs.WriteString("contexts:\n")
	for i, name := range []string{"edge-1", "edge-2", "edge-3"} {
		b := make([]byte, 3)
		rand.Read(b)
		o := lab.DefaultOptions()
		o.Prefix = fmt.Sprintf("f%d%s", i, hex.EncodeToString(b))
		topo, err := lab.Up(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := lab.Down(o.Prefix); err != nil {
				t.Error(err)
			}
		})
		d := startFleetDaemon(t, bin, name, topo)
		ds = append(ds, d)
		fmt.Fprintf(&ctxs, "  - {name: %s, socket: %s}\n", name, d.sock)
		if i < 2 { // traffic for the two that stay
			if out, errOut, code := run(t, "gen", "--netns", lab.GenNS(o.Prefix), "--count", fmt.Sprint(1000*(i+1))); code != 0 {
				t.Fatalf("gen: exit %d %s%s", code, out, errOut)
			}
		}
	}
	writeContexts(t, ctxs.String(), 0o600)
	ds[2].stop(t)

	// The daemons count what arrived within a moment; wait for it.
	var out string
	for deadline := time.Now().Add(5 * time.Second); ; {
		var code int
		var errOut string
		out, errOut, code = run(t, "--all", "stats")
		if code != 0 {
			t.Fatalf("--all stats: exit %d %s\n%s", code, errOut, out)
		}
		if strings.Contains(out, " 3000 ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("--all stats did not total 3000 received within 5s; last:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("warpctl --all stats:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 {
		t.Fatalf("want a header, two rows, a total and one unreachable line:\n%s", out)
	}
	rx := func(line string) string { return strings.Fields(line)[5] }
	if !strings.HasPrefix(lines[1], "edge-1 ") || rx(lines[1]) != "1000" || !strings.HasPrefix(lines[2], "edge-2 ") || rx(lines[2]) != "2000" {
		t.Errorf("rows:\n%s\n%s", lines[1], lines[2])
	}
	if f := strings.Fields(lines[3]); f[0] != "TOTAL" || !strings.Contains(lines[3], "2 of 3 daemons") || f[5] != "3000" {
		t.Errorf("total: %s", lines[3])
	}
	if !strings.HasPrefix(lines[4], "unreachable: edge-3 ("+ds[2].sock+"): ") {
		t.Errorf("unreachable line: %s", lines[4])
	}
	if out, _, code := run(t, "--all", "pipeline", "list"); code != 0 || !strings.Contains(out, "lab-forward on 2") || !strings.Contains(out, "unreachable: edge-3") {
		t.Errorf("--all pipeline list: exit %d\n%s", code, out)
	}
	if out, _, code := run(t, "--all", "ports"); code != 0 || !strings.Contains(out, "4 interfaces") || !strings.Contains(out, "copy") {
		t.Errorf("--all ports: exit %d\n%s", code, out)
	}
	for _, d := range ds[:2] {
		d.stop(t)
	}
}
