package control

import (
	"fmt"
	"strings"

	"github.com/warpflow/warpflow/pipelines"
)

// Nodes describes a compiled graph's stages for the API.
func Nodes(g *pipelines.Graph) []StageNode {
	var out []StageNode
	for _, s := range g.Stages() {
		out = append(out, StageNode{Name: s.Name, Kind: s.Kind, Terminal: s.Terminal, Edges: s.Edges, Target: s.Target})
	}
	return out
}

// Info summarises a compiled graph.
func Info(name, file string, g *pipelines.Graph) PipelineInfo {
	set := g.Settings()
	stages := 0
	for _, s := range g.Stages() {
		if !strings.HasPrefix(s.Name, "drop:") { // the implicit drop terminals
			stages++
		}
	}
	return PipelineInfo{
		Name: name, File: file, Pipeline: g.Name(), Stages: stages,
		Ports: g.Ports(), Reasons: g.Reasons(), Workers: set.Workers, Batch: set.BatchSize,
	}
}

// SplitOf describes an offload plan for the API (nil for nil).
func SplitOf(p *pipelines.OffloadPlan) *Split {
	if p == nil {
		return nil
	}
	s := &Split{Mode: p.Mode.String(), Filter: p.Filter, Why: p.Why, KernelRules: p.Moved, StopReason: p.StopReason, After: p.After}
	for _, r := range p.Rules {
		s.Rules = append(s.Rules, SplitRule{Index: r.Index, Line: r.Pos.Line, Action: r.Action, Kernel: r.Kernel, Idle: r.Kernel && r.Idle})
	}
	return s
}

// MarkSplit sets each node's RunsIn from s: with kernel rules, the entry
// parse stage, the split filter and the terminals its kernel rules lead
// to (a drop:<reason>, a pass stage) run partly in the XDP program (the
// plan only ever splits a filter right after the entry parse).
func MarkSplit(nodes []StageNode, s *Split) {
	kernelTargets := map[string]bool{}
	if s != nil {
		for _, r := range s.Rules {
			if r.Kernel && !r.Idle {
				kernelTargets[r.Action] = true
			}
		}
	}
	for i := range nodes {
		n := &nodes[i]
		n.RunsIn = RunsOnWorkers
		if s == nil || s.KernelRules == 0 {
			continue
		}
		if n.Name == s.Filter || n.Terminal && kernelTargets[n.Name] {
			n.RunsIn = RunsInXDP
			continue
		}
		for _, e := range n.Edges {
			if n.Kind == "parse" && e == s.Filter {
				n.RunsIn = RunsInXDP
			}
		}
	}
}

// DOT renders a compiled graph as Graphviz: stages as boxes, terminals as
// ellipses (tx and pass) or octagons (drops), edges labelled with their
// number when a stage has more than one.
func DOT(name string, nodes []StageNode) string {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %q {\n\trankdir=LR;\n\tnode [fontname=\"monospace\"];\n", name)
	for _, n := range nodes {
		shape, label := "box", n.Name+"\\n("+n.Kind+")"
		switch {
		case n.Kind == "drop":
			shape = "octagon"
			label = n.Name
		case n.Terminal:
			shape = "ellipse"
			if n.Target != "" {
				label = n.Name + "\\n(" + n.Kind + " " + n.Target + ")"
			}
		}
		style := ""
		if n.RunsIn == RunsInXDP {
			label += "\\n[" + RunsInXDP + "]"
			style = `, style=filled, fillcolor="#cfe8ff"`
		}
		fmt.Fprintf(&b, "\t%q [shape=%s, label=\"%s\"%s];\n", n.Name, shape, strings.ReplaceAll(label, `"`, `\"`), style)
	}
	for _, n := range nodes {
		for e, t := range n.Edges {
			if len(n.Edges) > 1 {
				fmt.Fprintf(&b, "\t%q -> %q [label=\"%d\"];\n", n.Name, t, e)
			} else {
				fmt.Fprintf(&b, "\t%q -> %q;\n", n.Name, t)
			}
		}
	}
	b.WriteString("}\n")
	return b.String()
}

// PipelineProblems turns a compile error into the API's invalid-pipeline
// error, one problem per line as `warpctl pipeline validate` prints them.
func PipelineProblems(err error) *Error {
	e := &Error{Code: ErrInvalidPipeline.Code, Message: "invalid pipeline"}
	for _, line := range strings.Split(strings.TrimSpace(err.Error()), "\n") {
		if line != "" {
			e.Problems = append(e.Problems, line)
		}
	}
	return e
}
