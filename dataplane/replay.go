package dataplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/gopacket/gopacket/layers"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// ReplayConfig is one replay of a capture through a pipeline.
type ReplayConfig struct {
	// Capture is the capture file's path, or its name when CaptureData holds
	// its bytes (an embedded sample).
	Capture     string
	CaptureData []byte
	Graph       *pipelines.Graph
	// OutDir, when set, receives one capture per tx port (PORT.pcap), the
	// passed packets (pass.pcap, when the pipeline can pass), the samples
	// (their configured file names) and counters.json. When empty every
	// output is a null port: packets are counted and discarded.
	OutDir string
	Engine Options
	// Replay configures the input port (loops, preload).
	Replay ReplayOptions
	// Arena, when its Frames is set, is the frame arena to use as it is.
	// Otherwise the arena is sized for the capture (see pcapscan.go), with
	// frames of FrameSize bytes when that is set.
	Arena     rings.ArenaOptions
	FrameSize int
	// MaxOutput, when above 0, bounds the bytes written to the output
	// captures together (file headers included): the replay stops, as at
	// a damaged record, with an error wrapping ErrOutputLimit, once the
	// next packet would pass it.
	MaxOutput int64
	// Progress, when set, is called about five times a second.
	Progress func(ReplayProgress)
	// Notice, when set, is given one-line notices, each at most once: a
	// preload that streams instead, outputs converted to Ethernet, a
	// capture that is mostly zero-length records.
	Notice func(string)
	// Context, when set, stops the replay when it is done (Ctrl-C): the
	// input stops at the next batch, what is in flight drains, and Replay
	// returns the report so far with an error wrapping ErrInterrupted.
	Context context.Context
}

// ReplayProgress is how far a replay has got.
type ReplayProgress struct {
	Received uint64
	// Fraction is the part of the input consumed, from 0 to 1 (all passes
	// counted), or -1 when unknown (looping forever).
	Fraction float64
}

// ErrInterrupted is wrapped by the error of a replay stopped through its
// Context.
var ErrInterrupted = errors.New("interrupted")

// The zero-length warning: once more than this share of the records read
// (and at least this many) hold no bytes, the replay says so once.
const (
	zeroLengthWarnPercent = 1
	zeroLengthWarnMin     = 100
)

// interruptedRead turns a read that failed because ctx ended (a pipe's
// read deadline, see openCapture) into ErrInterrupted.
func interruptedRead(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w (%v)", ErrInterrupted, err)
	}
	return err
}

// PassFile is the capture that receives passed packets in a replay.
const PassFile = "pass.pcap"

