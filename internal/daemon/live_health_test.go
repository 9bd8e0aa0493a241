package daemon_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/lab"
)

// httpGet fetches url from inside namespace ns with curl and returns the
// status code and body.
func httpGet(t *testing.T, ns, url string) (int, string) {
	t.Helper()
	out, err := inNS(ns, "curl", "-s", "--max-time", "5", "-w", "\n%{http_code}", url).Output()
	if err != nil {
		t.Fatalf("curl %s: %v", url, err)
	}
	s := string(out)
	i := strings.LastIndexByte(s, '\n')
	code, err := strconv.Atoi(s[i+1:])
	if err != nil {
		t.Fatalf("curl %s: no status in %q", url, s)
	}
	return code, s[:i]
}

// readiness fetches /readyz and decodes it.
func readiness(t *testing.T, ns, addr string) (int, control.Readiness) {
	t.Helper()
	code, body := httpGet(t, ns, "http://"+addr+"/readyz")
	var r control.Readiness
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("/readyz: %d %q: %v", code, body, err)
	}
	return code, r
}

// TestLiveHealth: /healthz and /readyz on the metrics listener. With both
// lab interfaces receiving, /readyz is 200 and lists both queues running;
// after dp1 is deleted under on_link_loss: continue it is 503, names the
// lost queue and keeps dp0's running, while /healthz stays 200 (the
// process serves: a liveness probe must not restart it for that).
func TestLiveHealth(t *testing.T) {
	requireLive(t, "curl")
	topo := newLab(t)
	dir := t.TempDir()
	pipeline := writePipeline(t, dir, "blackhole", "name: blackhole\nstages:\n  - {name: sink, type: drop, reason: blackholed}\n")
	cfg := filepath.Join(dir, "warpflowd.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`pipeline: %s
interfaces:
  - {name: dp0, attach: native}
  - {name: dp1, attach: native}
on_link_loss: continue
stats_interval: 0s
workers_per_queue: 0
`, pipeline)), 0o644); err != nil {
		t.Fatal(err)
	}
	ns := topo.DP0.Namespace
	d := startDaemon(t, ns, "--config", cfg, "--metrics-addr", "127.0.0.1:0")
	m := d.waitFor(t, "metrics", 10*time.Second)
	addr, _ := m["listen"].(string)
	d.waitFor(t, "running", 10*time.Second)

	// The engines start just after "running" is logged: wait (bounded)
	// for the first 200.
	var code int
	var r control.Readiness
	for deadline := time.Now().Add(5 * time.Second); ; {
		if code, r = readiness(t, ns, addr); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz did not answer 200 within 5s with both queues up: last %d %+v", code, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
	want := []control.QueueReadiness{{Queue: "dp0/q0", State: control.QueueRunning}, {Queue: "dp1/q0", State: control.QueueRunning}}
	if code != 200 || !r.Ready || r.Pipeline != "blackhole" || fmt.Sprint(r.Queues) != fmt.Sprint(want) || len(r.Problems) != 0 {
		t.Fatalf("/readyz with both queues up: %d %+v", code, r)
	}
	if code, body := httpGet(t, ns, "http://"+addr+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}

	if err := lab.Do(topo.DP1.Namespace, func() error {
		l, err := netlink.LinkByName(topo.DP1.Name)
		if err != nil {
			return err
		}
		return netlink.LinkDel(l)
	}); err != nil {
		t.Fatalf("delete dp1: %v", err)
	}
	d.waitFor(t, "interface lost", 5*time.Second)
	code, r = readiness(t, ns, addr)
	want[1].State = control.QueueLost
	if code != 503 || r.Ready || fmt.Sprint(r.Queues) != fmt.Sprint(want) || len(r.Problems) != 1 || !strings.Contains(r.Problems[0], "dp1/q0") {
		t.Fatalf("/readyz after dp1 went: %d %+v", code, r)
	}
	if code, _ := httpGet(t, ns, "http://"+addr+"/healthz"); code != 200 {
		t.Fatalf("/healthz after dp1 went: %d, want 200 (the process still serves)", code)
	}
	if code := d.stop(t, syscall.SIGTERM, 10*time.Second); code != 0 {
		t.Logf("exit code after SIGTERM with a lost queue: %d", code)
	}
}
