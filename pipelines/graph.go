package pipelines

import (
	"container/heap"
	"sort"

	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/rings"
)

// Graph is a compiled pipeline: stages resolved to dense node numbers, each
// with a table from edge number to node, and a topological order computed
// once. It is immutable, so one Graph is shared by all workers (each with
// its own Runner) and may be published to them through an atomic pointer.
//
// Nodes are the config's stages in file order, then one implicit drop
// terminal per distinct `drop:<reason>` edge target (first appearance
// first), then the drop terminal of BadEdgeReason unless a config edge
// already made it.
type Graph struct {
	name     string
	file     string // the config's file name, for positions
	settings Settings
	nodes    []gnode
	topo     []int32 // every node, entry first, each before all its successors
	badEdge  int32   // the node a bad edge number leads to
	ports    []string
	reasons  []string
	samplers []SamplerInfo
	// offload is the kernel half's plans (Offload), made from what the
	// compile kept, once per mode: the graph is all a consumer needs
	// after parse (the workers' runners, the split, the stage
	// declarations).
	offload *offloadMemo
}

type gnode struct {
	name, kind string
	terminal   bool
	verdict    rings.Verdict
	target     uint16 // port or reason index
	label      string // tx: port; drop: reason
	tmpl       Template
	edges      []int32 // edge number -> node
	marks      bool    // a sampler: it may set Meta.SampleMask
	config     string  // configPrint of the stage's spec
	counters   *counters.Layout
}

// StageInfo describes one node of a compiled graph.
type StageInfo struct {
	Name     string   // stage name; "drop:<reason>" for implicit drop terminals
	Kind     string   // stage type
	Terminal bool     // tx, drop or pass
	Edges    []string // target node names, by edge number
	Target   string   // tx: port name; drop: reason; else empty
	// Counters is the layout of the stage's own counters (its template's
	// CountedTemplate.Counters), nil when it keeps none: Runner.Counters
	// and Runner.LiveCounters fill values in this layout.
	Counters *counters.Layout
}

// StageConfig returns a print of stage name's configuration as written,
// without positions or comments ("" for no such stage and for implicit
// drops): a SHA-256 digest in hex, so only equality means anything.
// Equally configured stages print the same, and their stage-specific
// counters (Counter keys) mean the same, which a swap uses to carry them.
func (g *Graph) StageConfig(name string) string {
	for i := range g.nodes {
		if g.nodes[i].name == name {
			return g.nodes[i].config
		}
	}
	return ""
}

// Name returns the pipeline's name.
func (g *Graph) Name() string { return g.name }

// Settings returns the pipeline's settings.
func (g *Graph) Settings() Settings { return g.settings }

// Ports returns the tx port names, in order of first appearance in the
// config: index i is Meta.Target of a packet with VerdictTX for port i.
func (g *Graph) Ports() []string { return append([]string(nil), g.ports...) }

// Reasons returns the drop reasons, in order of first appearance in the
// config, with BadEdgeReason last unless the config names it: index i is
// Meta.Target of a packet with VerdictDrop for reason i.
func (g *Graph) Reasons() []string { return append([]string(nil), g.reasons...) }

// Samplers returns the sample stages' settings; index i is bit i of
// Meta.SampleMask.
func (g *Graph) Samplers() []SamplerInfo { return append([]SamplerInfo(nil), g.samplers...) }

// Stages describes every node: the config's stages in file order, then the
// implicit drop terminals. Runner.Stats reports nodes in the same order.
func (g *Graph) Stages() []StageInfo {
	out := make([]StageInfo, len(g.nodes))
	for i := range g.nodes {
		n := &g.nodes[i]
		si := StageInfo{Name: n.name, Kind: n.kind, Terminal: n.terminal, Target: n.label, Counters: n.counters}
		for _, e := range n.edges {
			si.Edges = append(si.Edges, g.nodes[e].name)
		}
		out[i] = si
	}
	return out
}

