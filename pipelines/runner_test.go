package pipelines

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/rings"
)

const runnerConfig = `name: runner
settings: {batch_size: 64}
stages:
  - {name: mark, type: t_mark}
  - {name: par, type: t_parity, odd: split}
  - {name: even, type: tx, port: even0}
  - {name: split, type: t_mod, to: [odd1, "drop:odd3", bye]}
  - {name: odd1, type: tx, port: odd0}
  - {name: bye, type: pass}
`

// wantRoute is where runnerConfig sends packet seq.
func wantRoute(g *Graph, seq uint64) (rings.Verdict, uint16) {
	if seq%2 == 0 {
		return rings.VerdictTX, uint16(indexOf(g.ports, "even0"))
	}
	switch seq % 3 {
	case 0:
		return rings.VerdictTX, uint16(indexOf(g.ports, "odd0"))
	case 1:
		return rings.VerdictDrop, uint16(indexOf(g.reasons, "odd3"))
	}
	return rings.VerdictPass, 0
}

func TestRunnerRoutes(t *testing.T) {
	g := tkLoad(t, runnerConfig)
	for _, n := range []int{0, 1, 2, 63, 64, 65, 200, 1024} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			r := g.NewRunner(RunnerOptions{})
			b := tkBatch(t, rings.MaxBatch, n)
			r.Process(b)
			for i := 0; i < n; i++ {
				m := b.Meta[i]
				v, tg := wantRoute(g, m.Seq)
				if m.Verdict != v || m.Target != tg {
					t.Fatalf("packet %d: verdict %d target %d, want %d %d", i, m.Verdict, m.Target, v, tg)
				}
				if m.Hash != 1 {
					t.Fatalf("packet %d went through mark %d times", i, m.Hash)
				}
			}
			// Every node's packets: the ones routed to it.
			st := r.Stats(nil)
			counts := map[string]uint64{}
			for i := 0; i < n; i++ {
				counts["mark"]++
				counts["par"]++
				if i%2 == 0 {
					counts["even"]++
					continue
				}
				counts["split"]++
				counts[[]string{"odd1", "drop:odd3", "bye"}[i%3]]++
			}
			for _, s := range st {
				if s.Packets != counts[s.Name] {
					t.Errorf("%s: %d packets, want %d", s.Name, s.Packets, counts[s.Name])
				}
			}
		})
	}
}

