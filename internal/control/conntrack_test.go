package control_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/control/client"
)

// ctFake is a backend with conntrack: it records the queries it got.
type ctFake struct {
	*fakeBackend
	mu sync.Mutex
	qs []control.ConntrackQuery
}

func (f *ctFake) Conntrack(_ context.Context, q control.ConntrackQuery) (control.ConntrackReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.qs = append(f.qs, q)
	if q.Stage == "missing" {
		return control.ConntrackReply{}, control.Errorf(control.ErrNotFound, "no conntrack stage %q", q.Stage)
	}
	rep := control.ConntrackReply{Stage: "ct", Entries: 3, Capacity: 4096, Matched: 2, Flushed: q.Flush, Flows: []control.ConntrackFlow{}}
	if !q.Flush && q.Limit > 0 {
		rep.Flows = append(rep.Flows, control.ConntrackFlow{Queue: "dp0/0", Proto: 6, ProtoName: "tcp", Src: "10.0.0.1", Dst: "198.51.100.7", SrcPort: 4000, DstPort: 80, State: "ESTABLISHED"})
	}
	return rep, nil
}

func TestConntrackEndpoints(t *testing.T) {
	fb := &ctFake{fakeBackend: newFake()}
	_, sock := serve(t, fb)
	c := client.New(sock)
	ctx := context.Background()
	rep, err := c.Conntrack(ctx, control.ConntrackQuery{Proto: 6, Src: "10.0.0.0/8", DstPort: 80, State: "ESTABLISHED", Limit: 10})
	if err != nil || len(rep.Flows) != 1 || rep.Flows[0].State != "ESTABLISHED" {
		t.Fatalf("list: %+v %v", rep, err)
	}
	got := fb.qs[len(fb.qs)-1]
	if got.Proto != 6 || got.Src != "10.0.0.0/8" || got.DstPort != 80 || got.State != "ESTABLISHED" || got.Limit != 10 || got.Flush {
		t.Fatalf("the backend got %+v", got)
	}
	if rep, err := c.Conntrack(ctx, control.ConntrackQuery{Addr: "192.0.2.1", Flush: true}); err != nil || !rep.Flushed {
		t.Fatalf("flush: %+v %v", rep, err)
	}
	if got := fb.qs[len(fb.qs)-1]; !got.Flush || got.Addr != "192.0.2.1" {
		t.Fatalf("flush reached the backend as %+v", got)
	}
	if _, err := c.Conntrack(ctx, control.ConntrackQuery{Stage: "missing"}); !errors.Is(err, control.ErrNotFound) {
		t.Fatalf("unknown stage: %v", err)
	}
	// Bad parameters are refused before the backend sees them.
	before := len(fb.qs)
	for _, q := range []string{"proto=bogus", "src=10.0.0.300", "port=0", "port=70000", "state=SLEEPING", "limit=-1",
		"limit=100001", "nope=1", "src=1.2.3.4&src=5.6.7.8", "stage=../x", "addr=" + strings.Repeat("1", 300)} {
		status, body := rawRequest(t, sock, "GET /v1/conntrack?"+q+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		if !strings.HasPrefix(status, "400") || !strings.Contains(body, "bad_request") {
			t.Errorf("%s: %s %s", q, status, body)
		}
	}
	if status, _ := rawRequest(t, sock, "DELETE /v1/conntrack?limit=5 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); !strings.HasPrefix(status, "400") {
		t.Errorf("flush with a limit: %s", status)
	}
	if len(fb.qs) != before {
		t.Fatalf("%d bad queries reached the backend", len(fb.qs)-before)
	}
}

// TestConntrackFlushNeedsTokenOverTCP: a flush changes the daemon, so
// over TCP it needs the token even from loopback; so does a listing (it
// shows flows' addresses), where other reads from loopback are open.
func TestConntrackFlushNeedsTokenOverTCP(t *testing.T) {
	dir, _ := os.MkdirTemp("", "wfc-")
	defer os.RemoveAll(dir)
	o := control.DefaultOptions()
	o.Socket, o.TCP = filepath.Join(dir, "s.sock"), ":0"
	o.TokenFile = filepath.Join(dir, "token")
	fb := &ctFake{fakeBackend: newFake()}
	srv, err := control.NewServer(o, fb, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve()
	defer srv.Close()
	addr := "tcp://" + srv.Addrs()[1]
	ctx := context.Background()
	noTok := client.New(addr, client.WithToken(""))
	if _, err := noTok.Conntrack(ctx, control.ConntrackQuery{Limit: 5}); !errors.Is(err, control.ErrUnauthorized) {
		t.Fatalf("loopback list without a token: %v, want unauthorized", err)
	}
	if _, err := noTok.Stats(ctx); err != nil {
		t.Fatalf("loopback stats without a token: %v", err)
	}
	if _, err := noTok.Conntrack(ctx, control.ConntrackQuery{Flush: true}); !errors.Is(err, control.ErrUnauthorized) {
		t.Fatalf("flush without a token: %v", err)
	}
	tok, err := os.ReadFile(srv.TokenFile())
	if err != nil {
		t.Fatal(err)
	}
	withTok := client.New(addr, client.WithToken(strings.TrimSpace(string(tok))))
	if _, err := withTok.Conntrack(ctx, control.ConntrackQuery{Limit: 5}); err != nil {
		t.Fatalf("list with the token: %v", err)
	}
	if _, err := withTok.Conntrack(ctx, control.ConntrackQuery{Flush: true}); err != nil {
		t.Fatalf("flush with the token: %v", err)
	}
}
