package pipelines

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/warpflow/warpflow/internal/allocs"
)

// The reassemble stage's expiry: a datagram that never completes (a lost
// fragment) is forgotten and counted under expiries at its timeout,
// within expire's bound, whether other traffic flows or the link is idle
// (ticks), and the pending gauge follows, across swaps too.

// raxYAML is a pipeline with a reassemble stage and nothing stateful
// after it (so that a tick or a swap concerns the reassemble stage
// alone).
func raxYAML(opts string) string {
	return "name: rax-test\nsettings: {batch_size: 256}\nstages:\n  - {name: parse, type: parse}\n" +
		"  - {name: defrag, type: reassemble" + opts + "}\n  - {name: out, type: tx, port: out}\n"
}

// raDgram returns the three fragments (104, 104 and 92 bytes of payload)
// of a UDP datagram with IP identification id.
func raDgram(t testing.TB, id uint16) [][]byte {
	t.Helper()
	d := sfUDP(t, cli, srv, 4000, 53, 300)
	binary.BigEndian.PutUint16(d[14+4:], id)
	return fragV4(t, d, 104, 104)
}

// raOther is a packet that is not a fragment: traffic that moves the
// vector's clock and nothing else.
func raOther(t testing.TB) []byte { return sfUDP(t, cli, srv, 1000, 53, 8) }

func raStageOf(s *sfRig) *raStage { return s.stage("defrag").(*raStage) }

// raHeld is the datagrams a stage holds, from its arrays.
func raHeld(st *raStage) int { return len(st.recs) - len(st.free) }

// TestReassembleExpiresUnderOtherTraffic: a datagram whose last fragment
// never comes is counted under expiries, and leaves the pending gauge, at
// the first vector at or past its timeout though no fragment comes after
// it: other traffic's vectors move the clock. Before, it waited for a
// fragment of its own key or a full table, and on a link with no more
// fragments was never counted. In full mode its merged fragments stay
// counted under frag_merged, and the datagram once under expiries.
func TestReassembleExpiresUnderOtherTraffic(t *testing.T) {
	raModes(t, func(t *testing.T, opts string) {
		s := newSFRig(t, raxYAML(opts+", timeout: 2"))
		fr := raDgram(t, 7)
		s.send(fr[0], fr[1]) // the last never comes
		st := raStageOf(s)
		merged := stCounter(st, "dropped=frag_merged")
		if got := stCounter(st, "pending"); got != 1 {
			t.Fatalf("pending %d with one datagram in reassembly, want 1", got)
		}
		expiry := s.now + 2000
		for s.advance(100); s.now < expiry; s.advance(100) {
			s.one(raOther(t))
			if got := stCounter(st, "expiries"); got != 0 {
				t.Fatalf("%d expiries %d ms before the timeout", got, expiry-s.now)
			}
		}
		s.one(raOther(t)) // the first vector at the timeout
		if got, left := stCounter(st, "expiries"), stCounter(st, "pending"); got != 1 || left != 0 || raHeld(st) != 0 {
			t.Fatalf("at the timeout: expiries %d, pending %d, %d held (want 1, 0, 0)", got, left, raHeld(st))
		}
		for range 50 {
			s.advance(1000)
			s.one(raOther(t))
		}
		if got := stCounter(st, "expiries"); got != 1 {
			t.Fatalf("expiries %d 50 s on, want the datagram counted once", got)
		}
		if got := stCounter(st, "dropped=frag_merged"); got != merged {
			t.Fatalf("frag_merged %d after the expiry, was %d", got, merged)
		}
		// Forgotten: its last fragment now has no first (shallow), or
		// starts a datagram of its own (full).
		want := map[string]string{"": "drop:frag_no_first", ", mode: full": "drop:frag_merged"}[opts]
		if o := s.one(fr[2]); o.reason != want {
			t.Fatalf("the last fragment after the expiry: %s, want %s", o.reason, want)
		}
	})
}

