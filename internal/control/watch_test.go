package control

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestWatchMetrics: the watch's series appear only with a watch, carry
// its counts, and lint clean.
func TestWatchMetrics(t *testing.T) {
	withWatch := func() Stats {
		s := sampleStats()
		s.Watch = &WatchStats{File: "/etc/warpflow/pipelines/pipeline.yaml", Watching: true, InSync: false, Swapped: 3, Refused: 2, Failed: 1}
		return s
	}
	problems, err := testutil.CollectAndLint(newCollector(withWatch))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	rec := httptest.NewRecorder()
	MetricsHandler(withWatch).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		`warpflow_pipeline_watch_total{result="swapped"} 3`,
		`warpflow_pipeline_watch_total{result="refused"} 2`,
		`warpflow_pipeline_watch_total{result="failed"} 1`,
		"warpflow_pipeline_watch_in_sync 0",
	} {
		if !strings.Contains(rec.Body.String(), want+"\n") {
			t.Errorf("scrape lacks %s", want)
		}
	}
	rec = httptest.NewRecorder()
	MetricsHandler(sampleStats).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if strings.Contains(rec.Body.String(), "warpflow_pipeline_watch") {
		t.Error("watch series without a watch")
	}
}
