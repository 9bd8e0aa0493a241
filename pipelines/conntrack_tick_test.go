package pipelines

import (
	"testing"

	"github.com/warpflow/warpflow/internal/allocs"
)

// TestConntrackTickExpiresIdleFlows: a worker whose link went quiet gets
// ticks (Ticker) instead of packets; its flows expire on them as they
// would under traffic, within the sweep's period, and the entries gauge
// and the expiries counter say so. Before the ticks an idle table kept
// every flow, expired or not, until traffic resumed.
func TestConntrackTickExpiresIdleFlows(t *testing.T) {
	s := newSFRig(t, ctYAML(", size: 4096, timeouts: {udp: 1}", ""))
	const flows = 300
	for f := range flows {
		s.one(sfUDP(t, cli, srv, uint16(1000+f), 53, 8))
	}
	st := s.stage("ct").(*ctStage)
	counter := func(k string) uint64 { return stCounter(st, k) }
	if got := counter("entries"); got != flows {
		t.Fatalf("entries %d after %d flows, want %d", got, flows, flows)
	}
	now := uint64(s.now)
	// Before the timeout a tick expires nothing.
	now += 500
	s.r.Tick(now)
	if got := counter("expiries"); got != 0 {
		t.Fatalf("%d expiries half a timeout on", got)
	}
	if st.tab.now != uint32(now) {
		t.Fatalf("the table's clock is %d after a tick at %d", st.tab.now, now)
	}
	// Ticks every IdleTickMS: 4096*100/10000 = 40 entries a tick, the
	// whole table each sweep period, so every flow is gone within one
	// period (and a tick) of its expiry at 1000 ms.
	expiry := uint64(s.now) + 1000
	for counter("expiries") < flows {
		if now > expiry+ctSweepPeriod+IdleTickMS {
			t.Fatalf("%d ms after the flows' expiry only %d of %d expired", now-expiry, counter("expiries"), flows)
		}
		now += IdleTickMS
		s.r.Tick(now)
	}
	if now <= expiry+ctSweepPeriod/2 {
		t.Fatalf("every flow expired %d ms after the expiry: the sweep took more than it is due", now-expiry)
	}
	if got := counter("entries"); got != 0 {
		t.Fatalf("entries %d after every flow expired, want 0", got)
	}
	if st.tab.n != 0 {
		t.Fatalf("the table holds %d flows after every one expired", st.tab.n)
	}
	// A new flow after the ticks is new, and its timeout runs from the
	// ticked clock (a packet time behind it by less than ctClockBack
	// leaves the clock where the ticks put it).
	s.now = uint32(now)
	if o := s.one(sfUDP(t, cli, srv, 1000, 53, 8)); ctClass(o.m.CT) != "new" {
		t.Fatalf("a flow after its expiry: %s, want new", ctClass(o.m.CT))
	}
	// Ticks never allocate.
	if n := allocs.Count(200, func() { now += IdleTickMS; s.r.Tick(now) }); n != 0 {
		t.Fatalf("%d allocations in 200 ticks, want 0", n)
	}
}

// TestConntrackTickNeedsAClock: a stage that has seen no packet has no
// clock to move and no flows: a tick makes no table (a worker that never
// gets traffic does not reserve one), and the first packet after ticks
// starts the clock at its own time.
func TestConntrackTickNeedsAClock(t *testing.T) {
	s := newSFRig(t, ctYAML(", size: 4096", ""))
	st := s.stage("ct").(*ctStage)
	s.r.Tick(1 << 40)
	if st.tab != nil {
		t.Fatal("a tick made a table for a stage that has seen no packet")
	}
	s.one(sfUDP(t, cli, srv, 1000, 53, 8))
	if st.tab.now != s.now {
		t.Fatalf("clock %d after the first packet at %d", st.tab.now, s.now)
	}
}

// TestRunnerTicksOnEmptyEpochBatch: the engine ticks a steered worker
// with an empty batch that carries its whole time (Batch.Epoch); an
// empty batch without one (a replay's: the port's own times) is no tick,
// so a replay's clock stays the capture's.
func TestRunnerTicksOnEmptyEpochBatch(t *testing.T) {
	s := newSFRig(t, ctYAML(", size: 4096, timeouts: {udp: 1}", ""))
	s.one(sfUDP(t, cli, srv, 1000, 53, 8))
	st := s.stage("ct").(*ctStage)
	was := st.tab.now
	b := s.b
	b.Clear()
	b.SetTime(s.now + 5000) // a replay port's time: no Epoch
	s.r.Process(b)
	if st.tab.now != was {
		t.Fatalf("an empty batch without an epoch moved the clock from %d to %d", was, st.tab.now)
	}
	b.Clear()
	b.SetTime64(uint64(s.now) + 5000)
	s.r.Process(b)
	if st.tab.now != s.now+5000 {
		t.Fatalf("an empty batch with an epoch: clock %d, want %d", st.tab.now, s.now+5000)
	}
	// The sweep ran on it: 5 s of the clock owe 4096*5000/10000 = 2048
	// entries, and the one flow sits in the first of them.
	if got := stCounter(st, "expiries"); got != 1 {
		t.Fatalf("expiries %d after the tick, want 1", got)
	}
}
