package pipelines

import (
	"errors"
	"net/netip"
	"slices"
)

// The conntrack stage's state beyond the hot path: setting the table up
// or taking it over from a swap, and serving the control plane's
// requests (list, count, flush).

func (t *conntrackTemplate) stateful() bool { return true }

// carriesState implements stateCarrying: a swap hands the table over.
func (t *conntrackTemplate) carriesState() bool { return true }

// TakeState implements StateCarrier.
func (s *ctStage) TakeState(olds []Stage, own func(src, dst *[16]byte, sport, dport uint16, proto uint8, v6 bool) bool, carried bool) bool {
	c := &ctCarry{inherit: !carried}
	for _, o := range olds {
		if os, ok := o.(*ctStage); ok {
			c.olds = append(c.olds, os)
		}
	}
	if len(c.olds) == 0 {
		return false
	}
	if own != nil {
		c.own = func(k *ctTuple) bool { return own(&k.src, &k.dst, k.sport, k.dport, k.proto, k.v6) }
	}
	s.carry = c
	return true
}

// setup makes the instance's table: the one a swap handed over when it
// fits as it is (same size, one old instance, no re-steering), else a new
// one, with the flows of the old ones that belong here copied in. It runs
// on the worker at the first Process (the old instances are quiescent by
// then). A table that is handed over stays with this instance; the old
// instance keeps its pointer but never runs again.
func (s *ctStage) setup() {
	c := s.carry
	s.carry = nil
	if c != nil && len(c.olds) == 1 && c.own == nil {
		if old := c.olds[0].current(); old != nil && len(old.ent) == s.t.size {
			s.tab = old
			if c.inherit {
				s.c[ctcEntries] = uint64(old.n)
				s.live.mark(ctcEntries)
			}
			return
		}
	}
	s.tab = newCTTable(s.t.size)
	if c == nil {
		return
	}
	// Copy the live flows that belong here; what does not fit is counted
	// as evicted (the new table is smaller than the old ones' flows).
	// seen counts the old flows this instance was responsible for: each
	// old flow is seen by exactly one new instance (the one its original
	// direction is steered to), so the entries counter, summed over the
	// workers, loses exactly the flows that were not moved.
	moved, lost, seen := 0, 0, 0
	var k ctTuple
	for _, src := range c.sources() {
		old := src.tab
		if !old.nowSet {
			// A table no packet reached (made for a control request
			// on an idle worker) has no flows and no clock: its zero
			// time would move this table's clock, expiring every
			// flow copied from the others.
			continue
		}
		s.tab.start(old.now)
		for e := range old.ent {
			en := &old.ent[e]
			if en.status&ctStUsed == 0 {
				continue
			}
			keep := true
			for _, own := range [2]func(*ctTuple) bool{src.own, c.own} {
				if own == nil || !keep {
					continue
				}
				old.tupleOf(en, 0, &k)
				if !own(&k) {
					keep = false
					break // another worker's now
				}
				// Its replies must be steered here too: a translated
				// flow whose port now belongs to another worker cannot
				// be kept whole on either (counted as evicted).
				old.tupleOf(en, 1, &k)
				if !own(&k) {
					seen++
					lost++
					keep = false
				}
			}
			if !keep {
				continue
			}
			seen++
			ne, ok := s.tab.alloc()
			if !ok {
				lost++
				continue
			}
			s.tab.ent[ne] = *en
			s.tab.ent[ne].status &^= ctStTentative
			s.tab.add(ne)
			moved++
		}
	}
	if c.inherit {
		s.c[ctcEntries] = uint64(moved)
	} else {
		// The old instances' counters carry on, entries among them:
		// what they counted in and this table lacks went away here.
		s.c[ctcEntries] -= uint64(seen - moved)
	}
	s.c[ctcEvictions] += uint64(lost)
	s.live.mark(ctcEntries)
	s.live.mark(ctcEvictions)
}