// TestReassembleTickExpiresIdle: on a live worker whose link went quiet
// the engine ticks instead (Ticker); the datagram expires at the first
// tick at or past its timeout and the counters say so. A tick before the
// stage has datagrams does nothing: no table, no clock. Before, the
// reassemble stage did not tick: the datagram stayed, uncounted, until
// traffic with fragments came back.
func TestReassembleTickExpiresIdle(t *testing.T) {
	s := newSFRig(t, raxYAML(", timeout: 2"))
	st := raStageOf(s)
	if !s.r.Ticks() {
		t.Fatal("a runner with a reassemble stage does not tick")
	}
	s.r.Tick(1 << 40)
	if st.recs != nil || st.nowSet {
		t.Fatalf("a tick before any packet: table made %v, clock set %v", st.recs != nil, st.nowSet)
	}
	s.one(raDgram(t, 7)[0])
	if got := stCounter(st, "pending"); got != 1 {
		t.Fatalf("pending %d, want 1", got)
	}
	now := uint64(s.now)
	// A tick behind the clock (by less than the timeout) leaves it.
	s.r.Tick(now - 500)
	if st.last != s.now {
		t.Fatalf("a tick 500 ms back moved the clock to %d from %d", st.last, s.now)
	}
	expiry := now + 2000
	for now += IdleTickMS; now < expiry; now += IdleTickMS {
		s.r.Tick(now)
		if got := stCounter(st, "expiries"); got != 0 {
			t.Fatalf("%d expiries %d ms before the timeout", got, expiry-now)
		}
		if st.last != uint32(now) {
			t.Fatalf("the clock is %d after a tick at %d", st.last, uint32(now))
		}
	}
	s.r.Tick(now)
	if got, left := stCounter(st, "expiries"), stCounter(st, "pending"); got != 1 || left != 0 || raHeld(st) != 0 {
		t.Fatalf("at the first tick at the timeout: expiries %d, pending %d, %d held (want 1, 0, 0)", got, left, raHeld(st))
	}
}

// TestReassembleExpiryReplayDeterministic: a replay has no ticks (an
// empty batch carries no epoch) and its clock is the capture's, so what
// expires, and when, is the same on every run, whatever each instance's
// random index seed: here two runs, batch by batch, against the counts
// the timeline says. Before, none of the three lost datagrams was ever
// counted.
func TestReassembleExpiryReplayDeterministic(t *testing.T) {
	type step struct {
		at                   uint32 // ms after the start
		pkts                 [][]byte
		empty                bool // an empty batch (a replay's, no epoch)
		expiries, held, done uint64
	}
	a, b, c, d := raDgram(t, 1), raDgram(t, 2), raDgram(t, 3), raDgram(t, 4)
	o := raOther(t)
	steps := []step{
		{at: 0, pkts: [][]byte{a[0], b[0], c[0], c[1], c[2]}, held: 2, done: 1}, // a, b lost; c whole
		{at: 1000, pkts: [][]byte{d[0], o}, held: 3, done: 1},
		{at: 100_000, empty: true, held: 3, done: 1}, // no tick: the clock stays
		{at: 1999, pkts: [][]byte{o}, held: 3, done: 1},
		{at: 2000, pkts: [][]byte{o, o}, expiries: 2, held: 1, done: 1}, // a and b at their timeout
		{at: 2500, pkts: [][]byte{o}, expiries: 2, held: 1, done: 1},
		{at: 3000, pkts: [][]byte{o}, expiries: 3, held: 0, done: 1}, // d
		{at: 9000, pkts: [][]byte{o}, expiries: 3, held: 0, done: 1},
	}
	var runs [2][][]Counter
	for run := range runs {
		s := newSFRig(t, raxYAML(", timeout: 2"))
		st := raStageOf(s)
		start := s.now
		for k, p := range steps {
			s.now = start + p.at
			if p.empty {
				s.b.Clear()
				s.b.SetTime(s.now)
				s.r.Process(s.b)
			} else {
				s.send(p.pkts...)
			}
			if got, held, done := stCounter(st, "expiries"), stCounter(st, "pending"), stCounter(st, "datagrams"); got != p.expiries || held != p.held || done != p.done || uint64(raHeld(st)) != p.held {
				t.Fatalf("run %d step %d (%d ms): expiries %d pending %d datagrams %d (%d held), want %d %d %d", run, k, p.at, got, held, done, raHeld(st), p.expiries, p.held, p.done)
			}
			runs[run] = append(runs[run], stReport(st))
		}
	}
	for k := range steps {
		if !slices.Equal(runs[0][k], runs[1][k]) {
			t.Fatalf("step %d: the runs differ:\n%v\n%v", k, runs[0][k], runs[1][k])
		}
	}
}