func TestRunnerStatsAndCounters(t *testing.T) {
	g := tkLoad(t, runnerConfig)
	r := g.NewRunner(RunnerOptions{Timing: true})
	b := tkBatch(t, 64, 64)
	var wantBytes uint64
	for i := range b.Descs {
		wantBytes += uint64(b.Descs[i].Len)
	}
	for range 3 {
		fillBatch3(b)
		r.Process(b)
	}
	st := r.Stats(nil)
	if len(st) != len(g.Stages()) {
		t.Fatalf("%d stats for %d nodes", len(st), len(g.Stages()))
	}
	for i, s := range st {
		if s.Name != g.Stages()[i].Name || s.Kind != g.Stages()[i].Kind {
			t.Errorf("stats[%d] = %s/%s, want %s/%s", i, s.Name, s.Kind, g.Stages()[i].Name, g.Stages()[i].Kind)
		}
	}
	mark := st[0]
	if mark.Calls != 3 || mark.Packets != 3*64 || mark.Bytes != 3*wantBytes || mark.Nanos == 0 {
		t.Errorf("mark stats = %+v", mark)
	}
	if bad := st[len(st)-1]; bad.Name != "drop:"+BadEdgeReason || bad.Packets != 0 || bad.Calls != 0 {
		t.Errorf("bad-edge stats = %+v", bad)
	}
	got := runnerList(r, false)
	want := []StageCounter{{Stage: "mark", Counter: Counter{Key: "marked", Packets: 3 * 64, Bytes: 3 * wantBytes}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Counters = %+v, want %+v", got, want)
	}

	// Two runners' sums.
	r2 := g.NewRunner(RunnerOptions{})
	fillBatch3(b)
	r2.Process(b)
	sum := SumStats(SumStats(nil, st), r2.Stats(nil))
	if sum[0].Packets != 4*64 || sum[0].Calls != 4 || len(sum) != len(st) {
		t.Errorf("SumStats mark = %+v (len %d)", sum[0], len(sum))
	}
	// Two runners' stage counters add up in the stage's layout.
	l := g.Stages()[0].Counters
	sc := make([]counters.Value, l.Len())
	r.Counters(0, sc)
	r2.Counters(0, sc)
	if sc[0].Value != 4*64 {
		t.Errorf("two runners' counters = %+v", sc)
	}
	// Merging by name when the order differs.
	other := []NodeStats{{Name: "new", Packets: 1}, {Name: "mark", Packets: 1}}
	sum = SumStats(sum, other)
	if sum[0].Packets != 4*64+1 || sum[len(sum)-1].Name != "new" {
		t.Errorf("SumStats by name: %+v", sum)
	}
}

func fillBatch3(b *rings.Batch) { tkFill(b, b.Cap()) }

func TestRunnerBadEdge(t *testing.T) {
	g := tkLoad(t, `name: p
stages:
  - {name: bad, type: t_bad}
  - {name: out, type: tx, port: p0}
`)
	r := g.NewRunner(RunnerOptions{})
	for _, n := range []int{1, 3, 64} { // 1: all bad (fast path); 3, 64: mixed
		b := tkBatch(t, 64, n)
		r.Process(b)
		bad := uint16(indexOf(g.Reasons(), BadEdgeReason))
		for i := 0; i < n; i++ {
			m := b.Meta[i]
			if i%3 == 0 {
				if m.Verdict != rings.VerdictDrop || m.Target != bad {
					t.Errorf("n=%d packet %d: verdict %d/%d, want bad-edge drop", n, i, m.Verdict, m.Target)
				}
			} else if m.Verdict != rings.VerdictTX || m.Target != 0 {
				t.Errorf("n=%d packet %d: verdict %d/%d, want tx", n, i, m.Verdict, m.Target)
			}
		}
	}
	st := r.Stats(nil)
	if last := st[len(st)-1]; last.Packets != 1+1+22 {
		t.Errorf("bad-edge node counted %d packets, want 24", last.Packets)
	}
}

// TestRunnerFastPathAppends: when a node's packets all take one edge but the
// successor already holds packets from another node, they are appended.
func TestRunnerFastPathAppends(t *testing.T) {
	g := tkLoad(t, `name: p
stages:
  - {name: par, type: t_parity, odd: m2}
  - {name: m1, type: t_mark, next: join}
  - {name: m2, type: t_mark, next: join}
  - {name: join, type: t_mark}
  - {name: out, type: tx, port: p0}
`)
	r := g.NewRunner(RunnerOptions{})
	b := tkBatch(t, 64, 10)
	r.Process(b)
	for i := 0; i < 10; i++ {
		if m := b.Meta[i]; m.Hash != 2 || m.Verdict != rings.VerdictTX {
			t.Errorf("packet %d: hash %d verdict %d", i, m.Hash, m.Verdict)
		}
	}
	for _, s := range r.Stats(nil) {
		if s.Name == "join" && (s.Packets != 10 || s.Calls != 1) {
			t.Errorf("join: %+v", s)
		}
	}
}

func TestRunnerSampler(t *testing.T) {
	g := tkLoad(t, "name: p\nstages:\n"+tkSamplerChain(3))
	if got := len(g.Samplers()); got != 3 {
		t.Fatalf("%d samplers", got)
	}
	for i, s := range g.Samplers() {
		if s.Stage != fmt.Sprintf("s%d", i) || s.N != uint64(i+1) || s.Mode != "every" {
			t.Errorf("sampler %d = %+v", i, s)
		}
	}
	r := g.NewRunner(RunnerOptions{})
	b := tkBatch(t, 64, 5)
	r.Process(b)
	if b.Meta[4].SampleMask != 0b111 || b.Meta[4].Verdict != rings.VerdictPass {
		t.Errorf("meta = %+v", b.Meta[4])
	}
}

// TestRunnerTerminalEntry: a graph that is one terminal still gives every
// packet a verdict.
func TestRunnerTerminalEntry(t *testing.T) {
	g := tkLoad(t, "name: p\nstages: [{name: d, type: drop, reason: all}]\n")
	r := g.NewRunner(RunnerOptions{})
	b := tkBatch(t, 64, 64)
	r.Process(b)
	for i := range b.Meta {
		if b.Meta[i].Verdict != rings.VerdictDrop || b.Meta[i].Target != 0 {
			t.Fatalf("packet %d: %+v", i, b.Meta[i])
		}
	}
}

func TestRunnerZeroAllocs(t *testing.T) {
	g := tkLoad(t, runnerConfig)
	for _, timing := range []bool{false, true} {
		r := g.NewRunner(RunnerOptions{Timing: timing})
		b := tkBatch(t, 256, 256) // more than the batch size: sliced
		n := allocs.Count(200, func() {
			fillBatch3(b)
			r.Process(b)
		})
		if n != 0 {
			t.Errorf("timing=%v: %d allocations in 200 batches, want 0", timing, n)
		}
	}
}

// BenchmarkRunner measures the executor's own cost per packet: test stages
// that do almost nothing, so the time is the graph's gather/scatter,
// counting and verdict writing.
func BenchmarkRunner(b *testing.B) {
	cases := []struct{ name, src string }{
		{"chain4", `name: p
stages:
  - {name: a, type: t_mark}
  - {name: b, type: t_mark}
  - {name: c, type: t_mark}
  - {name: d, type: t_mark}
  - {name: out, type: tx, port: p0}
`},
		{"branchy", runnerConfig},
	}
	for _, c := range cases {
		for _, timing := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/timing=%v", c.name, timing), func(b *testing.B) {
				g := tkLoad(b, c.src)
				r := g.NewRunner(RunnerOptions{Timing: timing})
				batch := tkBatch(b, 64, 64)
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					r.Process(batch)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*64), "ns/pkt")
			})
		}
	}
}

