package pipelines

import (
	"fmt"
	"strings"

	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/rings"
	"go.yaml.in/yaml/v3"
)

// Edge is the number of one of a stage's outgoing edges, dense from 0 in the
// order the stage's Template.Edges lists them.
type Edge = uint8

// MaxEdges is the most outgoing edges one stage may have.
const MaxEdges = 255

// Stage is one worker's instance of a compiled stage: a graph node that
// processes a vector of packets at a time (the rte_graph / VPP node model).
//
// Process examines packets b.Descs[idx[k]] / b.Meta[idx[k]] for every k and
// writes each packet's outgoing edge into next[k] (len(next) == len(idx)).
// It may rewrite packet bytes in place through b.Packet and b.AdjustHead. It
// must not allocate, lock, log, keep references to b after returning, or
// return errors per packet: a packet it cannot handle goes to an edge (often
// an implicit drop with a named reason).
//
// An instance is used by one worker goroutine only, so it may keep scratch
// space and plain (non-atomic) counters.
type Stage interface {
	Process(b *rings.Batch, idx []uint16, next []Edge)
}

// LengthKeeper is implemented by stage instances that can promise never to
// change a packet's Desc.Len. The runner then carries the sum of a vector's
// lengths across the stage instead of summing it again. KeepsLength is
// called once, when a runner is made; a stage that returns true must keep
// every length unchanged in every Process call.
type LengthKeeper interface {
	KeepsLength() bool
}

// CountedTemplate is a Template whose instances keep counters of their
// own, beyond the packets and bytes the graph counts at every node: a
// filter's hits per rule, a count stage's keys, a rewrite's exceptions.
// Counters returns their layout: families from the kind's declarations
// (Kind.Counters) with this stage's key sets, fixed for the template's
// life. Every instance must implement Reporter for it.
type CountedTemplate interface {
	Template
	Counters() *counters.Layout
}

// Reporter is an instance of a CountedTemplate. Report adds its counters
// into dst, which has the layout's length, in layout order, so the
// engine sums its workers' instances by calling each in turn. The engine
// calls it only while the instance's worker is not running a batch (after
// a run, or at a batch boundary); it must not allocate.
type Reporter interface {
	Report(dst []counters.Value)
}

// Template is a stage compiled from its spec: immutable, shared by all
// workers, and able to make per-worker instances.
type Template interface {
	// Edges lists where the stage's outgoing edges lead, in Edge order.
	Edges() []Target
	// NewInstance returns a fresh per-worker instance.
	NewInstance() Stage
}

// Target is where an edge leads: another stage by name, or an implicit drop
// terminal with a named reason. Exactly one of Stage and Drop is set.
type Target struct {
	Stage string
	Drop  string
	Pos   Pos // where the target was written, for error messages
}

// String renders the target the way it is written in a config.
func (t Target) String() string {
	if t.Drop != "" {
		return "drop:" + t.Drop
	}
	return t.Stage
}

// Pos is a position in a config file.
type Pos struct {
	File string
	Line int
	Col  int
}