// raFill takes n records straight into st (white box: a million
// fragments through a pipeline would take the test's time for nothing),
// each a datagram of its own key, at the stage's clock.
func raFill(st *raStage, n int) {
	var k raKey
	k.proto = 17
	for i := range n {
		binary.BigEndian.PutUint32(k.src[:4], uint32(i))
		st.take(&k, k.hash(st.seed))
	}
}

// TestReassembleExpiryBounded: a million datagrams due at once (a table
// of max_datagrams 1<<20, every one lost) expire over many vectors, never
// more than raExpireMax in one (a vector's extra work is bounded), the
// oldest first; and over ticks at most raTickExpireMax a tick. The last
// is counted ceil(max_datagrams/cap) calls after the first at its
// timeout: the bound CONFIG.md states. Before, none expired.
func TestReassembleExpiryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("a table of a million datagrams (120 MB): not in -short")
	}
	const n = 1 << 20
	s := newSFRig(t, raxYAML(", max_datagrams: 1048576, max_fragments: 2, timeout: 1"))
	st := raStageOf(s)
	b := stFillBatch(t, s.a, [][]byte{raOther(t)})
	idx, next := stDense(1)
	vector := func(ms uint32) { b.Meta[0].Time = ms; st.Process(b, idx, next) }
	now := s.now
	vector(now) // setup, and the clock
	for _, tick := range []bool{false, true} {
		raFill(st, n)
		if got := raHeld(st); got != n {
			t.Fatalf("%d datagrams held, want %d", got, n)
		}
		pending := stCounter(st, "pending")
		if pending != n {
			t.Fatalf("pending %d, want %d", pending, n)
		}
		first := st.oldest
		limit, want := raExpireMax, n/raExpireMax
		if tick {
			limit, want = raTickExpireMax, n/raTickExpireMax
		}
		now += 1000 // every one due
		calls := 0
		for raHeld(st) > 0 {
			was := stCounter(st, "expiries")
			if tick {
				now += IdleTickMS
				s.r.Tick(uint64(now))
			} else {
				now++
				vector(now)
			}
			calls++
			got := stCounter(st, "expiries") - was
			if got > uint64(limit) || got < uint64(limit) && raHeld(st) > 0 {
				t.Fatalf("tick %v: call %d expired %d (cap %d), %d left", tick, calls, got, limit, raHeld(st))
			}
			if calls == 1 && st.recs[first-1].flags != 0 {
				t.Fatalf("tick %v: the oldest datagram was not among the first expired", tick)
			}
			if calls > want {
				t.Fatalf("tick %v: %d calls and %d datagrams left, want all gone in %d", tick, calls, raHeld(st), want)
			}
		}
		if calls != want {
			t.Fatalf("tick %v: every datagram expired in %d calls, want %d", tick, calls, want)
		}
		if got := stCounter(st, "pending"); got != 0 {
			t.Fatalf("tick %v: pending %d after every datagram expired", tick, got)
		}
		if st.oldest != 0 || st.newest != 0 {
			t.Fatalf("tick %v: the expiry list's ends are %d, %d with no datagram", tick, st.oldest, st.newest)
		}
	}
	if got := stCounter(st, "expiries"); got != 2*n {
		t.Fatalf("expiries %d, want %d", got, 2*n)
	}
}

// TestReassembleExpiryZeroAlloc: the per-vector expiry and Tick allocate
// nothing while they expire datagrams (allocs.Count: the exact count),
// and they do expire them: each measured call here expires one.
func TestReassembleExpiryZeroAlloc(t *testing.T) {
	for _, tick := range []bool{false, true} {
		t.Run(fmt.Sprint("tick=", tick), func(t *testing.T) {
			s := newSFRig(t, raxYAML(", timeout: 1"))
			st := raStageOf(s)
			// 51 lost datagrams, one each 100 ms: the warm-up call and
			// 50 measured ones, 100 ms apart, expire one each.
			t0 := s.now
			for i := range 51 {
				s.one(raDgram(t, uint16(100+i))[0])
				s.advance(100)
			}
			now := t0 + 900 // f's first call: the first one's timeout, 1000 ms after it
			b := stFillBatch(t, s.a, [][]byte{raOther(t), raOther(t)})
			f := func() {
				now += 100
				if tick {
					s.r.Tick(uint64(now))
					return
				}
				b.Meta[0].Time, b.Meta[1].Time = now, now
				s.r.Process(b)
			}
			if n := allocs.Count(50, f); n != 0 {
				t.Fatalf("%d allocations in 50 calls", n)
			}
			if got, left := stCounter(st, "expiries"), stCounter(st, "pending"); got != 51 || left != 0 {
				t.Fatalf("the calls expired %d, pending %d (want 51, 0)", got, left)
			}
		})
	}
}

