package pipelines

import "unsafe"

// TableSizer is a stage template whose every instance (one a worker)
// allocates tables of a size its configuration fixes: conntrack's flow
// table, reassemble's datagram table. TableBytes is that size in bytes,
// the most one instance takes (the tables are allocated when the
// instance first runs, and whole). The dataplane checks a plan's sum
// against the memory the process can still take before it builds the
// plan (dataplane.CheckTableMemory): a table the machine cannot hold is
// then a clear error, not the OOM killer or the Go runtime's fatal "out
// of memory" in a worker.
type TableSizer interface {
	TableBytes() uint64
}

// TableBytes is the bytes of tables one runner of g allocates: the sum of
// its TableSizer stages'.
func (g *Graph) TableBytes() uint64 {
	var n uint64
	for i := range g.nodes {
		if ts, ok := g.nodes[i].tmpl.(TableSizer); ok && !g.nodes[i].terminal {
			n += ts.TableBytes()
		}
	}
	return n
}

// NewTableBytes is TableBytes less the tables a runner of g takes over
// whole from the same worker's runner of old, the graph before a swap
// with as many runners (the dataplane passes nil otherwise: each table
// is then rebuilt from all the old ones): a stateful stage of the same name and kind
// whose table is the same size keeps its table (conntrack's setup) and
// allocates nothing. Every other table is new, and is allocated while
// the old ones still exist (their flows are copied over).
func (g *Graph) NewTableBytes(old *Graph) uint64 {
	if old == nil {
		return g.TableBytes()
	}
	var n uint64
	for i := range g.nodes {
		gn := &g.nodes[i]
		if ts, ok := gn.tmpl.(TableSizer); ok && !gn.terminal && !keepsTable(gn, old) {
			n += ts.TableBytes()
		}
	}
	return n
}

// keepsTable reports whether old has a stage that hands node gn its
// table whole: same name, same kind, a stateful template of the same
// table size that takes over a same-sized table (only conntrack does:
// reassembly starts empty on a swap, see raStage.TakeState).
func keepsTable(gn *gnode, old *Graph) bool {
	nt, ok := gn.tmpl.(*conntrackTemplate)
	if !ok {
		return false
	}
	for j := range old.nodes {
		on := &old.nodes[j]
		if on.name != gn.name || on.kind != gn.kind || on.terminal {
			continue
		}
		ot, ok := on.tmpl.(*conntrackTemplate)
		return ok && ot.size == nt.size
	}
	return false
}

// TableBytes implements TableSizer: the flow table of size entries, its
// index and its pin stamps (ctBytesPerFlow's sum).
func (t *conntrackTemplate) TableBytes() uint64 {
	return uint64(t.size)*uint64(ctEntryBytes+ctPinBytes) + 8*uint64(ctIndexSlots(t.size))
}

// TableBytes implements TableSizer: raStage.setup's arrays.
func (t *reassembleTemplate) TableBytes() uint64 {
	dg := uint64(t.maxDg)
	n := dg*uint64(unsafe.Sizeof(raRec{})) + dg*uint64(t.maxFrag)*4 + (2*dg+1)*8 + dg*4
	if t.full {
		n += dg * uint64(raHdrMax+t.maxBytes)
	}
	return n
}