func (p Pos) String() string {
	if p.File == "" {
		return fmt.Sprintf("%d:%d", p.Line, p.Col)
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

// Kind is one built-in stage type.
type Kind struct {
	Name string // the `type:` value in a config
	// Terminal kinds (tx, drop, pass) have no outgoing edges and no Build:
	// the graph handles them itself.
	Terminal bool
	// Build decodes the stage's options with c and returns its template. It
	// reports every problem through c (c.Errorf, c.Decode) and returns nil if
	// there was any.
	Build func(c *BuildContext) Template
	// Counters declares every family of counters a stage of this kind may
	// keep of its own (its template's layout takes its families from
	// here): what the report, `warpctl stats` and `top`, /metrics, the
	// Grafana dashboard and the stats log line show for it.
	Counters []counters.Decl
}

// BuildContext is what a stage's Build sees: its options, its default next
// target, and a place to report errors with positions.
type BuildContext struct {
	Name string     // the stage's name
	Kind string     // the stage's type
	File string     // config file name, for positions
	Node *yaml.Node // the stage's mapping node (all keys, including name/type/next)

	// SampleIndex is the index AddSampler returns if this stage calls it
	// (its bit in Meta.SampleMask): the number of samplers registered by the
	// stages before it. Prefer AddSampler, which also reports overflow.
	SampleIndex int

	next   Target
	hasNxt bool
	// parsed is every target ParseTarget returned: when Build fails, the
	// compiler still checks them, so that one bad option does not hide a
	// dangling edge elsewhere in the stage.
	parsed   []Target
	errs     *ErrorList
	samplers *[]SamplerInfo
	// common lists the keys every stage has (name, type, next), which
	// Decode accepts without the options struct naming them.
	common []string
}

// Next returns where the stage's "next" edge leads: the explicit `next:` key,
// or else the stage that follows in the list. ok is false for the last stage
// when it has no explicit next (an error the stage should report only if it
// needs a next edge).
func (c *BuildContext) Next() (t Target, ok bool) { return c.next, c.hasNxt }

// Pos returns the position of node n in the config (the stage's own node when
// n is nil).
func (c *BuildContext) Pos(n *yaml.Node) Pos {
	if n == nil {
		n = c.Node
	}
	return Pos{File: c.File, Line: n.Line, Col: n.Column}
}

// Errorf records an error at node n (the stage itself when n is nil),
// prefixed with the position and stage name.
func (c *BuildContext) Errorf(n *yaml.Node, format string, args ...any) {
	c.errs.Add(c.Pos(n), c.Name, fmt.Sprintf(format, args...))
}

// Failed reports whether any error was recorded for this pipeline so far.
func (c *BuildContext) Failed() bool { return c.errs.Len() > 0 }

// Option returns the value node of the stage's option key, or nil.
func (c *BuildContext) Option(key string) *yaml.Node {
	return mappingValue(c.Node, key)
}

// Decode strictly decodes the stage's options (its mapping, minus name, type
// and next) into v, a pointer to a struct with yaml tags. Unknown keys and
// wrong types are recorded as errors with positions. It reports whether
// decoding succeeded.
func (c *BuildContext) Decode(v any) bool {
	return c.DecodeNode(c.Node, v, c.common...)
}

// DecodeNode strictly decodes node n into v like Decode, ignoring the keys
// named in skip. Use it for nested option lists (rules, ...) to get per-item
// positions. Fields of type yaml.Node or *yaml.Node (in v's top-level
// struct) receive the option's node itself, for positioned checks.
func (c *BuildContext) DecodeNode(n *yaml.Node, v any, skip ...string) bool {
	ok := true
	for _, e := range strictCheck(n, v, skip) {
		c.Errorf(e.node, "%s", e.msg)
		ok = false
	}
	if !ok {
		return false
	}
	if n == nil {
		return true
	}
	if err := decodeNode(n, v); err != nil {
		c.Errorf(n, "%s", cleanYAMLError(err))
		return false
	}
	return true
}

// MaxSamplers is the most sample stages one pipeline may have: one bit each
// in Meta.SampleMask.
const MaxSamplers = 32

// SamplerInfo describes one sample stage to the engine, which writes the
// packets the stage marks in Meta.SampleMask to File.
type SamplerInfo struct {
	Stage string // the sample stage's name
	Mode  string // "every" (one packet in N) or "first" (the first N packets)
	N     uint64
	File  string // capture file the sampled packets go to
}

// AddSampler registers the stage as a sampler and returns its index: the bit
// it sets in Meta.SampleMask. s.Stage defaults to the stage's name. Beyond
// MaxSamplers it records an error and returns -1.
func (c *BuildContext) AddSampler(s SamplerInfo) int {
	if s.Stage == "" {
		s.Stage = c.Name
	}
	if c.samplers == nil {
		c.samplers = new([]SamplerInfo)
	}
	if len(*c.samplers) >= MaxSamplers {
		c.Errorf(nil, "too many sample stages (at most %d per pipeline)", MaxSamplers)
		return -1
	}
	*c.samplers = append(*c.samplers, s)
	return len(*c.samplers) - 1
}

// ParseTarget turns an edge written in a config ("stage-name" or
// "drop:reason") into a Target positioned at n.
func (c *BuildContext) ParseTarget(s string, n *yaml.Node) (Target, bool) {
	pos := c.Pos(n)
	if reason, ok := strings.CutPrefix(s, "drop:"); ok {
		if !validName(reason) {
			c.Errorf(n, "drop reason %q: want %s", reason, nameRule)
			return Target{}, false
		}
		c.parsed = append(c.parsed, Target{Drop: reason, Pos: pos})
		return Target{Drop: reason, Pos: pos}, true
	}
	if !validName(s) {
		c.Errorf(n, "edge target %q: want a stage name or drop:<reason>", s)
		return Target{}, false
	}
	c.parsed = append(c.parsed, Target{Stage: s, Pos: pos})
	return Target{Stage: s, Pos: pos}, true
}
