package daemon_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warpflow/warpflow/internal/capset"
	"github.com/warpflow/warpflow/internal/image"
	"golang.org/x/sys/unix"
)

// TestLiveImage builds the OCI image (internal/image, what scripts/image
// writes), loads it with podman and runs warpflowd from it on a lab of its
// own: --network host in the lab's dp namespace, the image's non-root
// default user, and only the capabilities the systemd unit lists (parsed
// from cmd/warpflowd/warpflowd.service, so the two cannot drift). A queue
// must come up, /readyz must say so through the container, and the sink
// must capture exactly what the offline replay of the same pipeline over
// the same capture writes, with the counters equal to the replay's; after
// SIGTERM the container exits 0 and dp0 has no XDP program left.
//
// Two things of the container runtime are set explicitly, each for a
// reason of its own:
//   - seccomp: podman's default profile lets bpf(2) through only with
//     CAP_SYS_ADMIN, so the container gets that profile with bpf allowed
//     under CAP_BPF (image.SeccompWithBPF), not an unconfined one;
//   - runc and explicit rlimits: crun (podman's default runtime on Debian
//     12) refuses a host with a hybrid cgroup hierarchy, which runc
//     handles, and podman's default rlimits (nofile 1048576) need
//     CAP_SYS_RESOURCE to set where the host's limits are lower.
func TestLiveImage(t *testing.T) {
	requireLive(t, "podman", "runc", "tcpreplay", "tcpdump", "curl")
	const pipeline = "../../testdata/live/lab-forward.yaml"
	const capture = "../../testdata/captures/mixed.pcap"
	caps, err := image.UnitCapabilities("../../cmd/warpflowd/warpflowd.service")
	if err != nil {
		t.Fatal(err)
	}
	want, wantFrames := replayOracle(t, pipeline, capture)

	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	o := image.DefaultOptions(root)
	o.Output = filepath.Join(t.TempDir(), "warpflow-image.tar")
	o.AllowDirty = true // the tests may run in a tree with changes; the image names them
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := image.Build(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("podman", "load", "-i", res.Path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Loaded image: "+res.Ref) {
		t.Fatalf("podman load -i %s: %v\n%s", res.Path, err, out)
	}
	t.Cleanup(func() { exec.Command("podman", "rmi", "--force", res.Ref).Run() })
	inspect, err := exec.Command("podman", "image", "inspect", res.Ref, "--format",
		"{{.Id}} {{.Digest}} {{.Config.User}} {{index .Labels \"org.opencontainers.image.revision\"}}").Output()
	if err != nil {
		t.Fatalf("podman image inspect: %v", err)
	}
	wantInspect := fmt.Sprintf("%s %s %d:%d %s", strings.TrimPrefix(res.ConfigDigest, "sha256:"), res.Manifest, image.User, image.User, res.Revision)
	if got := strings.TrimSpace(string(inspect)); got != wantInspect {
		t.Fatalf("podman sees the image as %q, built %q", got, wantInspect)
	}

	topo := newLab(t)
	etc, run := t.TempDir(), t.TempDir()
	src, err := os.ReadFile(pipeline)
	if err != nil {
		t.Fatal(err)
	}
	cfg := `pipeline: /etc/warpflow/pipeline.yaml
interfaces:
  - {name: dp0, attach: native, bind: auto}
  - {name: dp1, receive: false, bind: auto}
ports: {out0: dp1}
workers_per_queue: 0
track_frames: true
control: {socket: /run/warpflow/warpflowd.sock}
`
	for name, data := range map[string][]byte{"pipeline.yaml": src, "warpflowd.yaml": []byte(cfg)} {
		if err := os.WriteFile(filepath.Join(etc, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The socket's directory belongs to the image's user, like the unit's
	// RuntimeDirectory.
	if err := os.Chown(run, image.User, image.User); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(run, 0o750); err != nil {
		t.Fatal(err)
	}
	base, err := os.ReadFile(image.DefaultSeccomp)
	if err != nil {
		t.Fatalf("podman's default seccomp profile: %v", err)
	}
	prof, err := image.SeccompWithBPF(base)
	if err != nil {
		t.Fatal(err)
	}
	seccomp := filepath.Join(t.TempDir(), "seccomp.json")
	if err := os.WriteFile(seccomp, prof, 0o644); err != nil {
		t.Fatal(err)
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	limit := min(rl.Cur, 4096)
	var b [4]byte
	rand.Read(b[:])
	name := "warpflow-test-" + hex.EncodeToString(b[:])
	// Registered before the daemon's own cleanup, so it runs after it:
	// killing podman leaves the container to conmon.
	t.Cleanup(func() { exec.Command("podman", "rm", "--force", "--time", "0", name).Run() })

	sink := startSinkCapture(t, topo)
	d := watchDaemon(t, inNS(topo.DP0.Namespace, "podman", "--runtime", "runc", "run", "--rm", "--name", name,
		"--network", "host",
		"--cap-drop", "all", "--cap-add", strings.Join(image.Short(caps), ","),
		"--security-opt", "seccomp="+seccomp,
		"--ulimit", fmt.Sprintf("nofile=%d:%d", limit, limit), "--ulimit", fmt.Sprintf("nproc=%d:%d", limit, limit),
		"-v", etc+":/etc/warpflow:ro", "-v", run+":/run/warpflow",
		res.Ref,
		"--config", "/etc/warpflow/warpflowd.yaml", "--log-format", "json", "--stats-interval", "50ms", "--metrics-addr", "127.0.0.1:0"))
	up := d.waitFor(t, "queue up", 60*time.Second)
	if up["attach"] != "native" || up["bind"] != "copy" {
		t.Errorf("veth granted attach=%v bind=%v in the container, want native and copy (veth has no zero-copy)", up["attach"], up["bind"])
	}
	m := d.waitFor(t, "metrics", 10*time.Second)
	d.waitFor(t, "running", 10*time.Second)
	addr, _ := m["listen"].(string)

	// What the container runs as: the image's user, with exactly the
	// unit's capabilities effective.
	pidOut, err := exec.Command("podman", "inspect", "--format", "{{.State.Pid}}", name).Output()
	if err != nil {
		t.Fatalf("podman inspect %s: %v", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidOut)))
	if err != nil || pid <= 0 {
		t.Fatalf("podman inspect %s: pid %q", name, pidOut)
	}
	sets, err := capset.Read(pid)
	if err != nil {
		t.Fatal(err)
	}
	wantSet, err := capset.Of(caps...)
	if err != nil {
		t.Fatal(err)
	}
	if sets.UID != image.User || sets.Effective != wantSet || sets.Bounding != wantSet {
		t.Errorf("the containerised daemon (pid %d) runs as uid %d with effective capabilities %v and bounding %v; want uid %d and the unit's %v for both",
			pid, sets.UID, sets.Effective, sets.Bounding, image.User, wantSet)
	}

	var code int
	for deadline := time.Now().Add(5 * time.Second); ; {
		if code, _ = readiness(t, topo.DP0.Namespace, addr); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz through the container did not answer 200 within 5s: last %d", code)
		}
		time.Sleep(20 * time.Millisecond)
	}

	sent := tcpreplay(t, topo, capture, 20000)
	if sent != int(want.Received) {
		t.Fatalf("tcpreplay sent %d packets, the capture has %d", sent, want.Received)
	}
	waitReceived(t, d, uint64(sent))
	time.Sleep(100 * time.Millisecond) // settle, not a wait for a condition: the last frames through the sink's veth to tcpdump
	// podman passes the signal on to the container's PID 1, warpflowd.
	if code := d.stop(t, syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("the container exited %d after SIGTERM, want 0", code)
	}
	got := sink.stop(t)
	st := d.find("final stats")
	if st == nil {
		t.Fatal("no final stats line")
	}
	if num(st, "received") != want.Received || num(st, "transmitted") != want.Transmitted || num(st, "dropped")+num(st, "xdp_dropped") != want.Dropped || num(st, "passed") != 0 {
		t.Errorf("container's daemon: received %d, transmitted %d, dropped %d, passed %d; replay: %d, %d, %d",
			num(st, "received"), num(st, "transmitted"), num(st, "dropped")+num(st, "xdp_dropped"), num(st, "passed"), want.Received, want.Transmitted, want.Dropped)
	}
	for _, dc := range want.Drops {
		if n := num(st, "drops", dc.Reason) + num(st, "xdp_drops", dc.Reason); n != dc.Packets {
			t.Errorf("drops[%s] = %d, replay counted %d", dc.Reason, n, dc.Packets)
		}
	}
	if f := num(st, "frames", "total"); f != 4096 || num(st, "frames", "free")+num(st, "frames", "fill") != f {
		t.Errorf("frame accounting at the end: %v", st["frames"])
	}
	if len(got) != len(wantFrames) {
		t.Fatalf("sink captured %d frames, replay wrote %d", len(got), len(wantFrames))
	}
	for i := range got {
		if !bytes.Equal(got[i], wantFrames[i]) {
			t.Fatalf("frame %d differs:\nsink   %x\nreplay %x", i, got[i], wantFrames[i])
		}
	}
	if xdpAttached(t, topo.DP0.Namespace, topo.DP0.Name) {
		t.Error("an XDP program is still attached to dp0 after the container exited")
	}
}
