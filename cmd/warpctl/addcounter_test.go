package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// countProbeEdits add one counter, "probe" (every packet the stage sees),
// to the count stage: its declaration, its place in the layout, its plain
// counter, the count, its report. Each edit is (anchor, what replaces it)
// in pipelines/count.go; an anchor that is not there fails the test, so
// the edits cannot silently stop applying.
var countProbeEdits = [][2]string{
	{"countTotalDecl, countProtoDecl, countVLANDecl, countClassDecl}}\n",
		"countTotalDecl, countProtoDecl, countVLANDecl, countClassDecl, countProbeDecl}}\n\n" +
			"var countProbeDecl = counters.Decl{Name: \"probe\", Unit: \"packets\", Help: \"Packets the probe counted.\"}\n"},
	{"\treturn &countTemplate{keys: keys, edges: []Target{next}, counters: counters.NewLayout(fams...)}",
		"\tfams = append(fams, counters.Single(countProbeDecl))\n\treturn &countTemplate{keys: keys, edges: []Target{next}, counters: counters.NewLayout(fams...)}"},
	{"\tlayout                   *counters.Layout\n}", "\tlayout                   *counters.Layout\n\tprobe uint64\n}"},
	{"func (s *countStage) Process(b *rings.Batch, idx []uint16, next []Edge) {\n",
		"func (s *countStage) Process(b *rings.Batch, idx []uint16, next []Edge) {\n\ts.probe += uint64(len(idx))\n"},
	{"func (s *countStage) Report(dst []counters.Value) {\n",
		"func (s *countStage) Report(dst []counters.Value) {\n\tdst[len(dst)-1].Value += s.probe\n"},
}

// counterProbeTest is the test the probe build runs: it replays a capture
// through the default pipeline (its count stage "flows") and looks for
// the new counter in the report (JSON and text), in `stats --json` (the
// daemon's conversion of the engine's snapshot, encoded and decoded as the
// client does), in `stats`, in top's counter rows, in the daemon's stats
// log line and in /metrics.
const counterProbeTest = `package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/daemon"
	"github.com/warpflow/warpflow/pipelines"
)

func TestCounterProbe(t *testing.T) {
	g, err := pipelines.Default()
	if err != nil {
		t.Fatal(err)
	}
	rep, err := dataplane.Replay(dataplane.ReplayConfig{Capture: "../../testdata/captures/mixed.pcap", Graph: g, Engine: dataplane.DefaultOptions()})
	if err != nil {
		t.Fatal(err)
	}
	var flows uint64
	for _, st := range rep.Stages {
		if st.Name == "flows" {
			flows = st.Packets
		}
	}
	want := fmt.Sprintf("probe %d", flows)
	found := false
	js, _ := json.Marshal(rep)
	if flows == 0 || !strings.Contains(string(js), ` + "`" + `"name":"probe"` + "`" + `) {
		t.Fatalf("report JSON lacks the probe (flows saw %d)", flows)
	}
	var text bytes.Buffer
	printReport(&text, "mixed.pcap", rep, false)
	if !strings.Contains(strings.Join(strings.Fields(text.String()), " "), want) {
		t.Fatalf("report lacks %q:\n%s", want, text.String())
	}
	qs := daemon.FromEngine("q0", rep.Stats)
	wire, err := json.Marshal(control.Stats{Pipeline: g.Name(), Queues: []control.QueueStats{qs}, Stages: qs.Stages})
	if err != nil {
		t.Fatal(err)
	}
	var s control.Stats
	if err := json.Unmarshal(wire, &s); err != nil {
		t.Fatal(err)
	}
	if st := s.Stage("flows"); st == nil || st.Counter("probe", "") != flows {
		t.Fatalf("stats --json lacks the probe: %s", wire)
	}
	var human bytes.Buffer
	printStats(&human, s, nil, 0)
	if !strings.Contains(strings.Join(strings.Fields(human.String()), " "), fmt.Sprintf("flows probe %d", flows)) {
		t.Fatalf("stats lacks the probe:\n%s", human.String())
	}
	m := &topModel{key: "rate"}
	m.update(s, nil, time.Now())
	for _, r := range m.keyRows(1000) {
		if r.stage == "flows" && r.key == "probe" && r.packets == flows {
			found = true
		}
	}
	if !found {
		t.Fatalf("top's rows lack the probe: %+v", m.keyRows(1000))
	}
	var line bytes.Buffer
	slog.New(slog.NewTextHandler(&line, nil)).Info("stats", daemon.StatsLine(s)...)
	if !strings.Contains(line.String(), fmt.Sprintf(" stage_counters.flows.probe=%d ", flows)) {
		t.Fatalf("the stats line lacks the probe: %s", line.String())
	}
	rec := httptest.NewRecorder()
	control.MetricsHandler(func() control.Stats { return s }).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if line := fmt.Sprintf("warpflow_count_probe_packets_total{queue=\"q0\",stage=\"flows\"} %d\n", flows); !strings.Contains(rec.Body.String(), line) {
		t.Fatalf("/metrics lacks %s", line)
	}
}
`

// TestAddOneCounter: a counter added to one stage, in that stage's file
// alone, shows everywhere counters are shown. The test builds this
// package with pipelines/count.go replaced (go test -overlay: nothing in
// the tree is written) by a copy that declares and counts one more
// counter, and runs counterProbeTest in that build: the report, `stats
// --json`, `stats`, top's rows, the stats line and /metrics all have it,
// with no other file changed. The same probe against the unpatched build
// fails, so the probe proves something. (The committed dashboard and
// docs/COUNTERS.md are generated from the declarations: their tests ask
// for a regeneration, -update, when a counter is added.)
func TestAddOneCounter(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool: %v", err)
	}
	src, err := filepath.Abs("../../pipelines/count.go")
	if err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	patched := string(orig)
	for _, e := range countProbeEdits {
		if strings.Count(patched, e[0]) != 1 {
			t.Fatalf("pipelines/count.go: the edit anchor %q is not there once: update countProbeEdits", e[0])
		}
		patched = strings.Replace(patched, e[0], e[1], 1)
	}
	dir := t.TempDir()
	probe, err := filepath.Abs("counterprobe_test.go")
	if err != nil {
		t.Fatal(err)
	}
	run := func(replace map[string]string) (string, error) {
		files := map[string]string{probe: filepath.Join(dir, "probe.go")}
		for k, v := range replace {
			files[k] = v
		}
		ov, _ := json.Marshal(map[string]any{"Replace": files})
		ovFile := filepath.Join(dir, "overlay.json")
		if err := os.WriteFile(ovFile, ov, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(goBin, "test", "-count=1", "-overlay", ovFile, "-run", "^TestCounterProbe$", ".")
		cmd.Env = append(os.Environ(), "GOFLAGS=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if err := os.WriteFile(filepath.Join(dir, "probe.go"), []byte(counterProbeTest), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "count.go"), []byte(patched), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if out, err := run(map[string]string{src: filepath.Join(dir, "count.go")}); err != nil {
		t.Fatalf("the build with one counter added to pipelines/count.go: %v\n%s", err, out)
	}
	t.Logf("the probe build passed in %s", time.Since(start).Round(time.Millisecond))
	if out, err := run(nil); err == nil || !strings.Contains(out, "lacks the probe") {
		t.Fatalf("the probe passed without the counter (%v):\n%s", err, out)
	}
}
