package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// sampleCapture is the capture replayed when no capture is named: a copy of
// testdata/captures/mixed.pcap (a test keeps the two identical).
//
//go:embed sample.pcap
var sampleCapture []byte

const sampleName = "embedded:mixed.pcap"

type replayFlags struct {
	pipeline  string
	workers   int
	batch     int
	out       string
	force     bool
	expect    string
	json      bool
	loops     int
	preload   bool
	frameSize int
	noTiming  bool
	track     bool
	backend   string
	cudaUnsup string
	maxOutput string
}

func newReplayCommand() *cobra.Command {
	var f replayFlags
	cmd := &cobra.Command{
		Use:   "replay [flags] [CAPTURE|- ...]",
		Short: "Replay captures through a pipeline, offline and deterministically",
		Long: `Replay runs each capture (pcap or pcapng, any version libpcap reads,
optionally gzip-compressed) through a pipeline on a pool of persistent
workers and prints what every stage did and where every packet went. With no
capture it replays an embedded sample through the embedded default pipeline.

A capture is read once, front to back, so it may be a pipe: "-" is standard
input (tcpdump -w - -U | warpctl replay -), and /dev/stdin, a FIFO and
process substitution (warpctl replay <(zcat x.pcap.gz)) work too. A live
stream is replayed as it arrives, with progress on a terminal; Ctrl-C stops
it with the report so far. Only a regular file is read ahead (to size
frames) or again (--loops); a pipe's frames are sized from the snap length
its header declares, or --frame-size.

Output captures keep what the input said of each packet: its timestamp, at
the input's resolution (nanosecond pcap where the input had nanoseconds),
and its original length (a packet the capture cut stays cut; one the
pipeline lengthened or shortened keeps the difference). They are Ethernet
captures whatever the input's link type: the pipeline works on Ethernet
frames, and a capture of another link type is replayed with a synthetic
Ethernet header (the replay says so). --max-output bounds what all outputs
together may take; the replay stops with a clear line when they reach it.

Outputs (one capture per tx port, pass.pcap, sample files and counters.json)
are written to --out, which must be new or empty: --force replaces what an
earlier replay wrote there (it lists its files in .warpctl-outputs) and
nothing else. With several captures each gets its own subdirectory named
after the capture. --expect compares the outputs with a golden directory
written earlier by --out and exits 3 on any difference, naming the first
differing packet.

Frames are sized for the capture (up to 64 KiB, for jumbo and GRO/TSO
captures); --frame-size sets them instead. A damaged record or Ctrl-C stops
the replay: what was read before is still processed, reported and written,
then the error (or "interrupted") is printed and the exit code says which.

` + exitCodesHelp,
		RunE: func(cmd *cobra.Command, args []string) error { return runReplay(cmd, f, args) },
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.pipeline, "pipeline", "p", "", "pipeline config (default: the embedded default pipeline)")
	fl.IntVarP(&f.workers, "workers", "w", -1, fmt.Sprintf("worker goroutines, 0 (inline in the I/O loop) to %d (default: the pipeline's settings)", pipelines.MaxWorkers))
	fl.IntVar(&f.batch, "batch", 0, fmt.Sprintf("batch size, 1 to %d (default: the pipeline's settings)", rings.MaxBatch))
	fl.StringVarP(&f.out, "out", "o", "", "write output captures and counters.json to this new or empty directory")
	fl.BoolVar(&f.force, "force", false, "with --out: remove what an earlier replay wrote there first")
	fl.StringVar(&f.expect, "expect", "", "compare outputs and counters with this golden directory")
	fl.BoolVar(&f.json, "json", false, "print the results as JSON (see README: JSON output)")
	fl.IntVar(&f.loops, "loops", 1, "passes over each capture")
	fl.BoolVar(&f.preload, "preload", false, "load the capture into the frame arena first and replay from memory")
	fl.IntVar(&f.frameSize, "frame-size", 0, "frame size in bytes, a power of two from 2048 to 65536 (default: sized for the capture)")
	fl.BoolVar(&f.noTiming, "no-timing", false, "do not measure per-stage time")
	fl.BoolVar(&f.track, "track-frames", false, "debug mode: track every frame's owner and audit the arena after the run")
	fl.StringVar(&f.backend, "backend", "", "cpu or cuda (default: the pipeline's settings.backend, else cpu)")
	fl.StringVar(&f.cudaUnsup, "cuda-unsupported", "refuse", "with cuda, a pipeline the device cannot run whole: refuse (stop, naming the stage) or cpu (run it on CPU workers, saying so)")
	fl.StringVar(&f.maxOutput, "max-output", "auto", "with --out: stop once the output captures together would pass this size (bytes, or 500M, 4G, 2GiB; 0: no limit). auto: 16 times the capture's size on disk (times --loops), at least 4 GiB; 64 GiB for a pipe")
	return cmd
}