func TestRunnerNodesCount(t *testing.T) {
	g := tkLoad(t, runnerConfig)
	var names []string
	for _, s := range g.Stages() {
		names = append(names, s.Name)
	}
	want := "mark par even split odd1 bye drop:odd3 drop:" + BadEdgeReason
	if got := strings.Join(names, " "); got != want {
		t.Errorf("nodes = %s, want %s", got, want)
	}
}

// TestRunnerBytesAfterResize checks that a node's bytes are its packets'
// lengths as they arrive: after a stage that pushes a VLAN tag on the odd
// packets, both on the whole-vector path and the per-packet one.
func TestRunnerBytesAfterResize(t *testing.T) {
	g := tkLoad(t, `name: p
stages:
  - {name: mark, type: t_mark}
  - {name: push, type: rewrite, push_vlan: 7}
  - {name: par, type: t_parity, odd: odd}
  - {name: even, type: t_mark, next: out}
  - {name: odd, type: rewrite, push_vlan: 9}
  - {name: out, type: tx, port: p0}
`)
	a, err := rings.NewArena(rings.ArenaOptions{Frames: 64, FrameSize: 2048, Headroom: 64})
	if err != nil {
		t.Fatal(err)
	}
	b := rings.NewBatch(64, a)
	var in, odd uint64
	for i := 0; i < 64; i++ {
		addr, _ := a.Alloc()
		b.Append(rings.Desc{Addr: addr, Len: uint32(60 + i)}, uint64(i), 0)
		in += uint64(60 + i)
		if i%2 == 1 {
			odd += uint64(60 + i)
		}
	}
	r := g.NewRunner(RunnerOptions{})
	r.Process(b)
	want := map[string]uint64{
		"mark": in, "push": in, "par": in + 4*64,
		"even": in + 4*64 - (odd + 4*32), "odd": odd + 4*32,
		"out": in + 4*64 + 4*32,
	}
	for _, s := range r.Stats(nil) {
		if w, ok := want[s.Name]; ok && s.Bytes != w {
			t.Errorf("%s: %d bytes, want %d", s.Name, s.Bytes, w)
		}
	}
}