// TestReassembleExpiryOnlyTheLost: a datagram that completes, or that a
// full table evicts, is counted as such and never also as expired; only
// the lost one is, once. Before, the lost one was not counted at all.
func TestReassembleExpiryOnlyTheLost(t *testing.T) {
	raModes(t, func(t *testing.T, opts string) {
		s := newSFRig(t, raxYAML(opts+", max_datagrams: 2, timeout: 2"))
		ev, lost, whole := raDgram(t, 1), raDgram(t, 2), raDgram(t, 3)
		s.one(ev[0])
		s.advance(10)
		s.send(lost[0], lost[1])
		s.advance(10)
		s.one(whole[0]) // the table is full: ev, the nearest to its timeout, goes
		s.send(whole[1], whole[2])
		st := raStageOf(s)
		if got := stCounter(st, "evictions"); got != 1 {
			t.Fatalf("evictions %d, want 1", got)
		}
		for range 10 {
			s.advance(1000)
			s.one(raOther(t))
		}
		now := uint64(s.now)
		for range 50 {
			now += IdleTickMS
			s.r.Tick(now)
		}
		for k, want := range map[string]uint64{"datagrams": 1, "evictions": 1, "expiries": 1, "pending": 0} {
			if got := stCounter(st, k); got != want {
				t.Errorf("%s %d, want %d", k, got, want)
			}
		}
	})
}

// raGauge is the pending gauge as the engine reports it across a swap:
// the old instances' final counters (carried) plus the new ones'.
func raGauge(sts ...*raStage) uint64 {
	var n uint64
	for _, st := range sts {
		n += stCounter(st, "pending")
	}
	return n
}

// TestReassemblePendingAcrossSwaps: a swap starts reassembly empty, but
// the engine carries the old stage's counters on (same name, kind and
// configuration) and adds the new stage's: the new instance takes the
// old ones' datagrams off the gauge at its first vector or tick, so the
// sum is what the new tables hold. Also: a swap that does not carry the
// counters owes nothing; one that changes the worker count gives every
// new instance all the old ones, each owed once; a chain of swaps whose
// middle plan never ran owes through it. The settling tick allocates
// nothing. Before, there was no gauge (the old stage's pending read 0).
func TestReassemblePendingAcrossSwaps(t *testing.T) {
	y := raxYAML(", timeout: 2")
	carried := func(string) bool { return true }
	lose := func(s *sfRig, ids ...uint16) {
		for _, id := range ids {
			s.one(raDgram(t, id)[0])
		}
	}
	t.Run("same worker", func(t *testing.T) {
		old := newSFRig(t, y)
		lose(old, 1, 2, 3)
		ost := raStageOf(old)
		if got := stCounter(ost, "pending"); got != 3 {
			t.Fatalf("pending %d before the swap, want 3", got)
		}
		nw := newSFRig(t, y)
		nw.now = old.now
		if got := nw.r.CarryState([]*Runner{old.r}, nil, carried); len(got) != 0 {
			t.Fatalf("took state %v: reassembly starts empty", got)
		}
		nst := raStageOf(nw)
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		before := m.Mallocs
		nw.r.Tick(uint64(nw.now) + 100) // an idle worker's first tick settles
		runtime.ReadMemStats(&m)
		if n := m.Mallocs - before; n != 0 {
			t.Fatalf("%d allocations in the settling tick", n)
		}
		if got := raGauge(ost, nst); got != 0 {
			t.Fatalf("pending %d after the swap's first tick, the new stage holds none", got)
		}
		lose(nw, 4, 5)
		if got := raGauge(ost, nst); got != 2 {
			t.Fatalf("pending %d with two new datagrams, want 2", got)
		}
		nw.advance(3000)
		nw.one(raOther(t))
		if got := raGauge(ost, nst); got != 0 || stCounter(nst, "expiries") != 2 {
			t.Fatalf("pending %d, expiries %d after they expired", got, stCounter(nst, "expiries"))
		}
	})
	t.Run("counters reset", func(t *testing.T) {
		old := newSFRig(t, y)
		lose(old, 1, 2, 3)
		nw := newSFRig(t, raxYAML(", timeout: 3"))
		nw.r.CarryState([]*Runner{old.r}, nil, func(string) bool { return false })
		lose(nw, 4)
		if got := stCounter(raStageOf(nw), "pending"); got != 1 {
			t.Fatalf("pending %d in a stage whose counters started afresh, want 1", got)
		}
	})
	t.Run("worker count", func(t *testing.T) {
		o0, o1 := newSFRig(t, y), newSFRig(t, y)
		lose(o0, 1, 2)
		lose(o1, 3)
		n0, n1, n2 := newSFRig(t, y), newSFRig(t, y), newSFRig(t, y)
		olds := []*Runner{o0.r, o1.r}
		for _, n := range []*sfRig{n0, n1, n2} {
			n.r.CarryState(olds, func(src, dst *[16]byte, sport, dport uint16, proto uint8, v6 bool) bool { return true }, carried)
		}
		lose(n1, 4)        // a vector settles n1
		n2.r.Tick(1 << 40) // a tick n2
		lose(n0, 5, 6)     // and n0, which owes both old instances
		sts := []*raStage{raStageOf(o0), raStageOf(o1), raStageOf(n0), raStageOf(n1), raStageOf(n2)}
		if got := raGauge(sts...); got != 3 {
			t.Fatalf("pending %d after a swap to three workers holding 3, want 3", got)
		}
	})
	t.Run("chain", func(t *testing.T) {
		old, mid, nw := newSFRig(t, y), newSFRig(t, y), newSFRig(t, y)
		lose(old, 1, 2, 3)
		mid.r.CarryState([]*Runner{old.r}, nil, carried)
		nw.r.CarryState([]*Runner{mid.r}, nil, carried) // mid never ran
		nw.r.Tick(1 << 40)
		if got := raGauge(raStageOf(old), raStageOf(mid), raStageOf(nw)); got != 0 {
			t.Fatalf("pending %d after two swaps, the second before the middle plan ran: want 0", got)
		}
		if nst := raStageOf(nw); nst.acct.olds != nil || raStageOf(mid).acct.olds == nil {
			t.Fatal("the settled instance kept the old accounts, or settling changed the never-run one")
		}
	})
}