func loadPipeline(path string) (*pipelines.Graph, error) {
	if path == "" {
		return pipelines.Default()
	}
	return pipelines.LoadFile(path)
}

// checkReplayFlags reports a flag value that cannot work as a usage error,
// before anything runs.
func checkReplayFlags(cmd *cobra.Command, f replayFlags) error {
	changed := cmd.Flags().Changed
	switch {
	case f.loops < 1:
		return failf(codeUsage, "--loops %d: must be at least 1", f.loops)
	case changed("workers") && (f.workers < 0 || f.workers > pipelines.MaxWorkers):
		return failf(codeUsage, "--workers %d: must be 0 (inline) to %d", f.workers, pipelines.MaxWorkers)
	case changed("batch") && (f.batch < 1 || f.batch > rings.MaxBatch):
		return failf(codeUsage, "--batch %d: must be 1 to %d", f.batch, rings.MaxBatch)
	case changed("frame-size") && (f.frameSize < 2048 || f.frameSize > 65536 || f.frameSize&(f.frameSize-1) != 0):
		return failf(codeUsage, "--frame-size %d: must be a power of two from 2048 to 65536", f.frameSize)
	case f.force && f.out == "":
		return failf(codeUsage, "--force needs --out")
	}
	if _, err := parseSize(f.maxOutput); err != nil {
		return failf(codeUsage, "--max-output %s: %v", f.maxOutput, err)
	}
	return nil
}

// replayJSON is what --json prints: always this object (see README).
type replayJSON struct {
	Captures    []captureJSON `json:"captures"`
	Interrupted bool          `json:"interrupted,omitempty"`
}

// captureJSON is one capture's outcome: its report when the run started
// (complete, or up to the error), its error, and the golden comparison.
type captureJSON struct {
	Capture string            `json:"capture"`
	OutDir  string            `json:"out_dir,omitempty"`
	Report  *dataplane.Report `json:"report,omitempty"`
	Error   string            `json:"error,omitempty"`
	Golden  *goldenJSON       `json:"golden,omitempty"`
}

type goldenJSON struct {
	Dir        string `json:"dir"`
	Match      bool   `json:"match"`
	Difference string `json:"difference,omitempty"`
	Error      string `json:"error,omitempty"`
}

type replayInput struct {
	name string
	data []byte
}

