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
		fmt.Fprintf(&b, "\t%q [shape=%s, label=\"%s\"];\n", n.Name, shape, strings.ReplaceAll(label, `"`, `\"`))
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
