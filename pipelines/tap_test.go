package pipelines

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/warpflow/warpflow/rings"

	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/internal/testwait"
)

const tapPipeline = "name: t\nstages:\n  - {name: parse, type: parse}\n" +
	"  - {name: acl, type: filter, rules: [{proto: udp, dst_port: 9, action: \"drop:nine\"}], default: out}\n" +
	"  - {name: out, type: tx, port: p}\n"

// tapBatch is n UDP packets, destination port 9 for every odd one, each
// carrying its index at byte 42.
func tapBatch(t testing.TB, a *rings.Arena, n int) *rings.Batch {
	b := rings.NewBatch(n, a)
	for i := range n {
		addr, _ := a.Alloc()
		pkt := a.Frame(addr)[addr&uint64(a.FrameSize()-1):][:64]
		copy(pkt, []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0, 0x45, 0, 0, 50, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2})
		binary.BigEndian.PutUint16(pkt[34:], 1000)
		port := uint16(53)
		if i%2 == 1 {
			port = 9
		}
		binary.BigEndian.PutUint16(pkt[36:], port)
		binary.BigEndian.PutUint16(pkt[38:], 30)
		binary.BigEndian.PutUint32(pkt[42:], uint32(i))
		b.Append(rings.Desc{Addr: addr, Len: 64}, uint64(i), 0)
	}
	return b
}

// TestTap: a tap on a stage takes every packet arriving at it, one on an
// edge only those leaving by it; it stops at its count, truncates to its
// snap length, and costs no allocation on or off.
func TestTap(t *testing.T) {
	g, err := Load("t.yaml", []byte(tapPipeline))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := rings.NewArena(rings.ArenaOptions{Frames: 64, FrameSize: 2048, Headroom: 256})
	b := tapBatch(t, a, 32)
	for _, tc := range []struct {
		stage, edge string
		count, snap int
		want        []uint32 // packet indices, in order
		wantLen     int
	}{
		{"acl", "", 100, 100, seq(0, 32, 1), 64},
		{"acl", "drop:nine", 100, 50, seq(1, 32, 2), 50},
		{"acl", "out", 5, 64, seq(0, 10, 2), 64},
		{"out", "", 3, 64, []uint32{0, 2, 4}, 64},
	} {
		tap, err := g.NewTap(tc.stage, tc.edge, tc.count, tc.snap, 1<<16)
		if err != nil {
			t.Fatal(err)
		}
		r := g.NewRunner(RunnerOptions{})
		r.SetTap(tap)
		r.Process(b)
		var got []uint32
		tap.Drain(func(ts time.Time, data []byte, length int) {
			if len(data) != tc.wantLen || length != 64 || time.Since(ts) > time.Minute {
				t.Errorf("%s/%s: record of %d bytes (of %d) at %v", tc.stage, tc.edge, len(data), length, ts)
			}
			got = append(got, binary.BigEndian.Uint32(data[42:]))
		})
		if len(got) != len(tc.want) {
			t.Fatalf("%s/%s: tapped %v, want %v", tc.stage, tc.edge, got, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("%s/%s: tapped %v, want %v", tc.stage, tc.edge, got, tc.want)
			}
		}
		if tap.Taken() != uint64(len(tc.want)) || (tc.count <= len(tc.want)) != tap.Done() {
			t.Fatalf("%s/%s: taken %d, done %v", tc.stage, tc.edge, tap.Taken(), tap.Done())
		}
	}
	for _, bad := range [][2]string{{"nope", ""}, {"acl", "nope"}, {"out", "x"}} {
		if _, err := g.NewTap(bad[0], bad[1], 1, 64, 1<<16); err == nil {
			t.Errorf("tap %v accepted", bad)
		}
	}
	// No allocation with the tap off, nor on (its buffer is preallocated).
	r := g.NewRunner(RunnerOptions{})
	if n := allocs.Count(100, func() { r.Process(b) }); n != 0 {
		t.Fatalf("%d allocations in 100 batches without a tap, want 0", n)
	}
	tap, _ := g.NewTap("acl", "", 1<<30, 64, 1<<20)
	r.SetTap(tap)
	if n := allocs.Count(100, func() { r.Process(b); tap.Drain(func(time.Time, []byte, int) {}) }); n != 0 {
		t.Fatalf("%d allocations in 100 batches with a tap, want 0", n)
	}
	// A full buffer misses packets, never blocks.
	small, _ := g.NewTap("acl", "", 100, 64, 5*(64+16))
	r.SetTap(small)
	r.Process(b)
	if small.Taken() != 5 || small.Missed() != 27 {
		t.Fatalf("full buffer: taken %d, missed %d", small.Taken(), small.Missed())
	}
}

func seq(from, to, step int) []uint32 {
	var out []uint32
	for i := from; i < to; i += step {
		out = append(out, uint32(i))
	}
	return out
}