func runReplay(cmd *cobra.Command, f replayFlags, args []string) error {
	if err := checkReplayFlags(cmd, f); err != nil {
		return err
	}
	g, err := loadPipeline(f.pipeline)
	if err != nil {
		return failf(codeFailed, "pipeline: %v", err)
	}
	var inputs []replayInput
	if len(args) == 0 {
		inputs = append(inputs, replayInput{name: sampleName, data: sampleCapture})
	}
	stdin := 0
	for _, a := range args {
		inputs = append(inputs, replayInput{name: a})
		if a == dataplane.StdinName {
			stdin++
		}
	}
	if stdin > 1 {
		return failf(codeUsage, "standard input (-) is named %d times: it can be read once", stdin)
	}
	subdir := func(in replayInput) string {
		if len(inputs) > 1 {
			return captureStem(in.name)
		}
		return ""
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
	if f.out != "" {
		var known []string
		for _, in := range inputs {
			for _, file := range dataplane.OutputFiles(g) {
				known = append(known, path.Join(subdir(in), file))
			}
		}
		if err := prepareOut(f.out, f.force, known); err != nil {
			return err
		}
	}

	// Ctrl-C or SIGTERM stops the replay cleanly (report so far, outputs
	// closed, exit 130); a second one kills as usual.
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)

	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	var res replayJSON
	var written []string
	failed, mismatched := 0, 0
	for _, in := range inputs {
		sub := subdir(in)
		cr, files, err := replayOne(ctx, f, g, in, sub, stdout, stderr)
		res.Captures = append(res.Captures, cr)
		for _, file := range files {
			written = append(written, path.Join(sub, file))
		}
		switch {
		case errors.Is(err, dataplane.ErrInterrupted):
			res.Interrupted = true
		case err != nil:
			failed++
		case cr.Golden != nil && !cr.Golden.Match && cr.Golden.Error == "":
			mismatched++
		case cr.Golden != nil && cr.Golden.Error != "":
			failed++
		}
		if res.Interrupted {
			break
		}
	}
	if f.out != "" && len(written) > 0 {
		if err := writeManifest(f.out, written); err != nil {
			fmt.Fprintln(stderr, err)
			failed++
		}
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return failf(codeFailed, "encode results: %v", err)
		}
	}
	switch {
	case res.Interrupted:
		last := res.Captures[len(res.Captures)-1].Capture
		return failf(codeInterrupted, "interrupted during %s (capture %d of %d): its report covers what was done before", last, len(res.Captures), len(inputs))
	case failed > 0:
		return failf(codeFailed, "%d of %d captures failed", failed, len(inputs))
	case mismatched > 0:
		return failf(codeMismatch, "%d of %d captures differ from their goldens", mismatched, len(inputs))
	}
	return nil
}

// replayOne replays one capture, prints its report (unless --json) and
// compares it with its golden. It returns the capture's result, the output
// files it wrote (relative to its output directory), and the error that
// ended the replay, if any.
func replayOne(ctx context.Context, f replayFlags, g *pipelines.Graph, in replayInput, sub string, stdout, stderr io.Writer) (captureJSON, []string, error) {
	cr := captureJSON{Capture: in.name}
	outDir := joinIf(f.out, sub)
	if f.expect != "" && outDir == "" {
		tmp, err := os.MkdirTemp("", "warpctl-replay-")
		if err != nil {
			cr.Error = fmt.Sprintf("temporary output directory: %v", err)
			fmt.Fprintf(stderr, "%s: %s\n", in.name, cr.Error)
			return cr, nil, err
		}
		defer os.RemoveAll(tmp)
		outDir = tmp
	} else {
		cr.OutDir = outDir
	}
	cfg := dataplane.ReplayConfig{
		Capture:     in.name,
		CaptureData: in.data,
		Graph:       g,
		OutDir:      outDir,
		Engine:      dataplane.DefaultOptions(),
		Replay:      dataplane.DefaultReplayOptions(),
		FrameSize:   f.frameSize,
		Context:     ctx,
		MaxOutput:   maxOutputFor(f, in),
		Notice: func(line string) {
			fmt.Fprintf(stderr, "%s: %s\n", in.name, line)
		},
	}
	cfg.Replay.Name = filepath.Base(in.name)
	if in.name == dataplane.StdinName {
		cfg.Replay.Name = "stdin"
	}
	cfg.Replay.Loops = f.loops
	cfg.Replay.Preload = f.preload
	cfg.Engine.Workers = f.workers
	cfg.Engine.BatchSize = f.batch
	cfg.Engine.Timing = !f.noTiming
	cfg.Engine.TrackFrames = f.track
	exec, err := executorFor(f.backend, f.cudaUnsup, g, stderr)
	if err != nil {
		cr.Error = err.Error()
		fmt.Fprintln(stderr, cr.Error)
		return cr, nil, err
	}
	cfg.Engine.NewExecutor = exec
	bar := newProgressBar(stderr, in.name, in.data, f.loops)
	cfg.Progress = bar.update
	rep, err := dataplane.Replay(cfg)
	bar.finish()
	started := rep.Pipeline != ""
	var files []string
	if started {
		cr.Report = &rep
		if cr.OutDir != "" {
			files = dataplane.OutputFiles(g)
		}
		if !f.json {
			printReport(stdout, in.name, rep, outDir != "" && cr.OutDir != "")
		}
	}
	if err == nil && !rep.Balanced {
		err = fmt.Errorf("%w: %s", dataplane.ErrUnbalanced, rep.AccountingLine())
	}
	if err != nil {
		cr.Error = err.Error()
		if errors.Is(err, dataplane.ErrInterrupted) {
			cr.Error = "interrupted"
		}
		if errors.Is(err, dataplane.ErrOutputLimit) {
			cr.Error += " (--max-output " + f.maxOutput + "; 0 for no limit)"
		}
		// Errors from opening a capture already name it.
		if msg := cr.Error; strings.Contains(msg, in.name) {
			fmt.Fprintln(stderr, msg)
		} else {
			fmt.Fprintf(stderr, "%s: %s\n", in.name, msg)
		}
		return cr, files, err
	}
	if f.expect != "" {
		gd := &goldenJSON{Dir: joinIf(f.expect, sub)}
		cr.Golden = gd
		diff, err := dataplane.CompareDirs(outDir, gd.Dir)
		switch {
		case err != nil:
			gd.Error = err.Error()
			fmt.Fprintf(stderr, "%s: compare with golden: %v\n", in.name, err)
		case diff != nil:
			gd.Difference = diff.String()
			fmt.Fprintf(stderr, "%s: differs from golden %s: %s\n", in.name, gd.Dir, diff)
		default:
			gd.Match = true
			if !f.json {
				fmt.Fprintf(stdout, "golden %s: outputs and counters match\n", gd.Dir)
			}
		}
	}
	return cr, files, nil
}

