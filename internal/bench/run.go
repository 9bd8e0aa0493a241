package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"time"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/internal/baseline"
	"github.com/warpflow/warpflow/internal/hostinfo"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/workers"
)

// Options configures a bench run.
type Options struct {
	Capture string // the capture replayed by every row (64-byte packets for the targets); "" for the embedded bench-64.pcap
	Packets uint64 // packets per measurement (rounded up to whole passes over the capture)
	Repeats int    // measurements per row; the median is reported
	CPU     int    // the core every in-process row runs on; -1: do not pin
	// Testpmd enables the dpdk-testpmd rows (macswap and io forwarding,
	// one run each); TestpmdSeconds is each one's run length.
	Testpmd        bool
	TestpmdSeconds int
	TestpmdCPUs    [2]int // main lcore, forwarding lcore
	// StatefulFlows is the concurrent flows of the stateful rows
	// (StatefulFlows, a million, by default; the rows measure Packets
	// after setting them up). 0 leaves the stateful rows out.
	StatefulFlows uint64
	// GeneratorCPU, where it is not -1, adds a reference row: the
	// stateful row with its packets written by a thread on this core, as
	// a NIC's DMA would write them (nicgen.go), where the stateful rows'
	// own core writes them (in-core).
	GeneratorCPU int
}

// DefaultOptions measures 20 million packets three times per row on the
// last CPU (CPU 0 takes more of the machine's interrupts and timers), with
// testpmd forwarding on that same CPU and its main lcore on CPU 0.
func DefaultOptions() Options {
	cpu := runtime.NumCPU() - 1
	return Options{
		Capture: "", // the embedded copy of testdata/captures/bench-64.pcap
		Packets: 20_000_000, Repeats: 3, CPU: cpu,
		Testpmd: true, TestpmdSeconds: 5, TestpmdCPUs: [2]int{0, cpu},
		StatefulFlows: StatefulFlows, GeneratorCPU: DefaultGeneratorCPU(cpu),
	}
}

// DefaultGeneratorCPU is the stateful rows' generator's core beside the rows' cpu: the
// one before it (CPU 0 on a 2-CPU machine), or -1 (in-core) on one CPU.
func DefaultGeneratorCPU(cpu int) int {
	if cpu < 1 {
		return -1
	}
	return cpu - 1
}

// Row is one measured configuration.
type Row struct {
	Name        string  `json:"name"`
	Baseline    bool    `json:"baseline"`
	Mpps        float64 `json:"mpps"`
	NsPerPacket float64 `json:"ns_per_packet"`
	Packets     uint64  `json:"packets"`
	Allocs      uint64  `json:"allocs_per_run,omitempty"`
	Err         string  `json:"error,omitempty"`
	// MppsRuns is every repeat's rate, in measurement order, for the rows
	// measured in-process (Mpps is their median); the chart draws their
	// range as error bars.
	MppsRuns []float64 `json:"mpps_runs,omitempty"`
	// Flows and TableBytesPerFlow, for the stateful row: the flows in the
	// conntrack table at the end, and the table's memory per flow.
	Flows             int     `json:"flows,omitempty"`
	TableBytesPerFlow float64 `json:"table_bytes_per_flow,omitempty"`
	// CPUNsPerPacket, for the stateful rows: the thread's CPU time per
	// packet (user and system), beside the wall time NsPerPacket; the two
	// differ by what other processes took of the core.
	CPUNsPerPacket float64 `json:"cpu_ns_per_packet,omitempty"`
	// Generator, for the stateful rows: where the packets were written,
	// "cpu N" (a thread of its own, as a NIC: nicgen.go) or "in-core"
	// (by the row's own core, on top of its work). GeneratorWaits is the
	// share of the steady phase's batches for which the row waited on
	// that thread; well above zero, the row measured the generator.
	Generator      string  `json:"generator,omitempty"`
	GeneratorWaits float64 `json:"generator_waits,omitempty"`
}

// Target is one goal from the project's issue, checked against rows of the
// same run. Reference goals are the goals against a stricter
// baseline than the issue names, shown for comparison only.
type Target struct {
	// Absolute targets (Base empty) compare the row's own figure (Unit:
	// "Mpps", "allocs/packet", "bytes/flow") with Want, at least or (Max)
	// at most.
	Unit string `json:"unit,omitempty"`
	Max  bool   `json:"max,omitempty"`

	Name      string  `json:"name"`
	Row       string  `json:"row"`
	Base      string  `json:"baseline"`
	Want      float64 `json:"want_ratio"`
	Ratio     float64 `json:"ratio"`
	Met       bool    `json:"met"`
	Reference bool    `json:"reference,omitempty"`
	Note      string  `json:"note,omitempty"` // set when the target was not measured
}

