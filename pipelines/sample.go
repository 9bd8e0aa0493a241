package pipelines

import (
	"strings"

	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/rings"
	"go.yaml.in/yaml/v3"
)

// sampleKind is the built-in "sample" stage: it marks packets for capture.
//
// Options: exactly one of every: N (one packet in N) or first: N (the first
// N packets), N >= 1; and file: NAME.pcap, a file name inside the output
// directory (letters, digits, '_', '-', '.', no path separators, ending in
// .pcap).
//
// The stage only marks candidates: it sets its bit (the index AddSampler
// returned) in Meta.SampleMask of every packet that reaches it and takes
// edge 0, next. The engine then picks the N-th or the first N candidates
// in receive order (Meta.Seq) and writes them to the file, so the capture
// is the same for any number of workers, which per-worker counting here
// could not give.
//
// Counters: kept, the candidates the engine picked (the candidates are the
// stage's packets); the engine, which picks them, writes it (SampleKept).
var sampleKind = Kind{Name: "sample", Build: buildSample, Counters: []counters.Decl{sampleKeptDecl}}

// sampleKeptDecl is the sample stage's one counter.
var sampleKeptDecl = counters.Decl{Name: "kept", Kind: counters.Counter, Unit: "packets",
	Help: "Packets a sample stage kept (every N-th or the first N of those that reached it) for its file."}

// sampleLayout is every sample stage's counter layout.
var sampleLayout = counters.NewLayout(counters.Single(sampleKeptDecl))

// SampleKept is the index of a sample stage's kept count in its counter
// values: the engine, which picks the samples in receive order, writes it
// there (the stage's own Report adds nothing).
const SampleKept = 0

type sampleOptions struct {
	Every *int64 `yaml:"every"`
	First *int64 `yaml:"first"`
	File  string `yaml:"file"`
}

func buildSample(c *BuildContext) Template {
	var o sampleOptions
	if !c.Decode(&o) {
		return nil
	}
	ok := true
	info := SamplerInfo{Stage: c.Name, File: o.File}
	var nNode *yaml.Node
	switch {
	case o.Every != nil && o.First != nil:
		c.Errorf(c.Option("first"), "sample wants one of every and first, not both")
		ok = false
	case o.Every != nil:
		info.Mode, nNode = "every", c.Option("every")
		ok = sampleN(c, "every", *o.Every, nNode, &info) && ok
	case o.First != nil:
		info.Mode, nNode = "first", c.Option("first")
		ok = sampleN(c, "first", *o.First, nNode, &info) && ok
	default:
		c.Errorf(nil, "sample needs every: N or first: N")
		ok = false
	}
	switch f := c.Option("file"); {
	case f == nil:
		c.Errorf(nil, "sample needs file: NAME.pcap")
		ok = false
	case !validSampleFile(o.File):
		c.Errorf(f, "file %q: want a file name ending in .pcap, of letters, digits, '_', '-' and '.', without path separators", o.File)
		ok = false
	}
	next, hasNext := rwNextTarget(c)
	if !ok || !hasNext {
		return nil
	}
	k := c.AddSampler(info)
	if k < 0 {
		return nil // AddSampler recorded why
	}
	return &sampleStage{bit: 1 << uint(k), edges: []Target{next}}
}

func sampleN(c *BuildContext, key string, n int64, at *yaml.Node, info *SamplerInfo) bool {
	if n < 1 {
		c.Errorf(at, "%s %d: want N >= 1", key, n)
		return false
	}
	info.N = uint64(n)
	return true
}

// validSampleFile reports whether name is a plain .pcap file name: no
// directory part, no hidden or dot-dot names.
func validSampleFile(name string) bool {
	stem, ok := strings.CutSuffix(name, ".pcap")
	return ok && stem != "" && !strings.HasPrefix(name, ".") && validName(name)
}

// sampleStage is both the template and the instance: it keeps no state, so
// all workers share it.
type sampleStage struct {
	bit   uint32
	edges []Target
}

func (s *sampleStage) Edges() []Target { return s.edges }

func (s *sampleStage) NewInstance() Stage { return s }

// Counters implements CountedTemplate: kept, which the engine counts.
func (s *sampleStage) Counters() *counters.Layout { return sampleLayout }

// Report implements Reporter: the stage counts nothing itself.
func (s *sampleStage) Report([]counters.Value) {}

// Process implements Stage.
func (s *sampleStage) Process(b *rings.Batch, idx []uint16, next []Edge) {
	for k, i := range idx {
		b.Meta[i].SampleMask |= s.bit
		next[k] = 0
	}
}

// KeepsLength implements LengthKeeper: sampling only marks metadata.
func (s *sampleStage) KeepsLength() bool { return true }