func joinIf(dir, sub string) string {
	if dir == "" || sub == "" {
		return dir
	}
	return filepath.Join(dir, sub)
}

// captureStem names a capture's output subdirectory: its base name without
// the extension ("stdin" for standard input).
func captureStem(name string) string {
	if name == dataplane.StdinName {
		return "stdin"
	}
	base := filepath.Base(strings.TrimPrefix(name, "embedded:"))
	return strings.TrimSuffix(base, filepath.Ext(base))
}

// Output limit defaults (see --max-output).
const (
	maxOutputFactor  = 16
	maxOutputFloor   = 4 << 30
	maxOutputUnsized = 64 << 30
)

// maxOutputFor is the --max-output limit in bytes for one capture (0: no
// limit), checkReplayFlags having checked the flag.
func maxOutputFor(f replayFlags, in replayInput) int64 {
	if f.maxOutput != "auto" {
		n, _ := parseSize(f.maxOutput)
		return n
	}
	var size int64
	switch {
	case in.data != nil:
		size = int64(len(in.data))
	case in.name == dataplane.StdinName:
		if fi, err := os.Stdin.Stat(); err == nil && fi.Mode().IsRegular() {
			size = fi.Size()
		}
	default:
		if fi, err := os.Stat(in.name); err == nil && fi.Mode().IsRegular() {
			size = fi.Size()
		}
	}
	return autoMaxOutput(size, f.loops)
}

// autoMaxOutput is --max-output auto for a capture of size bytes (0:
// unknown) replayed loops times.
func autoMaxOutput(size int64, loops int) int64 {
	if size == 0 {
		return maxOutputUnsized
	}
	n := int64(max(loops, 1))
	if size > math.MaxInt64/maxOutputFactor/n {
		return 0
	}
	return max(size*maxOutputFactor*n, maxOutputFloor)
}

// parseSize reads a byte count: a number, optionally with a unit (K, M, G,
// T: powers of 1024, with or without "iB" or "B"), or "auto".
func parseSize(s string) (int64, error) {
	if s == "auto" {
		return -1, nil
	}
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, errors.New("want a size such as 0, 500M, 4G or 2GiB, or auto")
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil {
		return 0, err
	}
	shift := 0
	switch strings.ToUpper(strings.TrimSpace(t[i:])) {
	case "", "B":
	case "K", "KB", "KIB":
		shift = 10
	case "M", "MB", "MIB":
		shift = 20
	case "G", "GB", "GIB":
		shift = 30
	case "T", "TB", "TIB":
		shift = 40
	default:
		return 0, fmt.Errorf("unknown unit %q (want K, M, G or T)", t[i:])
	}
	if n > math.MaxInt64>>shift {
		return 0, errors.New("too large")
	}
	return n << shift, nil
}
