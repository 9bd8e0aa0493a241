package pipelines

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sync/atomic"

	"github.com/warpflow/warpflow/counters"

	"go.yaml.in/yaml/v3"
)

// LiveReporter is a Reporter whose counters can also be read while its
// worker runs: the filter's per-rule hits, the count stage's per-key
// counts, the rewrite stage's exceptions.
//
// The stage keeps plain counters on the hot path, as every stage does,
// and marks which ones moved (a flag test per counter touched, no map, no
// lock, no allocation). PublishCounters, which the runner calls from
// Runner.Publish on the worker's own goroutine (after a partial batch and
// at least every publishEvery packets), stores the moved ones into
// single-writer atomics; LiveReport reads those from any goroutine.
//
// What a reader gets: each counter is exact as of one publish of its
// worker (at most publishEvery packets old under load, exact at rest) and
// never goes down; counters are not a snapshot of one instant across
// each other (a rule's packets and bytes, or two rules, may be one
// publish apart).
type LiveReporter interface {
	Reporter
	// PublishCounters stores the counters that changed since its last
	// call where LiveReport reads them. Worker goroutine only.
	PublishCounters()
	// LiveReport adds the published counters into dst, like Report. Safe
	// from any goroutine, concurrently with Process and PublishCounters;
	// it does not allocate.
	LiveReport(dst []counters.Value)
}

// liveTable is the published side of a stage's n plain counters: an
// atomic pair per counter and the list of those that moved since the
// last publish. mark is the only hot-path call.
type liveTable struct {
	pkts, bytes []atomic.Uint64
	dirty       []bool
	moved       []int32 // indices marked since the last publish, cap n
}

func newLiveTable(n int) liveTable {
	return liveTable{
		pkts: make([]atomic.Uint64, n), bytes: make([]atomic.Uint64, n),
		dirty: make([]bool, n), moved: make([]int32, 0, n),
	}
}

// mark notes that counter i moved. Each index enters moved at most once
// between publishes, so the append never grows it past its capacity.
func (t *liveTable) mark(i int) {
	if !t.dirty[i] {
		t.dirty[i] = true
		t.moved = append(t.moved, int32(i))
	}
}

// publishPairs stores the moved counters of parallel packet and byte
// slices.
func (t *liveTable) publishPairs(pkts, bytes []uint64) {
	for _, i := range t.moved {
		t.pkts[i].Store(pkts[i])
		t.bytes[i].Store(bytes[i])
		t.dirty[i] = false
	}
	t.moved = t.moved[:0]
}

// publishCounters stores the moved counters of c.
func (t *liveTable) publishCounters(c []rwCounter) {
	for _, i := range t.moved {
		t.pkts[i].Store(c[i].packets)
		t.bytes[i].Store(c[i].bytes)
		t.dirty[i] = false
	}
	t.moved = t.moved[:0]
}

// load returns counter i as published.
func (t *liveTable) load(i int) (pkts, bytes uint64) {
	return t.pkts[i].Load(), t.bytes[i].Load()
}

// addPairs adds parallel packet and byte counters into dst, in order.
func addPairs(dst []counters.Value, pkts, bytes []uint64) {
	for k := range dst {
		dst[k].Value += pkts[k]
		dst[k].Bytes += bytes[k]
	}
}

// addTo adds the published counters at indices [from, from+len(dst)) into
// dst.
func (t *liveTable) addTo(dst []counters.Value, from int) {
	for k := range dst {
		dst[k].Value += t.pkts[from+k].Load()
		dst[k].Bytes += t.bytes[from+k].Load()
	}
}

// LiveCounters adds node i's published stage counters into dst (the
// stage's layout's length: Graph.Stages()[i].Counters), like Counters but
// safe from any goroutine while the runner processes (see LiveReporter
// for what a reader sees). It reports false, adding nothing, for a node
// whose stage keeps no live counters.
func (r *Runner) LiveCounters(i int, dst []counters.Value) bool {
	lr, ok := r.nodes[i].stage.(LiveReporter)
	if ok {
		lr.LiveReport(dst)
	}
	return ok
}

// publishLive is the stage half of Publish.
func (r *Runner) publishLive() {
	for _, lr := range r.lives {
		lr.PublishCounters()
	}
}

// configPrint is a stage's configuration as written, without positions
// or comments: two stages with the same print were configured the same,
// so their stage-specific counters mean the same across a swap. It is
// the SHA-256 of the tree's kinds, tags and values in order (hex), not
// the tree itself: a graph keeps one print per stage for as long as it
// runs, and a 100,000-rule filter's tree written out is tens of MB.
func configPrint(n *yaml.Node) string {
	h := sha256.New()
	w := bufio.NewWriterSize(h, 4096)
	// Each string goes in after its length, so no choice of bytes in
	// one can make two different trees print alike.
	var l [binary.MaxVarintLen64]byte
	str := func(s string) {
		w.Write(l[:binary.PutUvarint(l[:], uint64(len(s)))])
		w.WriteString(s)
	}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n == nil {
			return
		}
		if n.Kind == yaml.AliasNode {
			// Never followed: an alias is a pointer into the tree, and
			// following nested ones is the expansion an alias bomb
			// counts on. Parse refuses aliases before any tree exists;
			// a Spec built in code that has one prints its name.
			w.WriteByte('*')
			str(n.Value)
			return
		}
		w.WriteByte(byte('0' + n.Kind))
		str(n.Tag)
		str(n.Value)
		w.WriteByte('(')
		for _, c := range n.Content {
			walk(c)
		}
		w.WriteByte(')')
	}
	walk(n)
	w.Flush()
	return hex.EncodeToString(h.Sum(nil))
}
