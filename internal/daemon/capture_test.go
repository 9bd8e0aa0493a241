package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/control/client"
	"github.com/warpflow/warpflow/pipelines"
)

const capturePipeline = "name: cap\nstages:\n  - {name: parse, type: parse}\n  - {name: out, type: tx, port: out}\n"

// captureDaemon is a daemon with a pipeline and no queues: enough for the
// capture's control path (the request, the room, the file, the writer).
func captureDaemon(t *testing.T, captureDir, group string) *Daemon {
	t.Helper()
	g, err := pipelines.Load("cap.yaml", []byte(capturePipeline))
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.CaptureDir, cfg.Control.Group = captureDir, group
	return &Daemon{cfg: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil)), graph: g, store: map[string]*stored{}}
}

// attackNames are the names a hostile client gives, with the reason each
// must be refused (what the error says).
var attackNames = map[string]string{
	"../../etc/warpflow-attack":              "not a path",
	"/tmp/a/../../etc/warpflow-attack":       "not a path",
	"/etc/warpflow-attack":                   "not a path",
	"sub/x.pcap":                             "not a path",
	"..":                                     "must not start with '.'",
	".hidden":                                "must not start with '.'",
	"a\x00b":                                 "NUL",
	strings.Repeat("a", 200):                 "longer than",
	"link.pcap":                              "exists",
	"fifo.pcap":                              "exists",
	"old.pcap":                               "exists",
	"sub":                                    "exists",
	"x\nlevel=ERROR msg=forged":              "only letters",
	"../" + filepath.Base(os.TempDir()) + "": "not a path",
}

// planted reports whether name is one plant makes (the member's test
// lets the daemon make its capture_dir, so nothing is planted there).
func planted(name string) bool {
	return name == "link.pcap" || name == "fifo.pcap" || name == "old.pcap" || name == "sub"
}

// plant fills the capture_dir with what an attacker (or an accident)
// leaves there: a link out, a FIFO, a file, a directory.
func plant(t *testing.T, captureDir, outside string) {
	t.Helper()
	if err := os.MkdirAll(captureDir, 0o750); err != nil {
		t.Fatal(err)
	}
	os.Symlink(filepath.Join(outside, "via-link"), filepath.Join(captureDir, "link.pcap"))
	syscall.Mkfifo(filepath.Join(captureDir, "fifo.pcap"), 0o600)
	os.WriteFile(filepath.Join(captureDir, "old.pcap"), []byte("keep"), 0o600)
	os.Mkdir(filepath.Join(captureDir, "sub"), 0o700)
}

// checkNothingOutside fails when anything but the planted entries
// appeared outside the capture_dir or the planted file changed.
func checkNothingOutside(t *testing.T, captureDir, outside string) {
	t.Helper()
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("files made outside the capture_dir: %v", ents)
	}
	if _, err := os.Lstat("/etc/warpflow-attack"); err == nil {
		os.Remove("/etc/warpflow-attack")
		t.Fatal("/etc/warpflow-attack was made")
	}
	if data, _ := os.ReadFile(filepath.Join(captureDir, "old.pcap")); string(data) != "keep" {
		t.Fatalf("old.pcap written over: %q", data)
	}
}

// TestCaptureStaysInCaptureDir: issue 18 item 4. The daemon itself (not
// only the server's request check) refuses every name that is a path or
// names something there, from a working directory where "../.." leads
// out; a good name is made in capture_dir, mode 0640, and the reply says
// where.
func TestCaptureStaysInCaptureDir(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	os.Mkdir(outside, 0o700)
	captureDir := filepath.Join(base, "var", "captures")
	plant(t, captureDir, outside)
	// A working directory two levels below outside: "../../x" would be
	// base/x, "../outside" ... any path resolved here leaves the room.
	cwd := filepath.Join(outside, "..", "var", "captures", "sub")
	t.Chdir(cwd)
	d := captureDaemon(t, captureDir, "")
	for name, why := range attackNames {
		ci, err := d.captureStart(control.CaptureRequest{Stage: "parse", Count: 10, Snaplen: 100, File: name})
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("name %q: %+v %v, want refused (%s)", name, ci, err, why)
		}
		if err != nil && len(err.Error()) > 400 {
			t.Errorf("name %q: the error echoes %d bytes", name, len(err.Error()))
		}
	}
	checkNothingOutside(t, captureDir, outside)
	ci, err := d.captureStart(control.CaptureRequest{Stage: "parse", Count: 10, Snaplen: 100, File: "good.pcap"})
	want := filepath.Join(captureDir, "good.pcap")
	if err != nil || ci.File != want || !ci.Active {
		t.Fatalf("good name: %+v %v, want active at %s", ci, err, want)
	}
	if _, err := d.captureStop("stopped"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(want)
	if err != nil || fi.Mode() != 0o640 || fi.Size() != 24 {
		t.Fatalf("%s: %v %v, want a 0640 pcap with its 24-byte header", want, fi, err)
	}
	// The name again: it exists now.
	if _, err := d.captureStart(control.CaptureRequest{Stage: "parse", Count: 10, Snaplen: 100, File: "good.pcap"}); !errors.Is(err, control.ErrConflict) {
		t.Fatalf("an existing capture's name: %v", err)
	}
}

