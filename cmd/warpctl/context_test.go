package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/internal/control"
)

// stubBackend answers the read commands with fixed counts.
type stubBackend struct {
	name    string
	rx      uint64
	removed []string
}

func (b *stubBackend) Pipelines() control.PipelineList {
	return control.PipelineList{Running: b.name, Generation: 1, Pipelines: []control.PipelineInfo{{Name: b.name, Pipeline: b.name, Running: true}}}
}
func (b *stubBackend) Load(string, control.LoadRequest) (control.PipelineInfo, error) {
	return control.PipelineInfo{}, control.ErrRefused
}
func (b *stubBackend) Show(string) (control.PipelineDetail, error) {
	return control.PipelineDetail{}, control.ErrNotFound
}
func (b *stubBackend) Remove(name string) error { b.removed = append(b.removed, name); return nil }
func (b *stubBackend) Swap(string) (control.SwapReply, error) {
	return control.SwapReply{}, control.ErrRefused
}
func (b *stubBackend) Stats() control.Stats {
	return control.Stats{Pipeline: b.name, Generation: 1, Totals: control.Counts{Received: b.rx, Transmitted: b.rx - 1, Dropped: 1, Balanced: true}}
}
func (b *stubBackend) Ports() control.PortsReply {
	return control.PortsReply{Interfaces: []control.InterfaceInfo{{Name: "dp0", Receives: true, Attach: "native"}}}
}
func (b *stubBackend) Capture() control.CaptureInfo { return control.CaptureInfo{} }
func (b *stubBackend) CaptureStart(control.CaptureRequest) (control.CaptureInfo, error) {
	return control.CaptureInfo{}, control.ErrRefused
}
func (b *stubBackend) CaptureStop() (control.CaptureInfo, error) { return control.CaptureInfo{}, nil }

// serveStub runs a control server for b on a socket in dir and on
// loopback TCP, and returns the socket, the TCP address and the token
// file.
func serveStub(t *testing.T, dir string, b *stubBackend) (sock, tcp, token string) {
	t.Helper()
	o := control.DefaultOptions()
	o.Socket, o.TCP, o.TokenFile = filepath.Join(dir, "ctl.sock"), "127.0.0.1:0", filepath.Join(dir, "control.token")
	srv, err := control.NewServer(o, b, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve()
	t.Cleanup(func() { srv.Close() })
	return o.Socket, srv.Addrs()[1], srv.TokenFile()
}

// writeContexts writes a contexts file (mode perm) and points
// $WARPCTL_CONFIG at it.
func writeContexts(t *testing.T, text string, perm os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(text), perm); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, perm)
	t.Setenv("WARPCTL_CONFIG", p)
	t.Setenv("WARPCTL_SOCKET", "")
	t.Setenv("WARPCTL_TOKEN", "")
	return p
}

func TestContextsFileRefused(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		perm       os.FileMode
		want       string
	}{
		{"unknown key", "contexts:\n  - {name: a, socket: /run/a.sock, sockit: x}\n", 0o600, "sockit"},
		{"alias", "contexts:\n  - &x {name: a, socket: /run/a.sock}\n  - *x\n", 0o600, "anchors and aliases"},
		{"both targets", "contexts:\n  - {name: a, socket: /run/a.sock, tcp: 127.0.0.1:1}\n", 0o600, "exactly one of"},
		{"neither", "contexts:\n  - {name: a}\n", 0o600, "exactly one of"},
		{"relative socket", "contexts:\n  - {name: a, socket: run/a.sock}\n", 0o600, "absolute path"},
		{"token on a socket", "contexts:\n  - {name: a, socket: /run/a.sock, token_file: /x}\n", 0o600, "tcp only"},
		{"twice", "contexts:\n  - {name: a, socket: /a}\n  - {name: a, socket: /b}\n", 0o600, "listed twice"},
		{"bad name", "contexts:\n  - {name: 'a b', socket: /a}\n", 0o600, "name"},
		{"current unknown", "current: b\ncontexts:\n  - {name: a, socket: /a}\n", 0o600, `"b" is not one of`},
		{"inline token readable", "contexts:\n  - {name: a, tcp: '127.0.0.1:1', token: " + strings.Repeat("ab", 32) + "}\n", 0o644, "chmod 600"},
		{"writable by others", "contexts:\n  - {name: a, socket: /a}\n", 0o666, "chmod go-w"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeContexts(t, tc.text, tc.perm)
			_, errOut, code := run(t, "--context", "a", "stats")
			if code != codeUsage || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, want %d with %q:\n%s", code, codeUsage, tc.want, errOut)
			}
		})
	}
	// A link in the file's place is not followed.
	dir := t.TempDir()
	real := filepath.Join(dir, "real.yaml")
	os.WriteFile(real, []byte("contexts: []\n"), 0o600)
	link := filepath.Join(dir, "config.yaml")
	os.Symlink(real, link)
	t.Setenv("WARPCTL_CONFIG", link)
	if _, errOut, code := run(t, "--context", "a", "stats"); code != codeUsage || !strings.Contains(errOut, "contexts file") {
		t.Fatalf("through a symlink: exit %d %s", code, errOut)
	}
}

