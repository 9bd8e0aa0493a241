package rings

import (
	"errors"
	"maps"
	"strings"
	"testing"
)

func TestTrackerOwners(t *testing.T) {
	a := newTestArena(t, 4, 2048, 0)
	tr := NewTracker(a)
	port := tr.Owner("port0")
	if tr.Owner("port0") != port || tr.Owner("free") != OwnerFree || tr.Owner("untracked") != OwnerUntracked {
		t.Fatal("Owner does not intern names")
	}
	if port == OwnerFree || port == OwnerUntracked || tr.Owner("ring") == port {
		t.Fatal("distinct names share an owner")
	}
	if tr.Name(port) != "port0" || tr.Name(Owner(999)) != "owner(999)" {
		t.Fatalf("Name = %q, %q", tr.Name(port), tr.Name(Owner(999)))
	}
}

func TestTrackerAdoptsArenaState(t *testing.T) {
	a := newTestArena(t, 4, 2048, 0)
	a.Alloc()
	a.Alloc()
	tr := NewTracker(a)
	counts, err := tr.Check(nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"free": 2, "untracked": 2}; !maps.Equal(counts, want) {
		t.Fatalf("counts %v, want %v", counts, want)
	}
}

// TestTrackerMoves runs scripted hand-offs; each step must fail with the
// given sentinel (or succeed) and failed steps must change nothing.
func TestTrackerMoves(t *testing.T) {
	a := newTestArena(t, 4, 2048, 128)
	tr := NewTracker(a)
	port, ring, worker := tr.Owner("port"), tr.Owner("ring"), tr.Owner("worker")
	addr, ok := tr.Alloc(port)
	if !ok || addr != 128 {
		t.Fatalf("Alloc = %#x, %v", addr, ok)
	}
	tests := []struct {
		name     string
		addr     uint64
		from, to Owner
		err      error
		msg      string // substring of the error
	}{
		{"port to ring", addr, port, ring, nil, ""},
		{"any address in the frame", addr + 1000, ring, worker, nil, ""},
		{"wrong owner", addr, port, ring, ErrWrongOwner, "held by worker"},
		{"free frame taken by someone else", 2048, port, ring, ErrWrongOwner, "held by free"},
		{"outside the arena", 4 * 2048, worker, ring, ErrBadAddr, ""},
		{"worker frees", addr, worker, OwnerFree, nil, ""},
		{"double free", addr, worker, OwnerFree, ErrDoubleFree, "frame 0x0"},
		{"double free by another owner", addr, ring, OwnerFree, ErrDoubleFree, ""},
	}
	for _, tt := range tests {
		before, _ := tr.OwnerOf(tt.addr)
		err := tr.Move(tt.addr, tt.from, tt.to)
		if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
			t.Fatalf("%s: Move = %v, want %v", tt.name, err, tt.err)
		}
		if err != nil {
			if !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("%s: error %q lacks %q", tt.name, err, tt.msg)
			}
			if after, _ := tr.OwnerOf(tt.addr); after != before {
				t.Fatalf("%s: failed move changed the owner to %s", tt.name, tr.Name(after))
			}
		}
	}
	if _, err := tr.OwnerOf(1 << 40); !errors.Is(err, ErrBadAddr) {
		t.Fatalf("OwnerOf outside = %v", err)
	}
}

func TestTrackerCatchesDoubleFreeBeforeTheArena(t *testing.T) {
	a := newTestArena(t, 4, 2048, 0)
	tr := NewTracker(a)
	w := tr.Owner("worker")
	addr, _ := tr.Alloc(w)
	if err := tr.Free(addr, w); err != nil {
		t.Fatal(err)
	}
	if err := tr.Free(addr, w); !errors.Is(err, ErrDoubleFree) {
		t.Fatalf("second Free = %v, want ErrDoubleFree", err)
	}
	if a.FreeFrames() != 4 {
		t.Fatalf("double free reached the arena: %d free frames of 4", a.FreeFrames())
	}
	if _, err := tr.Check(nil); err != nil {
		t.Fatalf("Check after a caught double free: %v", err)
	}
}

