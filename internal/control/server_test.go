package control_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/control/client"
	"github.com/warpflow/warpflow/pipelines"
)

// fakeBackend is a store of pipelines and a counter set; it records the
// actions it was asked for.
type fakeBackend struct {
	mu      sync.Mutex
	loads   int
	store   map[string]*pipelines.Graph
	running string
	stats   control.Stats
}

func newFake() *fakeBackend {
	return &fakeBackend{store: map[string]*pipelines.Graph{}, stats: control.Stats{Pipeline: "a", Generation: 1,
		Totals: control.Counts{Received: 10, Transmitted: 7, Dropped: 3, Balanced: true, Drops: []control.DropCount{{Reason: "x", Packets: 3}}},
		Queues: []control.QueueStats{{Queue: "dp0/0", Counts: control.Counts{Received: 10, Transmitted: 7, Dropped: 3, Drops: []control.DropCount{{Reason: "x", Packets: 3}},
			Ports: []control.PortCount{{Port: "out", Packets: 7, Bytes: 700}}}, Stages: []control.StageStats{{Name: "parse", Kind: "parse", Packets: 10, Calls: 1}}}}}}
}

func (f *fakeBackend) Pipelines() control.PipelineList {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := control.PipelineList{Running: f.running}
	for n, g := range f.store {
		l.Pipelines = append(l.Pipelines, control.Info(n, "", g))
	}
	return l
}
func (f *fakeBackend) Load(peer string, r control.LoadRequest) (control.PipelineInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loads++
	g, err := pipelines.Load(r.File, []byte(r.Source))
	if err != nil {
		return control.PipelineInfo{}, control.PipelineProblems(err)
	}
	name := r.Name
	if name == "" {
		name = g.Name()
	}
	f.store[name] = g
	return control.Info(name, r.File, g), nil
}
func (f *fakeBackend) Show(name string) (control.PipelineDetail, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.store[name]
	if !ok {
		return control.PipelineDetail{}, control.Errorf(control.ErrNotFound, "no pipeline %q", name)
	}
	return control.PipelineDetail{PipelineInfo: control.Info(name, "", g), Graph: control.Nodes(g), DOT: control.DOT(name, control.Nodes(g))}, nil
}
func (f *fakeBackend) Remove(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if name == f.running {
		return control.Errorf(control.ErrConflict, "pipeline %q is running", name)
	}
	delete(f.store, name)
	return nil
}
func (f *fakeBackend) Swap(name string) (control.SwapReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.store[name]; !ok {
		return control.SwapReply{}, control.Errorf(control.ErrNotFound, "no pipeline %q", name)
	}
	from := f.running
	f.running = name
	return control.SwapReply{From: from, To: name}, nil
}
func (f *fakeBackend) Stats() control.Stats      { f.mu.Lock(); defer f.mu.Unlock(); return f.stats }
func (f *fakeBackend) Ports() control.PortsReply { return control.PortsReply{} }
func (f *fakeBackend) Capture() control.CaptureInfo {
	return control.CaptureInfo{}
}
func (f *fakeBackend) CaptureStart(r control.CaptureRequest) (control.CaptureInfo, error) {
	return control.CaptureInfo{Active: true, Stage: r.Stage, File: r.File, Count: r.Count}, nil
}
func (f *fakeBackend) CaptureStop() (control.CaptureInfo, error) { return control.CaptureInfo{}, nil }

