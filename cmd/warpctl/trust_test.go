package main

import (
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/warpflow/warpflow/internal/control"
)

// recorder is a backend that records the capture requests and swaps it
// gets (the embedded nil Backend is never reached by these tests).
type recorder struct {
	control.Backend
	mu    sync.Mutex
	files []string
	swaps int
}

func (r *recorder) CaptureStart(req control.CaptureRequest) (control.CaptureInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.files = append(r.files, req.File)
	return control.CaptureInfo{Active: true, Stage: req.Stage, File: "/var/lib/warpflow/captures/" + req.File, Count: req.Count, Snaplen: req.Snaplen}, nil
}

func (r *recorder) Swap(name string) (control.SwapReply, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.swaps++
	return control.SwapReply{To: name}, nil
}

func serveRecorder(t *testing.T, tcp bool) (*recorder, *control.Server) {
	t.Helper()
	rec := &recorder{}
	o := control.DefaultOptions()
	o.Socket = filepath.Join(t.TempDir(), "s.sock")
	if tcp {
		o.TCP = "127.0.0.1:0"
	}
	srv, err := control.NewServer(o, rec, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve()
	t.Cleanup(func() { srv.Close() })
	return rec, srv
}

// TestCaptureFileIsAName: --file goes to the daemon as given (it was
// resolved against warpctl's working directory, issue 18 item 4), the
// reply's full path is printed, and a path is refused before any request.
func TestCaptureFileIsAName(t *testing.T) {
	rec, srv := serveRecorder(t, false)
	t.Chdir(t.TempDir())
	out, stderr, code := run(t, "capture", "start", "--stage", "parse", "--file", "acl.pcap", "--socket", srv.Addrs()[0])
	if code != 0 || !strings.Contains(out, "to /var/lib/warpflow/captures/acl.pcap ") {
		t.Fatalf("capture start: exit %d %s%s", code, out, stderr)
	}
	for _, bad := range []string{"../../etc/x", "/tmp/a/../../etc/x", "/tmp/x.pcap", "sub/x.pcap", ".x"} {
		_, stderr, code := run(t, "capture", "start", "--stage", "parse", "--file", bad, "--socket", srv.Addrs()[0])
		if code != codeUsage || !strings.Contains(stderr, "capture: file") {
			t.Errorf("--file %s: exit %d %s", bad, code, stderr)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.files) != 1 || rec.files[0] != "acl.pcap" {
		t.Fatalf("the daemon was sent %q, want just \"acl.pcap\"", rec.files)
	}
}

// TestTCPToken: over tcp:// a swap needs the daemon's token: refused
// (exit 5, naming the way to give it) without, sent with --token-file,
// $WARPCTL_TOKEN_FILE or $WARPCTL_TOKEN; a token file others may read
// is a usage error.
func TestTCPToken(t *testing.T) {
	rec, srv := serveRecorder(t, true)
	addr := "tcp://" + srv.Addrs()[1]
	t.Setenv("WARPCTL_TOKEN", "")
	t.Setenv("WARPCTL_TOKEN_FILE", "")
	_, stderr, code := run(t, "pipeline", "swap", "x", "--socket", addr)
	if code != codeRefused || !strings.Contains(stderr, "control token") || !strings.Contains(stderr, "--token-file") {
		t.Fatalf("swap without a token: exit %d %s", code, stderr)
	}
	if _, stderr, code := run(t, "pipeline", "swap", "x", "--socket", addr, "--token-file", srv.TokenFile()); code != 0 {
		t.Fatalf("swap with --token-file: exit %d %s", code, stderr)
	}
	t.Setenv("WARPCTL_TOKEN_FILE", srv.TokenFile())
	if _, stderr, code := run(t, "pipeline", "swap", "x", "--socket", addr); code != 0 {
		t.Fatalf("swap with $WARPCTL_TOKEN_FILE: exit %d %s", code, stderr)
	}
	t.Setenv("WARPCTL_TOKEN_FILE", "")
	tok, _ := os.ReadFile(srv.TokenFile())
	t.Setenv("WARPCTL_TOKEN", strings.TrimSpace(string(tok)))
	if _, stderr, code := run(t, "pipeline", "swap", "x", "--socket", addr); code != 0 {
		t.Fatalf("swap with $WARPCTL_TOKEN: exit %d %s", code, stderr)
	}
	t.Setenv("WARPCTL_TOKEN", "")
	loose := filepath.Join(t.TempDir(), "t")
	os.WriteFile(loose, tok, 0o644)
	if _, stderr, code := run(t, "pipeline", "swap", "x", "--socket", addr, "--token-file", loose); code != codeUsage || !strings.Contains(stderr, "chmod 600") {
		t.Fatalf("a token file others may read: exit %d %s", code, stderr)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.swaps != 3 {
		t.Fatalf("%d swaps reached the daemon, want the 3 with a token", rec.swaps)
	}
}

// TestUnsafeSocketRefused: warpctl will not talk through a socket path
// another user could replace (exit 4, naming the directory and the fix).
func TestUnsafeSocketRefused(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	priv := filepath.Join(open, "priv")
	os.Mkdir(priv, 0o750)
	ln, err := net.Listen("unix", filepath.Join(priv, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, stderr, code := run(t, "pipeline", "list", "--socket", filepath.Join(priv, "s.sock"))
	if code != codeUnreachable || !strings.Contains(stderr, open+" is writable") || !strings.Contains(stderr, "chmod go-w") {
		t.Fatalf("exit %d %s", code, stderr)
	}
}