// TestCaptureDirChecked: a capture_dir that is a link, lies under a link
// or a directory others may write, or belongs to another user is refused
// before any file is made; a missing one is made 0750.
func TestCaptureDirChecked(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	os.Mkdir(outside, 0o700)
	try := func(dir string) error {
		_, err := captureDaemon(t, dir, "").captureStart(control.CaptureRequest{Stage: "parse", Count: 1, Snaplen: 100, File: "x.pcap"})
		return err
	}
	link := filepath.Join(base, "captures-link")
	os.Symlink(outside, link)
	if err := try(link); err == nil || !strings.Contains(err.Error(), link+" is a symbolic link") {
		t.Fatalf("capture_dir a link: %v", err)
	}
	if err := try(filepath.Join(link, "sub")); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("capture_dir under a link: %v", err)
	}
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	if err := try(filepath.Join(open, "captures")); err == nil || !strings.Contains(err.Error(), open+" is writable") {
		t.Fatalf("capture_dir under a 0777 directory: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(open, "captures")); err == nil {
		t.Fatal("a capture_dir was made under the 0777 directory")
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("files made through the link: %v", ents)
	}
	made := filepath.Join(base, "new", "captures")
	if err := try(made); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(made); err != nil || fi.Mode().Perm() != 0o750 {
		t.Fatalf("made capture_dir: %v %v", fi, err)
	}
	if os.Geteuid() == 0 {
		theirs := filepath.Join(base, "theirs")
		os.Mkdir(theirs, 0o755)
		os.Chown(theirs, 65534, 65534)
		if err := try(theirs); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Fatalf("capture_dir of another user: %v", err)
		}
	}
}

// TestCaptureAsGroupMember: a --socket-group member whose group is
// supplementary, through the real server and client in another process,
// gets every hostile name refused and a good one made in capture_dir,
// which the daemon made with the socket group so the member can read it.
func TestCaptureAsGroupMember(t *testing.T) {
	if sock := os.Getenv("WARPFLOW_CAPTURE_CLIENT"); sock != "" {
		captureClient(sock) // the child's side
		return
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root to run a client as another user in a new group, and CI runs as root")
		}
		t.Skip("needs root: runs a client as another user in a group made with groupadd")
	}
	group := fmt.Sprintf("wfc%d", rand.IntN(1_000_000))
	if out, err := exec.Command("groupadd", group).CombinedOutput(); err != nil {
		t.Fatalf("groupadd: %v %s", err, out)
	}
	defer exec.Command("groupdel", group).Run()
	gr, err := user.LookupGroup(group)
	if err != nil {
		t.Fatal(err)
	}
	gid, _ := strconv.Atoi(gr.Gid)
	uid := 61000 + rand.IntN(3000)
	for ; ; uid++ {
		if _, err := user.LookupId(strconv.Itoa(uid)); err != nil {
			break
		}
	}
	base, err := os.MkdirTemp("", "wfcap-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	os.Chmod(base, 0o755)
	outside := filepath.Join(base, "outside")
	os.Mkdir(outside, 0o777) // writable by the member: nothing may land here either
	os.Chmod(outside, 0o777)
	captureDir := filepath.Join(base, "captures")
	d := captureDaemon(t, captureDir, group)
	o := control.DefaultOptions()
	o.Socket, o.Group = filepath.Join(base, "run", "s.sock"), group
	srv, err := control.NewServer(o, d.Backend(), d.log)
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve()
	defer srv.Close()
	bin := filepath.Join(base, "client")
	data, _ := os.ReadFile(os.Args[0])
	os.WriteFile(bin, data, 0o755)
	cmd := exec.Command(bin, "-test.run=^TestCaptureAsGroupMember$")
	cmd.Dir = outside // where a path resolved by the client would go
	cmd.Env = append(os.Environ(), "WARPFLOW_CAPTURE_CLIENT="+o.Socket)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{uint32(gid)}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	lines := string(out)
	for name := range attackNames {
		if planted(name) {
			continue
		}
		if !strings.Contains(lines, fmt.Sprintf("%q: refused", name)) {
			t.Errorf("name %q was not refused:\n%s", name, lines)
		}
	}
	want := filepath.Join(captureDir, "member.pcap")
	if !strings.Contains(lines, fmt.Sprintf("%q: made %s", "member.pcap", want)) {
		t.Fatalf("the good name:\n%s", lines)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("files made outside the capture_dir: %v", ents)
	}
	d.captureStop("stopped")
	var st syscall.Stat_t
	syscall.Stat(captureDir, &st)
	if int(st.Gid) != gid || st.Mode&0o7777 != 0o2750 {
		t.Fatalf("capture_dir gid %d %04o, want %d 2750", st.Gid, st.Mode&0o7777, gid)
	}
	syscall.Stat(want, &st)
	if int(st.Gid) != gid || st.Mode&0o7777 != 0o640 || st.Uid != 0 {
		t.Fatalf("capture file uid %d gid %d %04o, want 0:%d 0640", st.Uid, st.Gid, st.Mode&0o7777, gid)
	}
}

// captureClient is the member's side: every hostile name, then a good one.
func captureClient(sock string) {
	c := client.New(sock)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name := range attackNames {
		if planted(name) {
			continue
		}
		_, err := c.CaptureStart(ctx, control.CaptureRequest{Stage: "parse", Count: 10, Snaplen: 100, File: name})
		if errors.Is(err, control.ErrBadRequest) || errors.Is(err, control.ErrConflict) {
			fmt.Printf("%q: refused\n", name)
		} else {
			fmt.Printf("%q: %v\n", name, err)
		}
	}
	ci, err := c.CaptureStart(ctx, control.CaptureRequest{Stage: "parse", Count: 10, Snaplen: 100, File: "member.pcap"})
	if err != nil {
		fmt.Printf("%q: %v\n", "member.pcap", err)
		return
	}
	fmt.Printf("%q: made %s\n", "member.pcap", ci.File)
}