// Result is a whole bench run.
type Result struct {
	Capture   string    `json:"capture"`
	CPU       int       `json:"cpu"`
	GoVersion string    `json:"go_version"`
	Machine   string    `json:"machine"` // hostinfo.CPU: what the figures were measured on
	When      time.Time `json:"when"`
	Rows      []Row     `json:"rows"`
	Targets   []Target  `json:"targets"`
}

// Row names, used by targets and the chart.
const (
	RowGopacket       = "gopacket DecodingLayerParser (decode only)"
	RowGopacketSparse = "gopacket DecodingLayerParser, sparse container (decode only)"
	RowGopacketReader = "gopacket pcapgo read + decode"
	RowTestpmd        = "dpdk-testpmd macswap (pcap infinite_rx -> null)"
	RowTestpmdIO      = "dpdk-testpmd io (pcap infinite_rx -> null)"
	RowParse          = "warpflow parse -> null"
	RowMacswap        = "warpflow parse + macswap -> null"
	RowDefault1k      = "warpflow default: parse, 1000-rule filter, rewrite, count -> null"
)

// Run measures every row and checks the targets. Progress lines go to log.
func Run(ctx context.Context, o Options, log io.Writer) (Result, error) {
	res := Result{Capture: o.Capture, CPU: o.CPU, GoVersion: runtime.Version(), Machine: hostinfo.CPU(), When: time.Now().UTC()}
	if o.Repeats < 1 {
		return res, fmt.Errorf("repeats %d: must be at least 1", o.Repeats)
	}
	if o.GeneratorCPU < -1 {
		return res, fmt.Errorf("generator cpu %d: must be a CPU number, or -1 for no such row", o.GeneratorCPU)
	}
	if o.StatefulFlows > 0 && o.GeneratorCPU >= 0 && o.GeneratorCPU == o.CPU {
		return res, fmt.Errorf("generator cpu %d is the rows' cpu: give another, or -1 to leave the reference row out", o.GeneratorCPU)
	}
	if o.Capture == "" {
		// The baselines and testpmd read a file: write the embedded
		// capture to one, so that the bench runs from any directory.
		path, cleanup, err := embeddedCapture()
		if err != nil {
			return res, err
		}
		defer cleanup()
		o.Capture, res.Capture = path, EmbeddedCaptureName
	}
	probe, err := pipelines.Load("bench", []byte(parseOnlyPipeline))
	if err != nil {
		return res, fmt.Errorf("bench pipeline: %w", err)
	}
	passPackets, err := capturePackets(o.Capture, probe)
	if err != nil {
		return res, err
	}
	loops := int((o.Packets + passPackets - 1) / passPackets)

	inproc := []struct {
		name string
		run  func() (Row, error)
	}{
		{RowGopacket, func() (Row, error) { return baselineRow(baseline.GopacketParse(o.Capture, loops)) }},
		{RowGopacketSparse, func() (Row, error) { return baselineRow(baseline.GopacketParseSparse(o.Capture, loops)) }},
		{RowGopacketReader, func() (Row, error) { return baselineRow(baseline.GopacketParseReader(o.Capture, loops)) }},
		{RowParse, func() (Row, error) { return replayRow(o.Capture, parseOnlyPipeline, loops) }},
		{RowMacswap, func() (Row, error) { return replayRow(o.Capture, macswapPipeline, loops) }},
		{RowDefault1k, func() (Row, error) { return replayRow(o.Capture, defaultPipeline1k(), loops) }},
	}
	if o.StatefulFlows > 0 {
		inproc = append(inproc, []struct {
			name string
			run  func() (Row, error)
		}{
			{RowStatefulBase, func() (Row, error) { return statefulRow(statefulBasePipeline(), o.StatefulFlows, o.Packets, -1) }},
			{RowStateful, func() (Row, error) { return statefulRow(statefulPipeline, o.StatefulFlows, o.Packets, -1) }},
		}...)
		if o.GeneratorCPU >= 0 {
			inproc = append(inproc, struct {
				name string
				run  func() (Row, error)
			}{RowStatefulNIC, func() (Row, error) {
				return statefulRow(statefulPipeline, o.StatefulFlows, o.Packets, o.GeneratorCPU)
			}})
		}
	}
	// Rows are measured round-robin (every row once, then every row
	// again, ...) rather than one row's repeats back to back: on a shared
	// machine whose speed shifts from one stretch of seconds to the next,
	// each row then sees the same mix of fast and slow stretches, and the
	// ratios between rows' medians stay meaningful.
	samples := make([][]Row, len(inproc))
	errs := make([]string, len(inproc))
	for rep := range o.Repeats {
		for i, m := range inproc {
			if errs[i] != "" {
				continue
			}
			fmt.Fprintf(log, "measuring %s (%d of %d) ...\n", m.name, rep+1, o.Repeats)
			r, err := onCPU(o.CPU, m.run)
			if err != nil {
				errs[i] = err.Error()
				continue
			}
			samples[i] = append(samples[i], r)
		}
	}
	for i, m := range inproc {
		row := Row{Name: m.name, Baseline: isBaseline(m.name), Err: errs[i]}
		if row.Err == "" {
			var runs []float64
			for _, r := range samples[i] {
				runs = append(runs, r.Mpps)
			}
			row = median(samples[i])
			row.Name, row.Baseline, row.MppsRuns = m.name, isBaseline(m.name), runs
		}
		res.Rows = append(res.Rows, row)
	}
	if o.Testpmd {
		// Both forwarding modes over the same capture on the same cores:
		// macswap reads and writes every header, io forwards the mbufs
		// without touching a byte (the floor of testpmd's own per-packet
		// cost).
		for _, m := range []struct{ name, mode string }{{RowTestpmd, baseline.ForwardMacswap}, {RowTestpmdIO, baseline.ForwardIO}} {
			fmt.Fprintf(log, "measuring %s ...\n", m.name)
			row := Row{Name: m.name, Baseline: true}
			to := baseline.DefaultTestpmdOptions()
			to.Capture, to.Mode = o.Capture, m.mode
			to.Duration = time.Duration(o.TestpmdSeconds) * time.Second
			to.MainCore, to.ForwardCore = o.TestpmdCPUs[0], o.TestpmdCPUs[1]
			tr, err := baseline.Testpmd(ctx, to)
			if err != nil {
				row.Err = err.Error()
			} else {
				row.Mpps, row.NsPerPacket, row.Packets = tr.Mpps, tr.NsPerPacket, tr.Packets
			}
			res.Rows = append(res.Rows, row)
		}
	}
	res.Targets = checkTargets(res.Rows)
	return res, nil
}

