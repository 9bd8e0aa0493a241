package pipelines

import (
	"fmt"
	"testing"

	"github.com/warpflow/warpflow/internal/allocs"
)

func TestSampleBuildErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{`{every: 2, first: 3, file: a.pcap}`, "not both"},
		{`{file: a.pcap}`, "needs every: N or first: N"},
		{`{every: 0, file: a.pcap}`, "every 0: want N >= 1"},
		{`{first: -5, file: a.pcap}`, "first -5: want N >= 1"},
		{`{every: x, file: a.pcap}`, "cannot unmarshal"},
		{`{every: 10}`, "needs file"},
		{`{every: 10, file: out/a.pcap}`, `file "out/a.pcap"`},
		{`{every: 10, file: ../a.pcap}`, `file "../a.pcap"`},
		{`{every: 10, file: 'a\b.pcap'}`, `file "a\\b.pcap"`},
		{`{every: 10, file: a.pcapng}`, `file "a.pcapng"`},
		{`{every: 10, file: .pcap}`, `file ".pcap"`},
		{`{every: 10, file: .hidden.pcap}`, `file ".hidden.pcap"`},
		{`{every: 10, file: "a b.pcap"}`, `file "a b.pcap"`},
		{`{every: 10, file: a.pcap, snaplen: 96}`, `unknown option "snaplen"`},
	} {
		t.Run(tc.want, func(t *testing.T) { stWantBuildError(t, sampleKind, tc.yaml, tc.want) })
	}
}

// TestSampleRegisters builds two sample stages of one pipeline and checks
// what they register and which bit each sets.
func TestSampleRegisters(t *testing.T) {
	c1 := stContext(t, sampleKind, `{name: s1, every: 100, file: every.pcap}`, nil)
	c1.samplers = new([]SamplerInfo)
	t1 := sampleKind.Build(c1)
	c2 := stContext(t, sampleKind, `{name: s2, first: 3, file: first.pcap, next: out}`, c1)
	t2 := sampleKind.Build(c2)
	if c1.errs.Len() != 0 || t1 == nil || t2 == nil {
		t.Fatalf("build: %v", c1.errs)
	}
	want := []SamplerInfo{{Stage: "s1", Mode: "every", N: 100, File: "every.pcap"}, {Stage: "s2", Mode: "first", N: 3, File: "first.pcap"}}
	if got := *c1.samplers; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("samplers %v, want %v", got, want)
	}
	if e := t1.Edges(); len(e) != 1 || e[0].Stage != "next" {
		t.Fatalf("edges %v", e)
	}

	b := stFillBatch(t, stArena(t), stBenchPackets(t, 4))
	b.Meta[1].SampleMask = 1 << 7 // another sampler's bit stays
	next := []Edge{9, 9}
	t2.NewInstance().Process(b, []uint16{1, 3}, next)
	t1.NewInstance().Process(b, []uint16{0, 1}, next)
	if got := []uint32{b.Meta[0].SampleMask, b.Meta[1].SampleMask, b.Meta[2].SampleMask, b.Meta[3].SampleMask}; fmt.Sprint(got) != fmt.Sprint([]uint32{1, 1<<7 | 3, 0, 2}) {
		t.Fatalf("sample masks %v", got)
	}
	if next[0] != 0 || next[1] != 0 {
		t.Fatalf("edges %v, want next", next)
	}
}

func TestSampleTooMany(t *testing.T) {
	first := stContext(t, sampleKind, `{every: 1, file: s0.pcap}`, nil)
	first.samplers = new([]SamplerInfo)
	for i := 0; i < MaxSamplers; i++ {
		c := stContext(t, sampleKind, fmt.Sprintf(`{every: 1, file: s%d.pcap}`, i), first)
		if sampleKind.Build(c) == nil {
			t.Fatalf("sampler %d: %v", i, c.errs)
		}
	}
	c := stContext(t, sampleKind, `{every: 1, file: extra.pcap}`, first)
	if sampleKind.Build(c) != nil || c.errs.Len() == 0 {
		t.Fatalf("sampler %d accepted", MaxSamplers)
	}
}

func TestSampleZeroAlloc(t *testing.T) {
	st := stMustBuild(t, sampleKind, `{first: 10, file: x.pcap}`).NewInstance()
	b := stFillBatch(t, stArena(t), stBenchPackets(t, 64))
	idx, next := stDense(b.Len())
	if n := allocs.Count(100, func() { st.Process(b, idx, next) }); n != 0 {
		t.Fatalf("Process allocated %d times in 100 batches, want 0", n)
	}
	for i := range b.Meta {
		if b.Meta[i].SampleMask != 1 {
			t.Fatalf("packet %d: mask %#x", i, b.Meta[i].SampleMask)
		}
	}
}