// Replay runs cfg's capture through cfg's pipeline and returns the report.
// The capture is a file, "-" for standard input, a pipe or a FIFO (see
// pcapinput.go), read in one pass unless it is a regular file.
// The report is returned (with what was counted) even when err != nil, as
// long as the run started: a capture that turns corrupt midway, an output
// that fails, or an interrupt (cfg.Context) stop the input, and what was
// read before is still processed, reported, written to well-formed output
// captures and to counters.json. rep.Pipeline is set once the run started.
func Replay(cfg ReplayConfig) (rep Report, err error) {
	ctx := cfg.Context
	if ctx == nil {
		ctx = context.Background()
	}
	notice := func(string) {}
	if cfg.Notice != nil {
		notice = cfg.Notice
	}
	var src io.Reader
	var input *captureInput
	name := cfg.Capture
	if cfg.CaptureData != nil {
		src = bytes.NewReader(cfg.CaptureData)
	} else {
		if input, err = openCapture(ctx, cfg.Capture); err != nil {
			return rep, err
		}
		defer input.release()
		src, name = input.f, input.name
	}
	rd, err := newRecordReader(name, src)
	if err != nil {
		if input != nil {
			input.f.Close()
		}
		return rep, interruptedRead(ctx, err)
	}
	plan, err := replayArena(cfg, rd, input)
	if err != nil {
		if input != nil {
			input.f.Close()
		}
		return rep, err
	}
	if plan.note != "" {
		notice(plan.note)
	}
	arena, err := rings.NewArena(plan.opts)
	if err != nil {
		if input != nil {
			input.f.Close()
		}
		return rep, fmt.Errorf("frame arena: %w", err)
	}
	ro := cfg.Replay
	ro.Preload = plan.preload
	if ro.Name == "" {
		ro.Name = filepath.Base(cfg.Capture)
		if cfg.Capture == StdinName {
			ro.Name = "stdin"
		}
	}
	var file *os.File
	if input != nil {
		file = input.f
	}
	in, err := newReplayFrom(rd, file, arena, ro)
	if err != nil {
		if file != nil {
			file.Close()
		}
		return rep, interruptedRead(ctx, err)
	}
	if nonEthernet := rd.linkNames(); nonEthernet != "" && cfg.OutDir != "" {
		notice(fmt.Sprintf("outputs are Ethernet captures: the pipeline's stages read and rewrite Ethernet headers, so %s packets got a synthetic Ethernet header in place of their own", nonEthernet))
	}
	var budget *outputBudget
	if cfg.MaxOutput > 0 && cfg.OutDir != "" {
		budget = &outputBudget{limit: cfg.MaxOutput}
		in.budget = budget
	}
	wo := pcapWriterOptions{nano: rd.nanoRes, stamps: in.stamps, budget: budget}
	var closers []Port
	closers = append(closers, in)
	started := false
	defer func() {
		for _, c := range closers {
			if cerr := c.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}
		if started && cfg.OutDir != "" {
			if werr := WriteCounters(cfg.OutDir, rep); werr != nil && err == nil {
				err = werr
			}
		}
	}()

	outs := Outputs{Ports: map[string]Port{}, Samples: map[string]Port{}}
	// Every output needs a file of its own: two writers on one path would
	// silently overwrite each other's records (a sample file named after a
	// tx port, or pass.pcap).
	writers := map[string]string{} // file -> what writes it
	open := func(file, name, what string) (Port, error) {
		if prev, dup := writers[file]; dup {
			return nil, fmt.Errorf("%s: file %s is already written by %s", what, file, prev)
		}
		writers[file] = what
		if cfg.OutDir == "" {
			return NewNullPort(name), nil
		}
		return createPcapWriter(filepath.Join(cfg.OutDir, file), name, layers.LinkTypeEthernet, wo)
	}
	if cfg.OutDir != "" {
		if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
			return rep, fmt.Errorf("output directory: %w", err)
		}
	}
	for _, name := range cfg.Graph.Ports() {
		p, err := open(name+".pcap", name, fmt.Sprintf("tx port %q", name))
		if err != nil {
			return rep, err
		}
		closers = append(closers, p)
		outs.Ports[name] = p
	}
	if hasPass(cfg.Graph) {
		p, err := open(PassFile, "pass", "the pass verdict")
		if err != nil {
			return rep, err
		}
		closers = append(closers, p)
		outs.Pass = p
	}
	for _, s := range cfg.Graph.Samplers() {
		p, err := open(s.File, s.Stage, fmt.Sprintf("sample stage %q", s.Stage))
		if err != nil {
			return rep, err
		}
		closers = append(closers, p)
		outs.Samples[s.File] = p
	}

	e, err := NewEngine(cfg.Graph, arena, in, outs, cfg.Engine)
	if err != nil {
		return rep, err
	}
	// The engine calls progress from its I/O loop, the goroutine that
	// drives the port, so the port's position can be read directly.
	zeroWarned := false
	checkZero := func() {
		if zeroWarned {
			return
		}
		if zero, recs := in.zeroLen.Load(), in.nrec; zero >= zeroLengthWarnMin && zero*100 > recs*zeroLengthWarnPercent {
			zeroWarned = true
			notice(fmt.Sprintf("warning: %d of the %d records read so far hold no bytes at all (zero-length records: input drops here, empty frames to tshark); is %s really a capture?", zero, recs, name))
		}
	}
	progress := func(received uint64) {
		checkZero()
		if cfg.Progress != nil {
			cfg.Progress(ReplayProgress{Received: received, Fraction: in.fraction()})
		}
	}
	started = true
	// A stop through ctx is clean for the engine (it stops receiving and
	// drains what is in flight, returning nil); for a replay it means the
	// capture was not read to its end.
	runErr := interruptedRead(ctx, e.RunContext(ctx, progress))
	if runErr == nil && ctx.Err() != nil && !in.eof {
		runErr = fmt.Errorf("replay %s: %w", cfg.Capture, ErrInterrupted)
	}
	checkZero()
	rep = e.Report()
	st := in.Stats()
	rep.Records = st.Records
	if st.Oversize > 0 {
		rep.InputDrops = append(rep.InputDrops, DropCount{Reason: "oversize", Packets: st.Oversize})
	}
	if st.Malformed > 0 {
		rep.InputDrops = append(rep.InputDrops, DropCount{Reason: "short_link_header", Packets: st.Malformed})
	}
	if st.ZeroLength > 0 {
		rep.InputDrops = append(rep.InputDrops, DropCount{Reason: "zero_length", Packets: st.ZeroLength})
	}
	rep.Cut = st.Cut
	if !ro.Preload {
		var inDrops uint64
		for _, d := range rep.InputDrops {
			inDrops += d.Packets
		}
		rep.Balanced = rep.Balanced && rep.Records == rep.Received+inDrops
	}
	if !ro.Preload && runErr == nil && arena.FreeFrames() != arena.Frames() {
		runErr = fmt.Errorf("internal error: %d of %d frames not returned to the arena", arena.Frames()-arena.FreeFrames(), arena.Frames())
	}
	return rep, runErr
}

// OutputFiles names the files a replay of graph g writes into its OutDir:
// one capture per tx port, pass.pcap when the graph can pass, the samples,
// and counters.json.
func OutputFiles(g *pipelines.Graph) []string {
	var files []string
	for _, name := range g.Ports() {
		files = append(files, name+".pcap")
	}
	if hasPass(g) {
		files = append(files, PassFile)
	}
	for _, s := range g.Samplers() {
		files = append(files, s.File)
	}
	return append(files, CountersFile)
}

func hasPass(g *pipelines.Graph) bool {
	for _, s := range g.Stages() {
		if s.Kind == "pass" {
			return true
		}
	}
	return false
}

// ErrUnbalanced is returned by callers that check Report.Balanced.
var ErrUnbalanced = errors.New("packet accounting does not balance")