// TestReassembleEvictsTheOldest: a full table evicts the datagram that
// has waited longest (the nearest to its timeout: one timeout per stage),
// wherever its record is. The scan it replaced looked at 8 records at a
// hand: after some datagrams completed and their records were taken by
// new ones, the 8 it saw were the newest, and it evicted one of those
// while older ones stayed.
func TestReassembleEvictsTheOldest(t *testing.T) {
	s := newSFRig(t, raYAML(", timeout: 30, max_datagrams: 16"))
	st := s.stage("defrag").(*raStage)
	type dg struct{ first, last []byte }
	mk := func(i int) dg {
		d := sfUDP(t, cli, srv, uint16(5000+i), 53, 200)
		d[14+4], d[14+5] = byte(i>>8), byte(i) // an IP ID per datagram
		f := fragV4(t, d, 104)
		return dg{f[0], f[1]}
	}
	var d []dg
	for i := range 24 {
		d = append(d, mk(i))
	}
	// 0 - 15 fill the table, a millisecond apart; 0 - 7 complete, and
	// 16 - 23 take their records.
	for i := range 16 {
		s.one(d[i].first)
		s.advance(1)
	}
	for i := range 8 {
		if o := s.one(d[i].last); o.reason != "tx:out" {
			t.Fatalf("datagram %d's last fragment: %s", i, o.reason)
		}
	}
	for i := 16; i < 24; i++ {
		s.one(d[i].first)
		s.advance(1)
	}
	if len(st.free) != 0 {
		t.Fatalf("%d records free, want a full table", len(st.free))
	}
	// One more: the oldest waiting, datagram 8, goes.
	s.one(mk(99).first)
	if got := stCounter(st, "evictions"); got != 1 {
		t.Fatalf("evictions %d, want 1", got)
	}
	if o := s.one(d[8].last); o.reason != "drop:frag_no_first" {
		t.Fatalf("the oldest datagram's last fragment after the eviction: %s, want drop:frag_no_first", o.reason)
	}
	for _, i := range []int{9, 16, 23} {
		if o := s.one(d[i].last); o.reason != "tx:out" {
			t.Fatalf("datagram %d, younger than the evicted one: %s, want tx:out", i, o.reason)
		}
	}
}
