package control

import (
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/warpflow/warpflow/workers"
)

func sampleStats() Stats {
	return Stats{Pipeline: "a", Generation: 3, Swaps: 2,
		Queues: []QueueStats{{Queue: "dp0/0", Counts: Counts{Received: 10, ReceivedBytes: 640, Transmitted: 7, Dropped: 3, Batches: 1,
			Drops: map[string]uint64{"acl": 3}, Kernel: map[string]uint64{"rx_ring_full": 1},
			Ports: map[string]PortCount{"out0": {Packets: 7, Bytes: 448}}},
			Workers: []workers.WorkerStats{{Batches: 1, Packets: 10}},
			Stages:  []StageStats{{Name: "parse", Kind: "parse", Packets: 10, Calls: 1, Nanos: 500, Drops: map[string]uint64{"malformed": 0}}}}}}
}

// TestMetricsLint: the exposition follows the Prometheus conventions
// (promlint: _total counters, units in names, help text).
func TestMetricsLint(t *testing.T) {
	problems, err := testutil.CollectAndLint(collector{func() Stats { return sampleStats() }})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// TestMetricsValues: the scrape carries the Stats counters.
func TestMetricsValues(t *testing.T) {
	rec := httptest.NewRecorder()
	MetricsHandler(sampleStats).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`warpflow_received_packets_total{queue="dp0/0"} 10`,
		`warpflow_transmitted_packets_total{port="out0",queue="dp0/0"} 7`,
		`warpflow_dropped_packets_total{queue="dp0/0",reason="acl"} 3`,
		`warpflow_kernel_dropped_packets_total{queue="dp0/0",reason="rx_ring_full"} 1`,
		`warpflow_stage_packets_total{kind="parse",queue="dp0/0",stage="parse"} 10`,
		`warpflow_stage_seconds_total{kind="parse",queue="dp0/0",stage="parse"} 5e-07`,
		`warpflow_pipeline_info{pipeline="a"} 1`,
		`warpflow_pipeline_swaps_total 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
}

// TestDashboardMetrics: every metric the Grafana dashboard queries exists.
func TestDashboardMetrics(t *testing.T) {
	data, err := os.ReadFile("../../docs/grafana-warpflow.json")
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	MetricsHandler(sampleStats).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (warpflow_\w+)`).FindAllStringSubmatch(rec.Body.String(), -1) {
		names[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`warpflow_\w+`).FindAllString(string(data), -1) {
		if !names[m] {
			t.Errorf("dashboard queries %s, which warpflowd does not export", m)
		}
	}
}
