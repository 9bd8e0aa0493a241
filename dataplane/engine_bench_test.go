package dataplane

import (
	"os"
	"strconv"
	"testing"

	"github.com/warpflow/warpflow/internal/benchshape"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// benchReplay replays the 64-byte bench capture, preloaded, through g to
// null ports, b.N passes, and reports per-packet cost. BATCH=N in the
// environment sets the engine's batch size (Options.BatchSize) instead of
// the pipeline's, for batch-size experiments (BENCHMARKS.md).
func benchReplay(b *testing.B, g *pipelines.Graph, workers int) {
	cfg := ReplayConfig{Capture: "../testdata/captures/bench-64.pcap", Graph: g, Engine: DefaultOptions(), Replay: DefaultReplayOptions()}
	cfg.Arena = rings.ArenaOptions{Frames: 8192, FrameSize: 2048, Headroom: 256}
	cfg.Engine.Workers = workers
	cfg.Replay.Preload = true
	if v, err := strconv.Atoi(os.Getenv("BATCH")); err == nil {
		cfg.Engine.BatchSize = v
	}
	runReplayBench(b, cfg)
}

// runReplayBench runs cfg for b.N passes without per-stage timing and
// reports ns/pkt and Mpps.
func runReplayBench(b *testing.B, cfg ReplayConfig) {
	cfg.Engine.Timing = false
	cfg.Replay.Loops = b.N
	b.ReportAllocs()
	b.ResetTimer()
	rep, err := Replay(cfg)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if !rep.Balanced {
		b.Fatal(rep.AccountingLine())
	}
	ns := float64(b.Elapsed().Nanoseconds()) / float64(rep.Received)
	b.ReportMetric(ns, "ns/pkt")
	b.ReportMetric(1e3/ns, "Mpps")
	b.ReportMetric(float64(rep.Received)/float64(b.N), "pkts/op")
}

func mustLoad(b *testing.B, src string) *pipelines.Graph {
	g, err := pipelines.Load("bench.yaml", []byte(src))
	if err != nil {
		b.Fatal(err)
	}
	return g
}

// BenchmarkReplay measures whole pipelines over one pass (4096 packets) of
// the bench capture per op. Compare the rows with each other: parse-only is
// the engine's floor, the default shape adds a filter, rewrite and count.
func BenchmarkReplay(b *testing.B) {
	parse := "name: p\nstages:\n  - {name: parse, type: parse}\n  - {name: out, type: tx, port: sink}\n"
	txOnly := "name: t\nstages:\n  - {name: out, type: tx, port: sink}\n"
	macswap := "name: m\nstages:\n  - {name: parse, type: parse}\n  - {name: swap, type: rewrite, swap_macs: true}\n  - {name: out, type: tx, port: sink}\n"
	def := "name: d\nstages:\n  - {name: parse, type: parse}\n" +
		"  - {name: acl, type: filter, rules: [{class: malformed, action: \"drop:malformed\"}, {proto: tcp, dst_port: 23, action: \"drop:telnet\"}]}\n" +
		"  - {name: nat, type: rewrite, snat: {addr: 198.51.100.1, port: 4000}}\n" +
		"  - {name: flows, type: count, by: [protocol, vlan]}\n  - {name: out, type: tx, port: sink}\n"
	b.Run("parse/inline", func(b *testing.B) { benchReplay(b, mustLoad(b, parse), 0) })
	b.Run("macswap/inline", func(b *testing.B) { benchReplay(b, mustLoad(b, macswap), 0) })
	b.Run("default-shape/inline", func(b *testing.B) { benchReplay(b, mustLoad(b, def), 0) })
	b.Run("default-shape/1worker", func(b *testing.B) { benchReplay(b, mustLoad(b, def), 1) })
	// The I/O loop's own cost in worker mode: the worker only transmits,
	// so the handoff, completion, transmit and recycle set the pace.
	b.Run("tx-only/1worker", func(b *testing.B) { benchReplay(b, mustLoad(b, txOnly), 1) })
	b.Run("default-1k/inline", func(b *testing.B) { benchReplay(b, mustLoad(b, benchDefault1k()), 0) })
	b.Run("embedded-default/stream", benchDefaultStream)
}

// benchDefaultStream runs the embedded default pipeline as `warpctl
// replay` does: mixed.pcap streamed from the file (read and copied into
// frames on every pass, b.N passes), one worker, null outputs.
func benchDefaultStream(b *testing.B) {
	g, err := pipelines.Default()
	if err != nil {
		b.Fatal(err)
	}
	runReplayBench(b, ReplayConfig{Capture: "../testdata/captures/mixed.pcap", Graph: g, Engine: DefaultOptions(), Replay: DefaultReplayOptions()})
}

// benchDefault1k is internal/bench's RowDefault1k pipeline (parse, a
// 1000-rule filter the bench traffic misses, SNAT plus MAC swap, count by
// protocol), so that the bench's target row can be profiled through the
// whole engine with go test.
func benchDefault1k() string { return benchshape.Default("d1k", 1000) }
