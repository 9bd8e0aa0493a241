package pipelines

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/internal/benchshape"
	"github.com/warpflow/warpflow/rings"
)

// shapePipeline is internal/bench's default-shape pipeline (parse, a
// rules-long filter that the bench traffic misses, SNAT plus MAC swap,
// count by protocol), so the stages' share of the bench's target row can be
// measured and profiled without the engine.
func shapePipeline(rules int) string { return benchshape.Default("shape", rules) }

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
// packet's header in the same few cache sets). With CHUNK=N the runner takes
// each batch of 64 through the graph in slices of N (settings.batch_size
// N): the stages' passes then stay within fewer cache lines, at the cost of
// more calls (measured slower at 32 and 16, BENCHMARKS.md).
func BenchmarkDefaultShape(b *testing.B) {
	src := shapePipeline(1000)
	if c := os.Getenv("CHUNK"); c != "" {
		src = strings.Replace(src, "name: shape\n", "name: shape\nsettings: {batch_size: "+c+"}\n", 1)
	}
	g, err := Load("shape.yaml", []byte(src))
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

// BenchmarkDefaultShapeFused is BenchmarkDefaultShape as one pass per
// packet instead of one pass per stage: the same stage instances' work
// (parse's decoder, the filter's pre-gates and trees, the NAT rewrite on a
// one-packet vector, the protocol count) for each packet in turn before
// the next. It is a sketch of stage fusion with no runner bookkeeping at
// all, kept so that the comparison in BENCHMARKS.md can be rerun: on the
// dev machine it is slower than the vector runner, because each stage's
// loop keeps its own constants in registers and overlaps many packets,
// where the fused loop's body is too large for either.
func BenchmarkDefaultShapeFused(b *testing.B) {
	g, err := Load("shape.yaml", []byte(shapePipeline(1000)))
	if err != nil {
		b.Fatal(err)
	}
	a, descs := shapeCapture(b, false)
	r := g.NewRunner(RunnerOptions{})
	var (
		ps *parseStage
		fs *filterStage
		rs *rewriteStage
		cs *countStage
	)
	for i := range r.nodes {
		switch s := r.nodes[i].stage.(type) {
		case *parseStage:
			ps = s
		case *filterStage:
			fs = s
		case *rewriteStage:
			rs = s
		case *countStage:
			cs = s
		}
	}
	if ps == nil || fs == nil || rs == nil || cs == nil || rs.cfg.ops&^rwNAT4Ops != 0 {
		b.Fatal("shape pipeline without its parse, filter, NAT rewrite and count stages")
	}
	batch := rings.NewBatch(64, a)
	var next [1]Edge
	var one [1]uint16
	c := fs.t.cls
	b.ReportAllocs()
	for b.Loop() {
		for start := 0; start < len(descs); start += 64 {
			batch.Clear()
			for k, d := range descs[start:min(start+64, len(descs))] {
				batch.Append(d, uint64(start+k), 0)
			}
			for k := range batch.Descs {
				m := &batch.Meta[k]
				p := batch.Packet(k)
				if !decodeFast(p, m, ps.tunnels) {
					resetParsed(m)
					m.Class = decodeEthernet(p, m, ps.tunnels)
				}
				// The pre-gates on this packet alone (prePassMeta's key
				// array costs more), then the trees if one passed.
				hit := uint64(0)
				for gi := range c.pre {
					g := &c.pre[gi]
					x := min((keyDim(m, g.dim)-g.base)>>(g.shift&63), uint64(g.nbits))
					hit |= c.gateBits[uint64(g.off)+x>>6] >> (x & 63)
				}
				if (len(c.pre) == 0 || hit&1 != 0) && fs.t.ruleEdge[c.lookupTrees(m)] != 0 {
					continue
				}
				one[0] = uint16(k)
				rs.processNAT4(batch, one[:], next[:])
				n := uint64(batch.Descs[k].Len)
				proto := countProtoNone
				if m.Flags&(rings.FlagIPv4|rings.FlagIPv6) != 0 {
					proto = int(m.IPProto)
				}
				cs.proto[proto].packets++
				cs.proto[proto].bytes += n
				cs.total.packets++
				cs.total.bytes += n
				m.Verdict = rings.VerdictTX
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(descs)), "ns/pkt")
	if cs.total.packets != uint64(b.N*len(descs)) {
		b.Fatalf("count saw %d packets, want %d", cs.total.packets, b.N*len(descs))
	}
}