// TestRunnerBytesCarriedByLengthKeepers checks node bytes on a graph whose
// stages keep lengths (their vector's sum is carried, not summed again)
// mixed with ones that change them, on every scatter path: whole vector
// handed over (parse, count), appended to a non-empty vector (both
// branches meet at out), and per packet (par). Two batches, so a carried
// sum left over from the first would show.
func TestRunnerBytesCarriedByLengthKeepers(t *testing.T) {
	g := tkLoad(t, `name: p
stages:
  - {name: parse, type: parse}
  - {name: swap, type: rewrite, swap_macs: true}
  - {name: par, type: t_parity, odd: odd}
  - {name: even, type: rewrite, push_vlan: 7}
  - {name: flows, type: count, next: out}
  - {name: odd, type: count}
  - {name: out, type: tx, port: p0}
`)
	for _, n := range []string{"parse", "swap", "flows", "odd"} {
		if !g.NewRunner(RunnerOptions{}).nodes[indexOfNode(t, g, n)].keepsLen {
			t.Fatalf("%s does not keep lengths", n)
		}
	}
	if g.NewRunner(RunnerOptions{}).nodes[indexOfNode(t, g, "even")].keepsLen {
		t.Fatal("a push_vlan rewrite claims to keep lengths")
	}
	a, err := rings.NewArena(rings.ArenaOptions{Frames: 64, FrameSize: 2048, Headroom: 64})
	if err != nil {
		t.Fatal(err)
	}
	r := g.NewRunner(RunnerOptions{})
	want := map[string]uint64{}
	for batch := range 2 {
		b := rings.NewBatch(64, a)
		var in, odd uint64
		for i := 0; i < 64; i++ {
			l := uint64(60 + i + batch*7)
			b.Append(rings.Desc{Addr: uint64(i)*2048 + 64, Len: uint32(l)}, uint64(i), 0)
			in += l
			if i%2 == 1 {
				odd += l
			}
		}
		even := in - odd
		for k, v := range map[string]uint64{
			"parse": in, "swap": in, "par": in, "even": even, "odd": odd,
			"flows": even + 4*32, "out": in + 4*32,
		} {
			want[k] += v
		}
		r.Process(b)
		stats := r.Stats(nil)
		for _, s := range stats {
			if w, ok := want[s.Name]; ok && s.Bytes != w {
				t.Errorf("batch %d: %s: %d bytes, want %d", batch, s.Name, s.Bytes, w)
			}
		}
		// Per-edge bytes: what leaves by the edges into a node is what
		// that node counted arriving.
		into := map[string]uint64{}
		for i, s := range stats {
			if len(s.EdgeBytes) != len(s.Edges) {
				t.Fatalf("%s: %d edge byte counts for %d edges", s.Name, len(s.EdgeBytes), len(s.Edges))
			}
			for e, n := range s.EdgeBytes {
				into[g.Stages()[i].Edges[e]] += n
			}
		}
		for _, s := range stats {
			if s.Name != "parse" && into[s.Name] != s.Bytes {
				t.Errorf("batch %d: edges into %s carried %d bytes, it counted %d", batch, s.Name, into[s.Name], s.Bytes)
			}
		}
	}
}

func indexOfNode(t *testing.T, g *Graph, name string) int {
	t.Helper()
	for i := range g.nodes {
		if g.nodes[i].name == name {
			return i
		}
	}
	t.Fatalf("no node %s", name)
	return -1
}

