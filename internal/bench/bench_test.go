package bench

import (
	"bytes"
	"context"
	"io"
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
	res, err := Run(context.Background(), o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{RowGopacket, RowGopacketSparse, RowGopacketReader, RowParse, RowMacswap, RowDefault1k}
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
			unmeasured++
			continue
		}
		measured++
		if tg.Ratio <= 0 || tg.Met != (tg.Ratio >= tg.Want) {
			t.Errorf("target %+v", tg)
		}
	}
	if measured != 4 || unmeasured != 1 || reference != 2 {
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
	o.Packets, o.Repeats, o.CPU, o.Testpmd = 8192, 2, -1, false
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
