package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warpflow/warpflow/internal/control/client"
	"github.com/warpflow/warpflow/internal/daemon"
	"github.com/warpflow/warpflow/internal/lab"
	"github.com/warpflow/warpflow/xdp"
)

// The systemd unit (cmd/warpflowd/warpflowd.service), read the way these
// tests need it: the [Service] section's settings, each key's values in
// order.
type unitFile map[string][]string

const unitPath = "../../cmd/warpflowd/warpflowd.service"

func readUnit(t *testing.T, path string) unitFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: line %q: not KEY=VALUE", path, line)
			}
			u[k] = append(u[k], v)
		}
	}
	return u
}

// one returns the unit's single value for key ("" when unset).
func (u unitFile) one(t *testing.T, key string) string {
	t.Helper()
	switch v := u[key]; len(v) {
	case 0:
		return ""
	case 1:
		return v[0]
	default:
		t.Fatalf("unit sets %s %d times: %q", key, len(v), v)
	}
	return ""
}

// caps returns the capabilities the unit gives the daemon: its
// AmbientCapabilities, which must be its CapabilityBoundingSet too (the
// daemon could not hold more than the bounding set lets it).
func (u unitFile) caps(t *testing.T) []string {
	t.Helper()
	var amb, bnd []string
	for _, v := range u["AmbientCapabilities"] {
		amb = append(amb, strings.Fields(v)...)
	}
	for _, v := range u["CapabilityBoundingSet"] {
		bnd = append(bnd, strings.Fields(v)...)
	}
	slices.Sort(amb)
	slices.Sort(bnd)
	if len(amb) == 0 || !slices.Equal(amb, bnd) {
		t.Fatalf("unit: AmbientCapabilities %v and CapabilityBoundingSet %v must name the same capabilities", amb, bnd)
	}
	return amb
}

// capNumbers maps the capability names a unit may use to their numbers.
var capNumbers = map[string]uint{
	"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_FOWNER": 3, "CAP_SETGID": 6, "CAP_SETUID": 7,
	"CAP_NET_BIND_SERVICE": 10, "CAP_NET_ADMIN": 12, "CAP_NET_RAW": 13, "CAP_IPC_LOCK": 14,
	"CAP_SYS_ADMIN": 21, "CAP_SYS_RESOURCE": 24, "CAP_PERFMON": 38, "CAP_BPF": 39,
}

func capMask(t *testing.T, names []string) uint64 {
	t.Helper()
	var m uint64
	for _, n := range names {
		c, ok := capNumbers[n]
		if !ok {
			t.Fatalf("unit capability %s: unknown to this test (add it to capNumbers)", n)
		}
		m |= 1 << c
	}
	return m
}

// freeID returns an id in [from, from+1000) that names no user (kind
// "user") or group, for a test identity that cannot collide with a real
// one.
func freeID(t *testing.T, kind string, from int, not ...int) int {
	t.Helper()
	for id := from; id < from+1000; id++ {
		var err error
		if kind == "user" {
			_, err = user.LookupId(strconv.Itoa(id))
		} else {
			_, err = user.LookupGroupId(strconv.Itoa(id))
		}
		if err != nil && !slices.Contains(not, id) {
			return id
		}
	}
	t.Fatalf("no free %s id in [%d, %d)", kind, from, from+1000)
	return -1
}