// TestRunnerOutcome: the runner summarises a batch whose packets all ended
// at one terminal with no sample mark (verdict, target, total bytes as they
// arrived there), and leaves no summary when they split, when a sampler
// saw them, or once the batch changes.
func TestRunnerOutcome(t *testing.T) {
	lenSum := func(n, extra int) uint64 {
		var s uint64
		for i := 0; i < n; i++ {
			s += uint64(60 + i + extra)
		}
		return s
	}
	for _, tc := range []struct {
		name   string
		src    string
		n      int // packets; 80 runs in two chunks of the graph's batch size 64
		valid  bool
		target uint16
		bytes  uint64
	}{
		{"linear", "name: p\nstages:\n  - {name: m, type: t_mark}\n  - {name: out, type: tx, port: p0}\n", 64, true, 0, lenSum(64, 0)},
		{"two chunks", "name: p\nstages:\n  - {name: m, type: t_mark}\n  - {name: out, type: tx, port: p0}\n", 80, true, 0, lenSum(80, 0)},
		{"resized on the way", "name: p\nstages:\n  - {name: parse, type: parse}\n  - {name: tag, type: rewrite, push_vlan: 7}\n  - {name: out, type: tx, port: p0}\n", 64, true, 0, lenSum(64, 4)},
		{"second port", "name: p\nstages:\n  - {name: par, type: t_parity, odd: b}\n  - {name: a, type: tx, port: p0}\n  - {name: b, type: tx, port: p1}\n", 1, true, 0, lenSum(1, 0)},
		{"split", "name: p\nstages:\n  - {name: par, type: t_parity, odd: b}\n  - {name: a, type: tx, port: p0}\n  - {name: b, type: tx, port: p1}\n", 64, false, 0, 0},
		{"sampled", "name: p\nstages:\n  - {name: s, type: sample, every: 2, file: s.pcap}\n  - {name: out, type: tx, port: p0}\n", 64, false, 0, 0},
		{"sampler named otherwise", "name: p\nstages:\n  - {name: s, type: t_sample, every: 2, file: s.pcap, as: mirror}\n  - {name: out, type: tx, port: p0}\n", 64, false, 0, 0},
	} {
		g := tkLoad(t, tc.src)
		a, err := rings.NewArena(rings.ArenaOptions{Frames: 128, FrameSize: 2048, Headroom: 64})
		if err != nil {
			t.Fatal(err)
		}
		b := rings.NewBatch(128, a)
		for i := 0; i < tc.n; i++ {
			b.Append(rings.Desc{Addr: uint64(i)*2048 + 64, Len: uint32(60 + i)}, uint64(i), 0)
		}
		g.NewRunner(RunnerOptions{}).Process(b)
		o := b.Outcome
		if o.Valid != tc.valid {
			t.Fatalf("%s: outcome %+v, want valid=%v", tc.name, o, tc.valid)
		}
		if !tc.valid {
			continue
		}
		if o.Verdict != rings.VerdictTX || o.Target != tc.target || o.Bytes != tc.bytes {
			t.Fatalf("%s: outcome %+v, want tx to port %d, %d bytes", tc.name, o, tc.target, tc.bytes)
		}
		for i := range b.Meta {
			if b.Meta[i].Verdict != o.Verdict || b.Meta[i].Target != o.Target {
				t.Fatalf("%s: packet %d has verdict %v/%d, the outcome says %v/%d", tc.name, i, b.Meta[i].Verdict, b.Meta[i].Target, o.Verdict, o.Target)
			}
		}
		b.Append(rings.Desc{Len: 60}, 999, 0)
		if b.Outcome.Valid {
			t.Fatalf("%s: outcome still valid after Append", tc.name)
		}
	}
}

// TestSumStatsEdges: SumStats adds edge counts by position, grows a
// shorter list, and never writes into src.
func TestSumStatsEdges(t *testing.T) {
	a := []NodeStats{
		{Name: "n", Packets: 3, Edges: []uint64{1, 2}, EdgeBytes: []uint64{60, 120}},
		{Name: "m", Packets: 1, Edges: []uint64{1}, EdgeBytes: []uint64{60}},
	}
	b := []NodeStats{
		{Name: "n", Packets: 4, Edges: []uint64{3, 1}, EdgeBytes: []uint64{180, 70}},
		{Name: "m", Packets: 2, Edges: []uint64{1, 1}, EdgeBytes: []uint64{60, 70}},
	}
	sum := SumStats(nil, a)
	sum = SumStats(sum, b)
	want := []NodeStats{
		{Name: "n", Packets: 7, Edges: []uint64{4, 3}, EdgeBytes: []uint64{240, 190}},
		{Name: "m", Packets: 3, Edges: []uint64{2, 1}, EdgeBytes: []uint64{120, 70}},
	}
	if !reflect.DeepEqual(sum, want) {
		t.Fatalf("SumStats = %+v, want %+v", sum, want)
	}
	if !reflect.DeepEqual(a[0].Edges, []uint64{1, 2}) || !reflect.DeepEqual(a[0].EdgeBytes, []uint64{60, 120}) {
		t.Fatalf("SumStats wrote into its first src: %+v", a[0])
	}
}

// TestAllEqual: every length up to a few words, all equal and with each
// single position different (so both of allEqual's loops see a mismatch
// at every place).
func TestAllEqual(t *testing.T) {
	for n := 0; n <= 40; n++ {
		next := make([]Edge, n)
		for k := range next {
			next[k] = 3
		}
		if !allEqual(next, 3) {
			t.Fatalf("%d equal edges: allEqual false", n)
		}
		for k := range next {
			next[k] = 4
			if allEqual(next, 3) {
				t.Fatalf("%d edges, position %d differs: allEqual true", n, k)
			}
			next[k] = 3
		}
	}
}
