package pipelines

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warpflow/warpflow/rings"
)

// Tap copies the packets that pass one node of a graph (arriving at it,
// or leaving it by one edge) into a bounded buffer, which a goroutine off
// the data path drains (Drain) and writes out: the VPP `pcap trace` idea.
// Runners take it up with SetTap; with no tap set a runner pays one atomic
// load per batch. With one set, the tapped node's packets are copied (up
// to the snap length) under the tap's lock, once per batch; when the
// buffer is full the packets are counted as missed, never waited for.
// Count bounds the packets taken; after that the tap takes nothing.
type Tap struct {
	g    *Graph
	node int32
	edge int // -1: packets arriving at the node
	// stage and target name the tap point by name (target: the stage the
	// tapped edge leads to, "" for arrivals), for Follow.
	stage, target string
	*tapState
}

// tapState is what the taps of one capture share across graphs (Follow):
// the count left, the counters and the buffers.
type tapState struct {
	snaplen int
	left    atomic.Int64
	taken   atomic.Uint64
	missed  atomic.Uint64

	mu    sync.Mutex
	buf   []byte // records: 8 bytes unix ns, 4 captured length, 4 length, data
	spare []byte
}

const tapHeader = 16

// NewTap makes a tap on g's stage (by name) or, when edge is set, on the
// stage's edge named edge (its target, as Stages lists it, or its number),
// taking at most count packets of at most snaplen bytes each into a buffer
// of bufBytes (two such buffers are used in turn).
func (g *Graph) NewTap(stage, edge string, count, snaplen, bufBytes int) (*Tap, error) {
	t, err := g.tapPoint(stage, edge)
	if err != nil {
		return nil, err
	}
	if count <= 0 || snaplen <= 0 || bufBytes < snaplen+tapHeader {
		return nil, fmt.Errorf("tap: count %d, snaplen %d, buffer %d: want positive values and a buffer that holds one packet", count, snaplen, bufBytes)
	}
	t.tapState = &tapState{snaplen: snaplen}
	t.left.Store(int64(count))
	t.buf = make([]byte, 0, bufBytes)
	t.spare = make([]byte, 0, bufBytes)
	return t, nil
}

// Follow returns a tap on g at t's point, found by name: the stage of the
// same name and, for an edge tap, its edge to the stage of the same name.
// The two share the count, the counters and the buffers, so a capture
// goes on across a swap to g as one capture (the old plan's runners keep
// t until they retire, the new plan's take the new one). It fails, naming
// what is missing, when g has no such stage or edge.
func (t *Tap) Follow(g *Graph) (*Tap, error) {
	nt, err := g.tapPoint(t.stage, t.target)
	if err != nil {
		return nil, err
	}
	nt.tapState = t.tapState
	return nt, nil
}

// Graph is the graph the tap was made for.
func (t *Tap) Graph() *Graph { return t.g }

// tapPoint resolves a tap point of g (no state yet).
func (g *Graph) tapPoint(stage, edge string) (*Tap, error) {
	ni := -1
	for i := range g.nodes {
		if g.nodes[i].name == stage {
			ni = i
		}
	}
	if ni < 0 {
		return nil, fmt.Errorf("tap: pipeline %q has no stage %q", g.name, stage)
	}
	t := &Tap{g: g, node: int32(ni), edge: -1, stage: stage}
	if edge == "" {
		return t, nil
	}
	n := &g.nodes[ni]
	if n.terminal {
		return nil, fmt.Errorf("tap: stage %q is a terminal: it has no edges", stage)
	}
	for e, target := range n.edges {
		if g.nodes[target].name == edge {
			t.edge = e
			break
		}
	}
	if t.edge < 0 {
		if k, err := strconv.Atoi(edge); err == nil && k >= 0 && k < len(n.edges) {
			t.edge = k
		}
	}
	if t.edge < 0 {
		var names []string
		for _, target := range n.edges {
			names = append(names, g.nodes[target].name)
		}
		return nil, fmt.Errorf("tap: stage %q of pipeline %q has no edge %q (its edges lead to %v)", stage, g.name, edge, names)
	}
	t.target = g.nodes[n.edges[t.edge]].name
	return t, nil
}

// Taken is how many packets the tap copied; Missed how many passed while
// its buffer was full; Done reports that it took its count.
func (t *Tap) Taken() uint64  { return t.taken.Load() }
func (t *Tap) Missed() uint64 { return t.missed.Load() }
func (t *Tap) Done() bool     { return t.left.Load() <= 0 }

// Stop makes the tap take nothing more.
func (t *Tap) Stop() { t.left.Store(0) }

// Drain hands every record copied since the last Drain to fn, in order,
// outside the data path's way (the buffers are swapped under the lock,
// then read). The data is valid only during the call.
func (t *Tap) Drain(fn func(ts time.Time, data []byte, length int)) {
	t.mu.Lock()
	full := t.buf
	t.buf = t.spare[:0]
	t.mu.Unlock()
	for b := full; len(b) >= tapHeader; {
		ts := int64(binary.LittleEndian.Uint64(b))
		n := int(binary.LittleEndian.Uint32(b[8:]))
		length := int(binary.LittleEndian.Uint32(b[12:]))
		fn(time.Unix(0, ts), b[tapHeader:tapHeader+n], length)
		b = b[tapHeader+n:]
	}
	t.mu.Lock()
	t.spare = full[:0]
	t.mu.Unlock()
}

// take copies the packets idx names (those with next[k] == edge when next
// is set).
func (t *Tap) take(b *rings.Batch, idx []uint16, next []Edge, edge Edge) {
	if t.left.Load() <= 0 {
		return
	}
	now := uint64(time.Now().UnixNano())
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, i := range idx {
		if next != nil && next[k] != edge {
			continue
		}
		if t.left.Load() <= 0 {
			return
		}
		pkt := b.Packet(int(i))
		n := min(len(pkt), t.snaplen)
		if len(t.buf)+tapHeader+n > cap(t.buf) {
			t.missed.Add(1)
			continue
		}
		t.buf = binary.LittleEndian.AppendUint64(t.buf, now)
		t.buf = binary.LittleEndian.AppendUint32(t.buf, uint32(n))
		t.buf = binary.LittleEndian.AppendUint32(t.buf, uint32(len(pkt)))
		t.buf = append(t.buf, pkt[:n]...)
		t.left.Add(-1)
		t.taken.Add(1)
	}
}

// SetTap makes the runner copy the tapped node's packets into t from its
// next batch on; nil removes the tap. Safe from any goroutine.
func (r *Runner) SetTap(t *Tap) { r.tap.Store(t) }
