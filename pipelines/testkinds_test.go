package pipelines

import (
	"testing"

	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/rings"
	"go.yaml.in/yaml/v3"
)

// Test-only stage kinds, so the compiler and the executor are tested
// without depending on the real stages.
func tkKinds() map[string]Kind {
	return map[string]Kind{
		// t_parity: even Seq to next (edge 0), odd Seq to `odd` (edge 1).
		"t_parity": {Name: "t_parity", Build: tkBuildParity},
		// t_mod: Seq % len(to) picks the edge; `to` lists the targets.
		"t_mod": {Name: "t_mod", Build: tkBuildMod},
		// t_mark: adds 1 to Meta.Hash and goes to next; reports a counter.
		"t_mark": {Name: "t_mark", Build: tkBuildMark},
		// t_bad: packets with Seq%3 == 0 take edge 7, which it does not have.
		"t_bad": {Name: "t_bad", Build: tkBuildBad},
		// t_sample: registers a sampler and sets its bit on every packet.
		"t_sample": {Name: "t_sample", Build: tkBuildSample},
		// t_panic: a Build with a bug.
		"t_panic": {Name: "t_panic", Build: func(c *BuildContext) Template { panic("boom") }},
		// t_noedges: a template without edges (a kind bug).
		"t_noedges": {Name: "t_noedges", Build: func(c *BuildContext) Template {
			c.Decode(&struct{}{})
			return &tkTmpl{mk: func() Stage { return tkNop{} }}
		}},
		// t_stub: a kind not written yet.
		"t_stub": {Name: "t_stub"},
	}
}

type tkTmpl struct {
	edges []Target
	mk    func() Stage
}

func (t *tkTmpl) Edges() []Target    { return t.edges }
func (t *tkTmpl) NewInstance() Stage { return t.mk() }

type tkNop struct{}

func (tkNop) Process(b *rings.Batch, idx []uint16, next []Edge) {
	for k := range next {
		next[k] = 0
	}
}

// tkNext returns the stage's next edge, or records the error the way the
// real stages do (Compile reports the same error, and keeps one copy).
func tkNext(c *BuildContext) (Target, bool) {
	t, ok := c.Next()
	if !ok {
		c.Errorf(nil, "last stage has no next edge")
	}
	return t, ok
}

func tkBuildParity(c *BuildContext) Template {
	var o struct {
		Odd yaml.Node `yaml:"odd"`
	}
	if !c.Decode(&o) {
		return nil
	}
	if o.Odd.Kind == 0 {
		c.Errorf(nil, "odd: required")
		return nil
	}
	odd, ok := c.ParseTarget(o.Odd.Value, &o.Odd)
	next, nok := tkNext(c)
	if !ok || !nok {
		return nil
	}
	return &tkTmpl{edges: []Target{next, odd}, mk: func() Stage { return tkParity{} }}
}

type tkParity struct{}

func (tkParity) Process(b *rings.Batch, idx []uint16, next []Edge) {
	for k, i := range idx {
		next[k] = Edge(b.Meta[i].Seq & 1)
	}
}

func tkBuildMod(c *BuildContext) Template {
	var o struct {
		To []yaml.Node `yaml:"to"`
	}
	if !c.Decode(&o) {
		return nil
	}
	var edges []Target
	for i := range o.To {
		t, ok := c.ParseTarget(o.To[i].Value, &o.To[i])
		if !ok {
			return nil
		}
		edges = append(edges, t)
	}
	if len(edges) == 0 {
		c.Errorf(nil, "to: want at least one target")
		return nil
	}
	n := uint64(len(edges))
	return &tkTmpl{edges: edges, mk: func() Stage { return tkMod{n} }}
}

type tkMod struct{ n uint64 }

func (s tkMod) Process(b *rings.Batch, idx []uint16, next []Edge) {
	for k, i := range idx {
		next[k] = Edge(b.Meta[i].Seq % s.n)
	}
}

func tkBuildMark(c *BuildContext) Template {
	if !c.Decode(&struct{}{}) {
		return nil
	}
	next, ok := tkNext(c)
	if !ok {
		return nil
	}
	return &tkCountedTmpl{tkTmpl{edges: []Target{next}, mk: func() Stage { return &tkMark{} }}}
}

// tkCountedTmpl is a tkTmpl whose instances keep t_mark's counter.
type tkCountedTmpl struct{ tkTmpl }

func (t *tkCountedTmpl) Counters() *counters.Layout { return tkMarkLayout }

var tkMarkLayout = counters.NewLayout(counters.Single(counters.Decl{Name: "marked", Unit: "packets", Bytes: true, Help: "Packets t_mark marked."}))

type tkMark struct{ packets, bytes uint64 }

func (s *tkMark) Process(b *rings.Batch, idx []uint16, next []Edge) {
	for k, i := range idx {
		b.Meta[i].Hash++
		s.packets++
		s.bytes += uint64(b.Descs[i].Len)
		next[k] = 0
	}
}

func (s *tkMark) Report(dst []counters.Value) {
	dst[0].Value += s.packets
	dst[0].Bytes += s.bytes
}

func tkBuildBad(c *BuildContext) Template {
	if !c.Decode(&struct{}{}) {
		return nil
	}
	next, ok := tkNext(c)
	if !ok {
		return nil
	}
	return &tkTmpl{edges: []Target{next}, mk: func() Stage { return tkBad{} }}
}

type tkBad struct{}

func (tkBad) Process(b *rings.Batch, idx []uint16, next []Edge) {
	for k, i := range idx {
		next[k] = 0
		if b.Meta[i].Seq%3 == 0 {
			next[k] = 7
		}
	}
}

func tkBuildSample(c *BuildContext) Template {
	var o struct {
		Every uint64 `yaml:"every"`
		File  string `yaml:"file"`
		As    string `yaml:"as"` // SamplerInfo.Stage, when not the stage's name
	}
	if !c.Decode(&o) {
		return nil
	}
	bit := c.AddSampler(SamplerInfo{Stage: o.As, Mode: "every", N: o.Every, File: o.File})
	next, ok := tkNext(c)
	if !ok || bit < 0 {
		return nil
	}
	mask := uint32(1) << bit
	return &tkTmpl{edges: []Target{next}, mk: func() Stage { return tkSample{mask} }}
}

type tkSample struct{ mask uint32 }

func (s tkSample) Process(b *rings.Batch, idx []uint16, next []Edge) {
	for k, i := range idx {
		b.Meta[i].SampleMask |= s.mask
		next[k] = 0
	}
}

// tkLoad compiles a config with the test kinds.
func tkLoad(t testing.TB, src string) *Graph {
	t.Helper()
	g, err := loadWith("test.yaml", []byte(src), tkKinds())
	if err != nil {
		t.Fatalf("load:\n%v", err)
	}
	return g
}

// tkBatch returns a batch of n packets with Seq 0..n-1 and Len 60+i.
func tkBatch(t testing.TB, capacity, n int) *rings.Batch {
	t.Helper()
	a, err := rings.NewArena(rings.ArenaOptions{Frames: 16, FrameSize: 2048, Headroom: 0})
	if err != nil {
		t.Fatal(err)
	}
	b := rings.NewBatch(capacity, a)
	tkFill(b, n)
	return b
}

func tkFill(b *rings.Batch, n int) {
	b.SetLen(n)
	for i := 0; i < n; i++ {
		b.Descs[i] = rings.Desc{Addr: uint64(i%16) * 2048, Len: uint32(60 + i)}
		b.Meta[i] = rings.Meta{Seq: uint64(i)}
	}
}
