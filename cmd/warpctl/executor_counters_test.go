package main

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/gpu"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/daemon"
	"github.com/warpflow/warpflow/pipelines"
)

// TestExecutorCountersShown: with backend cuda (kernel.cu's code built
// for the host and emulated: no device needed), the engine's snapshot
// names the backend and carries the executor's own counters, packets by
// path (device, fallback to the CPU workers) and the slots in flight, and
// `stats`, top's queue rows and /metrics show them, with the device's and
// the fallback's shares: every packet received went one way or the other.
func TestExecutorCountersShown(t *testing.T) {
	dir := t.TempDir()
	host, err := gpu.BuildHostKernel(dir)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	g, err := pipelines.Default()
	if err != nil {
		t.Fatal(err)
	}
	ko := gpu.DefaultOptions()
	ko.Emulate, ko.Emulator, ko.Rings, ko.Slots = true, host, 2, 16
	eo := dataplane.DefaultOptions()
	eo.Workers = 1
	eo.NewExecutor = gpu.NewExecutor(gpu.ExecutorOptions{Kernel: ko})
	rep, err := dataplane.Replay(dataplane.ReplayConfig{Capture: "../../testdata/captures/mixed.pcap", Graph: g, Engine: eo})
	if err != nil {
		t.Fatal(err)
	}
	x := rep.Executor
	if x == nil || x.Backend != "cuda" {
		t.Fatalf("the report's executor: %+v, want backend cuda", x)
	}
	vals := map[string]uint64{}
	for _, r := range control.TopCounters(x.Counters, -1) {
		vals[r.Text] = r.Value
	}
	device, fallback := vals["packets=device"], vals["packets=fallback"]
	if device == 0 || device+fallback != rep.Received || vals["slots_in_flight"] != 0 || len(vals) != 3 {
		t.Fatalf("executor counters %v: want device + fallback = received %d, none in flight after the run", vals, rep.Received)
	}
	t.Logf("mixed.pcap through the emulated device: %d on the device, %d handed back to the CPU workers", device, fallback)

	qs := daemon.FromEngine("dp0/q0", rep.Stats)
	s := control.Stats{Pipeline: g.Name(), Queues: []control.QueueStats{qs}, Stages: qs.Stages}
	s.Totals = qs.Counts
	var out bytes.Buffer
	printStats(&out, s, nil, 0)
	share := func(n uint64) string {
		return regexp.QuoteMeta(fmt.Sprintf("%.1f%%", 100*float64(n)/float64(rep.Received)))
	}
	if !regexp.MustCompile(`(?m)^\s+dp0/q0\s.*\scuda\s*$`).MatchString(out.String()) ||
		!regexp.MustCompile(`(?m)^  executor cuda: packets by path: device=\d+ \(`+share(device)+`\) fallback=\d+ \(`+share(fallback)+`\), slots_in_flight=0$`).MatchString(out.String()) {
		t.Errorf("stats lacks the backend and the executor's counters with their shares:\n%s", out.String())
	}
	m := &topModel{key: "rate"}
	m.update(s, nil, time.Now())
	top := strings.Join(m.lines(), "\n")
	if !regexp.MustCompile(`(?m)^dp0/q0\s.*\scuda\s`).MatchString(top) || !strings.Contains(top, "  cuda: packets by path: device=") || !strings.Contains(top, "slots_in_flight=0") {
		t.Errorf("top lacks the backend and the executor's counters:\n%s", top)
	}
	rec := httptest.NewRecorder()
	control.MetricsHandler(func() control.Stats { return s }).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range []string{
		`warpflow_executor_info{backend="cuda",queue="dp0/q0"} 1`,
		`warpflow_executor_packets_total{backend="cuda",path="device",queue="dp0/q0"} ` + strconv.FormatUint(device, 10),
		`warpflow_executor_packets_total{backend="cuda",path="fallback",queue="dp0/q0"} ` + strconv.FormatUint(fallback, 10),
		`warpflow_executor_slots_in_flight{backend="cuda",queue="dp0/q0"} 0`,
	} {
		if !strings.Contains(rec.Body.String(), line+"\n") {
			t.Errorf("/metrics lacks %s", line)
		}
	}
}
