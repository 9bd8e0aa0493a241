package control

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestTCPReadsFromElsewhereNeedToken: loopback reads are open over TCP,
// reads from any other address need the token like every change.
func TestTCPReadsFromElsewhereNeedToken(t *testing.T) {
	s := &Server{token: strings.Repeat("t", 64)}
	for _, tc := range []struct {
		method, addr, auth string
		ok                 bool
	}{
		{"GET", "127.0.0.1:4000", "", true},
		{"GET", "[::1]:4000", "", true},
		{"HEAD", "127.0.0.5:4000", "", true},
		{"GET", "192.0.2.1:4000", "", false},
		{"GET", "[2001:db8::1]:4000", "", false},
		{"GET", "192.0.2.1:4000", "Bearer " + s.token, true},
		{"GET", "127.0.0.1:4000", "Bearer wrong", false},
		{"GET", "127.0.0.1:4000", "Basic " + s.token, false},
		{"POST", "127.0.0.1:4000", "", false},
		{"DELETE", "127.0.0.1:4000", "", false},
		{"PUT", "127.0.0.1:4000", "", false},
		{"POST", "127.0.0.1:4000", "Bearer " + s.token, true},
		{"POST", "127.0.0.1:4000", "Bearer " + s.token + "x", false},
		{"POST", "127.0.0.1:4000", "Bearer " + s.token[:63], false},
	} {
		r := httptest.NewRequest(tc.method, "/v1/stats", nil)
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		err := s.tcpAllowed(r, Peer{Addr: tc.addr})
		if (err == nil) != tc.ok {
			t.Errorf("%s from %s with %q: %v, want allowed %v", tc.method, tc.addr, tc.auth, err, tc.ok)
		}
	}
	// Two Authorization headers: refused, whichever is right.
	r := httptest.NewRequest("POST", "/v1/pipelines", nil)
	r.Header.Add("Authorization", "Bearer "+s.token)
	r.Header.Add("Authorization", "Bearer x")
	if err := s.tcpAllowed(r, Peer{Addr: "127.0.0.1:1"}); err == nil {
		t.Fatal("two Authorization headers accepted")
	}
	// A server without a token (no TCP configured) matches nothing.
	if (&Server{}).tokenOK("") {
		t.Fatal("an empty token matched a server without one")
	}
}

// FuzzDecodeStrict: whatever the body, decodeStrict never panics, an
// accepted body has only exact field names, and errors stay short.
func FuzzDecodeStrict(f *testing.F) {
	for _, s := range []string{`{"source":"x","file":"f"}`, `{"SOURCE":"x"}`, `{"source":"x","source":"y"}`, `[]`, `{"name":1}`, `{} {}`, `{"source":"x"`, "", `{"a":{"b":[1,2,{"c":null}]}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req LoadRequest
		err := decodeStrict(data, &req)
		if err != nil {
			if e := AsError(err); len(e.Message) > 400 || !utf8.ValidString(e.Message) && utf8.Valid(data) {
				t.Fatalf("error of %d bytes: %q", len(e.Message), e.Message)
			}
			return
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(data, &m) != nil {
			t.Fatalf("accepted %q, which is not a JSON object", data)
		}
		for k := range m {
			if k != "name" && k != "file" && k != "source" {
				t.Fatalf("accepted key %q", k)
			}
		}
	})
}

func TestClip(t *testing.T) {
	if Clip("short") != "short" {
		t.Fatal("a short string was cut")
	}
	long := strings.Repeat("é", 100) // 200 bytes
	c := Clip(long)
	if !utf8.ValidString(c) || !strings.HasSuffix(c, "...(200 bytes)") || len(c) > ClipLen+20 {
		t.Fatalf("Clip(200 bytes of é) = %q", c)
	}
}