// ctSource is a table whose flows a new instance takes, with the
// steering that chose them where an instance between them never ran.
type ctSource struct {
	tab *ctTable
	own func(*ctTuple) bool // nil: all of its flows
	key *ctCarry            // whose own (nil: none): a table is taken once per key
}

// sources returns the tables the flows of c's old instances are in. An
// old instance that never ran (swaps that came faster than the worker's
// batches or control requests) holds no table: its flows are still in
// the tables it would have taken them from, chosen by its steering when
// it re-steered (the newest re-steering decides: this instance's own,
// where it has one, else the nearest one down the chain).
//
// Each instance is walked once per (key, decided): a chain of swaps that
// re-steered gives every instance the whole plan before as olds, and the
// paths through it, walked one by one, grow as the worker count to the
// power of the chain's length.
func (c *ctCarry) sources() []ctSource {
	var out []ctSource
	type visit struct {
		o       *ctStage
		key     *ctCarry
		decided bool
	}
	var seen []visit
	var walk func(olds []*ctStage, own func(*ctTuple) bool, key *ctCarry, decided bool)
	walk = func(olds []*ctStage, own func(*ctTuple) bool, key *ctCarry, decided bool) {
		for _, o := range olds {
			v := visit{o, key, decided}
			if slices.Contains(seen, v) {
				continue
			}
			seen = append(seen, v)
			switch {
			case o.tab != nil:
				dup := false
				for _, x := range out {
					if x.tab == o.tab && x.key == key {
						dup = true
						break
					}
				}
				if !dup {
					out = append(out, ctSource{tab: o.tab, own: own, key: key})
				}
			case o.carry != nil:
				if !decided && o.carry.own != nil {
					walk(o.carry.olds, o.carry.own, o.carry, true)
				} else {
					walk(o.carry.olds, own, key, decided)
				}
			}
		}
	}
	walk(c.olds, nil, nil, c.own != nil)
	return out
}

// hasClock reports whether a table c's flows come from has a clock (has
// seen a packet): the tables sources finds, found without allocating. It
// walks the chain of carries a plan at a time (a carry's olds are the
// runners of the plan before), each instance once: walked path by path,
// a chain of re-steering swaps costs the worker count to the power of
// its length.
func (c *ctCarry) hasClock() bool {
	var a, b [MaxWorkers + 1]*ctStage
	cur, n := a[:0], 0
	for _, o := range c.olds {
		cur = appendUnique(cur, o)
	}
	for len(cur) > 0 {
		next := b[:0]
		for _, o := range cur {
			switch {
			case o.tab != nil:
				if o.tab.nowSet {
					return true
				}
			case o.carry != nil:
				for _, x := range o.carry.olds {
					if len(next) == cap(next) && !slices.Contains(next, x) {
						return c.hasClockSlow() // not one plan a level: walk it all
					}
					next = appendUnique(next, x)
				}
			}
		}
		a, b = b, a
		cur = a[:len(next)]
		if n++; n > 1<<16 {
			return c.hasClockSlow()
		}
	}
	return false
}

// appendUnique appends o to s unless s holds it.
func appendUnique(s []*ctStage, o *ctStage) []*ctStage {
	if slices.Contains(s, o) {
		return s
	}
	return append(s, o)
}

// hasClockSlow is hasClock over sources: it allocates.
func (c *ctCarry) hasClockSlow() bool {
	for _, src := range c.sources() {
		if src.tab.nowSet {
			return true
		}
	}
	return false
}

// current returns the table this instance holds or, if it never ran,
// the one it would have taken over (following a chain of swaps that came
// faster than the worker's batches).
func (s *ctStage) current() *ctTable {
	for x := s; x != nil; {
		if x.tab != nil {
			return x.tab
		}
		if x.carry == nil || len(x.carry.olds) != 1 || x.carry.own != nil {
			return nil
		}
		x = x.carry.olds[0]
	}
	return nil
}

