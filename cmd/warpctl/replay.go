package main

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/pipelines"
)

// sampleCapture is the capture replayed when no capture is named: a copy of
// testdata/captures/mixed.pcap (a test keeps the two identical).
//
//go:embed sample.pcap
var sampleCapture []byte

const sampleName = "embedded:mixed.pcap"

type replayFlags struct {
	pipeline string
	workers  int
	batch    int
	out      string
	expect   string
	json     bool
	loops    int
	preload  bool
	noTiming bool
	track    bool
}

func newReplayCommand() *cobra.Command {
	var f replayFlags
	cmd := &cobra.Command{
		Use:   "replay [flags] [CAPTURE...]",
		Short: "Replay captures through a pipeline, offline and deterministically",
		Long: `Replay runs each capture (pcap or pcapng) through a pipeline on a pool of
persistent workers and prints what every stage did and where every packet
went. With no capture it replays an embedded sample through the embedded
default pipeline.

Outputs (one capture per tx port, pass.pcap, sample files and counters.json)
are written to --out; with several captures each gets its own subdirectory
named after the capture. --expect compares the outputs with a golden
directory written earlier by --out and exits 3 on any difference, naming the
first differing packet.`,
		RunE: func(cmd *cobra.Command, args []string) error { return runReplay(cmd, f, args) },
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.pipeline, "pipeline", "p", "", "pipeline config (default: the embedded default pipeline)")
	fl.IntVarP(&f.workers, "workers", "w", -1, "worker goroutines (0 = inline in the I/O loop; default: the pipeline's settings)")
	fl.IntVar(&f.batch, "batch", 0, "batch size (default: the pipeline's settings)")
	fl.StringVarP(&f.out, "out", "o", "", "write output captures and counters.json to this directory")
	fl.StringVar(&f.expect, "expect", "", "compare outputs and counters with this golden directory")
	fl.BoolVar(&f.json, "json", false, "print the report as JSON")
	fl.IntVar(&f.loops, "loops", 1, "passes over each capture")
	fl.BoolVar(&f.preload, "preload", false, "load the capture into the frame arena first and replay from memory")
	fl.BoolVar(&f.noTiming, "no-timing", false, "do not measure per-stage time")
	fl.BoolVar(&f.track, "track-frames", false, "debug mode: track every frame's owner and audit the arena after the run")
	return cmd
}

func loadPipeline(path string) (*pipelines.Graph, error) {
	if path == "" {
		return pipelines.Default()
	}
	return pipelines.LoadFile(path)
}

func runReplay(cmd *cobra.Command, f replayFlags, args []string) error {
	switch {
	case f.loops < 1:
		return failf(codeUsage, "--loops %d: must be at least 1", f.loops)
	case f.workers < -1:
		return failf(codeUsage, "--workers %d: must be 0 (inline) or more", f.workers)
	case f.batch < 0:
		return failf(codeUsage, "--batch %d: must be positive", f.batch)
	}
	g, err := loadPipeline(f.pipeline)
	if err != nil {
		return failf(codeFailed, "pipeline: %v", err)
	}
	type input struct {
		name string
		data []byte
	}
	var inputs []input
	if len(args) == 0 {
		inputs = append(inputs, input{name: sampleName, data: sampleCapture})
	}
	for _, a := range args {
		inputs = append(inputs, input{name: a})
	}
	if len(inputs) > 1 && (f.out != "" || f.expect != "") {
		// Each capture's outputs go to a subdirectory named after it; two
		// captures with one name would overwrite each other's outputs.
		seen := map[string]string{}
		for _, in := range inputs {
			stem := captureStem(in.name)
			if prev, ok := seen[stem]; ok {
				return failf(codeUsage, "captures %s and %s would share the output directory %q: give them different names", prev, in.name, stem)
			}
			seen[stem] = in.name
		}
	}
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	failed, mismatched := 0, 0
	var reports []dataplane.Report
	for _, in := range inputs {
		sub := ""
		if len(inputs) > 1 {
			sub = captureStem(in.name)
		}
		outDir := joinIf(f.out, sub)
		tmp := ""
		if outDir == "" && f.expect != "" {
			tmp, err = os.MkdirTemp("", "warpctl-replay-")
			if err != nil {
				return failf(codeFailed, "temporary output directory: %v", err)
			}
			outDir = tmp
		}
		cfg := dataplane.ReplayConfig{
			Capture:     in.name,
			CaptureData: in.data,
			Graph:       g,
			OutDir:      outDir,
			Engine:      dataplane.DefaultOptions(),
			Replay:      dataplane.DefaultReplayOptions(),
		}
		cfg.Replay.Name = filepath.Base(in.name)
		cfg.Replay.Loops = f.loops
		cfg.Replay.Preload = f.preload
		cfg.Engine.Workers = f.workers
		cfg.Engine.BatchSize = f.batch
		cfg.Engine.Timing = !f.noTiming
		cfg.Engine.TrackFrames = f.track
		bar := newProgressBar(stderr, in.name, in.data)
		cfg.Progress = bar.update
		rep, err := dataplane.Replay(cfg)
		bar.finish()
		if err != nil {
			// Errors from opening a capture already name it.
			if msg := err.Error(); strings.Contains(msg, in.name) {
				fmt.Fprintln(stderr, msg)
			} else {
				fmt.Fprintf(stderr, "%s: %s\n", in.name, msg)
			}
			failed++
			if tmp != "" {
				os.RemoveAll(tmp)
			}
			continue
		}
		reports = append(reports, rep)
		if !f.json {
			printReport(stdout, in.name, rep)
		}
		if !rep.Balanced {
			fmt.Fprintf(stderr, "%s: %s\n", in.name, rep.AccountingLine())
			failed++
		}
		if f.expect != "" {
			diff, err := dataplane.CompareDirs(outDir, joinIf(f.expect, sub))
			switch {
			case err != nil:
				fmt.Fprintf(stderr, "%s: compare with golden: %v\n", in.name, err)
				failed++
			case diff != nil:
				fmt.Fprintf(stderr, "%s: differs from golden %s: %s\n", in.name, joinIf(f.expect, sub), diff)
				mismatched++
			default:
				if !f.json {
					fmt.Fprintf(stdout, "golden %s: outputs and counters match\n", joinIf(f.expect, sub))
				}
			}
		}
		if tmp != "" {
			os.RemoveAll(tmp)
		}
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		var v any = reports
		if len(reports) == 1 && len(inputs) == 1 {
			v = reports[0]
		}
		if err := enc.Encode(v); err != nil {
			return failf(codeFailed, "encode report: %v", err)
		}
	}
	switch {
	case failed > 0:
		return failf(codeFailed, "%d of %d captures failed", failed, len(inputs))
	case mismatched > 0:
		return failf(codeMismatch, "%d of %d captures differ from their goldens", mismatched, len(inputs))
	}
	return nil
}

func joinIf(dir, sub string) string {
	if dir == "" || sub == "" {
		return dir
	}
	return filepath.Join(dir, sub)
}

// captureStem names a capture's output subdirectory: its base name without
// the extension.
func captureStem(name string) string {
	base := filepath.Base(strings.TrimPrefix(name, "embedded:"))
	return strings.TrimSuffix(base, filepath.Ext(base))
}
