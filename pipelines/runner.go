package pipelines

import (
	"encoding/binary"
	"slices"
	"sync/atomic"
	"time"

	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/rings"
)

// RunnerOptions configures a Runner.
type RunnerOptions struct {
	// Timing measures the time spent in each node: one clock read per node
	// that has packets, per batch (never per packet).
	Timing bool
	// Worker and Workers say which of how many workers the runner is for
	// (stages that implement WorkerAware are told). Zero Workers means
	// one.
	Worker, Workers int
}

// Runner executes a Graph on batches, VPP style: every node has a
// preallocated vector of packet indices; all packets start at the entry;
// nodes run in topological order, each on its whole vector, and their
// packets are scattered to the successors' vectors by the edge each packet
// took (moving the whole vector when they all took the same one). Terminal
// nodes write the verdict.
//
// A Runner belongs to one worker goroutine: Process, Stats and Counters must
// not run concurrently. Process neither allocates nor locks.
type Runner struct {
	g      *Graph
	nodes  []rnode
	topo   []int32
	next   []Edge // the stage's per-packet edge output, cap chunk
	chunk  int    // vector capacity: the graph's batch size
	timing bool
	// outcome collects the batch's rings.Outcome while Process runs;
	// mixed once two terminals took packets or a sampler marked some.
	outcome rings.Outcome
	mixed   bool
	// pub mirrors the node counters for LiveStats on other goroutines;
	// sincePub is the packets processed since the last publish.
	pub      []nodePub
	sincePub int
	// tap, when set, copies one node's packets (SetTap); loaded once per
	// batch. curTap is the one taken up: its node is marked tapped, so the
	// node loop pays one flag test (no extra register) for the feature.
	tap    atomic.Pointer[Tap]
	curTap *Tap
	// badSeen is the bad-edge terminal's packet count at the last
	// Publish: bad edges are summed only when it moved.
	badSeen uint64
	// lives are the stages that are LiveReporters, published with the
	// node counters. Held as the interface, asserted once here: a type
	// assertion to an interface in Publish allocated now and then (the
	// runtime builds a call site's assertion cache lazily, with
	// mallocgc, on a random one of its misses), which the stateful
	// bench row saw as 2 allocations in a 20M-packet run.
	lives []LiveReporter
	// committers are the stages to confirm after each batch, servicers
	// those that serve control requests, tickers those that keep time
	// (stateful.go).
	committers []Committer
	servicers  []Servicer
	tickers    []Ticker
	// tickNodes are the tickers' nodes, tickCalls their calls at the
	// last starved check, and starveAt the engine time (Batch.Epoch) of
	// the next: see tickStarved.
	tickNodes []int
	tickCalls []uint64
	starveAt  uint64
}

// nodePub is one node's published counters: single-writer atomics (the
// runner's goroutine stores, any goroutine loads), the pattern workers'
// counters use.
type nodePub struct {
	calls, packets, bytes, nanos atomic.Uint64
	edges, edgeBytes             []atomic.Uint64 // the stage's edges, then bad edges summed
}

// publishEvery bounds how stale LiveStats may be under full load: a
// publication is a few dozen atomic stores, too much for every batch of an
// in-memory replay, nothing against a thousand packets. A batch that is not
// full (a live port with nothing more waiting) publishes at once, so at
// rest the counters are exact.
const publishEvery = 1024

type rnode struct {
	stage    Stage       // nil for terminals
	table    *[256]int32 // edge -> node; edges the stage does not have lead to the bad-edge drop
	vec      []uint16    // packet indices waiting at this node, cap chunk
	terminal bool
	verdict  rings.Verdict
	target   uint16

	calls, packets, bytes, nanos uint64
	// vecBytes is the sum of Desc.Len of the packets in vec as they
	// arrived, so that a stage that keeps lengths (LengthKeeper) passes it
	// on without summing its vector again.
	vecBytes uint64
	keepsLen bool
	marks    bool // its stage registered a sampler: it may set Meta.SampleMask
	tapped   bool // the runner's tap is on this node (runner goroutine only)
	// edgePackets and edgeBytes count packets and their bytes by the edge
	// number the stage wrote, bad ones included (nil for terminals).
	edgePackets *[256]uint64
	edgeBytes   *[256]uint64
}

