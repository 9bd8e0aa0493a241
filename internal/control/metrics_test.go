package control

import (
	"fmt"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/pipelines"
)

// metricsPipeline has a filter of 300 rules (more than have a series of
// their own), a count stage by every key and a sample stage.
func metricsPipeline(t testing.TB) *pipelines.Graph {
	var b strings.Builder
	b.WriteString("name: a\nstages:\n  - {name: parse, type: parse}\n  - name: acl\n    type: filter\n    default: flows\n    rules:\n")
	for i := range 300 {
		fmt.Fprintf(&b, "      - {proto: tcp, dst_port: %d, action: \"drop:acl\"}\n", i+1)
	}
	b.WriteString("  - {name: flows, type: count, by: [protocol, vlan, class]}\n  - {name: smp, type: sample, every: 7, file: s.pcap}\n  - {name: out, type: tx, port: out0}\n")
	g, err := pipelines.Load("a.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// stageGroups is stage's counter groups with the given values, by family
// name and key ("" for a family of one counter).
func stageGroups(t testing.TB, g *pipelines.Graph, stage string, set map[[2]string]counters.Value) []counters.Group {
	for _, si := range g.Stages() {
		if si.Name != stage {
			continue
		}
		l := si.Counters
		vals := make([]counters.Value, l.Len())
		for fi, f := range l.Families() {
			for k := range f.Len() {
				key := ""
				if f.Keys != nil {
					key = f.Keys[k]
				}
				if v, ok := set[[2]string{f.Name, key}]; ok {
					vals[l.At(fi)+k] = v
					delete(set, [2]string{f.Name, key})
				}
			}
		}
		if len(set) > 0 {
			t.Fatalf("stage %s has no counters %v", stage, set)
		}
		return l.Groups(vals)
	}
	t.Fatalf("no stage %s", stage)
	return nil
}

// sampleStats is one queue that received 20 packets: the workers
// transmitted 7, dropped 3 (acl) and passed 1; the XDP program's kernel
// rules dropped 8 and passed 1.
func sampleStats() Stats { return sampleStatsOf(nil) }

var sampleGraph = sync.OnceValue(func() *pipelines.Graph { return metricsPipeline(nil) })

func sampleStatsOf(t testing.TB) Stats {
	g := sampleGraph()
	v := func(p, b uint64) counters.Value { return counters.Value{Value: p, Bytes: b} }
	return Stats{Pipeline: "a", Generation: 3, Swaps: 2,
		KernelRules: []KernelRuleStats{
			{Interface: "dp0", Pipeline: "a", Generation: 2, Filter: "acl", Rule: 0, Line: 7, Action: "drop:flood", Packets: 8, Bytes: 512},
			{Interface: "dp0", Pipeline: "a", Generation: 2, Filter: "acl", Rule: 1, Line: 8, Action: "accept (to pass, pass)", Packets: 1, Bytes: 64},
		},
		Totals: Counts{Drops: []DropCount{{Reason: "acl", Packets: 3}, {Reason: "flood", XDPPackets: 8}}},
		Queues: []QueueStats{{Queue: "dp0/0", Counts: Counts{Received: 20, ReceivedBytes: 1280, Transmitted: 7, Dropped: 3, Passed: 1, Batches: 1,
			EngineReceived: 11, XDPDropped: 8, XDPPassed: 1, Redirected: 11, FramesLost: 2,
			Drops:       []DropCount{{Reason: "acl", Packets: 3}},
			KernelDrops: []DropCount{{Reason: "rx_ring_full", Packets: 1}, {Reason: "rx_dropped"}},
			Ports:       []PortCount{{Port: "out0", Packets: 7, Bytes: 448}},
			Frames:      Frames{Total: 8, Places: []FramePlace{{Place: "free", Frames: 6}, {Place: "fill", Frames: 2}}}},
			Executor: Executor{Backend: "cuda", Workers: []Worker{{Batches: 1, Packets: 10}},
				Counters: []counters.Group{
					{Decl: counters.Decl{Name: "packets", Label: "path", Help: "Packets by path."}, Values: []counters.KeyValue{{Key: "device", Value: 9}, {Key: "fallback", Value: 1}}},
					{Decl: counters.Decl{Name: "slots_in_flight", Kind: counters.Gauge, Help: "Slots in flight."}, Values: []counters.KeyValue{{Value: 2}}}}},
			Sockets: []SocketCounters{{Port: "dp0/0", Counters: []counters.Group{{Decl: counters.Decl{Name: "kicks", Help: "Kicks."}, Values: []counters.KeyValue{{Value: 4}}}}}},
			Stages: []StageStats{{Name: "parse", Kind: "parse", Packets: 10, Calls: 1, Nanos: 500, Drops: []DropCount{{Reason: "malformed"}}},
				{Name: "acl", Kind: "filter", Packets: 10, Counters: stageGroups(t, g, "acl", map[[2]string]counters.Value{
					{"rule", "0"}: v(3, 192), {"rule", "256"}: v(1, 64), {"rule", "257"}: v(2, 128), {"rule", "default"}: v(4, 256)})},
				{Name: "flows", Kind: "count", Packets: 7, Counters: stageGroups(t, g, "flows", map[[2]string]counters.Value{
					{"total", ""}: v(7, 448), {"proto", "udp"}: v(4, 256), {"proto", "200"}: v(2, 128), {"proto", "201"}: v(1, 64),
					{"vlan", "10"}: v(7, 448), {"class", "ok"}: v(7, 448)})},
				{Name: "smp", Kind: "sample", Packets: 7, File: "s.pcap", Counters: stageGroups(t, g, "smp", map[[2]string]counters.Value{{"kept", ""}: v(1, 0)})}}}},
		SampleFiles: []SampleFile{{Stage: "smp", File: "/var/lib/warpflow/captures/samples/s.pcap", Written: 1}},
	}
}

// TestMetricsStageCounters: the stages' own counters are exported as
// their kinds declare them, with bounded keys: a filter's rules past the
// 256th summed as other, a count stage's unnamed protocols summed, its
// VLAN keys left out; the sample stage's kept packets; the executor's and
// the sockets' declared counters.
func TestMetricsStageCounters(t *testing.T) {
	rec := httptest.NewRecorder()
	MetricsHandler(func() Stats { return sampleStatsOf(t) }).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`warpflow_filter_rule_packets_total{queue="dp0/0",rule="0",stage="acl"} 3`,
		`warpflow_filter_rule_packets_total{queue="dp0/0",rule="other",stage="acl"} 3`,
		`warpflow_filter_rule_bytes_total{queue="dp0/0",rule="other",stage="acl"} 192`,
		`warpflow_filter_rule_packets_total{queue="dp0/0",rule="default",stage="acl"} 4`,
		`warpflow_count_total_packets_total{queue="dp0/0",stage="flows"} 7`,
		`warpflow_count_proto_packets_total{proto="udp",queue="dp0/0",stage="flows"} 4`,
		`warpflow_count_proto_packets_total{proto="other",queue="dp0/0",stage="flows"} 3`,
		`warpflow_count_class_packets_total{class="ok",queue="dp0/0",stage="flows"} 7`,
		`warpflow_sample_kept_packets_total{queue="dp0/0",stage="smp"} 1`,
		`warpflow_sample_written_packets_total{stage="smp"} 1`,
		`warpflow_executor_packets_total{backend="cuda",path="device",queue="dp0/0"} 9`,
		`warpflow_executor_packets_total{backend="cuda",path="fallback",queue="dp0/0"} 1`,
		`warpflow_executor_slots_in_flight{backend="cuda",queue="dp0/0"} 2`,
		`warpflow_socket_kicks_total{port="dp0/0",queue="dp0/0"} 4`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	for _, bad := range []string{`vlan=`, `rule="256"`, `rule="257"`, `proto="200"`, `warpflow_count_vlan`} {
		if strings.Contains(body, bad) {
			t.Errorf("scrape has the unbounded label %s", bad)
		}
	}
}

// TestMetricsLint: the exposition follows the Prometheus conventions
// (promlint: _total counters, units in names, help text).
func TestMetricsLint(t *testing.T) {
	problems, err := testutil.CollectAndLint(newCollector(func() Stats { return sampleStatsOf(t) }))
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
		`warpflow_dropped_in_xdp_packets_total{reason="flood"} 8`,
		`warpflow_batched_packets_total{queue="dp0/0"} 11`,
		`warpflow_frames{place="fill",queue="dp0/0"} 2`,
		`warpflow_frames_lost_total{queue="dp0/0"} 2`,
		`warpflow_executor_info{backend="cuda",queue="dp0/0"} 1`,
		`warpflow_worker_packets_total{queue="dp0/0",worker="0"} 10`,
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

// TestDashboardMetrics: every metric the dashboard's panels over the
// model's families query is in a scrape, and so is every declared metric
// the scrape's stats have a panel for.
func TestDashboardMetrics(t *testing.T) {
	st := sampleStatsOf(t)
	var declared []Declared
	for _, q := range st.Queues {
		for _, s := range q.Stages {
			for _, g := range s.Counters {
				declared = append(declared, Declared{Owner: s.Kind, Decl: g.Decl})
			}
		}
	}
	data, err := Dashboard(declared)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	MetricsHandler(func() Stats { return st }).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (warpflow_\w+)`).FindAllStringSubmatch(rec.Body.String(), -1) {
		names[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`warpflow_\w+`).FindAllString(string(data), -1) {
		if !names[m] {
			t.Errorf("dashboard queries %s, which the scrape lacks", m)
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

// TestMetricsFramesLost: frames_lost is one family of the model's own,
// warpflow_frames_lost_total, a counter by queue, with one series per
// queue (a queue that lost none reads 0), and no other family is named
// for it.
func TestMetricsFramesLost(t *testing.T) {
	const name = "warpflow_frames_lost_total"
	n := 0
	for _, f := range Families() {
		if !strings.Contains(f.Name, "frames_lost") {
			continue
		}
		n++
		if f.Name != name || f.Gauge || len(f.Labels) != 1 || f.Labels[0] != "queue" {
			t.Errorf("family %s (gauge %v, labels %v), want the counter %s by queue", f.Name, f.Gauge, f.Labels, name)
		}
	}
	if n != 1 {
		t.Fatalf("%d families for frames_lost, want one", n)
	}
	st := Stats{Queues: []QueueStats{
		{Queue: "dp0/0", Counts: Counts{Transmitted: 9, FramesLost: 5}},
		{Queue: "dp0/1", Counts: Counts{Transmitted: 4}},
	}}
	rec := httptest.NewRecorder()
	MetricsHandler(func() Stats { return st }).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		"# TYPE " + name + " counter",
		name + `{queue="dp0/0"} 5`,
		name + `{queue="dp0/1"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
}