// TestContexts: --context picks a socket or an authenticated TCP
// endpoint (its token_file sent), current is the default, and --all asks
// them all, listing the unreachable one without failing.
func TestContexts(t *testing.T) {
	dirA, dirB := t.TempDir(), t.TempDir()
	a, b := &stubBackend{name: "pa", rx: 100}, &stubBackend{name: "pb", rx: 50}
	sockA, _, _ := serveStub(t, dirA, a)
	_, tcpB, tokB := serveStub(t, dirB, b)
	writeContexts(t, `current: a
contexts:
  - {name: a, socket: `+sockA+`}
  - {name: b, tcp: "`+tcpB+`", token_file: `+tokB+`}
  - {name: gone, socket: `+filepath.Join(t.TempDir(), "none.sock")+`}
`, 0o600)

	if out, errOut, code := run(t, "stats"); code != 0 || !strings.Contains(out, "pipeline pa ") {
		t.Fatalf("current context: exit %d %s\n%s", code, errOut, out)
	}
	if out, errOut, code := run(t, "--context", "b", "stats"); code != 0 || !strings.Contains(out, "pipeline pb ") {
		t.Fatalf("--context b: exit %d %s\n%s", code, errOut, out)
	}
	// A change over TCP needs the token: the context's token_file sends it.
	if _, errOut, code := run(t, "--context", "b", "pipeline", "rm", "old"); code != 0 || len(b.removed) != 1 {
		t.Fatalf("pipeline rm over TCP with the context's token: exit %d %s", code, errOut)
	}
	if _, errOut, code := run(t, "--context", "a", "--socket", sockA, "stats"); code != codeUsage || !strings.Contains(errOut, "give one") {
		t.Errorf("--context with --socket: exit %d %s", code, errOut)
	}
	if _, errOut, code := run(t, "--context", "nope", "stats"); code != codeUsage || !strings.Contains(errOut, "contexts: a, b, gone") {
		t.Errorf("unknown context: exit %d %s", code, errOut)
	}
	if _, errOut, code := run(t, "--all", "pipeline", "swap", "x"); code != codeUsage || !strings.Contains(errOut, "read commands") {
		t.Errorf("--all on swap: exit %d %s", code, errOut)
	}

	out, errOut, code := run(t, "--all", "stats")
	if code != 0 {
		t.Fatalf("--all stats: exit %d %s\n%s", code, errOut, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[1], "a ") || !strings.HasPrefix(lines[2], "b ") ||
		!strings.HasPrefix(lines[3], "TOTAL ") || !strings.Contains(lines[3], "2 of 3 daemons") || !strings.Contains(lines[3], " 150 ") ||
		!strings.HasPrefix(lines[4], "unreachable: gone (") {
		t.Fatalf("--all stats:\n%s", out)
	}
	js, _, code := run(t, "stats", "--all", "--json")
	var res struct {
		Daemons []struct {
			Context string        `json:"context"`
			Reply   control.Stats `json:"reply"`
		} `json:"daemons"`
		Total       statsTotal  `json:"total"`
		Unreachable []allMissed `json:"unreachable"`
	}
	if code != 0 || json.Unmarshal([]byte(js), &res) != nil || len(res.Daemons) != 2 || res.Total.Received != 150 || res.Total.Daemons != 2 || res.Total.Of != 3 ||
		len(res.Unreachable) != 1 || res.Unreachable[0].Context != "gone" {
		t.Fatalf("--all --json: exit %d\n%s", code, js)
	}
	if out, _, code := run(t, "--all", "pipeline", "list"); code != 0 || !strings.Contains(out, "pa on 1, pb on 1") || !strings.Contains(out, "unreachable: gone") {
		t.Errorf("--all pipeline list: exit %d\n%s", code, out)
	}
	if out, _, code := run(t, "--all", "ports"); code != 0 || !strings.Contains(out, "2 interfaces") || !strings.Contains(out, "dp0 (native)") {
		t.Errorf("--all ports: exit %d\n%s", code, out)
	}

	// None answering: exit 4.
	writeContexts(t, "contexts:\n  - {name: gone, socket: "+filepath.Join(t.TempDir(), "none.sock")+"}\n", 0o600)
	if out, _, code := run(t, "--all", "stats"); code != codeUnreachable || !strings.Contains(out, "unreachable: gone") {
		t.Errorf("--all with none answering: exit %d\n%s", code, out)
	}
}

// FuzzContextsFile: any contexts file is read or refused, never a panic,
// and what is accepted validates.
func FuzzContextsFile(f *testing.F) {
	f.Add("current: a\ncontexts:\n  - {name: a, socket: /run/a.sock}\n  - {name: b, tcp: '127.0.0.1:9000', token_file: /t}\n")
	f.Add("contexts:\n  - &x {name: a, socket: /a}\n  - *x\n")
	f.Add("contexts: [[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]\n")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, text string) {
		p := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		cf, _, err := loadContexts(p)
		if err != nil {
			return
		}
		for _, c := range cf.Contexts {
			if (c.Socket == "") == (c.TCP == "") {
				t.Fatalf("accepted context %+v", c)
			}
		}
	})
}