func serve(t *testing.T, b control.Backend) (*control.Server, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "wfc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	o := control.DefaultOptions()
	o.Socket = filepath.Join(dir, "s.sock")
	o.ReadTimeout = 2 * time.Second
	srv, err := control.NewServer(o, b, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve()
	t.Cleanup(func() { srv.Close() })
	return srv, o.Socket
}

const goodPipeline = "name: good\nstages:\n  - {name: parse, type: parse}\n  - {name: out, type: tx, port: out}\n"

func TestClientRoundTrip(t *testing.T) {
	fb := newFake()
	_, sock := serve(t, fb)
	c := client.New(sock)
	ctx := context.Background()
	info, err := c.Load(ctx, control.LoadRequest{File: "good.yaml", Source: goodPipeline})
	if err != nil || info.Name != "good" || info.Stages != 2 {
		t.Fatalf("load: %+v %v", info, err)
	}
	// An invalid pipeline comes back with every problem, file:line:col.
	_, err = c.Load(ctx, control.LoadRequest{File: "bad.yaml", Source: "name: bad\nstages:\n  - {name: parse, type: parse, next: nowhere}\n"})
	var ce *control.Error
	if !errors.As(err, &ce) || !errors.Is(err, control.ErrInvalidPipeline) || len(ce.Problems) == 0 || !strings.HasPrefix(ce.Problems[0], "bad.yaml:3:") {
		t.Fatalf("invalid load: %#v", err)
	}
	// The same text as offline validation.
	_, offline := pipelines.Load("bad.yaml", []byte("name: bad\nstages:\n  - {name: parse, type: parse, next: nowhere}\n"))
	if strings.Join(ce.Problems, "\n") != strings.TrimSpace(offline.Error()) {
		t.Fatalf("daemon says %q, offline %q", ce.Problems, offline)
	}
	if _, err := c.Swap(ctx, "good"); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, "good"); !errors.Is(err, control.ErrConflict) {
		t.Fatalf("rm running: %v", err)
	}
	if _, err := c.Show(ctx, "nope"); !errors.Is(err, control.ErrNotFound) {
		t.Fatalf("show unknown: %v", err)
	}
	if _, err := c.Show(ctx, "../etc"); !errors.Is(err, control.ErrBadRequest) && !errors.Is(err, control.ErrNotFound) {
		t.Fatalf("show bad name: %v", err)
	}
	d, err := c.Show(ctx, "good")
	if err != nil || !strings.Contains(d.DOT, `"parse" -> "out"`) {
		t.Fatalf("show: %v\n%s", err, d.DOT)
	}
	s, err := c.Stats(ctx)
	if err != nil || s.Totals.Received != 10 || s.Queues[0].Stages[0].Name != "parse" {
		t.Fatalf("stats: %+v %v", s, err)
	}
	// A capture file is a name in the daemon's capture_dir, never a path.
	for _, f := range []string{"/tmp/x.pcap", "../x.pcap", "a/b.pcap", ".x", ""} {
		if _, err := c.CaptureStart(ctx, control.CaptureRequest{Stage: "parse", File: f}); !errors.Is(err, control.ErrBadRequest) {
			t.Fatalf("capture to %q: %v", f, err)
		}
	}
	if ci, err := c.CaptureStart(ctx, control.CaptureRequest{Stage: "parse", File: "x.pcap"}); err != nil || ci.File != "x.pcap" {
		t.Fatalf("capture to a name: %+v %v", ci, err)
	}
	if _, err := client.New(filepath.Join(t.TempDir(), "none.sock")).Stats(ctx); !errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("no daemon: %v", err)
	}
}

// rawRequest sends raw bytes on a new connection and returns the status
// line and body.
func rawRequest(t *testing.T, sock, req string) (string, string) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	// Written alongside the read: the server may answer (413) before the
	// body is all sent and close, and the write then fails.
	go io.WriteString(c, req)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", req[:min(len(req), 60)], err)
	}
	body, _ := io.ReadAll(resp.Body)
	return resp.Status, string(body)
}

func post(path, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: w\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", path, len(body), body)
}

// TestBadRequests: oversized, truncated and malformed requests get an
// error (or a closed connection), nothing is applied, and the daemon
// keeps serving.
func TestBadRequests(t *testing.T) {
	fb := newFake()
	_, sock := serve(t, fb)
	big := `{"file":"x","source":"` + strings.Repeat("a", control.MaxRequestBytes) + `"}`
	for _, tc := range []struct {
		name, req, status, code string
	}{
		{"oversized", post("/v1/pipelines", big), "413", "too_large"},
		{"not json", post("/v1/pipelines", "name: x"), "400", "bad_request"},
		{"unknown field", post("/v1/pipelines", `{"source":"x","evil":1}`), "400", "bad_request"},
		{"trailing data", post("/v1/pipelines", `{"source":"x"} {}`), "400", "bad_request"},
		{"wrong type", post("/v1/pipelines", `{"source":5}`), "400", "bad_request"},
		{"empty body", post("/v1/pipelines", ""), "400", "bad_request"},
		{"empty source", post("/v1/pipelines", `{"file":"x"}`), "400", "bad_request"},
		{"bad name", post("/v1/pipelines", `{"name":"a/b","source":"x"}`), "400", "bad_request"},
		{"swap with a body", post("/v1/pipelines/good/swap", `{"x":1}`), "400", "bad_request"},
		{"unknown endpoint", "GET /v1/nope HTTP/1.1\r\nHost: w\r\nConnection: close\r\n\r\n", "404", "not_found"},
		{"wrong method", "PUT /v1/stats HTTP/1.1\r\nHost: w\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", "404", "not_found"},
		{"capture count", post("/v1/capture", `{"stage":"parse","file":"x.pcap","count":-1}`), "400", "bad_request"},
	} {
		status, body := rawRequest(t, sock, tc.req)
		if !strings.HasPrefix(status, tc.status) || !strings.Contains(body, tc.code) {
			t.Errorf("%s: got %s %s", tc.name, status, body)
		}
	}
	// Truncated: a body shorter than its Content-Length, then the client
	// goes away. The server gives up after its read timeout at most.
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /v1/pipelines HTTP/1.1\r\nHost: w\r\nContent-Length: 1000\r\n\r\n{\"source\":\"name: t")
	c.Close()
	// A header that never ends: the read timeout ends it.
	c2, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c2, "GET /v1/stats HTTP/1.1\r\nHost: w\r\n")
	defer c2.Close()
	if s, _ := rawRequest(t, sock, "GET /v1/stats HTTP/1.1\r\nHost: w\r\nConnection: close\r\n\r\n"); !strings.HasPrefix(s, "200") {
		t.Fatalf("after bad requests: %s", s)
	}
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if fb.loads != 0 || len(fb.store) != 0 {
		t.Fatalf("bad requests reached the backend: %d loads, store %v", fb.loads, fb.store)
	}
}

