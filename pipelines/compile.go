package pipelines

import (
	"errors"
	"fmt"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Load parses and compiles a pipeline config. Every problem, from YAML
// syntax to graph shape and stage options, comes back at once as an
// *ErrorList sorted by position.
func Load(file string, data []byte) (*Graph, error) {
	return loadWith(file, data, nil)
}

// LoadFile reads, parses and compiles the pipeline config at path.
func LoadFile(path string) (*Graph, error) {
	data, err := ReadConfigFile(path)
	if err != nil {
		return nil, fmt.Errorf("read pipeline config: %w", err)
	}
	return Load(path, data)
}

func loadWith(file string, data []byte, extra map[string]Kind) (*Graph, error) {
	s, err := Parse(file, data)
	if s == nil {
		return nil, err
	}
	return compileWith(s, extra)
}

// Compile validates s completely (names, settings, stage types, every
// stage's options through its type's Build, edges, cycles, reachability)
// and builds the immutable Graph. All problems come back together as an
// *ErrorList sorted by position, including those Parse found when s came
// from Parse.
func Compile(s *Spec) (*Graph, error) { return compileWith(s, nil) }

// compileWith compiles s with the built-in kinds plus extra (tests register
// their own stage kinds this way; extra wins on a name clash).
func compileWith(s *Spec, extra map[string]Kind) (*Graph, error) {
	if s == nil {
		return nil, errors.New("compile pipeline: nil spec")
	}
	kinds := builtinKinds()
	for name, k := range extra {
		kinds[name] = k
	}
	c := &compiler{spec: s, kinds: kinds, errs: &ErrorList{}}
	if s.parseErrors != nil {
		c.errs.merge(s.parseErrors)
	}
	c.validateSpec()
	c.buildStages()
	c.checkStageRefs()
	c.checkEdges()
	if c.errs.Len() > 0 {
		return nil, c.finish()
	}
	return c.link()
}

// compiler holds the state of one Compile.
type compiler struct {
	spec     *Spec
	kinds    map[string]Kind
	errs     *ErrorList
	index    map[string]int // stage name -> stage number
	stages   []cstage
	samplers []SamplerInfo
}

// cstage is one stage during compilation.
type cstage struct {
	kind    Kind
	known   bool // the type names a kind
	tmpl    Template
	targets []Target // outgoing edges in Edge order
	// certain is false when the stage's edges could not be learnt (its Build
	// failed): its targets are then a guess (just next), and reachability,
	// which a missing edge would falsify, is not checked.
	certain bool
	term    terminal
	edges   []int // resolved targets: stage number, or -1 for a drop target / error
	// marks is true when its Build registered a sampler: its instances may
	// set Meta.SampleMask.
	marks bool
	// config is configPrint of the stage's node.
	config string
	// badNext is the default next edge when the following stage's name is
	// unusable (empty, invalid, reserved or a duplicate): not reported again.
	badNext Target
}

// finish sorts the error list and removes exact repeats (a problem Parse
// reported that Compile found again).
func (c *compiler) finish() error {
	c.errs.Sort()
	out := c.errs.Errs[:0]
	for i, e := range c.errs.Errs {
		if i > 0 && e == c.errs.Errs[i-1] {
			continue
		}
		out = append(out, e)
	}
	c.errs.Errs = out
	return c.errs
}

// buildStages works out each stage's next target and builds it: terminals
// here, other kinds through their Build.
func (c *compiler) buildStages() {
	s := c.spec
	c.stages = make([]cstage, len(s.Stages))
	for i := range s.Stages {
		st := &s.Stages[i]
		cs := &c.stages[i]
		cs.kind, cs.known = c.kinds[st.Type]
		node := st.Node
		if node == nil {
			node = synthesize(st)
		}
		ctx := &BuildContext{
			Name: st.Name, Kind: st.Type, File: s.File, Node: node,
			SampleIndex: len(c.samplers),
			errs:        c.errs, samplers: &c.samplers,
			common: []string{"name", "type", "next"},
		}
		ctx.next, ctx.hasNxt = c.nextTarget(i, cs, ctx)
		cs.config = configPrint(node)
		if !cs.known || st.noBuild {
			continue
		}
		if cs.kind.Terminal {
			cs.term, cs.certain = buildTerminal(ctx, cs.kind)
			continue
		}
		guess := func() {
			if ctx.hasNxt {
				cs.targets = []Target{ctx.next}
			}
			// Every edge the failed Build did parse is checked too: a bad
			// option must not hide a dangling edge in the same stage.
			cs.targets = append(cs.targets, ctx.parsed...)
		}
		if cs.kind.Build == nil {
			// A type whose stage is not written yet: say so, and take its
			// edges to be just next (the convention for edge 0) so the
			// graph checks still run.
			c.errs.Add(st.TypePos, st.Name, "stage type "+quote(st.Type)+" is not implemented")
			guess()
			cs.certain = true
			continue
		}
		before, samplers := c.errs.Len(), len(c.samplers)
		tmpl, edges, perr := safeBuild(cs.kind, ctx)
		switch {
		case perr != nil:
			c.errs.Add(st.Pos, st.Name, "internal error building stage: "+fmt.Sprint(perr))
		case c.errs.Len() > before:
		case tmpl == nil && !ctx.hasNxt:
			// It needed the next edge that the last stage lacks, which
			// was reported above.
		case tmpl == nil:
			c.errs.Add(st.Pos, st.Name, "internal error: stage type "+quote(st.Type)+" built nothing")
		case len(edges) == 0:
			c.errs.Add(st.Pos, st.Name, "internal error: stage has no outgoing edges")
		case len(edges) > MaxEdges:
			c.errs.Add(st.Pos, st.Name, fmt.Sprintf("stage has %d outgoing edges (at most %d)", len(edges), MaxEdges))
		default:
			cs.tmpl, cs.targets, cs.certain = tmpl, edges, true
			cs.marks = len(c.samplers) > samplers
			continue
		}
		guess()
	}
}

// safeBuild runs a kind's Build and its template's Edges, turning a panic
// in them (a bug in a stage, found by some config) into an error, so that
// no config can crash the daemon.
func safeBuild(k Kind, ctx *BuildContext) (tmpl Template, edges []Target, perr any) {
	defer func() {
		if r := recover(); r != nil {
			tmpl, edges, perr = nil, nil, r
		}
	}()
	tmpl = k.Build(ctx)
	if tmpl != nil {
		edges = append([]Target(nil), tmpl.Edges()...)
	}
	return tmpl, edges, nil
}

// nextTarget returns stage i's next edge: its `next:` key, or else the
// stage after it. It reports next on a terminal and a missing next on the
// last stage.
func (c *compiler) nextTarget(i int, cs *cstage, ctx *BuildContext) (Target, bool) {
	st := &c.spec.Stages[i]
	// A next that is present but unusable (reported already) still counts
	// as present, so the stage does not also report a missing next. Its
	// empty target is left unresolved by checkEdges.
	if st.nextBad {
		return Target{Pos: st.NextPos}, true
	}
	terminal := cs.known && cs.kind.Terminal
	if st.NextPos != (Pos{}) || st.Next != "" {
		if terminal {
			c.errs.Add(st.NextPos, st.Name, "next is not allowed on a terminal stage ("+st.Type+")")
			return Target{}, false
		}
		var n *yaml.Node
		if st.Node != nil {
			n = mappingValue(st.Node, "next")
		}
		if n == nil {
			n = &yaml.Node{Line: st.NextPos.Line, Column: st.NextPos.Col}
		}
		if t, ok := ctx.ParseTarget(st.Next, n); ok {
			return t, true
		}
		return Target{Pos: st.NextPos}, true
	}
	if i+1 < len(c.spec.Stages) {
		// The edge is there even when the following stage's name is bad
		// (that is reported already); checkEdges then leaves it unresolved
		// without a second report.
		nx := &c.spec.Stages[i+1]
		t := Target{Stage: nx.Name, Pos: st.Pos}
		if j, ok := c.index[nx.Name]; !ok || j != i+1 {
			cs.badNext = t
		}
		return t, true
	}
	if cs.known && !terminal {
		c.errs.Add(st.Pos, st.Name, "last stage has no next edge")
	}
	return Target{}, false
}

// checkEdges resolves every stage's targets and checks the graph: dangling
// edges, cycles, and (when every stage's edges are known) reachability.
func (c *compiler) checkEdges() {
	adj := make([][]int, len(c.stages))
	certain := true
	for i := range c.stages {
		cs := &c.stages[i]
		name := c.spec.Stages[i].Name
		if j, ok := c.index[name]; !ok || j != i || !cs.known || (!cs.kind.Terminal && !cs.certain) {
			certain = false
		}
		cs.edges = make([]int, len(cs.targets))
		for e, t := range cs.targets {
			cs.edges[e] = -1
			switch {
			case t.Drop != "":
				if !validName(t.Drop) {
					c.errs.Add(t.Pos, name, "drop reason "+quote(t.Drop)+": want "+nameRule)
				}
			case t.Stage == "" || t == cs.badNext:
				// A next edge that was reported as bad, or one to a stage
				// whose name was: nothing more to say, but reachability is
				// unknown.
				certain = false
			default:
				j := c.checkTarget(name, t)
				if j < 0 {
					// The edge was meant to reach some stage: which ones
					// are unreachable is unknown until it is fixed.
					certain = false
					continue
				}
				cs.edges[e] = j
				adj[i] = append(adj[i], j)
			}
		}
	}
	c.checkCycles(adj)
	if certain {
		c.checkReachable(adj)
	}
}

// synthesize makes the mapping node of a StageSpec built in code, so stage
// types can decode it like any other.
func synthesize(st *StageSpec) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: st.Pos.Line, Column: st.Pos.Col}
	add := func(k, v string) {
		if v != "" {
			n.Content = append(n.Content,
				&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k},
				&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v})
		}
	}
	add("name", st.Name)
	add("type", st.Type)
	add("next", st.Next)
	return n
}

func quote(s string) string { return strconv.Quote(s) }

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
