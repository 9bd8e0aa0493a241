package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/pipelines"
)

// TestRunSmall runs the whole bench on a few thousand packets without
// testpmd: every in-process row is measured, Warpflow rows allocate nothing
// per packet, targets are computed from the rows, and every repeat's rate
// is kept.
func TestRunSmall(t *testing.T) {
	o := DefaultOptions()
	o.Capture = "../../testdata/captures/bench-64.pcap"
	o.Packets = 20000
	o.Repeats = 2
	o.CPU = -1
	o.Testpmd = false
	o.StatefulFlows = 5000
	o.GeneratorCPU = 0
	if cpus := allowedCPUs(); len(cpus) > 0 {
		o.GeneratorCPU = cpus[0]
	}
	res, err := Run(context.Background(), o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{RowGopacket, RowGopacketSparse, RowGopacketReader, RowParse, RowMacswap, RowDefault1k, RowStatefulBase, RowStateful, RowStatefulNIC}
	if len(res.Rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(res.Rows), len(want))
	}
	for i, r := range res.Rows {
		if r.Name != want[i] || r.Err != "" || r.Mpps <= 0 || r.Packets < o.Packets {
			t.Errorf("row %d: %+v", i, r)
		}
		// A few allocations per run (arena, ports, graph) are fine; one
		// per packet or batch would be thousands.
		if !r.Baseline && r.Allocs > 1000 {
			t.Errorf("%s allocated %d times for %d packets", r.Name, r.Allocs, r.Packets)
		}
	}
	var measured, unmeasured, reference int
	for _, tg := range res.Targets {
		if tg.Reference {
			reference++
		}
		if tg.Note != "" {
			// The other-core row shares the test's unpinned CPUs with its
			// generator and may wait for it: then its target says so.
			if tg.Row == RowStatefulNIC && strings.Contains(tg.Note, "waited for its generator") {
				measured++
				continue
			}
			unmeasured++
			continue
		}
		measured++
		if tg.Unit != "" {
			if tg.Met != (tg.Max && tg.Ratio <= tg.Want || !tg.Max && tg.Ratio >= tg.Want) {
				t.Errorf("target %+v", tg)
			}
			continue
		}
		if tg.Ratio <= 0 || tg.Met != (tg.Ratio >= tg.Want) {
			t.Errorf("target %+v", tg)
		}
	}
	if g := res.Rows[8].Generator; g != fmt.Sprintf("cpu %d", o.GeneratorCPU) || res.Rows[7].Generator != "in-core" {
		t.Errorf("generators: %q and %q", res.Rows[7].Generator, g)
	}
	if measured != 8 || unmeasured != 3 || reference != 3 {
		t.Errorf("targets: %d measured, %d not (testpmd is off), %d reference: %+v", measured, unmeasured, reference, res.Targets)
	}
	for _, r := range res.Rows {
		if len(r.MppsRuns) != o.Repeats {
			t.Errorf("%s: %d repeats recorded, want %d", r.Name, len(r.MppsRuns), o.Repeats)
		}
	}
}