// NewRunner makes a runner with fresh instances of every stage. Call it
// once per worker.
func (g *Graph) NewRunner(o RunnerOptions) *Runner {
	chunk := g.settings.BatchSize
	if chunk <= 0 || chunk > rings.MaxBatch {
		chunk = rings.MaxBatch
	}
	r := &Runner{
		g:      g,
		nodes:  make([]rnode, len(g.nodes)),
		topo:   g.topo,
		next:   make([]Edge, chunk),
		chunk:  chunk,
		timing: o.Timing,
	}
	// One backing array for all vectors keeps them close in memory.
	backing := make([]uint16, chunk*len(g.nodes))
	for i := range g.nodes {
		gn := &g.nodes[i]
		rn := &r.nodes[i]
		rn.vec = backing[i*chunk : i*chunk : (i+1)*chunk]
		rn.terminal, rn.verdict, rn.target = gn.terminal, gn.verdict, gn.target
		rn.marks = gn.marks
		if gn.terminal {
			continue
		}
		rn.stage = gn.tmpl.NewInstance()
		if lk, ok := rn.stage.(LengthKeeper); ok {
			rn.keepsLen = lk.KeepsLength()
		}
		if lr, ok := rn.stage.(LiveReporter); ok {
			r.lives = append(r.lives, lr)
		}
		if c, ok := rn.stage.(Committer); ok {
			r.committers = append(r.committers, c)
		}
		if sv, ok := rn.stage.(Servicer); ok {
			r.servicers = append(r.servicers, sv)
		}
		if tk, ok := rn.stage.(Ticker); ok {
			r.tickers = append(r.tickers, tk)
			r.tickNodes = append(r.tickNodes, i)
			r.tickCalls = append(r.tickCalls, 0)
		}
		if wa, ok := rn.stage.(WorkerAware); ok {
			wa.SetWorker(o.Worker, max(o.Workers, 1))
		}
		rn.table = new([256]int32)
		rn.edgePackets = new([256]uint64)
		rn.edgeBytes = new([256]uint64)
		for e := range rn.table {
			rn.table[e] = g.badEdge
		}
		copy(rn.table[:], gn.edges)
	}
	for i := range r.nodes {
		if l, ok := r.nodes[i].stage.(Linker); ok {
			l.Link(r.Stage)
		}
	}
	r.pub = make([]nodePub, len(g.nodes))
	for i := range g.nodes {
		if ne := len(g.nodes[i].edges); !g.nodes[i].terminal {
			r.pub[i].edges = make([]atomic.Uint64, ne+1)
			r.pub[i].edgeBytes = make([]atomic.Uint64, ne+1)
		}
	}
	return r
}

// storeIfChanged stores v unless c holds it: the runner is c's only
// writer, so its own load is exact and cheap, and unchanged counters cost
// no store.
func storeIfChanged(c *atomic.Uint64, v uint64) {
	if c.Load() != v {
		c.Store(v)
	}
}

// Publish stores the node counters for LiveStats and the stages' own
// counters for LiveCounters. Process calls it after a
// partial batch and at least every publishEvery packets; the runner's owner
// calls it when it rests (an idle I/O loop). Only the runner's goroutine
// may call it.
func (r *Runner) Publish() {
	r.sincePub = 0
	// Edge numbers a stage does not have all lead to the bad-edge drop:
	// only when it counted packets is there anything to sum (over 256
	// entries per node, too much for every publish).
	badMoved := false
	if bp := r.nodes[r.g.badEdge].packets; bp != r.badSeen {
		r.badSeen, badMoved = bp, true
	}
	for i := range r.nodes {
		n, p := &r.nodes[i], &r.pub[i]
		storeIfChanged(&p.calls, n.calls)
		storeIfChanged(&p.packets, n.packets)
		storeIfChanged(&p.bytes, n.bytes)
		storeIfChanged(&p.nanos, n.nanos)
		if p.edges == nil {
			continue
		}
		ne := len(p.edges) - 1
		for e := range ne {
			storeIfChanged(&p.edges[e], n.edgePackets[e])
			storeIfChanged(&p.edgeBytes[e], n.edgeBytes[e])
		}
		if !badMoved {
			continue
		}
		var bad, badBytes uint64
		for e := ne; e < len(n.edgePackets); e++ {
			bad += n.edgePackets[e]
			badBytes += n.edgeBytes[e]
		}
		storeIfChanged(&p.edges[ne], bad)
		storeIfChanged(&p.edgeBytes[ne], badBytes)
	}
	r.publishLive()
}

