package pipelines

import (
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/rings"
)

// shapePipeline is internal/bench's default-shape pipeline (parse, a
// rules-long filter that the bench traffic misses, SNAT plus MAC swap,
// count by protocol), so the stages' share of the bench's target row can be
// measured and profiled without the engine.
func shapePipeline(rules int) string {
	var sb strings.Builder
	sb.WriteString("name: shape\nstages:\n  - {name: parse, type: parse}\n" +
		"  - name: acl\n    type: filter\n    default: accept\n    rules:\n" +
		"      - {class: malformed, action: \"drop:malformed\"}\n")
	for i := 1; i < rules; i++ {
		switch i % 4 {
		case 0:
			fmt.Fprintf(&sb, "      - {proto: tcp, src: 198.18.%d.%d/32, dst_port: %d, action: \"drop:r%d\"}\n", (i/256)%256, i%256, 1+i%60000, i%8)
		case 1:
			fmt.Fprintf(&sb, "      - {proto: udp, src: 198.19.%d.0/24, dst_port: %d-%d, action: \"drop:r%d\"}\n", i%256, 2000+i%1000, 2100+i%1000, i%8)
		case 2:
			fmt.Fprintf(&sb, "      - {dst: 203.0.%d.%d/32, action: \"drop:r%d\"}\n", (i/256)%256, i%256, i%8)
		case 3:
			fmt.Fprintf(&sb, "      - {src: \"2001:db8:%x::/48\", dst_port: %d, action: \"drop:r%d\"}\n", i, 1+i%60000, i%8)
		}
	}
	sb.WriteString("  - {name: nat, type: rewrite, swap_macs: true, snat: {addr: 198.51.100.1, port: 4000}}\n" +
		"  - {name: flows, type: count, by: [protocol]}\n  - {name: out, type: tx, port: sink}\n")
	return sb.String()
}

// shapeCapture loads the bench capture into frames of a fresh arena and
// returns their descriptors.
func shapeCapture(tb testing.TB, spread bool) (*rings.Arena, []rings.Desc) {
	tb.Helper()
	c, done, err := ptOpenCapture("../testdata/captures/bench-64.pcap")
	if err != nil {
		tb.Fatal(err)
	}
	defer done()
	a, err := rings.NewArena(rings.ArenaOptions{Frames: 8192, FrameSize: 2048, Headroom: 256})
	if err != nil {
		tb.Fatal(err)
	}
	var descs []rings.Desc
	for {
		p, _, err := c.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			tb.Fatal(err)
		}
		addr, ok := a.Alloc()
		if !ok {
			tb.Fatal("arena exhausted")
		}
		if spread {
			addr += uint64(len(descs)%24) * 64
		}
		copy(a.Frame(addr)[addr&2047:], p)
		descs = append(descs, rings.Desc{Addr: addr, Len: uint32(len(p))})
	}
	return a, descs
}

// BenchmarkDefaultShape runs the bench capture (4096 64-byte UDP/IPv4
// frames) through the default-shape pipeline with a 1000-rule filter, in
// batches of 64 refilled the way a port fills them, one pass per op. With
// SPREAD=1 in the environment each packet starts at a different 64-byte
// line of its frame (frame-placement experiments: 2 KiB frames put every
// packet's header in the same few cache sets).
func BenchmarkDefaultShape(b *testing.B) {
	g, err := Load("shape.yaml", []byte(shapePipeline(1000)))
	if err != nil {
		b.Fatal(err)
	}
	a, descs := shapeCapture(b, os.Getenv("SPREAD") != "")
	r := g.NewRunner(RunnerOptions{})
	batch := rings.NewBatch(64, a)
	b.ReportAllocs()
	for b.Loop() {
		for start := 0; start < len(descs); start += 64 {
			batch.Clear()
			for k, d := range descs[start:min(start+64, len(descs))] {
				batch.Append(d, uint64(start+k), 0)
			}
			r.Process(batch)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(descs)), "ns/pkt")
	st := r.Stats(nil)
	for _, s := range st {
		if s.Name == "out" && s.Packets != uint64(b.N*len(descs)) {
			b.Fatalf("out saw %d packets, want %d", s.Packets, b.N*len(descs))
		}
	}
}
