package control

import (
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/workers"
)

// sampleStats is one queue that received 20 packets: the workers
// transmitted 7, dropped 3 (acl) and passed 1; the XDP program's kernel
// rules dropped 8 and passed 1 (in Dropped and Passed too, as the daemon
// counts them).
func sampleStats() Stats {
	return Stats{Pipeline: "a", Generation: 3, Swaps: 2,
		KernelRules: []KernelRuleStats{
			{Interface: "dp0", Pipeline: "a", Generation: 2, Filter: "acl", Rule: 0, Line: 7, Action: "drop:flood", Packets: 8, Bytes: 512},
			{Interface: "dp0", Pipeline: "a", Generation: 2, Filter: "acl", Rule: 1, Line: 8, Action: "accept (to pass, pass)", Packets: 1, Bytes: 64},
		},
		Queues: []QueueStats{{Queue: "dp0/0", Counts: Counts{Received: 20, ReceivedBytes: 1280, Transmitted: 7, Dropped: 11, Passed: 2, Batches: 1,
			XDPDropped: 8, XDPPassed: 1, Redirected: 11,
			Drops: map[string]uint64{"acl": 3}, Kernel: map[string]uint64{"rx_ring_full": 1},
			Ports: map[string]PortCount{"out0": {Packets: 7, Bytes: 448}}},
			Workers: []workers.WorkerStats{{Batches: 1, Packets: 10}},
			Stages: []StageStats{{Name: "parse", Kind: "parse", Packets: 10, Calls: 1, Nanos: 500, Drops: map[string]uint64{"malformed": 0}},
				{Name: "acl", Kind: "filter", Packets: 10, Counters: []pipelines.Counter{
					{Key: "rule[0]", Packets: 3, Bytes: 192}, {Key: "rule[256]", Packets: 1, Bytes: 64}, {Key: "rule[900]", Packets: 2, Bytes: 128}, {Key: "default", Packets: 4, Bytes: 256}}},
				{Name: "flows", Kind: "count", Packets: 7, Counters: []pipelines.Counter{
					{Key: "total", Packets: 7, Bytes: 448}, {Key: "proto=udp", Packets: 4, Bytes: 256}, {Key: "proto=47", Packets: 2, Bytes: 128}, {Key: "proto=132", Packets: 1, Bytes: 64},
					{Key: "vlan=10", Packets: 7, Bytes: 448}, {Key: "class=ok", Packets: 7, Bytes: 448}}},
				{Name: "smp", Kind: "sample", Packets: 7, Sample: &dataplane.SampleCount{Stage: "smp", File: "s.pcap", Candidates: 7, Written: 1}}}}}}
}

// TestMetricsStageCounters: the stages' own counters are exported with
// bounded keys: a filter's rules past the 256th summed, a count stage's
// unnamed protocols summed, its VLAN keys left out; sample counts.
func TestMetricsStageCounters(t *testing.T) {
	rec := httptest.NewRecorder()
	MetricsHandler(sampleStats).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`warpflow_stage_key_packets_total{key="rule[0]",kind="filter",queue="dp0/0",stage="acl"} 3`,
		`warpflow_stage_key_packets_total{key="rule[other]",kind="filter",queue="dp0/0",stage="acl"} 3`,
		`warpflow_stage_key_bytes_total{key="rule[other]",kind="filter",queue="dp0/0",stage="acl"} 192`,
		`warpflow_stage_key_packets_total{key="default",kind="filter",queue="dp0/0",stage="acl"} 4`,
		`warpflow_stage_key_packets_total{key="total",kind="count",queue="dp0/0",stage="flows"} 7`,
		`warpflow_stage_key_packets_total{key="proto=udp",kind="count",queue="dp0/0",stage="flows"} 4`,
		`warpflow_stage_key_packets_total{key="proto=other",kind="count",queue="dp0/0",stage="flows"} 3`,
		`warpflow_stage_key_packets_total{key="class=ok",kind="count",queue="dp0/0",stage="flows"} 7`,
		`warpflow_sample_candidate_packets_total{queue="dp0/0",stage="smp"} 7`,
		`warpflow_sample_kept_packets_total{queue="dp0/0",stage="smp"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	for _, bad := range []string{`key="vlan=10"`, `key="rule[256]"`, `key="rule[900]"`, `key="proto=47"`} {
		if strings.Contains(body, bad) {
			t.Errorf("scrape has the unbounded label %s", bad)
		}
	}
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
		`warpflow_received_packets_total{queue="dp0/0"} 20`,
		`warpflow_transmitted_packets_total{port="out0",queue="dp0/0"} 7`,
		`warpflow_dropped_packets_total{queue="dp0/0",reason="acl"} 3`,
		`warpflow_kernel_dropped_packets_total{queue="dp0/0",reason="rx_ring_full"} 1`,
		`warpflow_stage_packets_total{kind="parse",queue="dp0/0",stage="parse"} 10`,
		`warpflow_stage_seconds_total{kind="parse",queue="dp0/0",stage="parse"} 5e-07`,
		`warpflow_pipeline_info{pipeline="a"} 1`,
		`warpflow_pipeline_swaps_total 2`,
		`warpflow_xdp_dropped_packets_total{queue="dp0/0"} 8`,
		`warpflow_xdp_passed_packets_total{queue="dp0/0"} 1`,
		`warpflow_passed_packets_total{queue="dp0/0"} 1`,
		`warpflow_xdp_rule_packets_total{action="drop:flood",interface="dp0",pipeline="a",rule="0"} 8`,
		`warpflow_xdp_rule_bytes_total{action="drop:flood",interface="dp0",pipeline="a",rule="0"} 512`,
		`warpflow_xdp_rule_packets_total{action="accept (to pass, pass)",interface="dp0",pipeline="a",rule="1"} 1`,
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

// TestMetricsBalance: per queue, received equals the sum of the series
// every packet is in exactly one of (transmitted by port, dropped by
// reason, passed, xdp_dropped, xdp_passed), with the kernel's decisions
// included and counted once.
func TestMetricsBalance(t *testing.T) {
	rec := httptest.NewRecorder()
	MetricsHandler(sampleStats).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	line := regexp.MustCompile(`(?m)^warpflow_(received_packets|transmitted_packets|dropped_packets|passed_packets|xdp_dropped_packets|xdp_passed_packets)_total\{[^}]*queue="dp0/0"[^}]*\} (\d+)$`)
	sums := map[string]uint64{}
	for _, m := range line.FindAllStringSubmatch(rec.Body.String(), -1) {
		v, err := strconv.ParseUint(m[2], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		sums[m[1]] += v
	}
	out := sums["transmitted_packets"] + sums["dropped_packets"] + sums["passed_packets"] + sums["xdp_dropped_packets"] + sums["xdp_passed_packets"]
	if sums["received_packets"] != 20 || out != sums["received_packets"] || sums["xdp_dropped_packets"] != 8 {
		t.Fatalf("scrape: %v: received %d, accounted %d", sums, sums["received_packets"], out)
	}
}