// FlowFilter selects flows for the control plane's requests. Zero fields
// match everything.
type FlowFilter struct {
	Proto    uint8        // IP protocol; 0: any
	Src, Dst netip.Prefix // of the original direction
	Addr     netip.Prefix // either address of either direction
	Port     uint16       // either port of either direction
	SrcPort  uint16       // of the original direction
	DstPort  uint16
	// State is a TCP state name (ESTABLISHED, TIME_WAIT, ...), or one of
	// "unreplied", "replied", "assured"; "" for any.
	State string
}

// FlowInfo describes one tracked flow.
type FlowInfo struct {
	Proto                      uint8
	Zone                       uint16
	Src, Dst                   netip.Addr // original direction, as it arrived
	SrcPort                    uint16
	DstPort                    uint16
	ReplySrc                   netip.Addr // the reply direction, as it arrives (NAT applied)
	ReplyDst                   netip.Addr
	ReplySrcPort, ReplyDstPort uint16
	State                      string // TCP state, else ""
	Replied                    bool
	Assured                    bool
	SNAT                       bool
	DNAT                       bool
	ExpiresMS                  int64 // milliseconds until expiry on the packets' clock
}

// FlowRequest is one control request to one conntrack instance: list,
// count or flush the flows that match Filter, in chunks. The worker scans
// at most FlowScanChunk entries per batch boundary, from From; Next is
// where the next chunk starts (-1: done).
type FlowRequest struct {
	Flush  bool
	Filter FlowFilter
	From   int
	Limit  int // most flows to list (0: count only)

	// Results, valid once Done is closed.
	Flows    []FlowInfo
	Matched  int // flows that matched (and were flushed, for a flush)
	Next     int
	Entries  int // flows in the table
	Capacity int
	Bytes    int // the table's memory
	Err      error
	Done     chan struct{}
}

// FlowScanChunk bounds the entries a worker looks at for one request
// chunk: a few hundred microseconds, so a list or flush of a large table
// delays traffic by that much at a time.
const FlowScanChunk = 1 << 16

// ErrFlowBusy is returned when an instance already has a request.
var ErrFlowBusy = errors.New("conntrack: a request is already in progress on this worker")

// Post hands r to the instance; the worker serves it at its next batch
// boundary and closes r.Done. Control plane only.
func (s *ctStage) Post(r *FlowRequest) error {
	r.Done = make(chan struct{})
	if !s.req.CompareAndSwap(nil, r) {
		return ErrFlowBusy
	}
	return nil
}

// Cancel withdraws r if the worker has not taken it (a control request
// that timed out); it reports whether it did. If it did not, the worker
// has taken it and will close r.Done.
func (s *ctStage) Cancel(r *FlowRequest) bool { return s.req.CompareAndSwap(r, nil) }

// Pending implements Servicer.
func (s *ctStage) Pending() bool { return s.req.Load() != nil }

// Serve implements Servicer.
func (s *ctStage) Serve() {
	if r := s.req.Load(); r != nil {
		s.serve(r)
	}
}

// FlowPoster is implemented by stage instances that take FlowRequests.
type FlowPoster interface {
	Post(r *FlowRequest) error
	Cancel(r *FlowRequest) bool
}

// serve runs one chunk of r.
func (s *ctStage) serve(r *FlowRequest) {
	if !s.req.CompareAndSwap(r, nil) {
		return // cancelled meanwhile
	}
	defer close(r.Done)
	t := s.table()
	r.Capacity, r.Bytes = len(t.ent), t.bytes()
	from := max(r.From, 0)
	end := min(from+FlowScanChunk, len(t.ent))
	var k ctTuple
	for e := from; e < end; e++ {
		en := &t.ent[e]
		if en.status&ctStUsed == 0 || en.status&ctStTentative != 0 {
			continue
		}
		if t.expired(en) {
			s.drop(uint32(e), ctcExpiries)
			continue
		}
		if !s.matches(en, &r.Filter, &k) {
			continue
		}
		r.Matched++
		if r.Flush {
			s.drop(uint32(e), ctcDeletes)
			continue
		}
		if len(r.Flows) < r.Limit {
			r.Flows = append(r.Flows, s.info(en))
		}
	}
	r.Entries = t.n
	r.Next = end
	if end >= len(t.ent) {
		r.Next = -1
	}
}