func TestTrackerCheck(t *testing.T) {
	type world struct {
		a                  *Arena
		tr                 *Tracker
		port, ring, worker Owner
		inRing, inWorker   []Desc
	}
	// setup: 8 frames; 3 in the ring, 2 with the worker, 1 with the port
	// (not listed, so only counted), 2 free.
	setup := func(t *testing.T) *world {
		w := &world{a: newTestArena(t, 8, 2048, 64)}
		w.tr = NewTracker(w.a)
		w.port, w.ring, w.worker = w.tr.Owner("port"), w.tr.Owner("ring"), w.tr.Owner("worker")
		for i := range 6 {
			addr, _ := w.tr.Alloc(w.port)
			d := Desc{Addr: addr, Len: 60}
			switch {
			case i < 3:
				must(t, w.tr.Move(addr, w.port, w.ring))
				w.inRing = append(w.inRing, d)
			case i < 5:
				must(t, w.tr.Move(addr, w.port, w.worker))
				w.inWorker = append(w.inWorker, d)
			}
		}
		return w
	}
	tests := []struct {
		name   string
		mutate func(w *world)
		errs   []error // every sentinel the joined error must wrap; none means clean
		msg    string
	}{
		{"consistent", func(w *world) {}, nil, ""},
		{"ring dropped a frame", func(w *world) { w.inRing = w.inRing[:2] }, []error{ErrLostFrame}, "recorded as ring's is not there"},
		{"frame in ring and worker", func(w *world) { w.inWorker = append(w.inWorker, w.inRing[0]) }, []error{ErrDuplicateFrame}, "held by ring and by worker"},
		{"handed on without a move", func(w *world) {
			w.inWorker = append(w.inWorker, w.inRing[2])
			w.inRing = w.inRing[:2]
		}, []error{ErrWrongOwner}, "found in worker but recorded as ring's"},
		{"arena double free behind the tracker's back", func(w *world) {
			w.a.Free(w.inWorker[0].Addr)
			w.a.Free(w.inWorker[0].Addr)
		}, []error{ErrDoubleFree, ErrWrongOwner, ErrDuplicateFrame}, "on the free stack twice"},
		{"free frame leaked off the stack", func(w *world) { w.a.Alloc() }, []error{ErrLostFrame}, "recorded as free's is not there"},
		{"garbage on the free stack", func(w *world) { w.a.free = append(w.a.free, 100) }, []error{ErrBadAddr}, "free stack holds 0x64"},
		{"descriptor outside the arena", func(w *world) { w.inRing = append(w.inRing, Desc{Addr: 1 << 30}) }, []error{ErrBadAddr}, "ring holds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := setup(t)
			tt.mutate(w)
			counts, err := w.tr.Check(map[Owner][]Desc{w.ring: w.inRing, w.worker: w.inWorker})
			if want := map[string]int{"free": 2, "ring": 3, "worker": 2, "port": 1}; !maps.Equal(counts, want) {
				t.Errorf("counts %v, want %v", counts, want)
			}
			if len(tt.errs) == 0 {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Check found nothing wrong")
			}
			for _, want := range tt.errs {
				if !errors.Is(err, want) {
					t.Errorf("Check error does not wrap %v:\n%v", want, err)
				}
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Check error lacks %q:\n%v", tt.msg, err)
			}
		})
	}
}

