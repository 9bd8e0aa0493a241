package control_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/control/client"

	"github.com/warpflow/warpflow/internal/testwait"
)

// needRoot skips a test that needs another user, and fails it under
// CI=true (CI runs as root: it may not skip there).
func needRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("needs root (%s), and CI runs as root", why)
	}
	t.Skipf("needs root: %s", why)
}

// openTemp is a temporary directory others can search (0755), so another
// uid can reach what a test puts below it.
func openTemp(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "wfc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// testBinary copies the test binary where any uid can run it.
func testBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(openTemp(t), "client")
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// asUser runs the test binary's client side (TestMain: a pipeline load on
// sock) as uid with primary group gid and supplementary groups, and
// returns what it printed: "<nil>" for success, else the error.
func asUser(t *testing.T, bin, sock string, uid, gid int, groups ...int) string {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), "WARPFLOW_CLIENT_SOCKET="+sock)
	g := make([]uint32, len(groups))
	for i, x := range groups {
		g[i] = uint32(x)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: g}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client as uid %d: %v: %s", uid, err, out)
	}
	return strings.TrimSpace(string(out))
}

// unusedID finds a number in 61000..64999 that names no user (or group).
func unusedID(t *testing.T, group bool, not ...int) int {
	t.Helper()
	for id := 61000 + rand.IntN(1000); id < 65000; id++ {
		var err error
		if group {
			_, err = user.LookupGroupId(strconv.Itoa(id))
		} else {
			_, err = user.LookupId(strconv.Itoa(id))
		}
		if err != nil && !slicesContains(not, id) {
			return id
		}
	}
	t.Fatal("no unused id in 61000..64999")
	return -1
}

func slicesContains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// tempGroup makes a real group with groupadd and removes it at the end.
func tempGroup(t *testing.T) (string, int) {
	t.Helper()
	name := fmt.Sprintf("wft%d", rand.IntN(1_000_000))
	if out, err := exec.Command("groupadd", name).CombinedOutput(); err != nil {
		t.Fatalf("groupadd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("groupdel", name).CombinedOutput(); err != nil {
			t.Errorf("groupdel %s: %v: %s", name, err, out)
		}
	})
	g, err := user.LookupGroup(name)
	if err != nil {
		t.Fatal(err)
	}
	gid, _ := strconv.Atoi(g.Gid)
	return name, gid
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(ioDiscard{}, nil)) }

type ioDiscard struct{}

func (ioDiscard) Write(p []byte) (int, error) { return len(p), nil }