// LiveStats appends the runner's published per-node counts to dst, in
// Graph.Stages order, like Stats, but safe from any goroutine while the
// runner processes: each counter is as of the last Publish (at most
// publishEvery packets old under load, exact at rest). It allocates (the
// control plane's path).
func (r *Runner) LiveStats(dst []NodeStats) []NodeStats {
	for i := range r.pub {
		p := &r.pub[i]
		st := NodeStats{
			Name: r.g.nodes[i].name, Kind: r.g.nodes[i].kind,
			Calls: p.calls.Load(), Packets: p.packets.Load(), Bytes: p.bytes.Load(), Nanos: p.nanos.Load(),
		}
		if p.edges != nil {
			ne := len(p.edges) - 1
			st.Edges = make([]uint64, ne, ne+1)
			st.EdgeBytes = make([]uint64, ne, ne+1)
			for e := range ne {
				st.Edges[e], st.EdgeBytes[e] = p.edges[e].Load(), p.edgeBytes[e].Load()
			}
			if bad := p.edges[ne].Load(); bad > 0 {
				st.Edges = append(st.Edges, bad)
				st.EdgeBytes = append(st.EdgeBytes, p.edgeBytes[ne].Load())
			}
		}
		dst = append(dst, st)
	}
	return dst
}

// takeTap moves the tap mark to t's node (or clears it). Runner
// goroutine only.
func (r *Runner) takeTap(t *Tap) {
	if r.curTap != nil {
		r.nodes[r.curTap.node].tapped = false
	}
	r.curTap = t
	if t != nil {
		r.nodes[t.node].tapped = true
	}
}

// tapInput and tapEdge copy a tapped node's packets: those arriving, or
// those leaving by the tapped edge.
func (r *Runner) tapInput(b *rings.Batch, idx []uint16) {
	if t := r.curTap; t.edge < 0 {
		t.take(b, idx, nil, 0)
	}
}

func (r *Runner) tapEdge(b *rings.Batch, idx []uint16, next []Edge) {
	if t := r.curTap; t.edge >= 0 {
		t.take(b, idx, next, Edge(t.edge))
	}
}

// Graph returns the graph the runner runs.
func (r *Runner) Graph() *Graph { return r.g }

// Process runs the whole graph on b in place. Afterwards every packet has
// a verdict (Meta.Verdict != VerdictNone) and Meta.Target set. A batch
// longer than the graph's batch size is run in slices of that size.
func (r *Runner) Process(b *rings.Batch) {
	n := b.Len()
	r.outcome, r.mixed = rings.Outcome{}, false
	if t := r.tap.Load(); t != r.curTap {
		r.takeTap(t)
	}
	if n == 0 && r.tickers != nil {
		// An empty batch with the engine's whole time is a tick (an idle
		// worker's, or one that a round gave no packet): see Ticker.
		if now := b.Epoch(); now != 0 {
			r.Tick(now)
		}
	}
	if r.servicers != nil {
		r.Service()
	}
	for start := 0; start < n; start += r.chunk {
		r.run(b, start, min(start+r.chunk, n))
	}
	for _, c := range r.committers {
		c.Commit(b)
	}
	if r.tickers != nil && n > 0 {
		// Due, or the clock stepped back by more than a period (then
		// start over from it rather than wait for it to catch up).
		if now := b.Epoch(); now != 0 && (now >= r.starveAt || r.starveAt-now > 2*IdleTickMS) {
			r.tickStarved(now)
		}
	}
	if n > 0 && !r.mixed {
		r.outcome.Valid = true
	}
	b.Outcome = r.outcome
	if r.sincePub += n; r.sincePub >= publishEvery || n < b.Cap() {
		r.Publish()
	}
}

// tickStarved ticks the tickers whose stage got no packet since the last
// check, IdleTickMS of the engine's time ago (live batches only: Epoch
// is 0 in a replay, which never ticks). The engine ticks a worker that
// gets no packet; this is the stage that gets none on a worker that
// does: a filter before it that drops everything (a swap to a blocking
// rule set that keeps the conntrack stage), or a branch that takes every
// packet elsewhere. Its flows and datagrams then expire as an idle
// link's do, instead of staying listed and counted until traffic reaches
// the stage again. Between batches (after the commits): nothing of this
// batch is in flight at a stage that took none of it. Once per
// IdleTickMS, so a busy runner pays one comparison a batch.
func (r *Runner) tickStarved(now uint64) {
	first := r.starveAt == 0
	r.starveAt = now + IdleTickMS
	for i, tk := range r.tickers {
		calls := r.nodes[r.tickNodes[i]].calls
		if calls == r.tickCalls[i] && !first {
			tk.Tick(now)
		}
		r.tickCalls[i] = calls
	}
}

