package control

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHealthEndpoints(t *testing.T) {
	ready := Readiness{Ready: true, Pipeline: "p", Queues: []QueueReadiness{{Queue: "dp0/q0", State: QueueRunning}}}
	notReady := Readiness{Pipeline: "p", Queues: []QueueReadiness{{Queue: "dp0/q0", State: QueueLost}}, Problems: []string{"queue dp0:0: lost"}}
	for _, tc := range []struct {
		name   string
		ready  func() Readiness
		method string
		path   string
		code   int
		body   string
	}{
		{"healthz", nil, "GET", "/healthz", 200, "ok\n"},
		{"healthz head", nil, "HEAD", "/healthz", 200, ""},
		{"healthz post", nil, "POST", "/healthz", 405, ""},
		{"readyz ready", func() Readiness { return ready }, "GET", "/readyz", 200, `"ready":true`},
		{"readyz not ready", func() Readiness { return notReady }, "GET", "/readyz", 503, `"problems":["queue dp0:0: lost"]`},
		{"readyz without a daemon", nil, "GET", "/readyz", 503, `"queues":[]`},
		{"readyz post", func() Readiness { return ready }, "POST", "/readyz", 405, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			HealthHandlers(mux, tc.ready)
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			if rec.Code != tc.code {
				t.Fatalf("%s %s: %d, want %d (%s)", tc.method, tc.path, rec.Code, tc.code, rec.Body)
			}
			if tc.body != "" && !strings.Contains(rec.Body.String(), tc.body) {
				t.Fatalf("%s %s: body %q lacks %q", tc.method, tc.path, rec.Body, tc.body)
			}
			if tc.path == "/readyz" && tc.code != 405 {
				var r Readiness
				if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil || r.Ready != (tc.code == 200) {
					t.Fatalf("body %q: %v, ready %v", rec.Body, err, r.Ready)
				}
			}
		})
	}
}