// TestSocketGroupMembers: with --socket-group a member reaches the socket
// and is served whether the group is its primary or a supplementary one
// (SO_PEERGROUPS); a non-member is kept out by the directory's mode and,
// with the modes opened up, refused by the peer check. Issue 18 item 3:
// the daemon made the directory root:root 0750 and checked only the
// primary gid.
func TestSocketGroupMembers(t *testing.T) {
	if os.Getenv("WARPFLOW_CLIENT_SOCKET") != "" {
		return
	}
	needRoot(t, "runs clients as another uid in a group made with groupadd")
	group, gid := tempGroup(t)
	uid := unusedID(t, false)
	other := unusedID(t, true, gid)
	bin := testBinary(t)
	fb := newFake()
	o := control.DefaultOptions()
	o.Socket = filepath.Join(openTemp(t), "run", "warpflowd.sock") // run/ made by the server
	o.Group = group
	srv, err := control.NewServer(o, fb, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve()
	defer srv.Close()
	var st syscall.Stat_t
	syscall.Stat(filepath.Dir(o.Socket), &st)
	if st.Uid != 0 || int(st.Gid) != gid || st.Mode&0o7777 != 0o750 {
		t.Fatalf("socket directory root:%d %04o, want root:%d 0750", st.Gid, st.Mode&0o7777, gid)
	}
	syscall.Stat(o.Socket, &st)
	if int(st.Gid) != gid || st.Mode&0o777 != 0o660 {
		t.Fatalf("socket gid %d %04o, want %d 0660", st.Gid, st.Mode&0o777, gid)
	}
	if out := asUser(t, bin, o.Socket, uid, gid); out != "<nil>" {
		t.Fatalf("member by primary group: %s", out)
	}
	if out := asUser(t, bin, o.Socket, uid, other, gid); out != "<nil>" {
		t.Fatalf("member by supplementary group: %s", out)
	}
	if out := asUser(t, bin, o.Socket, uid, other); !strings.Contains(out, "unreachable") || !strings.Contains(out, "permission denied") {
		t.Fatalf("non-member through the modes: %s", out)
	}
	// The modes opened up: the peer check refuses the non-member itself.
	os.Chmod(filepath.Dir(o.Socket), 0o755)
	os.Chmod(o.Socket, 0o666)
	if out := asUser(t, bin, o.Socket, uid, other, other+1); !strings.Contains(out, "forbidden") || !strings.Contains(out, fmt.Sprintf("uid %d", uid)) {
		t.Fatalf("non-member through the peer check: %s", out)
	}
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if fb.loads != 2 {
		t.Fatalf("%d loads reached the backend, want the 2 members'", fb.loads)
	}
}

// TestSocketGroupExistingDir: a socket directory of ours made before
// (another run, systemd's RuntimeDirectory) is opened to the group; one
// the group cannot reach through is refused at start, naming it.
func TestSocketGroupExistingDir(t *testing.T) {
	needRoot(t, "chowns to a group made with groupadd")
	group, gid := tempGroup(t)
	base := openTemp(t)
	run := filepath.Join(base, "run")
	os.Mkdir(run, 0o700)
	o := control.DefaultOptions()
	o.Socket, o.Group = filepath.Join(run, "s.sock"), group
	srv, err := control.NewServer(o, newFake(), quietLog())
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	var st syscall.Stat_t
	syscall.Stat(run, &st)
	if int(st.Gid) != gid || st.Mode&0o7777 != 0o750 {
		t.Fatalf("existing directory: gid %d %04o, want %d 0750", st.Gid, st.Mode&0o7777, gid)
	}
	// An ancestor the group cannot search.
	os.Chmod(base, 0o700)
	defer os.Chmod(base, 0o755)
	_, err = control.NewServer(o, newFake(), quietLog())
	if err == nil || !strings.Contains(err.Error(), "cannot reach") || !strings.Contains(err.Error(), base+" is") {
		t.Fatalf("unreachable ancestor: %v", err)
	}
}

// attacker serves its own answer on a socket, as another user's daemon
// would.
func attacker(t *testing.T, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"running":"attacker","generation":1,"pipelines":[]}`)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// listenAsChild is TestMain's listener side: the attacker's server, run
// as another uid.
func listenAsChild(path string) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		fmt.Println(err)
		return
	}
	os.Chmod(path, 0o666)
	fmt.Println("listening")
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"running":"attacker","generation":1,"pipelines":[]}`)
	}))
}

