package dataplane

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/pipelines"
)

var update = flag.Bool("update", false, "rewrite the golden outputs under testdata/golden")

const goldenRoot = "../testdata/golden"

// corpusDir holds real captures the project did not write (see its
// README.md for their provenance).
const corpusDir = "../testdata/corpus"

// goldenCases are the captures replayed through the default pipeline and
// compared with testdata/golden/<name>/.
var goldenCases = []string{
	"../testdata/captures/mixed.pcap",
	"../testdata/captures/malformed.pcap",
	"../testdata/captures/linktypes/sll-113.pcap",
	"../testdata/captures/linktypes/raw-101.pcap",
}

func defaultGraph(t testing.TB) *pipelines.Graph {
	t.Helper()
	g, err := pipelines.Default()
	if err != nil {
		t.Fatalf("default pipeline: %v", err)
	}
	return g
}

func replayTo(t testing.TB, g *pipelines.Graph, capture, out string, workers, batch int) Report {
	t.Helper()
	cfg := ReplayConfig{Capture: capture, Graph: g, OutDir: out, Engine: DefaultOptions(), Replay: DefaultReplayOptions()}
	cfg.Engine.Workers = workers
	cfg.Engine.BatchSize = batch
	cfg.Engine.TrackFrames = true
	rep, err := Replay(cfg)
	if err != nil {
		t.Fatalf("replay %s (workers %d, batch %d): %v", capture, workers, batch, err)
	}
	if !rep.Balanced {
		t.Fatalf("replay %s: %s", capture, rep.AccountingLine())
	}
	return rep
}

func stem(path string) string {
	base := filepath.Base(path)
	return strings.TrimSuffix(base, filepath.Ext(base))
}

// TestGolden replays each golden case through the default pipeline and
// compares every output capture and counters.json with the goldens. Run
// `go test ./dataplane -run TestGolden -update` to rewrite them after an
// intended change, and review the diff.
func TestGolden(t *testing.T) {
	g := defaultGraph(t)
	for _, capture := range goldenCases {
		t.Run(stem(capture), func(t *testing.T) {
			want := filepath.Join(goldenRoot, stem(capture))
			if *update {
				os.RemoveAll(want)
				replayTo(t, g, capture, want, 1, 0)
				return
			}
			got := t.TempDir()
			replayTo(t, g, capture, got, 1, 0)
			diff, err := CompareDirs(got, want)
			if err != nil {
				t.Fatal(err)
			}
			if diff != nil {
				t.Fatalf("differs from %s: %s (rerun with -update if the change is intended)", want, diff)
			}
		})
	}
}

// TestDeterministicAcrossWorkers checks that outputs and counters are
// byte-identical for any worker count and batch size.
func TestDeterministicAcrossWorkers(t *testing.T) {
	g := defaultGraph(t)
	capture := "../testdata/captures/mixed.pcap"
	ref := t.TempDir()
	refRep := replayTo(t, g, capture, ref, 0, 0)
	if refRep.Received == 0 || refRep.Transmitted == 0 || refRep.Dropped == 0 || refRep.Passed == 0 {
		t.Fatalf("mixed.pcap should exercise tx, drop and pass: %s", refRep.AccountingLine())
	}
	for _, c := range []struct{ workers, batch int }{{1, 1}, {1, 64}, {2, 7}, {2, 64}, {4, 256}} {
		t.Run(fmt.Sprintf("workers=%d,batch=%d", c.workers, c.batch), func(t *testing.T) {
			out := t.TempDir()
			rep := replayTo(t, g, capture, out, c.workers, c.batch)
			if !reflect.DeepEqual(rep.Deterministic(), refRep.Deterministic()) {
				t.Fatalf("counters differ from the inline run:\n got %+v\nwant %+v", rep.Deterministic(), refRep.Deterministic())
			}
			if diff, err := CompareDirs(out, ref); err != nil || diff != nil {
				t.Fatalf("outputs differ from the inline run: %v %v", diff, err)
			}
		})
	}
}

// TestCorpus replays every capture in testdata/corpus through the default
// pipeline: each one must replay with balanced counters (every link type in
// the corpus is supported; TestReplayCorpus and TestUnsupportedLinkType keep
// the one-line unsupported error covered). None may panic.
func TestCorpus(t *testing.T) {
	files, _ := filepath.Glob(corpusDir + "/*.pcap")
	if len(files) < 50 {
		t.Fatalf("%d captures in %s, want the 51 committed ones", len(files), corpusDir)
	}
	g := defaultGraph(t)
	replayed := 0
	for _, f := range files {
		cfg := ReplayConfig{Capture: f, Graph: g, Engine: DefaultOptions(), Replay: DefaultReplayOptions()}
		cfg.Engine.Workers = 2
		cfg.Engine.TrackFrames = true
		rep, err := Replay(cfg)
		if err != nil {
			t.Errorf("%s: %v", filepath.Base(f), err)
			continue
		}
		if !rep.Balanced || rep.Received == 0 {
			t.Errorf("%s: %s", filepath.Base(f), rep.AccountingLine())
			continue
		}
		replayed++
	}
	t.Logf("%d of %d captures replayed", replayed, len(files))
	if replayed != len(files) {
		t.Errorf("only %d of %d corpus captures replayed", replayed, len(files))
	}
}