// TestLiveStats: LiveStats, read while another goroutine processes, ends
// equal to Stats at rest.
func TestLiveStats(t *testing.T) {
	g, err := Load("t.yaml", []byte(tapPipeline))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := rings.NewArena(rings.ArenaOptions{Frames: 64, FrameSize: 2048, Headroom: 256})
	b := tapBatch(t, a, 32)
	r := g.NewRunner(RunnerOptions{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 2000 {
			r.Process(b)
		}
	}()
	var last uint64
	deadline := time.Now().Add(testwait.Deadline)
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
			if time.Now().After(deadline) {
				t.Fatalf("gave up after %v waiting for the processing goroutine's 2000 batches", testwait.Deadline)
			}
		}
		st := r.LiveStats(nil)
		if st[0].Packets < last {
			t.Fatalf("live packets went back from %d to %d", last, st[0].Packets)
		}
		last = st[0].Packets
	}
	r.Publish()
	live, rest := r.LiveStats(nil), r.Stats(nil)
	for i := range rest {
		if live[i].Packets != rest[i].Packets || live[i].Calls != rest[i].Calls || live[i].Bytes != rest[i].Bytes || len(live[i].Edges) != len(rest[i].Edges) {
			t.Fatalf("node %s: live %+v, at rest %+v", rest[i].Name, live[i], rest[i])
		}
		for e := range rest[i].Edges {
			if live[i].Edges[e] != rest[i].Edges[e] {
				t.Fatalf("node %s edge %d: live %d, at rest %d", rest[i].Name, e, live[i].Edges[e], rest[i].Edges[e])
			}
		}
	}
	if rest[0].Packets != 2000*32 {
		t.Fatalf("parse saw %d", rest[0].Packets)
	}
}

// TestTapFollow: a tap followed onto another graph (the tapped stage and
// edge at other node and edge numbers there) takes the same point's
// packets into the same buffers and count; a graph without the point is
// refused, naming what it lacks.
func TestTapFollow(t *testing.T) {
	g, err := Load("t.yaml", []byte(tapPipeline))
	if err != nil {
		t.Fatal(err)
	}
	// acl is node 2 here (1 in t), and the rules send to out.
	g2, err := Load("t2.yaml", []byte("name: t2\nstages:\n  - {name: parse, type: parse}\n  - {name: count, type: count}\n"+
		"  - {name: acl, type: filter, default: \"drop:other\", rules: [{proto: udp, dst_port: 53, action: out}]}\n  - {name: out, type: tx, port: p}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := rings.NewArena(rings.ArenaOptions{Frames: 64, FrameSize: 2048, Headroom: 256})
	b := tapBatch(t, a, 32)
	tap, err := g.NewTap("acl", "out", 24, 64, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	nt, err := tap.Follow(g2)
	if err != nil {
		t.Fatal(err)
	}
	if nt.Graph() != g2 || nt.node == tap.node {
		t.Fatalf("follow: node %d edge %d on %v (was %d, %d): the test graphs no longer differ", nt.node, nt.edge, nt.Graph().Name(), tap.node, tap.edge)
	}
	r, r2 := g.NewRunner(RunnerOptions{}), g2.NewRunner(RunnerOptions{})
	r.SetTap(tap)
	r2.SetTap(nt)
	r.Process(b) // 16 leave acl for out
	b2 := tapBatch(t, a, 32)
	r2.Process(b2) // 16 more, of which 8 fit the count
	var got []uint32
	tap.Drain(func(_ time.Time, data []byte, _ int) { got = append(got, binary.BigEndian.Uint32(data[42:])) })
	want := append(seq(0, 32, 2), seq(0, 16, 2)...)
	if len(got) != len(want) || !tap.Done() || nt.Taken() != 24 {
		t.Fatalf("followed tap took %v (taken %d, done %v), want %v", got, nt.Taken(), tap.Done(), want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("followed tap took %v, want %v", got, want)
		}
	}
	g3, err := Load("t3.yaml", []byte("name: t3\nstages:\n  - {name: parse, type: parse}\n  - {name: acl, type: filter}\n  - {name: rw, type: rewrite, swap_macs: true}\n  - {name: out, type: tx, port: p}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tap.Follow(g3); err == nil || !strings.Contains(err.Error(), `stage "acl" of pipeline "t3" has no edge "out"`) {
		t.Fatalf("follow onto a graph without the edge: %v", err)
	}
	g4, err := Load("t4.yaml", []byte("name: t4\nstages:\n  - {name: out, type: tx, port: p}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tap.Follow(g4); err == nil || !strings.Contains(err.Error(), `pipeline "t4" has no stage "acl"`) {
		t.Fatalf("follow onto a graph without the stage: %v", err)
	}
}