func addrOf(b *[16]byte, v6 bool) netip.Addr {
	if v6 {
		return netip.AddrFrom16(*b)
	}
	return netip.AddrFrom4([4]byte(b[:4]))
}

// matches reports whether entry en passes filter f.
func (s *ctStage) matches(en *ctEntry, f *FlowFilter, k *ctTuple) bool {
	t := s.tab
	if f.Proto != 0 && en.proto != f.Proto {
		return false
	}
	v6 := en.status&ctStV6 != 0
	t.tupleOf(en, 0, k)
	src, dst := addrOf(&k.src, v6), addrOf(&k.dst, v6)
	if f.Src.IsValid() && !f.Src.Contains(src) || f.Dst.IsValid() && !f.Dst.Contains(dst) {
		return false
	}
	if f.SrcPort != 0 && k.sport != f.SrcPort || f.DstPort != 0 && k.dport != f.DstPort {
		return false
	}
	var r ctTuple
	t.tupleOf(en, 1, &r)
	if f.Addr.IsValid() {
		rs, rd := addrOf(&r.src, v6), addrOf(&r.dst, v6)
		if !f.Addr.Contains(src) && !f.Addr.Contains(dst) && !f.Addr.Contains(rs) && !f.Addr.Contains(rd) {
			return false
		}
	}
	if f.Port != 0 && k.sport != f.Port && k.dport != f.Port && r.sport != f.Port && r.dport != f.Port {
		return false
	}
	switch f.State {
	case "":
	case "unreplied":
		return en.status&ctStSeenReply == 0
	case "replied":
		return en.status&ctStSeenReply != 0
	case "assured":
		return en.status&ctStAssured != 0
	default:
		return en.proto == 6 && int(en.state) < len(tcpStateNames) && tcpStateNames[en.state] == f.State
	}
	return true
}

// FlowStateNames are the State filter's accepted values.
func FlowStateNames() []string {
	out := []string{"unreplied", "replied", "assured"}
	for _, n := range tcpStateNames {
		if n != "" && n != "NONE" {
			out = append(out, n)
		}
	}
	return out
}

func (s *ctStage) info(en *ctEntry) FlowInfo {
	t := s.tab
	v6 := en.status&ctStV6 != 0
	var o, r ctTuple
	t.tupleOf(en, 0, &o)
	t.tupleOf(en, 1, &r)
	fi := FlowInfo{
		Proto: en.proto, Zone: en.zone,
		Src: addrOf(&o.src, v6), Dst: addrOf(&o.dst, v6), SrcPort: o.sport, DstPort: o.dport,
		ReplySrc: addrOf(&r.src, v6), ReplyDst: addrOf(&r.dst, v6), ReplySrcPort: r.sport, ReplyDstPort: r.dport,
		Replied: en.status&ctStSeenReply != 0, Assured: en.status&ctStAssured != 0,
		SNAT: en.status&ctStSNAT != 0, DNAT: en.status&ctStDNAT != 0,
		ExpiresMS: int64(int32(en.expires - t.now)),
	}
	if en.proto == 6 && int(en.state) < len(tcpStateNames) {
		fi.State = tcpStateNames[en.state]
	}
	return fi
}

var (
	_ StateCarrier = (*ctStage)(nil)
	_ Servicer     = (*ctStage)(nil)
	_ Ticker       = (*ctStage)(nil)
	_ FlowPoster   = (*ctStage)(nil)
)