// procStatus reads the fields of /proc/PID/status.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestLiveServiceUnit runs warpflowd as the systemd unit would, without
// systemd: as an unprivileged user, with exactly the capabilities the
// unit file lists (parsed from it, so the test follows the unit), its
// memlock limit, no_new_privs, and the directories its RuntimeDirectory=
// and StateDirectory= make, owned by that user and group with the unit's
// modes. On a lab of its own the daemon must bring its queue up, hold
// those capabilities and no others, forward exactly what the offline
// replay of the pipeline forwards (the ACL's drops in the XDP program),
// serve the control socket to a member of the socket's group (by a
// supplementary group) and to root and refuse another user, make a
// capture in its capture_dir, and stop cleanly on SIGTERM.
//
// What it cannot show is systemd's own part (the namespaces ProtectSystem=
// and friends make, the seccomp filters of RestrictSUIDSGID= and the like,
// its creation of the user and directories): scripts/unit-systemd checks
// the unit under a real systemd. The unit's User=, Group= and
// SupplementaryGroups= decide which ids the test gives the daemon, so a
// unit whose group the daemon would have to chown to fails here as it
// would under systemd.
func TestLiveServiceUnit(t *testing.T) {
	requireLive(t, "tcpreplay", "tcpdump", "setpriv", "prlimit")
	u := readUnit(t, unitPath)
	caps := u.caps(t)
	for _, c := range caps {
		if c == "CAP_SYS_ADMIN" || c == "CAP_PERFMON" {
			t.Errorf("unit grants %s: the dataplane is meant to run without it", c)
		}
	}
	exec0 := strings.Fields(u.one(t, "ExecStart"))
	if len(exec0) < 3 || !slices.Contains(exec0, "--config") || !slices.Contains(exec0, "--log-format") {
		t.Fatalf("unit ExecStart %q: want the binary, --config FILE and --log-format json", exec0)
	}

	// The identities: the unit's user, its primary group and the socket
	// group (the unit's group, which the install steps make and the
	// config names as control.group) become free numeric ids.
	daemonUID := freeID(t, "user", 61000)
	memberUID := freeID(t, "user", 61000, daemonUID)
	sockGID := freeID(t, "group", 62000)
	primaryGID := sockGID
	var groups []int
	if u.one(t, "Group") == "" {
		// DynamicUser= without Group=: a group of its own, not the
		// socket's.
		primaryGID = freeID(t, "group", 62000, sockGID)
	}
	if sg := u["SupplementaryGroups"]; len(sg) > 0 {
		groups = append(groups, sockGID)
	}
	otherGID := freeID(t, "group", 62000, sockGID, primaryGID)

	// The files, where the daemon's user can read them: a root-owned 0755
	// tree like /usr/local/bin and /etc/warpflow, and the runtime and
	// state directories systemd would make for the unit.
	top, err := os.MkdirTemp("", "wf-unit-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(top, "warpflowd")
	copyFile(t, daemonBinary(t), bin, 0o755)
	ctl := filepath.Join(top, "warpctl")
	copyFile(t, warpctlBinary(t), ctl, 0o755)
	const pipelineSrc = "../../testdata/live/lab-forward.yaml"
	const capture = "../../testdata/captures/mixed.pcap"
	pipeline := filepath.Join(top, "pipeline.yaml")
	copyFile(t, pipelineSrc, pipeline, 0o644)
	mkUnitDir := func(name, modeKey string) string {
		mode, err := strconv.ParseUint(u.one(t, modeKey), 8, 32)
		if err != nil {
			t.Fatalf("unit %s=%q: %v", modeKey, u.one(t, modeKey), err)
		}
		dir := filepath.Join(top, name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, daemonUID, primaryGID); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, os.FileMode(mode)); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	if u.one(t, "RuntimeDirectory") == "" || u.one(t, "StateDirectory") == "" {
		t.Fatalf("unit has RuntimeDirectory=%q, StateDirectory=%q: want both (socket, captures)", u.one(t, "RuntimeDirectory"), u.one(t, "StateDirectory"))
	}
	runDir := mkUnitDir("run", "RuntimeDirectoryMode")
	stateDir := mkUnitDir("state", "StateDirectoryMode")
	sock := filepath.Join(runDir, "warpflowd.sock")
	cfg := filepath.Join(top, "warpflowd.yaml")
	cfgText := fmt.Sprintf(`pipeline: %s
interfaces:
  - {name: dp0, attach: native}
  - {name: dp1, receive: false}
ports: {out0: dp1}
stats_interval: 0s
control: {socket: %s, group: "%d"}
capture_dir: %s
`, pipeline, sock, sockGID, filepath.Join(stateDir, "captures"))
	if err := os.WriteFile(cfg, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}

	// The command systemd would run, with the unit's limits and
	// credentials applied by prlimit and setpriv (each execs the next, so
	// the process is warpflowd itself).
	memlock := u.one(t, "LimitMEMLOCK")
	if memlock == "infinity" {
		memlock = "unlimited"
	}
	if _, err := strconv.ParseUint(memlock, 10, 64); err != nil && memlock != "unlimited" {
		t.Fatalf("unit LimitMEMLOCK=%q: this test knows infinity and plain byte counts", u.one(t, "LimitMEMLOCK"))
	}
	lower := make([]string, len(caps))
	for i, c := range caps {
		lower[i] = "+" + strings.ToLower(strings.TrimPrefix(c, "CAP_"))
	}
	capArg := "-all," + strings.Join(lower, ",")
	priv := []string{"--reuid=" + strconv.Itoa(daemonUID), "--regid=" + strconv.Itoa(primaryGID)}
	if len(groups) > 0 {
		priv = append(priv, "--groups="+strconv.Itoa(groups[0]))
	} else {
		priv = append(priv, "--clear-groups")
	}
	if u.one(t, "NoNewPrivileges") == "yes" {
		priv = append(priv, "--no-new-privs")
	}
	priv = append(priv, "--inh-caps="+capArg, "--ambient-caps="+capArg, "--bounding-set="+capArg, "--")
	args := append([]string(nil), exec0[1:]...)
	args[slices.Index(args, "--config")+1] = cfg
	wrapped := append([]string{"--memlock=" + memlock + ":" + memlock, "--", "setpriv"}, priv...)
	if missing, err := xdp.MissingCapabilities(xdp.Capability(capNumbers["CAP_SYS_RESOURCE"])); err != nil || len(missing) > 0 {
		// Raising a hard limit takes CAP_SYS_RESOURCE, which systemd has
		// and some sandboxes' root lacks. The daemon then runs under the
		// lower limit this process has: a stricter test, not a weaker one
		// (what works under a lower memlock limit works under a higher).
		var lim syscall.Rlimit
		const rlimitMemlock = 8 // RLIMIT_MEMLOCK
		syscall.Getrlimit(rlimitMemlock, &lim)
		t.Logf("no CAP_SYS_RESOURCE to apply the unit's LimitMEMLOCK=%s: warpflowd runs under this process's %d bytes", u.one(t, "LimitMEMLOCK"), lim.Cur)
		wrapped = append([]string{"--", "setpriv"}, priv...)
	}
	wrapped = append(wrapped, bin)
	wrapped = append(wrapped, args...)

	want, wantFrames := replayOracle(t, pipelineSrc, capture)
	topo := newLab(t)
	sink := startSinkCapture(t, topo)
	cmd := inNS(topo.DP0.Namespace, "prlimit", wrapped...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	d := watchDaemon(t, cmd)
	up := d.waitFor(t, "queue up", 20*time.Second)
	if up["interface"] != "dp0" {
		t.Errorf("queue up: %v", up)
	}
	d.waitFor(t, "running", 10*time.Second)

	// It is warpflowd, as the unit's user, holding exactly the unit's
	// capabilities.
	pid := cmd.Process.Pid
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil || exe != bin {
		t.Fatalf("process %d is %q (%v), want %s: a wrapper did not exec", pid, exe, err, bin)
	}
	st := procStatus(t, pid)
	id := strconv.Itoa(daemonUID)
	if st["Uid"] != strings.Join([]string{id, id, id, id}, "\t") {
		t.Errorf("daemon Uid %q, want %d everywhere", st["Uid"], daemonUID)
	}
	mask := fmt.Sprintf("%016x", capMask(t, caps))
	for _, k := range []string{"CapEff", "CapPrm", "CapAmb", "CapBnd"} {
		if st[k] != mask {
			t.Errorf("daemon %s %s, want %s (the unit's %v)", k, st[k], mask, caps)
		}
	}
	if u.one(t, "NoNewPrivileges") == "yes" && st["NoNewPrivs"] != "1" {
		t.Errorf("daemon NoNewPrivs %q, want 1", st["NoNewPrivs"])
	}

	// The control socket: the socket group's, mode 0660; a member by a
	// supplementary group may use it, another user may not, root may.
	var sst syscall.Stat_t
	if err := syscall.Lstat(sock, &sst); err != nil {
		t.Fatal(err)
	}
	if int(sst.Uid) != daemonUID || int(sst.Gid) != sockGID || sst.Mode&0o777 != 0o660 {
		t.Errorf("socket %s: uid %d gid %d mode %04o, want %d, %d, 0660", sock, sst.Uid, sst.Gid, sst.Mode&0o777, daemonUID, sockGID)
	}
	// as runs warpctl on the socket as memberUID with group gid and the
	// supplementary groups given, and returns its output and exit code.
	as := func(gid int, supplementary string, args ...string) (string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "setpriv", append([]string{"--reuid=" + strconv.Itoa(memberUID), "--regid=" + strconv.Itoa(gid),
			"--groups=" + supplementary, "--inh-caps=-all", "--", ctl, "--socket", sock}, args...)...)
		cmd.Dir = "/"
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("warpctl %v did not finish within 20s", args)
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	member := strconv.Itoa(sockGID)
	// A tap on rewrite, after the filter's accept edge: a tap on acl would
	// have the workers run the kernel rules while it is on (the kernel
	// drops checked below would then depend on when it took its 5).
	if out, code := as(otherGID, member, "capture", "start", "--stage", "rewrite", "--count", "5", "--file", "unit.pcap"); code != 0 {
		t.Fatalf("capture start by a member of the socket group (supplementary): exit %d:\n%s", code, out)
	}
	if out, code := as(otherGID, strconv.Itoa(otherGID), "pipeline", "list"); code == 0 {
		t.Errorf("a user outside the socket group used the socket:\n%s", out)
	}

	sent := tcpreplay(t, topo, capture, 20000)
	if sent != int(want.Received) {
		t.Fatalf("tcpreplay sent %d packets, the capture has %d", sent, want.Received)
	}
	c := client.New(sock) // root's client: it trusts the daemon's directory by delegation
	got := statsAfterReplay(t, c, topo, sent)
	if got.Totals.Received != want.Received || got.Totals.Transmitted != want.Transmitted || got.Totals.Dropped+got.Totals.XDPDropped != want.Dropped {
		t.Errorf("daemon totals %+v; replay received %d, transmitted %d, dropped %d", got.Totals, want.Received, want.Transmitted, want.Dropped)
	}
	var kernel uint64
	for _, q := range got.Queues {
		kernel += q.Program.Dropped
	}
	if kernel == 0 {
		t.Errorf("no drop ran in the XDP program: the kernel half's rules did not load or match under the unit's capabilities")
	}
	for _, r := range got.KernelRules {
		if r.Bytes < 14*r.Packets { // the frame length, read with bpf_xdp_get_buff_len
			t.Errorf("kernel rule %d: %d packets, %d bytes", r.Rule, r.Packets, r.Bytes)
		}
	}
	if out, code := as(otherGID, member, "capture", "stop"); code != 0 {
		t.Errorf("capture stop by a member: exit %d:\n%s", code, out)
	}
	capFile := filepath.Join(stateDir, "captures", "unit.pcap")
	var cst syscall.Stat_t
	if err := syscall.Lstat(capFile, &cst); err != nil {
		t.Errorf("capture file: %v", err)
	} else if int(cst.Uid) != daemonUID {
		t.Errorf("capture file %s owned by uid %d, want the daemon's %d", capFile, cst.Uid, daemonUID)
	} else if n := len(readFrames(t, capFile)); n != 5 {
		t.Errorf("capture file has %d packets, want the 5 asked for", n)
	}

	frames := stopWithSink(t, d, sink, topo)
	if len(frames) != len(wantFrames) {
		t.Fatalf("sink captured %d frames, replay wrote %d", len(frames), len(wantFrames))
	}
	for i := range frames {
		if !bytes.Equal(frames[i], wantFrames[i]) {
			t.Fatalf("frame %d differs:\nsink   %x\nreplay %x", i, frames[i], wantFrames[i])
		}
	}
	if xdpAttached(t, topo.DP0.Namespace, topo.DP0.Name) {
		t.Error("an XDP program is still attached to dp0 after SIGTERM")
	}
}

// TestUnitCapabilitiesAreXDPs: the unit grants exactly what xdp says a
// dataplane needs (the list its permission errors name), so neither can
// change without the other.
func TestUnitCapabilitiesAreXDPs(t *testing.T) {
	var want []string
	for _, c := range xdp.DataplaneCapabilities() {
		want = append(want, c.String())
	}
	slices.Sort(want)
	if got := readUnit(t, unitPath).caps(t); !slices.Equal(got, want) {
		t.Errorf("unit capabilities %v, xdp.DataplaneCapabilities %v", got, want)
	}
}

// TestUnitInstallSteps follows the install steps in the unit's comment as
// far as they touch the repository: every file the unit and the shipped
// config point at is placed by a step (the config at ExecStart's --config,
// the pipeline at the config's pipeline:), from a file that exists; the
// user and group the unit runs as are made by a step; and the shipped
// config with the shipped pipeline passes the daemon's checks short of
// the interfaces existing.
func TestUnitInstallSteps(t *testing.T) {
	data, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	placed := map[string]string{} // destination -> repository source
	var steps []string
	for _, line := range strings.Split(string(data), "\n") {
		step, ok := strings.CutPrefix(line, "#   ")
		if !ok || strings.HasPrefix(step, "#") {
			continue
		}
		step, _, _ = strings.Cut(step, " #") // a step's trailing comment
		steps = append(steps, step)
		f := strings.Fields(step)
		if len(f) > 0 && f[0] == "install" {
			var operands []string
			for i := 1; i < len(f); i++ {
				switch {
				case f[i] == "-m":
					i++
				case strings.HasPrefix(f[i], "-"):
				default:
					operands = append(operands, f[i])
				}
			}
			if len(operands) != 2 {
				t.Fatalf("install step %q: want SOURCE DEST", step)
			}
			dst := operands[1]
			if strings.HasSuffix(dst, "/") {
				dst += filepath.Base(operands[0])
			}
			placed[dst] = filepath.Join("../..", operands[0])
		}
	}
	u := readUnit(t, unitPath)
	exec0 := strings.Fields(u.one(t, "ExecStart"))
	cfgPath := exec0[slices.Index(exec0, "--config")+1]
	cfgSrc, ok := placed[cfgPath]
	if !ok {
		t.Fatalf("no install step places the unit's config %s (steps: %q)", cfgPath, steps)
	}
	if _, ok := placed["/etc/systemd/system/warpflowd.service"]; !ok {
		t.Errorf("no install step places the unit in /etc/systemd/system")
	}
	cfg, err := daemon.LoadConfig(cfgSrc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.File = cfgPath // where the steps put it: relative paths resolve there
	pipeSrc, ok := placed[cfg.PipelinePath()]
	if !ok {
		t.Fatalf("no install step places the config's pipeline %s (steps: %q)", cfg.PipelinePath(), steps)
	}
	for dst, src := range placed {
		if _, err := os.Stat(src); err != nil {
			t.Errorf("install step for %s: source %v", dst, err)
		}
	}
	if cfg.Pipeline, err = filepath.Abs(pipeSrc); err != nil {
		t.Fatal(err)
	}
	if err := daemon.CheckPipeline(cfg); err != nil {
		t.Errorf("the shipped config with the shipped pipeline: %v", err)
	}
	for _, k := range []string{"User", "Group"} {
		name := u.one(t, k)
		if name == "" {
			continue
		}
		made := false
		for _, s := range steps {
			f := strings.Fields(s)
			if len(f) > 1 && (f[0] == "useradd" || f[0] == "groupadd") && f[len(f)-1] == name &&
				(k == "User" && f[0] == "useradd" || k == "Group" && (f[0] == "groupadd" || slices.Contains(f, "--user-group"))) {
				made = true
			}
		}
		if !made {
			t.Errorf("unit %s=%s: no install step makes it", k, name)
		}
	}
}

var missingCaps = regexp.MustCompile(`(?:missing|lacks) ((?:CAP_[A-Z_]+(?:, | and )?)+)`)

// TestLiveMissingCapabilityNamed: warpflowd run as an unprivileged user
// with the unit's capabilities but one fails with one line that names
// that one as missing and no other: not the list of everything it could
// need (which named capabilities it had). CAP_IPC_LOCK is missed only
// where a UMEM exceeds RLIMIT_MEMLOCK, so the runs get a 1 MiB limit.
func TestLiveMissingCapabilityNamed(t *testing.T) {
	requireLive(t, "setpriv", "prlimit")
	caps := readUnit(t, unitPath).caps(t)
	topo := newLab(t)
	top, err := os.MkdirTemp("", "wf-caps-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(top, "warpflowd")
	copyFile(t, daemonBinary(t), bin, 0o755)
	pipeline := filepath.Join(top, "pipeline.yaml")
	copyFile(t, "../../testdata/live/lab-forward.yaml", pipeline, 0o644)
	uid := freeID(t, "user", 61000)
	run := filepath.Join(top, "run")
	if err := os.Mkdir(run, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(run, uid, uid); err != nil {
		t.Fatal(err)
	}
	for _, drop := range caps {
		t.Run(drop, func(t *testing.T) {
			var keep []string
			for _, c := range caps {
				if c != drop {
					keep = append(keep, "+"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
				}
			}
			capArg := "-all," + strings.Join(keep, ",")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "nsenter", "--net="+filepath.Join(lab.NamespaceDir, topo.DP0.Namespace), "--",
				"prlimit", "--memlock=1048576:1048576", "--",
				"setpriv", "--reuid="+strconv.Itoa(uid), "--regid="+strconv.Itoa(uid), "--clear-groups",
				"--inh-caps="+capArg, "--ambient-caps="+capArg, "--bounding-set="+capArg, "--",
				bin, "--pipeline", pipeline, "--iface", "dp0,attach=native", "--iface", "dp1,rx=false", "--port", "out0=dp1",
				"--socket", filepath.Join(run, "ctl.sock"), "--log-level", "error")
			cmd.Dir = "/"
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("warpflowd without %s still ran after 20s:\n%s", drop, out)
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("warpflowd without %s: %v, want exit 1:\n%s", drop, err, out)
			}
			msg := strings.TrimSpace(string(out))
			if strings.Contains(msg, "\n") {
				t.Errorf("more than one line:\n%s", msg)
			}
			named := map[string]bool{}
			for _, m := range missingCaps.FindAllStringSubmatch(msg, -1) {
				for _, c := range regexp.MustCompile(`CAP_[A-Z_]+`).FindAllString(m[1], -1) {
					named[c] = true
				}
			}
			if len(named) != 1 || !named[drop] {
				t.Errorf("without %s the error calls %v missing, want exactly %s:\n%s", drop, named, drop, msg)
			}
		})
	}
}