// run takes packets [start, end) of b through the graph.
//
// A node's bytes are the packets' Desc.Len as they arrive at it, so they
// are counted when the packets arrive: at the entry while its vector is
// filled, and at every other node while its predecessor scatters (a stage
// may resize packets, so a vector's sum cannot be carried across a
// stage that changes lengths). A stage that keeps lengths (LengthKeeper)
// hands its vector's sum on instead. Terminals then only write the
// verdict.
func (r *Runner) run(b *rings.Batch, start, end int) {
	entry := &r.nodes[r.topo[0]]
	v := entry.vec[:end-start]
	var bytes uint64
	for k, d := range b.Descs[start:end] {
		v[k] = uint16(start + k)
		bytes += uint64(d.Len)
	}
	entry.vec = v
	entry.bytes += bytes
	entry.vecBytes = bytes
	var t0 time.Time
	if r.timing {
		t0 = time.Now()
	}
	meta := b.Meta
	for _, ni := range r.topo {
		nd := &r.nodes[ni]
		idx := nd.vec
		if len(idx) == 0 {
			continue
		}
		if nd.tapped {
			r.tapInput(b, idx)
		}
		if nd.terminal {
			verdict, target := nd.verdict, nd.target
			setVerdicts(meta, idx, verdict, target)
			nd.vec = idx[:0]
			r.noteTerminal(verdict, target, nd.vecBytes)
		} else {
			if nd.marks {
				r.mixed = true
			}
			next := r.next[:len(idx)]
			nd.stage.Process(b, idx, next)
			if nd.tapped {
				r.tapEdge(b, idx, next)
			}
			r.scatter(nd, b.Descs, idx, next)
		}
		nd.vecBytes = 0
		nd.calls++
		nd.packets += uint64(len(idx))
		if r.timing {
			t1 := time.Now()
			nd.nanos += uint64(t1.Sub(t0))
			t0 = t1
		}
	}
}

// setVerdicts writes a terminal's verdict into its packets' metadata: a
// loop of its own, so that its registers do not depend on run's (inlined,
// it costs two instructions more per packet).
//
//go:noinline
func setVerdicts(meta []rings.Meta, idx []uint16, v rings.Verdict, t uint16) {
	for _, i := range idx {
		m := &meta[i]
		m.Verdict, m.Target = v, t
	}
}

// noteTerminal folds a terminal's vector (bytes long) into the batch's
// outcome.
func (r *Runner) noteTerminal(v rings.Verdict, t uint16, bytes uint64) {
	o := &r.outcome
	switch {
	case o.Verdict == rings.VerdictNone:
		o.Verdict, o.Target = v, t
	case o.Verdict != v || o.Target != t:
		r.mixed = true
	}
	o.Bytes += bytes
}

// scatter moves nd's packets to the vectors of the nodes their edges lead
// to, leaving nd's vector empty, and counts their bytes at the nodes they
// arrive at. Successors come later in topological order, and a packet sits
// in one vector at a time, so no vector overflows its capacity.
func (r *Runner) scatter(nd *rnode, descs []rings.Desc, idx []uint16, next []Edge) {
	idx = idx[:len(next)]
	e0 := next[0]
	if allEqual(next, e0) {
		dst := &r.nodes[nd.table[e0]]
		sum := nd.vecBytes
		if !nd.keepsLen {
			sum = sumLen(descs, idx)
		}
		nd.edgePackets[e0] += uint64(len(idx))
		nd.edgeBytes[e0] += sum
		dst.bytes += sum
		dst.vecBytes += sum
		if len(dst.vec) == 0 {
			// Fast path: hand over the whole vector, take the empty one.
			dst.vec, nd.vec = idx, dst.vec
			return
		}
		dst.vec = append(dst.vec, idx...)
		nd.vec = idx[:0]
		return
	}
	for k, e := range next {
		i := idx[k]
		dst := &r.nodes[nd.table[e]]
		n := uint64(descs[i].Len)
		nd.edgePackets[e]++
		nd.edgeBytes[e] += n
		dst.bytes += n
		dst.vecBytes += n
		dst.vec = append(dst.vec, i)
	}
	nd.vec = idx[:0]
}

// allEqual reports whether every edge in next is e, comparing eight at a
// time.
func allEqual(next []Edge, e Edge) bool {
	w := uint64(e) * 0x0101010101010101
	k := 0
	// k < len-7 rather than k+8 <= len: the compiler then proves next[k:]
	// at least 8 long, and the loop has no bounds checks.
	for ; k < len(next)-7; k += 8 {
		if binary.LittleEndian.Uint64(next[k:]) != w {
			return false
		}
	}
	for ; k < len(next); k++ {
		if next[k] != e {
			return false
		}
	}
	return true
}