// TestFramesReturned checks that after a run every frame is back in the
// arena, for streamed replays with several workers, whatever the verdicts.
func TestFramesReturned(t *testing.T) {
	g := defaultGraph(t)
	for _, capture := range []string{"../testdata/captures/mixed.pcap", "../testdata/captures/malformed.pcap"} {
		// Replay itself fails when frames are missing; a tiny arena makes
		// the recycling path run many times.
		cfg := ReplayConfig{Capture: capture, Graph: g, Engine: DefaultOptions(), Replay: DefaultReplayOptions()}
		cfg.Arena.Frames, cfg.Arena.FrameSize, cfg.Arena.Headroom = 40, 4096, 256
		cfg.Engine.Workers = 2
		cfg.Engine.BatchSize = 8
		rep, err := Replay(cfg)
		if err != nil {
			t.Fatalf("%s: %v", capture, err)
		}
		if !rep.Balanced {
			t.Fatalf("%s: %s", capture, rep.AccountingLine())
		}
	}
}

// TestSteadyStateAllocations checks that packets cost no allocations: a
// preloaded replay of 200 passes allocates no more than one of 2 passes.
func TestSteadyStateAllocations(t *testing.T) {
	g := defaultGraph(t)
	mallocs := func(loops int) uint64 {
		cfg := ReplayConfig{Capture: "../testdata/captures/mixed.pcap", Graph: g, Engine: DefaultOptions(), Replay: DefaultReplayOptions()}
		cfg.Engine.Workers = 0
		cfg.Engine.Timing = false
		cfg.Replay.Preload = true
		cfg.Replay.Loops = loops
		var a, b runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&a)
		rep, err := Replay(cfg)
		runtime.ReadMemStats(&b)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Balanced {
			t.Fatal(rep.AccountingLine())
		}
		return b.Mallocs - a.Mallocs
	}
	mallocs(2) // warm up lazily initialised state
	few, many := mallocs(2), mallocs(200)
	// 198 more passes are tens of thousands of packets; allow a handful of
	// runtime-internal allocations, none per packet or per batch.
	if many > few+20 {
		t.Fatalf("200 passes allocated %d times, 2 passes %d: packets or batches allocate", many, few)
	}
	t.Logf("allocations: 2 passes %d, 200 passes %d", few, many)
}

// TestSampleModes checks that the engine keeps exactly the sampled packets,
// in receive order, for both modes and any worker count.
func TestSampleModes(t *testing.T) {
	g, err := pipelines.Load("s.yaml", []byte(`name: s
stages:
  - {name: parse, type: parse}
  - {name: first, type: sample, first: 5, file: first.pcap}
  - {name: every, type: sample, every: 7, file: every.pcap}
  - {name: out, type: tx, port: out}
`))
	if err != nil {
		t.Fatal(err)
	}
	var ref string
	for _, workers := range []int{0, 2} {
		out := t.TempDir()
		rep := replayTo(t, g, "../testdata/captures/mixed.pcap", out, workers, 16)
		if len(rep.samples()) != 2 {
			t.Fatalf("samples: %+v", rep.samples())
		}
		first, every := rep.samples()[0], rep.samples()[1]
		if first.Candidates != 300 || first.Written != 5 {
			t.Errorf("first 5: %+v", first)
		}
		if every.Candidates != 300 || every.Written != (300+6)/7 {
			t.Errorf("every 7: %+v", every)
		}
		if ref == "" {
			ref = out
			continue
		}
		if diff, err := CompareDirs(out, ref); err != nil || diff != nil {
			t.Fatalf("samples differ between worker counts: %v %v", diff, err)
		}
	}
}

// TestCompareDirsNamesSide: a missing directory is named as the golden or
// the output one, and files present on one side only are reported.
func TestCompareDirsNamesSide(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	if _, err := CompareDirs(dir, missing); err == nil || !strings.Contains(err.Error(), "read golden directory") {
		t.Errorf("missing golden: err %v, want it named the golden directory", err)
	}
	if _, err := CompareDirs(missing, dir); err == nil || !strings.Contains(err.Error(), "read output directory") {
		t.Errorf("missing output: err %v, want it named the output directory", err)
	}
	got, want := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(got, "b.pcap"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if d, err := CompareDirs(got, want); err != nil || d == nil || d.File != "b.pcap" || !strings.Contains(d.Detail, "not in the golden") {
		t.Errorf("extra output file: %v, %v; want b.pcap written but not in the golden directory", d, err)
	}
}

// TestReplayOutputFilesClash: two outputs that would write the same file (a
// sample named after a tx port or pass.pcap, two samples sharing a file)
// are refused with an error naming both, instead of overwriting each other.
func TestReplayOutputFilesClash(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"sample on tx port file", `name: c
stages:
  - {name: s, type: sample, every: 1, file: eth0.pcap}
  - {name: out, type: tx, port: eth0}
`, `sample stage "s": file eth0.pcap is already written by tx port "eth0"`},
		{"sample on pass file", `name: c
stages:
  - {name: s, type: sample, every: 1, file: pass.pcap}
  - {name: p, type: pass}
`, `sample stage "s": file pass.pcap is already written by the pass verdict`},
		{"two samples", `name: c
stages:
  - {name: a, type: sample, every: 1, file: x.pcap}
  - {name: b, type: sample, first: 1, file: x.pcap}
  - {name: out, type: tx, port: eth0}
`, `sample stage "b": file x.pcap is already written by sample stage "a"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, err := pipelines.Load("c.yaml", []byte(c.yaml))
			if err != nil {
				t.Fatal(err)
			}
			out := t.TempDir()
			cfg := ReplayConfig{Capture: "../testdata/captures/mixed.pcap", Graph: g, OutDir: out, Engine: DefaultOptions(), Replay: DefaultReplayOptions()}
			if _, err := Replay(cfg); err == nil || err.Error() != c.want {
				t.Errorf("err %v, want %q", err, c.want)
			}
		})
	}
}