// TestUnsafeSocketChain reproduces issue 18 item 5's bypasses: a socket
// in a 0750 directory under a 0777 one, a parent that is a link owned by
// another user in a 0777 directory, and the same in /tmp. The daemon
// refuses to listen there and the client refuses to talk there, naming
// the component at fault; the attacker's answer never reaches the
// caller.
func TestUnsafeSocketChain(t *testing.T) {
	base := openTemp(t)
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	priv := filepath.Join(open, "priv")
	os.Mkdir(priv, 0o750)
	good := filepath.Join(base, "good")
	os.Mkdir(good, 0o700)
	attacker(t, filepath.Join(good, "s.sock"))
	attacker(t, filepath.Join(priv, "s.sock"))
	cases := []struct{ name, sock, names string }{
		{"0750 under 0777", filepath.Join(priv, "s.sock"), open + " is writable by group and others without the sticky bit"},
	}
	if os.Geteuid() == 0 {
		link := filepath.Join(open, "link")
		os.Symlink(good, link)
		os.Lchown(link, 65534, 65534)
		tmpLink := filepath.Join(os.TempDir(), filepath.Base(base)+"-link")
		os.Symlink(good, tmpLink)
		os.Lchown(tmpLink, 65534, 65534)
		t.Cleanup(func() { os.Remove(tmpLink) })
		cases = append(cases,
			struct{ name, sock, names string }{"their link in 0777", filepath.Join(link, "s.sock"), open + " is writable"},
			struct{ name, sock, names string }{"their link in /tmp", filepath.Join(tmpLink, "s.sock"), tmpLink + " is a symbolic link"})
	} else {
		link := filepath.Join(base, "mylink")
		os.Symlink(good, link)
		cases = append(cases, struct{ name, sock, names string }{"a link", filepath.Join(link, "s.sock"), link + " is a symbolic link"})
	}
	for _, tc := range cases {
		l, err := client.New(tc.sock).Pipelines(context.Background())
		if err == nil || !errors.Is(err, client.ErrUnsafeSocket) || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("client, %s: got %+v, %v; want refused naming %q", tc.name, l, err, tc.names)
		}
		if errors.Is(err, client.ErrUnreachable) {
			t.Errorf("client, %s: an unsafe path reported as unreachable: %v", tc.name, err)
		}
		o := control.DefaultOptions()
		o.Socket = filepath.Join(filepath.Dir(tc.sock), "d.sock")
		srv, err := control.NewServer(o, newFake(), quietLog())
		if err == nil {
			srv.Close()
		}
		if !errors.Is(err, control.ErrUnsafeSocket) || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("server, %s: %v; want refused naming %q", tc.name, err, tc.names)
		}
	}
	// The same socket through its real path is fine.
	if l, err := client.New(filepath.Join(good, "s.sock")).Pipelines(context.Background()); err != nil || l.Running != "attacker" {
		t.Fatalf("the real path: %+v %v", l, err)
	}
}