func isBaseline(name string) bool {
	return name == RowGopacket || name == RowGopacketSparse || name == RowGopacketReader || name == RowTestpmd || name == RowTestpmdIO
}

func baselineRow(r baseline.Result, err error) (Row, error) {
	if err != nil {
		return Row{}, err
	}
	return Row{Mpps: r.Mpps, NsPerPacket: r.NsPerPacket, Packets: r.Packets}, nil
}

// replayRow replays the capture, preloaded into the frame arena, loops
// times through the pipeline, inline on the calling (pinned) thread, to a
// null port.
func replayRow(capture, config string, loops int) (Row, error) {
	g, err := pipelines.Load("bench", []byte(config))
	if err != nil {
		return Row{}, fmt.Errorf("bench pipeline: %w", err)
	}
	cfg := dataplane.ReplayConfig{
		Capture: capture,
		Graph:   g,
		Engine:  dataplane.DefaultOptions(),
		Replay:  dataplane.DefaultReplayOptions(),
		Arena:   rings.ArenaOptions{Frames: 8192, FrameSize: 2048, Headroom: 256},
	}
	cfg.Engine.Workers = 0
	cfg.Engine.Timing = false
	cfg.Replay.Preload = true
	cfg.Replay.Loops = loops
	cfg.Replay.MinFrames = 256
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	rep, err := dataplane.Replay(cfg)
	runtime.ReadMemStats(&ms1)
	if err != nil {
		return Row{}, err
	}
	if !rep.Balanced {
		return Row{}, fmt.Errorf("%s", rep.AccountingLine())
	}
	return Row{
		Mpps: rep.Timing.Mpps, NsPerPacket: rep.Timing.NsPerPkt, Packets: rep.Received,
		Allocs: ms1.Mallocs - ms0.Mallocs,
	}, nil
}

// capturePackets counts the packets one pass over the capture yields.
func capturePackets(capture string, g *pipelines.Graph) (uint64, error) {
	cfg := dataplane.ReplayConfig{Capture: capture, Graph: g, Engine: dataplane.DefaultOptions(), Replay: dataplane.DefaultReplayOptions()}
	cfg.Engine.Workers = 0
	rep, err := dataplane.Replay(cfg)
	if err != nil {
		return 0, err
	}
	if rep.Received == 0 {
		return 0, errors.New("capture " + capture + " holds no packets")
	}
	return rep.Received, nil
}