// TestRunEmbeddedCapture: with no capture named the bench replays its
// embedded copy, from any directory.
func TestRunEmbeddedCapture(t *testing.T) {
	t.Chdir(t.TempDir())
	o := DefaultOptions()
	o.Packets, o.Repeats, o.CPU, o.Testpmd, o.StatefulFlows = 8192, 2, -1, false, 0
	res, err := Run(context.Background(), o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.Capture != EmbeddedCaptureName || len(res.Rows) != 6 {
		t.Fatalf("capture %q, %d rows", res.Capture, len(res.Rows))
	}
	for _, r := range res.Rows {
		if r.Err != "" || r.Packets < o.Packets || len(r.MppsRuns) != 2 {
			t.Errorf("row %+v", r)
		}
	}
}

func TestEmbeddedCaptureMatchesTestdata(t *testing.T) {
	want, err := os.ReadFile("../../testdata/captures/bench-64.pcap")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(benchCapture, want) {
		t.Fatal("internal/bench/bench-64.pcap differs from testdata/captures/bench-64.pcap: copy it again after regenerating")
	}
}

func TestDefaultPipelineHasThousandRules(t *testing.T) {
	src := defaultPipeline1k()
	if n := strings.Count(src, "action:"); n != 1000 {
		t.Fatalf("%d rules, want 1000", n)
	}
	if _, err := pipelines.Load("bench.yaml", []byte(src)); err != nil {
		t.Fatal(err)
	}
}

// TestCheckTargets: every target is the ratio of its row to its baseline
// in the same rows, met at or above its bar; a missing or failed row
// leaves it unmeasured. The io target sits beside the macswap one, on the
// same Warpflow row.
func TestCheckTargets(t *testing.T) {
	rows := []Row{
		{Name: RowGopacket, Baseline: true, Mpps: 10},
		{Name: RowGopacketSparse, Baseline: true, Mpps: 16},
		{Name: RowParse, Mpps: 35},
		{Name: RowMacswap, Mpps: 24},
		{Name: RowDefault1k, Mpps: 19},
		{Name: RowTestpmd, Baseline: true, Mpps: 20},
		{Name: RowTestpmdIO, Baseline: true, Mpps: 25},
		{Name: RowStateful, Mpps: 4.5, Packets: 1000, Allocs: 2, TableBytesPerFlow: 121.3, Generator: "in-core"},
		{Name: RowStatefulNIC, Mpps: 3.5, Packets: 1000, Generator: "cpu 0", GeneratorWaits: 0.01},
	}
	want := map[string]struct {
		ratio float64
		met   bool
	}{
		"parse stage >= 3x gopacket decode":                          {3.5, true},
		"parse + macswap >= dpdk-testpmd macswap":                    {1.2, true},
		"parse + macswap >= dpdk-testpmd io":                         {0.96, false},
		"default pipeline (1000 rules) >= 2x gopacket decode":        {1.9, false},
		"default pipeline (1000 rules) >= dpdk-testpmd macswap":      {0.95, false},
		"parse stage >= 3x gopacket sparse decode":                   {35.0 / 16, false},
		"default pipeline (1000 rules) >= 2x gopacket sparse decode": {19.0 / 16, false},
		"stateful (conntrack, ct filter, SNAT, 1M flows) >= 9 Mpps":  {4.5, false},
		"stateful: 0 allocations per packet":                         {0.002, false},
		"stateful: conntrack table <= 128 bytes per flow":            {121.3, true},
		"stateful, packets written by another core, >= 9 Mpps":       {3.5, false},
	}
	got := checkTargets(rows)
	if len(got) != len(want) {
		t.Fatalf("%d targets, want %d: %+v", len(got), len(want), got)
	}
	for _, tg := range got {
		w, ok := want[tg.Name]
		if !ok {
			t.Errorf("unexpected target %q", tg.Name)
			continue
		}
		if tg.Note != "" || math.Abs(tg.Ratio-w.ratio) > 1e-9 || tg.Met != w.met {
			t.Errorf("%s: ratio %v met %v note %q, want %v %v", tg.Name, tg.Ratio, tg.Met, tg.Note, w.ratio, w.met)
		}
	}
	io := got[2]
	if io.Row != RowMacswap || io.Base != RowTestpmdIO || io.Want != 1 || io.Reference {
		t.Errorf("io target %+v", io)
	}
	// Exactly at the bar is met; a failed testpmd io run leaves the target
	// unmeasured, not missed.
	rows[6].Mpps = 24
	if tg := checkTargets(rows)[2]; !tg.Met || tg.Ratio != 1 {
		t.Errorf("at the bar: %+v", tg)
	}
	rows[6].Err = "testpmd exited"
	if tg := checkTargets(rows)[2]; tg.Note == "" || tg.Met || tg.Ratio != 0 {
		t.Errorf("failed baseline: %+v", tg)
	}
	// A stateful row that waited on its generator in more than 1% of its
	// batches measured the generator: its rate target is not measured.
	rows[8].GeneratorWaits, rows[8].Mpps = 0.02, 9.5
	if tg := checkTargets(rows)[10]; tg.Met || tg.Note == "" || tg.Ratio != 9.5 {
		t.Errorf("generator-bound row: %+v", tg)
	}
	rows[8].GeneratorWaits = 0.01
	if tg := checkTargets(rows)[10]; !tg.Met || tg.Note != "" {
		t.Errorf("row at the waits' bar: %+v", tg)
	}
	if isBaseline(RowTestpmdIO) != true || isBaseline(RowMacswap) {
		t.Error("isBaseline")
	}
}