// TestTrackerFollowsFramesThroughRings walks frames through an SPSC and an
// MPMC ring and back to the free stack, the way a dataplane moves them.
func TestTrackerFollowsFramesThroughRings(t *testing.T) {
	a := newTestArena(t, 32, 2048, 128)
	tr := NewTracker(a)
	rx, spscO, mpmcO, tx := tr.Owner("rx"), tr.Owner("spsc"), tr.Owner("mpmc"), tr.Owner("tx")
	s := newTestSPSC(t, 16)
	m := newTestMPMC(t, 16)
	batch := make([]Desc, 0, 16)
	for range 12 {
		addr, _ := tr.Alloc(rx)
		batch = append(batch, Desc{Addr: addr, Len: 64})
	}
	must(t, tr.MoveDescs(batch, rx, spscO))
	if n := s.Enqueue(batch); n != 12 {
		t.Fatalf("enqueue %d", n)
	}
	out := make([]Desc, 16)
	n := s.Dequeue(out[:5])
	must(t, tr.MoveDescs(out[:n], spscO, mpmcO))
	m.Enqueue(out[:n])

	// Audit mid-flight: drain the rings to list them, then put back.
	inS := make([]Desc, 16)
	inS = inS[:s.Dequeue(inS)]
	inM := make([]Desc, 16)
	inM = inM[:m.Dequeue(inM)]
	counts, err := tr.Check(map[Owner][]Desc{spscO: inS, mpmcO: inM, rx: nil, tx: nil})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"free": 20, "spsc": 7, "mpmc": 5}; !maps.Equal(counts, want) {
		t.Fatalf("counts %v, want %v", counts, want)
	}
	s.Enqueue(inS)
	m.Enqueue(inM)

	// Drain both rings to tx, then free. Forgetting one frame is caught.
	for _, r := range []struct {
		deq  func([]Desc) int
		from Owner
	}{{s.Dequeue, spscO}, {m.Dequeue, mpmcO}} {
		n := r.deq(out)
		must(t, tr.MoveDescs(out[:n], r.from, tx))
		for _, d := range out[:n] {
			if d.Addr == batch[11].Addr {
				continue // the bug under test: a frame the output forgot to free
			}
			must(t, tr.Free(d.Addr, tx))
		}
	}
	_, err = tr.Check(map[Owner][]Desc{tx: nil})
	if !errors.Is(err, ErrLostFrame) || !strings.Contains(err.Error(), "recorded as tx's") {
		t.Fatalf("Check = %v, want the frame tx lost", err)
	}
	must(t, tr.Free(batch[11].Addr, tx))
	counts, err = tr.Check(map[Owner][]Desc{tx: nil})
	if err != nil || counts["free"] != 32 {
		t.Fatalf("after freeing everything: %v, %v", counts, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestTrackerEnter: a frame enters a place from wherever it is, unless it
// is already there or in a busy place: then the error names the frame and
// both places.
func TestTrackerEnter(t *testing.T) {
	a := newTestArena(t, 4, 2048, 0)
	tr := NewTracker(a)
	engine, rx := tr.Owner("engine"), tr.Owner("xsk0 rx")
	addr, _ := tr.Alloc(rx)
	from, err := tr.Enter(addr, engine, engine)
	if err != nil || from != rx {
		t.Fatalf("enter from rx: from %s, %v", tr.Name(from), err)
	}
	if o, _ := tr.OwnerOf(addr); o != engine {
		t.Fatalf("frame now held by %s, want engine", tr.Name(o))
	}
	_, err = tr.Enter(addr+100, engine)
	if !errors.Is(err, ErrDuplicateFrame) || !strings.Contains(err.Error(), "frame 0x0 enters engine while held by engine") {
		t.Fatalf("enter twice: %v", err)
	}
	other, _ := tr.Alloc(rx)
	if err := tr.Move(other, rx, engine); err != nil {
		t.Fatal(err)
	}
	_, err = tr.Enter(other, tr.Owner("xsk0 tx"), engine)
	if !errors.Is(err, ErrDuplicateFrame) || !strings.Contains(err.Error(), "enters xsk0 tx while held by engine") {
		t.Fatalf("enter from a busy place: %v", err)
	}
	if o, _ := tr.OwnerOf(other); o != engine {
		t.Fatalf("failed enter recorded a move: held by %s", tr.Name(o))
	}
	if _, err := tr.Enter(1<<40, engine); !errors.Is(err, ErrBadAddr) {
		t.Fatalf("enter outside the arena: %v", err)
	}
	if p := tr.Places(); len(p) != 5 || p[engine] != "engine" || p[OwnerFree] != "free" {
		t.Fatalf("places %v", p)
	}
}