// TestClientRefusesForeignServer: a socket whose path is all root's but
// that another uid listens on is refused by the peer check after
// connecting.
func TestClientRefusesForeignServer(t *testing.T) {
	if os.Getenv("WARPFLOW_LISTEN") != "" {
		return
	}
	needRoot(t, "runs a listener as another uid")
	bin := testBinary(t)
	base := openTemp(t)
	dir := filepath.Join(base, "d")
	os.Mkdir(dir, 0o755)
	uid := unusedID(t, false)
	os.Chown(dir, uid, uid) // theirs while they bind
	sock := filepath.Join(dir, "s.sock")
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), "WARPFLOW_LISTEN="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	var out bytes.Buffer
	var mu sync.Mutex
	cmd.Stdout = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer testwait.Kill(t, cmd, "the listener as uid "+strconv.Itoa(uid), testwait.Deadline)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		s := out.String()
		mu.Unlock()
		if strings.Contains(s, "listening") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the listener did not start: %q", s)
		}
	}
	// Delegated (root's 0755 base made it theirs): their socket is
	// theirs to serve.
	if l, err := client.New(sock).Pipelines(context.Background()); err != nil || l.Running != "attacker" {
		t.Fatalf("their own socket in their directory: %+v %v", l, err)
	}
	// Now the path is root's all the way down, but they still serve it.
	os.Chown(dir, 0, 0)
	os.Lchown(sock, 0, 0)
	l, err := client.New(sock).Pipelines(context.Background())
	if !errors.Is(err, client.ErrUnsafeSocket) || !strings.Contains(err.Error(), fmt.Sprintf("served by uid %d", uid)) {
		t.Fatalf("a root path served by uid %d: %+v %v", uid, l, err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// tcpServer serves the fake backend on a socket and loopback TCP, with
// its token file in the socket's directory.
func tcpServer(t *testing.T, fb *fakeBackend) (*control.Server, string) {
	t.Helper()
	o := control.DefaultOptions()
	o.Socket, o.TCP = filepath.Join(t.TempDir(), "s.sock"), "127.0.0.1:0"
	srv, err := control.NewServer(o, fb, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve()
	t.Cleanup(func() { srv.Close() })
	return srv, srv.Addrs()[1]
}

// TestTCPNeedsToken: over TCP (no peer credential) every verb that
// changes something is refused without the token from the daemon's
// token file, made 0600 at the first start; reads from loopback stay
// open; a wrong token is refused even for a read. Issue 18 item 4.
func TestTCPNeedsToken(t *testing.T) {
	fb := newFake()
	srv, addr := tcpServer(t, fb)
	fi, err := os.Lstat(srv.TokenFile())
	if err != nil || fi.Mode() != 0o600 || srv.TokenFile() != filepath.Join(filepath.Dir(srv.Addrs()[0]), "control.token") {
		t.Fatalf("token file %s: %v %v, want 0600 next to the socket", srv.TokenFile(), fi.Mode(), err)
	}
	tok, err := client.ReadTokenFile(srv.TokenFile())
	if err != nil || len(tok) != 64 {
		t.Fatalf("token %q %v", tok, err)
	}
	ctx := context.Background()
	anon := client.New("tcp://" + addr)
	wrong := client.New("tcp://"+addr, client.WithToken(strings.Repeat("0", 64)))
	good := client.New("tcp://"+addr, client.WithToken(tok))
	if s, err := anon.Stats(ctx); err != nil || s.Totals.Received != 10 {
		t.Fatalf("loopback read without a token: %v", err)
	}
	mutations := []struct {
		name string
		do   func(*client.Client) error
	}{
		{"load", func(c *client.Client) error {
			_, err := c.Load(ctx, control.LoadRequest{File: "g.yaml", Source: goodPipeline})
			return err
		}},
		{"swap", func(c *client.Client) error { _, err := c.Swap(ctx, "good"); return err }},
		{"rm", func(c *client.Client) error { return c.Remove(ctx, "good") }},
		{"capture start", func(c *client.Client) error {
			_, err := c.CaptureStart(ctx, control.CaptureRequest{Stage: "parse", File: "x.pcap"})
			return err
		}},
		{"capture stop", func(c *client.Client) error { _, err := c.CaptureStop(ctx); return err }},
	}
	for _, m := range mutations {
		for who, c := range map[string]*client.Client{"no token": anon, "wrong token": wrong} {
			err := m.do(c)
			var ce *control.Error
			if !errors.As(err, &ce) || ce.Code != "unauthorized" || ce.Status != http.StatusUnauthorized {
				t.Errorf("%s with %s: %v, want 401 unauthorized", m.name, who, err)
			}
		}
	}
	// Any other method too, without a list of verbs to keep.
	req, _ := http.NewRequest("PATCH", "http://"+addr+"/v1/pipelines/good", nil)
	if resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("PATCH without a token: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	fb.mu.Lock()
	if fb.loads != 0 || fb.running != "" {
		t.Fatalf("a refused TCP request reached the backend: %d loads, running %q", fb.loads, fb.running)
	}
	fb.mu.Unlock()
	if _, err := wrong.Stats(ctx); !errors.Is(err, control.ErrUnauthorized) {
		t.Fatalf("read with a wrong token: %v", err)
	}
	for _, m := range mutations {
		if err := m.do(good); err != nil && !errors.Is(err, control.ErrConflict) {
			t.Errorf("%s with the token: %v", m.name, err)
		}
	}
	// The unix socket needs no token: its peer has credentials.
	if _, err := client.New(srv.Addrs()[0]).Swap(ctx, "good"); err != nil {
		t.Fatalf("swap on the socket: %v", err)
	}
}

// TestTokenFileChecks: a token file others may read, a link or one owned
// by another user stops the daemon from starting, with the fix; an
// existing good one is used as it is.
func TestTokenFileChecks(t *testing.T) {
	dir := t.TempDir()
	start := func(tokenFile string) (*control.Server, error) {
		o := control.DefaultOptions()
		o.Socket, o.TCP, o.TokenFile = filepath.Join(dir, "s.sock"), "127.0.0.1:0", tokenFile
		srv, err := control.NewServer(o, newFake(), quietLog())
		if err == nil {
			srv.Close()
		}
		return srv, err
	}
	loose := filepath.Join(dir, "loose.token")
	os.WriteFile(loose, []byte(strings.Repeat("a", 40)), 0o644)
	if _, err := start(loose); !errors.Is(err, control.ErrUnsafeSocket) || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("0644 token file: %v", err)
	}
	short := filepath.Join(dir, "short.token")
	os.WriteFile(short, []byte("abc\n"), 0o600)
	if _, err := start(short); err == nil || !strings.Contains(err.Error(), "want 32") {
		t.Fatalf("short token: %v", err)
	}
	mine := filepath.Join(dir, "mine.token")
	os.WriteFile(mine, []byte(strings.Repeat("b", 40)+"\n"), 0o600)
	if _, err := start(mine); err != nil {
		t.Fatalf("a good token file: %v", err)
	}
	os.Symlink(mine, filepath.Join(dir, "link.token"))
	if _, err := start(filepath.Join(dir, "link.token")); !errors.Is(err, control.ErrUnsafeSocket) {
		t.Fatalf("token file that is a link: %v", err)
	}
	if os.Geteuid() == 0 {
		theirs := filepath.Join(dir, "theirs.token")
		os.WriteFile(theirs, []byte(strings.Repeat("c", 40)), 0o600)
		os.Chown(theirs, 65534, 65534)
		if _, err := start(theirs); !errors.Is(err, control.ErrUnsafeSocket) || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Fatalf("token file of another user: %v", err)
		}
	}
	// The client refuses a token file others may read, too.
	if _, err := client.ReadTokenFile(loose); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("client, 0644 token file: %v", err)
	}
}

// TestBodyLimits: every endpoint caps its body and answers 413 over it
// (swap answered 400), announced or chunked; the decoder is
// case-sensitive and refuses a key given twice; errors echo a short
// prefix of the input only. Issue 18 item 6.
func TestBodyLimits(t *testing.T) {
	fb := newFake()
	var logBuf syncBuffer
	dir, _ := os.MkdirTemp("", "wfc-")
	defer os.RemoveAll(dir)
	o := control.DefaultOptions()
	o.Socket = filepath.Join(dir, "s.sock")
	srv, err := control.NewServer(o, fb, slog.New(slog.NewTextHandler(&logBuf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve()
	defer srv.Close()
	sock := o.Socket
	small := strings.Repeat("x", control.MaxSmallRequest+1)
	huge := strings.Repeat("x", control.MaxRequestBytes+1)
	withBody := func(method, path, body string) string {
		return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: w\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", method, path, len(body), body)
	}
	chunked := func(method, path, body string) string {
		return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: w\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", method, path, len(body), body)
	}
	for _, tc := range []struct{ name, req string }{
		{"swap", withBody("POST", "/v1/pipelines/good/swap", small)},
		{"swap chunked", chunked("POST", "/v1/pipelines/good/swap", small)},
		{"capture start", withBody("POST", "/v1/capture", `{"stage":"`+small+`"}`)},
		{"capture start chunked", chunked("POST", "/v1/capture", `{"stage":"`+small+`"}`)},
		{"capture stop", withBody("DELETE", "/v1/capture", small)},
		{"rm", withBody("DELETE", "/v1/pipelines/good", small)},
		{"list", withBody("GET", "/v1/pipelines", small)},
		{"show", chunked("GET", "/v1/pipelines/good", small)},
		{"stats", withBody("GET", "/v1/stats", small)},
		{"ports", withBody("GET", "/v1/ports", small)},
		{"capture status", withBody("GET", "/v1/capture", small)},
		{"load", withBody("POST", "/v1/pipelines", `{"source":"`+huge+`"}`)},
		{"load chunked", chunked("POST", "/v1/pipelines", `{"source":"`+huge+`"}`)},
	} {
		status, body := rawRequest(t, sock, tc.req)
		if !strings.HasPrefix(status, "413") || !strings.Contains(body, "too_large") {
			t.Errorf("%s over its limit: %s %s", tc.name, status, clipBody(body))
		}
	}
	long := strings.Repeat("A", 100_000)
	for _, tc := range []struct{ name, req, want string }{
		{"upper-case key", post("/v1/pipelines", `{"SOURCE":"name: x","file":"x"}`), `did you mean \"source\"`},
		{"mixed-case key", post("/v1/capture", `{"Stage":"parse","file":"x.pcap"}`), `did you mean \"stage\"`},
		{"key twice", post("/v1/pipelines", `{"source":"name: x","source":"name: y"}`), `given twice`},
		{"not an object", post("/v1/pipelines", `["source"]`), `want a JSON object`},
		{"long unknown key", post("/v1/pipelines", `{"`+long+`":1}`), `unknown field`},
		{"long bad value", post("/v1/pipelines", `{"source":`+long+`}`), `malformed`},
		{"long name in the path", "GET /v1/pipelines/" + long[:10000] + " HTTP/1.1\r\nHost: w\r\nConnection: close\r\n\r\n", `pipeline name`},
		{"long unknown path", "GET /v1/" + long[:10000] + " HTTP/1.1\r\nHost: w\r\nConnection: close\r\n\r\n", `no endpoint`},
		{"long file label", post("/v1/pipelines", `{"source":"name: x","file":"`+long+`"}`), `longer than`},
		{"long capture file", post("/v1/capture", `{"stage":"parse","file":"`+long[:3000]+`"}`), `longer than`},
		{"long capture stage", post("/v1/capture", `{"stage":"`+long[:3000]+`","file":"x.pcap"}`), `at most`},
		{"capture path", post("/v1/capture", `{"stage":"parse","file":"../../etc/x"}`), `not a path`},
	} {
		status, body := rawRequest(t, sock, tc.req)
		code := "400"
		if strings.HasPrefix(tc.want, "no endpoint") {
			code = "404"
		}
		if !strings.HasPrefix(status, code) || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %s %s, want %s with %q", tc.name, status, clipBody(body), code, tc.want)
		}
		if len(body) > 600 {
			t.Errorf("%s: the reply echoes %d bytes: %s", tc.name, len(body), clipBody(body))
		}
	}
	// A pipeline whose problems quote a huge input: the reply and the log
	// line stay bounded.
	bad := fmt.Sprintf("name: bad\nstages:\n  - {name: %s, type: nosuch}\n", long)
	for i := range 300 {
		bad += fmt.Sprintf("  - {name: s%d, type: nosuch}\n", i)
	}
	_, err = client.New(sock).Load(context.Background(), control.LoadRequest{File: "bad.yaml", Source: bad})
	var ce *control.Error
	if !errors.As(err, &ce) || ce.Code != "invalid_pipeline" || len(ce.Problems) > 201 {
		t.Fatalf("a pipeline with 301 problems: %d problems, %v", len(ce.Problems), clipBody(fmt.Sprint(err)))
	}
	for _, p := range ce.Problems {
		if len(p) > 600 {
			t.Fatalf("a problem line of %d bytes", len(p))
		}
	}
	if !strings.Contains(ce.Problems[len(ce.Problems)-1], "more problems") {
		t.Fatalf("the cut problems are not counted: %q", ce.Problems[len(ce.Problems)-1])
	}
	for _, line := range strings.Split(logBuf.String(), "\n") {
		if len(line) > 4096 {
			t.Errorf("a log line of %d bytes: %s", len(line), clipBody(line))
		}
	}
	if !strings.Contains(logBuf.String(), "problems_total=") {
		t.Errorf("the failed load is not logged with its problem count:\n%s", clipBody(logBuf.String()))
	}
}

func clipBody(s string) string {
	if len(s) > 300 {
		return s[:300] + fmt.Sprintf("...(%d bytes)", len(s))
	}
	return s
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestRequestTypesFlat: the decoder's key check looks at the top level
// only, so the request types must have no nested objects.
func TestRequestTypesFlat(t *testing.T) {
	for _, v := range []any{control.LoadRequest{}, control.CaptureRequest{}} {
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			switch k := rt.Field(i).Type.Kind(); k {
			case reflect.String, reflect.Int, reflect.Bool, reflect.Int64, reflect.Uint64:
			default:
				t.Errorf("%s.%s is a %v: extend decodeStrict's key check to nested objects first", rt.Name(), rt.Field(i).Name, k)
			}
		}
	}
}