// sumLen returns the sum of Desc.Len of the packets idx names, with four
// independent sums so the loads overlap.
func sumLen(descs []rings.Desc, idx []uint16) uint64 {
	var s0, s1, s2, s3 uint64
	k := 0
	for ; k+4 <= len(idx); k += 4 {
		q := idx[k : k+4 : k+4]
		s0 += uint64(descs[q[0]].Len)
		s1 += uint64(descs[q[1]].Len)
		s2 += uint64(descs[q[2]].Len)
		s3 += uint64(descs[q[3]].Len)
	}
	for _, i := range idx[k:] {
		s0 += uint64(descs[i].Len)
	}
	return s0 + s1 + s2 + s3
}

// NodeStats counts what one node of a graph did.
type NodeStats struct {
	Name    string
	Kind    string
	Calls   uint64 // vectors processed (about one per batch that reached the node)
	Packets uint64
	Bytes   uint64 // sum of Desc.Len of the packets, as they arrived at the node
	Nanos   uint64 // time spent, with RunnerOptions.Timing
	// Edges counts the packets that left the node by each edge, in edge
	// order (Graph.Stages()[i].Edges), then, when a stage wrote edge
	// numbers it does not have, one more entry for those: they went to the
	// internal_bad_edge drop. Nil for terminals.
	Edges []uint64
	// EdgeBytes is Edges in bytes (sum of Desc.Len as the packets left).
	EdgeBytes []uint64
}

// Stats appends the runner's per-node counts to dst, in Graph.Stages order.
// Call it only while the runner is not processing.
func (r *Runner) Stats(dst []NodeStats) []NodeStats {
	for i := range r.nodes {
		n := &r.nodes[i]
		st := NodeStats{
			Name: r.g.nodes[i].name, Kind: r.g.nodes[i].kind,
			Calls: n.calls, Packets: n.packets, Bytes: n.bytes, Nanos: n.nanos,
		}
		if n.edgePackets != nil {
			ne := len(r.g.nodes[i].edges)
			st.Edges = append([]uint64(nil), n.edgePackets[:ne]...)
			st.EdgeBytes = append([]uint64(nil), n.edgeBytes[:ne]...)
			var bad, badBytes uint64
			for e, c := range n.edgePackets[ne:] {
				bad += c
				badBytes += n.edgeBytes[ne+e]
			}
			if bad > 0 {
				st.Edges = append(st.Edges, bad)
				st.EdgeBytes = append(st.EdgeBytes, badBytes)
			}
		}
		dst = append(dst, st)
	}
	return dst
}

// Counters adds node i's stage counters into dst (the stage's layout's
// length: Graph.Stages()[i].Counters) and reports whether the node has
// any. Call it only while the runner is not processing.
func (r *Runner) Counters(i int, dst []counters.Value) bool {
	rep, ok := r.nodes[i].stage.(Reporter)
	if ok {
		rep.Report(dst)
	}
	return ok
}

// SumStats adds src's counts into dst, matching nodes by name (runners of
// the same graph report the same nodes in the same order, which is the fast
// case), appending nodes dst lacks. It returns the updated dst.
func SumStats(dst, src []NodeStats) []NodeStats {
	for i, s := range src {
		j := i
		if j >= len(dst) || dst[j].Name != s.Name {
			j = -1
			for k := range dst {
				if dst[k].Name == s.Name {
					j = k
					break
				}
			}
		}
		if j < 0 {
			// Own copies: later sums add into them, and src is not ours.
			s.Edges = slices.Clone(s.Edges)
			s.EdgeBytes = slices.Clone(s.EdgeBytes)
			dst = append(dst, s)
			continue
		}
		d := &dst[j]
		d.Calls += s.Calls
		d.Packets += s.Packets
		d.Bytes += s.Bytes
		d.Nanos += s.Nanos
		d.Edges = addCounts(d.Edges, s.Edges)
		d.EdgeBytes = addCounts(d.EdgeBytes, s.EdgeBytes)
	}
	return dst
}

// addCounts adds src into dst element by element, growing dst to src's
// length, and returns dst.
func addCounts(dst, src []uint64) []uint64 {
	for len(dst) < len(src) {
		dst = append(dst, 0)
	}
	for i, c := range src {
		dst[i] += c
	}
	return dst
}