// TestDisconnectMidRequest: a client that sends half a request and goes
// away leaves no goroutine and no connection behind, and nothing applied.
func TestDisconnectMidRequest(t *testing.T) {
	fb := newFake()
	_, sock := serve(t, fb)
	// Warm up the server's own goroutines.
	rawRequest(t, sock, "GET /v1/stats HTTP/1.1\r\nHost: w\r\nConnection: close\r\n\r\n")
	time.Sleep(50 * time.Millisecond)
	before := runtime.NumGoroutine()
	for range 20 {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /v1/pipelines HTTP/1.1\r\nHost: w\r\nContent-Length: 500\r\n\r\n{\"source\":\"na")
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
	if fb.loads != 0 {
		t.Fatalf("%d loads from requests cut short", fb.loads)
	}
}

// TestUnsafeSocketPaths: the server refuses to start where another user
// could take over the socket.
func TestUnsafeSocketPaths(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	open := func(path string) error {
		o := control.DefaultOptions()
		o.Socket = path
		srv, err := control.NewServer(o, newFake(), log)
		if err == nil {
			srv.Close()
		}
		return err
	}
	dir := t.TempDir()
	ww := filepath.Join(dir, "ww")
	os.Mkdir(ww, 0o777)
	os.Chmod(ww, 0o777)
	if err := open(filepath.Join(ww, "s.sock")); !errors.Is(err, control.ErrUnsafeSocket) {
		t.Fatalf("world-writable dir: %v", err)
	}
	sticky := filepath.Join(dir, "sticky")
	os.Mkdir(sticky, 0o777)
	os.Chmod(sticky, 0o777|os.ModeSticky)
	if err := open(filepath.Join(sticky, "s.sock")); !errors.Is(err, control.ErrUnsafeSocket) {
		t.Fatalf("world-writable sticky dir: %v", err)
	}
	priv := filepath.Join(dir, "priv")
	os.Mkdir(priv, 0o700)
	file := filepath.Join(priv, "f.sock")
	os.WriteFile(file, nil, 0o600)
	if err := open(file); !errors.Is(err, control.ErrUnsafeSocket) {
		t.Fatalf("a file in the way: %v", err)
	}
	if err := open("relative.sock"); err == nil {
		t.Fatal("relative path accepted")
	}
	// A socket that serves: refused, the other daemon untouched.
	_, sock := serve(t, newFake())
	if err := open(sock); err == nil || !strings.Contains(err.Error(), "another warpflowd") {
		t.Fatalf("socket in use: %v", err)
	}
	// The mode: owner only.
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v %v", fi.Mode(), err)
	}
	if os.Geteuid() != 0 {
		return
	}
	// A stale socket owned by someone else.
	other := filepath.Join(priv, "other.sock")
	ln, err := net.Listen("unix", other)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	os.Chown(other, 65534, 65534)
	if err := open(other); !errors.Is(err, control.ErrUnsafeSocket) || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Fatalf("socket of another user: %v", err)
	}
	// A directory of another user.
	theirs := filepath.Join(dir, "theirs")
	os.Mkdir(theirs, 0o755)
	os.Chown(theirs, 65534, 65534)
	if err := open(filepath.Join(theirs, "s.sock")); !errors.Is(err, control.ErrUnsafeSocket) {
		t.Fatalf("directory of another user: %v", err)
	}
}