// onCPU runs fn on a fresh goroutine pinned to cpu, whose thread dies with it.
func onCPU(cpu int, fn func() (Row, error)) (Row, error) {
	type out struct {
		r   Row
		err error
	}
	ch := make(chan out, 1)
	go func() {
		if cpu >= 0 {
			if err := workers.PinCurrentGoroutine(cpu); err != nil {
				ch <- out{err: err}
				return
			}
		}
		r, err := fn()
		ch <- out{r, err}
	}()
	o := <-ch
	return o.r, o.err
}

func median(rows []Row) Row {
	sort.Slice(rows, func(i, j int) bool { return rows[i].Mpps < rows[j].Mpps })
	return rows[len(rows)/2]
}

func find(rows []Row, name string) *Row {
	for i := range rows {
		if rows[i].Name == name && rows[i].Err == "" && rows[i].Mpps > 0 {
			return &rows[i]
		}
	}
	return nil
}

// maxGeneratorWaits is the share of a row's batches that may wait on its
// NIC thread before its rate target counts as not measured.
const maxGeneratorWaits = 0.01

// checkTargets compares rows of one run, as the issue sets the goals.
func checkTargets(rows []Row) []Target {
	goals := []Target{
		{Name: "parse stage >= 3x gopacket decode", Row: RowParse, Base: RowGopacket, Want: 3},
		{Name: "parse + macswap >= dpdk-testpmd macswap", Row: RowMacswap, Base: RowTestpmd, Want: 1},
		{Name: "parse + macswap >= dpdk-testpmd io", Row: RowMacswap, Base: RowTestpmdIO, Want: 1},
		{Name: "default pipeline (1000 rules) >= 2x gopacket decode", Row: RowDefault1k, Base: RowGopacket, Want: 2},
		{Name: "default pipeline (1000 rules) >= dpdk-testpmd macswap", Row: RowDefault1k, Base: RowTestpmd, Want: 1},
		// The targets are against the obvious program (the default
		// map container). The same goals against gopacket's fastest
		// container are printed too, so nobody has to guess how much of a
		// ratio comes from the baseline's choice of container.
		{Name: "parse stage >= 3x gopacket sparse decode", Row: RowParse, Base: RowGopacketSparse, Want: 3, Reference: true},
		{Name: "default pipeline (1000 rules) >= 2x gopacket sparse decode", Row: RowDefault1k, Base: RowGopacketSparse, Want: 2, Reference: true},
		// The stateful stages' goals: absolute, on one core.
		{Name: "stateful (conntrack, ct filter, SNAT, 1M flows) >= 9 Mpps", Row: RowStateful, Want: 9, Unit: "Mpps"},
		{Name: "stateful: 0 allocations per packet", Row: RowStateful, Want: 0.001, Unit: "allocs/packet", Max: true},
		{Name: "stateful: conntrack table <= 128 bytes per flow", Row: RowStateful, Want: 128, Unit: "bytes/flow", Max: true},
		{Name: "stateful, packets written by another core, >= 9 Mpps", Row: RowStatefulNIC, Want: 9, Unit: "Mpps", Reference: true},
	}
	for i := range goals {
		g := &goals[i]
		r, b := find(rows, g.Row), find(rows, g.Base)
		if r == nil || b == nil && g.Base != "" {
			g.Note = "not measured in this run"
			continue
		}
		if g.Base == "" {
			if g.Unit == "Mpps" && r.GeneratorWaits > maxGeneratorWaits {
				// The row waited on its generator: what it measured is the
				// generator's rate, not the pipeline's.
				g.Ratio = r.Mpps
				g.Note = fmt.Sprintf("the row waited for its generator in %.1f%% of its batches: it measured the generator", 100*r.GeneratorWaits)
				continue
			}
			switch g.Unit {
			case "allocs/packet":
				g.Ratio = float64(r.Allocs) / float64(max(r.Packets, 1))
			case "bytes/flow":
				g.Ratio = r.TableBytesPerFlow
			default:
				g.Ratio = r.Mpps
			}
			if g.Max {
				g.Met = g.Ratio <= g.Want
			} else {
				g.Met = g.Ratio >= g.Want
			}
			continue
		}
		g.Ratio = r.Mpps / b.Mpps
		g.Met = g.Ratio >= g.Want
	}
	return goals
}