// link builds the Graph from a compile that found no problems.
func (c *compiler) link() (*Graph, error) {
	s := c.spec
	g := &Graph{name: s.Name, file: s.File, settings: s.Settings, samplers: c.samplers, offload: &offloadMemo{}}

	// Reasons and ports in order of first appearance in the file.
	type occ struct {
		pos   Pos
		label string
	}
	var reasonOcc, dropOcc, portOcc []occ
	for i := range c.stages {
		cs := &c.stages[i]
		switch cs.term.verdict {
		case rings.VerdictTX:
			portOcc = append(portOcc, occ{cs.term.pos, cs.term.label})
		case rings.VerdictDrop:
			reasonOcc = append(reasonOcc, occ{cs.term.pos, cs.term.label})
		}
		for _, t := range cs.targets {
			if t.Drop != "" {
				reasonOcc = append(reasonOcc, occ{t.Pos, t.Drop})
				dropOcc = append(dropOcc, occ{t.Pos, t.Drop})
			}
		}
	}
	ordered := func(list []occ) []string {
		sort.SliceStable(list, func(i, j int) bool {
			a, b := list[i].pos, list[j].pos
			if a.Line != b.Line {
				return a.Line < b.Line
			}
			return a.Col < b.Col
		})
		var out []string
		for _, o := range list {
			if !contains(out, o.label) {
				out = append(out, o.label)
			}
		}
		return out
	}
	g.ports = ordered(portOcc)
	g.reasons = ordered(reasonOcc)
	if !contains(g.reasons, BadEdgeReason) {
		g.reasons = append(g.reasons, BadEdgeReason)
	}
	implicit := ordered(dropOcc)
	if !contains(implicit, BadEdgeReason) {
		implicit = append(implicit, BadEdgeReason)
	}
	if len(g.ports) > 1<<16 || len(g.reasons) > 1<<16 {
		c.errs.Add(s.stagesPos, "", "too many distinct ports or drop reasons (at most 65536 each)")
		return nil, c.finish()
	}

	// Nodes: stages, then implicit drops.
	g.nodes = make([]gnode, len(c.stages), len(c.stages)+len(implicit))
	dropNode := make(map[string]int32, len(implicit))
	for _, r := range implicit {
		dropNode[r] = int32(len(g.nodes))
		g.nodes = append(g.nodes, gnode{
			name: "drop:" + r, kind: dropKind.Name, terminal: true,
			verdict: rings.VerdictDrop, target: uint16(indexOf(g.reasons, r)), label: r,
		})
	}
	g.badEdge = dropNode[BadEdgeReason]
	for i := range c.stages {
		cs := &c.stages[i]
		st := &s.Stages[i]
		n := &g.nodes[i]
		n.name, n.kind, n.tmpl, n.marks, n.config = st.Name, st.Type, cs.tmpl, cs.marks, cs.config
		if ct, ok := cs.tmpl.(CountedTemplate); ok {
			n.counters = ct.Counters()
		}
		if cs.kind.Terminal {
			n.terminal, n.verdict, n.label = true, cs.term.verdict, cs.term.label
			switch n.verdict {
			case rings.VerdictTX:
				n.target = uint16(indexOf(g.ports, n.label))
			case rings.VerdictDrop:
				n.target = uint16(indexOf(g.reasons, n.label))
			}
			continue
		}
		n.edges = make([]int32, len(cs.targets))
		for e, t := range cs.targets {
			if t.Drop != "" {
				n.edges[e] = dropNode[t.Drop]
			} else {
				n.edges[e] = int32(cs.edges[e])
			}
		}
	}
	g.topo = topoOrder(g.nodes)
	return g, nil
}

// topoOrder orders the nodes so that each comes before its successors
// (Kahn's algorithm, lowest node number first among the ready ones, so the
// order follows the file where it can). The graph is a DAG: Compile
// rejected cycles.
func topoOrder(nodes []gnode) []int32 {
	indeg := make([]int, len(nodes))
	for i := range nodes {
		for _, e := range uniqueEdges(nodes[i].edges) {
			indeg[e]++
		}
	}
	ready := &intHeap{}
	for i, d := range indeg {
		if d == 0 {
			heap.Push(ready, i)
		}
	}
	order := make([]int32, 0, len(nodes))
	for ready.Len() > 0 {
		n := heap.Pop(ready).(int)
		order = append(order, int32(n))
		for _, e := range uniqueEdges(nodes[n].edges) {
			if indeg[e]--; indeg[e] == 0 {
				heap.Push(ready, int(e))
			}
		}
	}
	return order
}

func uniqueEdges(edges []int32) []int32 {
	var out []int32
	for _, e := range edges {
		dup := false
		for _, o := range out {
			dup = dup || o == e
		}
		if !dup {
			out = append(out, e)
		}
	}
	return out
}

type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}