// TestUnprivilegedClientRefused runs a client as nobody: refused by the
// socket's mode, and, with the mode opened up, by the peer check.
func TestUnprivilegedClientRefused(t *testing.T) {
	if os.Getenv("WARPFLOW_CLIENT_SOCKET") != "" {
		return // the child's side runs in TestMain
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root to run a client as another user, and CI runs as root")
		}
		t.Skip("needs root: runs a client as uid 65534")
	}
	fb := newFake()
	_, sock := serve(t, fb)
	// The test binary, where nobody can run it.
	binDir, err := os.MkdirTemp("", "wfc-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(binDir) })
	bin := filepath.Join(binDir, "client")
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(bin), 0o755)
	run := func() string {
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), "WARPFLOW_CLIENT_SOCKET="+sock)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		return string(out) + fmt.Sprint(err)
	}
	// The directory (0700) and the socket (0600) keep nobody out.
	if out := run(); !strings.Contains(out, "unreachable") || !strings.Contains(out, "permission denied") {
		t.Fatalf("nobody through mode 0600: %s", out)
	}
	// Opened up, the server's own check refuses it, by uid.
	os.Chmod(filepath.Dir(sock), 0o755)
	os.Chmod(sock, 0o666)
	if out := run(); !strings.Contains(out, "forbidden") || !strings.Contains(out, "uid 65534") {
		t.Fatalf("nobody through the peer check: %s", out)
	}
	if fb.loads != 0 {
		t.Fatal("a refused client reached the backend")
	}
}

func TestMain(m *testing.M) {
	if sock := os.Getenv("WARPFLOW_LISTEN"); sock != "" {
		listenAsChild(sock) // serves until killed
		os.Exit(1)
	}
	if sock := os.Getenv("WARPFLOW_CLIENT_SOCKET"); sock != "" {
		_, err := client.New(sock).Load(context.Background(), control.LoadRequest{File: "x.yaml", Source: goodPipeline})
		var ce *control.Error
		if errors.As(err, &ce) {
			fmt.Println(ce.Code, ce.Message)
		} else {
			fmt.Println(err)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestTCPListener: no TCP unless configured; a bare port listens on
// loopback only, and the client reaches it with tcp://.
func TestTCPListener(t *testing.T) {
	srv, _ := serve(t, newFake())
	if len(srv.Addrs()) != 1 {
		t.Fatalf("listening on %v without TCP configured", srv.Addrs())
	}
	dir, _ := os.MkdirTemp("", "wfc-")
	defer os.RemoveAll(dir)
	o := control.DefaultOptions()
	o.Socket, o.TCP = filepath.Join(dir, "s.sock"), ":0"
	tsrv, err := control.NewServer(o, newFake(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	tsrv.Serve()
	defer tsrv.Close()
	addrs := tsrv.Addrs()
	if len(addrs) != 2 || !strings.HasPrefix(addrs[1], "127.0.0.1:") {
		t.Fatalf("listening on %v, want the socket and loopback", addrs)
	}
	if s, err := client.New("tcp://" + addrs[1]).Stats(context.Background()); err != nil || s.Totals.Received != 10 {
		t.Fatalf("over tcp: %+v %v", s, err)
	}
	for in, want := range map[string]string{"9464": "127.0.0.1:9464", ":9464": "127.0.0.1:9464", "0.0.0.0:9464": "0.0.0.0:9464"} {
		if got, err := control.MetricsAddr(in); err != nil || got != want {
			t.Errorf("metrics address %q: %q %v, want %q", in, got, err, want)
		}
	}
}

// TestLoadLargePipeline: a pipeline the file limits accept loads through
// the API too. The body cap was once 1 MiB, which refused (413) any
// filter of more than about 12,000 rules that loaded fine from a file.
func TestLoadLargePipeline(t *testing.T) {
	fb := newFake()
	_, sock := serve(t, fb)
	var b strings.Builder
	b.WriteString("name: large\nstages:\n  - {name: parse, type: parse}\n  - name: acl\n    type: filter\n    default: accept\n    rules:\n")
	const rules = 30000
	for i := range rules {
		fmt.Fprintf(&b, "      - {proto: udp, src: 10.%d.%d.0/24, dst_port: %d, action: \"drop:x\"}\n", i/256%256, i%256, 1+i%60000)
	}
	b.WriteString("  - {name: out, type: tx, port: out0}\n")
	if b.Len() <= 1<<20 {
		t.Fatalf("test pipeline is %d bytes: not over the old 1 MiB cap", b.Len())
	}
	info, err := client.New(sock).Load(context.Background(), control.LoadRequest{File: "large.yaml", Source: b.String()})
	if err != nil {
		t.Fatalf("load of a %d-byte pipeline: %v", b.Len(), err)
	}
	if info.Name != "large" {
		t.Fatalf("loaded %+v", info)
	}
}
