package pipelines

import "testing"

// countFlows serves one count request on st (a quiescent instance) and
// returns the flows it matched.
func countFlows(t *testing.T, st *ctStage) int {
	t.Helper()
	n := 0
	for from := 0; from >= 0; {
		r := &FlowRequest{From: from}
		if err := st.Post(r); err != nil {
			t.Fatal(err)
		}
		st.Serve()
		<-r.Done
		n += r.Matched
		from = r.Next
	}
	return n
}

// TestCarryFromClocklessTable: a re-steering (or resizing, or
// worker-count) swap copies the flows of every old worker's table. One
// old worker was idle, its table made by a control request before any
// packet (no clock: now 0). setup used to start the new table's clock
// from every source, the clockless one too: after the busy worker's
// flows were copied at its clock T, its zero moved the clock, and for T
// at or above 2^30 (most of every 49.7 days of a live clock) every copied
// flow expired (0 of 10 kept). A table no packet reached is skipped.
func TestCarryFromClocklessTable(t *testing.T) {
	y := ctYAML(", size: 4096", "")
	for _, T := range []uint32{1 << 20, 3 << 29, 3 << 30} {
		busy := newSFRig(t, y)
		busy.now = T
		for f := range 10 {
			busy.one(sfUDP(t, cli, srv, uint16(1000+f), 53, 8))
		}
		idle := newSFRig(t, y)
		if n := countFlows(t, idle.stage("ct").(*ctStage)); n != 0 {
			t.Fatalf("idle worker: %d flows", n)
		}
		nw := newSFRig(t, y)
		all := func(src, dst *[16]byte, sport, dport uint16, proto uint8, v6 bool) bool { return true }
		if got := nw.r.CarryState([]*Runner{busy.r, idle.r}, all, func(string) bool { return true }); len(got) != 1 {
			t.Fatalf("carried %v", got)
		}
		st := nw.stage("ct").(*ctStage)
		nw.r.Tick(uint64(T) + 100) // an idle worker's tick after the swap: the copy
		if st.tab == nil {
			t.Fatalf("T=%#x: the tick did not take the flows over", T)
		}
		if n := countFlows(t, st); n != 10 {
			t.Errorf("T=%#x: %d of the 10 carried flows left 100 ms after the swap (clock %#x)", T, n, st.tab.now)
		}
	}
}
