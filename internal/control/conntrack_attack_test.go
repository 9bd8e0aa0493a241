package control_test

import (
	"context"
	"errors"
	"github.com/warpflow/warpflow/internal/control/client"
	"github.com/warpflow/warpflow/internal/testwait"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/pipelines"
)

// TestConntrackMalformedQueryRefused: a query string the server cannot
// parse whole must be refused, never read with the bad pairs left out.
// url.Values from r.URL.Query() silently drops a pair with a bad escape
// or a semicolon, so "flush what matches src=<bad>" became "flush
// everything"; an empty filter value ("src=", what a script's unset
// variable gives) did the same. Neither reaches the backend.
func TestConntrackMalformedQueryRefused(t *testing.T) {
	fb := &ctFake{fakeBackend: newFake()}
	_, sock := serve(t, fb)
	for _, q := range []string{
		"src=%zz",                 // bad escape: the pair was dropped
		"dport=53&src=10.0.0.%g1", // a narrower flush became a wider one
		"src=10.0.0.1;dport=53",   // semicolon: the pair was dropped
		"src=",                    // empty value: no filter at all
		"state=",
		"port=",
		"stage=",
		"=1",
	} {
		for _, method := range []string{"DELETE", "GET"} {
			before := len(fb.qs)
			status, body := rawRequest(t, sock, method+" /v1/conntrack?"+q+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			if !strings.HasPrefix(status, "400") || !strings.Contains(body, "bad_request") {
				t.Errorf("%s ?%s: %s %s; want 400 bad_request", method, q, status, strings.TrimSpace(body))
			}
			if len(fb.qs) != before {
				t.Errorf("%s ?%s reached the backend as %+v", method, q, fb.qs[len(fb.qs)-1])
			}
		}
	}
	// Well-formed escapes still work: %2F is a prefix's slash.
	status, body := rawRequest(t, sock, "DELETE /v1/conntrack?src=10.0.0.0%2F8 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if !strings.HasPrefix(status, "200") {
		t.Fatalf("escaped prefix: %s %s", status, body)
	}
	if got := fb.qs[len(fb.qs)-1]; got.Src != "10.0.0.0/8" || !got.Flush {
		t.Fatalf("escaped prefix reached the backend as %+v", got)
	}
}

// TestConntrackStatesMatchStage: every state the API accepts is one the
// conntrack stage can match (a name only the API knew would select
// nothing, silently), and every state the stage has is accepted.
func TestConntrackStatesMatchStage(t *testing.T) {
	stage := pipelines.FlowStateNames()
	for _, s := range stage {
		if _, err := control.ParseConntrackQuery(url.Values{"state": {strings.ToLower(s)}}); err != nil {
			t.Errorf("state %s of the stage: %v", s, err)
		}
	}
	for _, s := range []string{"NONE", "SYN_SENT3", "established "} {
		if _, err := control.ParseConntrackQuery(url.Values{"state": {s}}); err == nil {
			t.Errorf("state %q accepted", s)
		}
	}
	// The error lists the choices: the same set as the stage's.
	_, err := control.ParseConntrackQuery(url.Values{"state": {"x"}})
	for _, s := range stage {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the error %q does not offer %s", err, s)
		}
	}
	if n := strings.Count(err.Error(), ",") + 1; n != len(stage) {
		t.Errorf("the error offers %d states, the stage has %d: %v", n, len(stage), err)
	}
}

// TestConntrackPrefixForms: an IPv4-mapped address or prefix filters
// IPv4 flows (the tables keep them as IPv4: the mapped form matched none
// before, without a word); a mapped prefix shorter than /96 and an
// address with a zone are refused.
func TestConntrackPrefixForms(t *testing.T) {
	for in, want := range map[string]string{
		"::ffff:10.0.0.1":     "10.0.0.1/32",
		"::ffff:10.0.0.0/104": "10.0.0.0/8",
		"::ffff:0:0/96":       "0.0.0.0/0",
		"10.0.0.9/8":          "10.0.0.0/8",
		"2001:db8::1":         "2001:db8::1/128",
	} {
		p, err := control.ParsePrefix(in)
		if err != nil || p.String() != want {
			t.Errorf("%s: %v %v, want %s", in, p, err, want)
		}
	}
	for _, in := range []string{"::ffff:0:0/64", "fe80::1%eth0", "10.0.0.1%x", "::ffff:10.0.0.1/33/1"} {
		if p, err := control.ParsePrefix(in); err == nil {
			t.Errorf("%s: %v, want an error", in, p)
		}
	}
	if _, err := control.ParseConntrackQuery(url.Values{"src": {"::ffff:0:0/64"}}); !errors.Is(err, control.ErrBadRequest) || !strings.Contains(err.Error(), "IPv4-mapped") {
		t.Errorf("a mapped /64 in a query: %v", err)
	}
}

// ctBlocking is a conntrack backend whose listings wait for release,
// counting how many are in it at once.
type ctBlocking struct {
	*fakeBackend
	in, most atomic.Int32
	entered  chan struct{}
	release  chan struct{}
}

func (f *ctBlocking) Conntrack(ctx context.Context, q control.ConntrackQuery) (control.ConntrackReply, error) {
	n := f.in.Add(1)
	defer f.in.Add(-1)
	for {
		m := f.most.Load()
		if n <= m || f.most.CompareAndSwap(m, n) {
			break
		}
	}
	f.entered <- struct{}{}
	select {
	case <-f.release:
	case <-ctx.Done():
		return control.ConntrackReply{}, ctx.Err()
	}
	return control.ConntrackReply{Stage: "ct", Flows: []control.ConntrackFlow{}}, nil
}

// TestConntrackListingsBounded: a listing's reply can be tens of MiB
// (MaxConntrackList flows), so the server serves two at a time; a third
// waits for a turn instead of holding its own copy at once, and is then
// served.
func TestConntrackListingsBounded(t *testing.T) {
	fb := &ctBlocking{fakeBackend: newFake(), entered: make(chan struct{}, 8), release: make(chan struct{})}
	_, sock := serve(t, fb)
	c := client.New(sock)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := c.Conntrack(ctx, control.ConntrackQuery{Limit: 10})
			errs <- err
		}()
	}
	for range 2 {
		testwait.Recv(t, fb.entered, "a listing to reach the backend", testwait.Deadline)
	}
	select {
	case <-fb.entered:
		t.Fatalf("a third listing reached the backend while two were in it")
	case <-time.After(300 * time.Millisecond):
	}
	close(fb.release)
	for range 3 {
		if err := testwait.Recv(t, errs, "a listing to finish", testwait.Deadline); err != nil {
			t.Fatalf("a listing: %v", err)
		}
	}
	if m := fb.most.Load(); m != 2 {
		t.Fatalf("%d listings in the backend at once, want 2", m)
	}
}
