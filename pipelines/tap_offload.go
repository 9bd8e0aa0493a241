package pipelines

// SeesKernel reports whether frames that the kernel half of t's graph
// decides under mode (Graph.Offload) would pass t's point if the workers
// decided them instead: a tap on the entry parse stage or its edge, on
// the split filter, on the filter's edge to a kernel rule's drop or pass
// terminal, or on such a terminal. The XDP program drops or passes those
// frames before any socket sees them, so such a tap sees none of them;
// a daemon that wants its capture to show what the pipeline does takes
// the kernel rules back to the workers while the tap is on (the workers
// run the whole pipeline, the kernel's prefix included, so no verdict
// changes). A kernel rule no frame the kernel decides can match (Idle:
// a class or ARP rule) hides nothing and is left out.
//
// It is false for every other point: a frame the kernel decides never
// reaches a stage behind the filter's other edges.
func (t *Tap) SeesKernel(mode OffloadMode) bool {
	g := t.g
	plan := g.Offload(mode)
	if plan.Moved == 0 {
		return false
	}
	// Moved > 0: the plan found the entry parse stage with one edge, to
	// the filter it split (planOffload).
	entry := g.topo[0]
	fi := g.nodes[entry].edges[0]
	fn := &g.nodes[fi]
	ft, ok := fn.tmpl.(*filterTemplate)
	if !ok {
		return false
	}
	targets := map[int32]bool{}
	for i := range plan.Moved {
		if !plan.Rules[i].Idle {
			targets[fn.edges[ft.ruleEdge[i]]] = true
		}
	}
	switch {
	case len(targets) == 0:
		return false
	case t.node == entry:
		return true // arrivals, or its one edge: every frame
	case t.node == fi:
		return t.edge < 0 || targets[fn.edges[t.edge]]
	}
	return targets[t.node]
}
