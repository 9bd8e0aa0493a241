package pipelines

import (
	"runtime"
	"testing"

	"github.com/warpflow/warpflow/internal/allocs"
)

// TestTickAfterSwapMakesNoTable: after a swap that carries the stage, a
// worker that saw no packet in either plan is ticked: the tick must not
// make a table (it allocated a whole one, 7 allocations, for a stage with
// no clock and no flows), while a carried table that has a clock is
// taken over by the tick and expires its flows on it, allocating
// nothing.
func TestTickAfterSwapMakesNoTable(t *testing.T) {
	y := ctYAML(", size: 4096", "")
	old := newSFRig(t, y) // the old plan's runner: never ran
	nw := newSFRig(t, y)  // the new plan's runner of the same worker
	if got := nw.r.CarryState([]*Runner{old.r}, nil, func(string) bool { return true }); len(got) != 1 {
		t.Fatalf("carried %v", got)
	}
	st := nw.stage("ct").(*ctStage)
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	before := m.Mallocs
	nw.r.Tick(1 << 40) // the first tick after the swap (not warmed up: it is the one that allocates)
	runtime.ReadMemStats(&m)
	n := m.Mallocs - before
	if st.tab != nil || n != 0 {
		t.Fatalf("a tick on a carried stage that has seen no packet: table made %v, %d allocations (want none)", st.tab != nil, n)
	}
}

func TestTickAfterSwapTakesTheTableOver(t *testing.T) {
	y := ctYAML(", size: 4096, timeouts: {udp: 1}", "")
	old := newSFRig(t, y)
	old.one(sfUDP(t, cli, srv, 1000, 53, 8))
	nw := newSFRig(t, y)
	if got := nw.r.CarryState([]*Runner{old.r}, nil, func(string) bool { return true }); len(got) != 1 {
		t.Fatalf("carried %v", got)
	}
	st := nw.stage("ct").(*ctStage)
	now := uint64(old.now)
	// Counted from the first tick, the take-over's (allocs.Count would
	// run a first call uncounted); one P, as allocs.Count measures, so
	// that no other goroutine's allocation is counted.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	before := m.Mallocs
	for range 200 { // 20 s of ticks: past the timeout and a sweep period
		now += IdleTickMS
		nw.r.Tick(now)
	}
	runtime.ReadMemStats(&m)
	if n := m.Mallocs - before; n != 0 {
		t.Fatalf("%d allocations in the ticks that took the table over", n)
	}
	if st.tab == nil || st.tab != old.stage("ct").(*ctStage).tab {
		t.Fatal("the ticks did not take the old plan's table over")
	}
	if got := stCounter(st, "expiries"); got != 1 || st.tab.n != 0 {
		t.Fatalf("after 20 s of ticks: %d expiries, %d flows (want the one flow expired)", got, st.tab.n)
	}
}

// TestTickAfterResizingSwapCopies: a swap that changes the table's size
// copies the flows into a new table; on an idle worker a tick does that
// copy (once: ticks after it allocate nothing) and the flows expire on
// the ticks, the entries gauge following, where they used to wait for
// the first packet.
func TestTickAfterResizingSwapCopies(t *testing.T) {
	old := newSFRig(t, ctYAML(", size: 4096, timeouts: {udp: 1}", ""))
	for f := range 10 {
		old.one(sfUDP(t, cli, srv, uint16(1000+f), 53, 8))
	}
	nw := newSFRig(t, ctYAML(", size: 8192, timeouts: {udp: 1}", ""))
	if got := nw.r.CarryState([]*Runner{old.r}, nil, func(string) bool { return false }); len(got) != 1 {
		t.Fatalf("carried %v", got)
	}
	st := nw.stage("ct").(*ctStage)
	now := uint64(old.now) + 100
	nw.r.Tick(now) // the copy
	if st.tab == nil || len(st.tab.ent) != 8192 || st.tab.n != 10 {
		t.Fatalf("after the first tick: table %v", st.tab != nil)
	}
	if got := stCounter(st, "entries"); got != 10 {
		t.Fatalf("entries %d after the copy, want 10", got)
	}
	if n := allocs.Count(200, func() { now += IdleTickMS; nw.r.Tick(now) }); n != 0 {
		t.Fatalf("%d allocations in 200 ticks after the copy", n)
	}
	if got, left := stCounter(st, "expiries"), stCounter(st, "entries"); got != 10 || left != 0 || st.tab.n != 0 {
		t.Fatalf("after 20 s of ticks: %d expiries, entries %d, %d flows held (want all 10 expired)", got, left, st.tab.n)
	}
}
