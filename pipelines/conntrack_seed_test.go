package pipelines

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
)

// TestCTHashFloodSpreads: a sender who knows the source picks tuples
// whose hash under a fixed seed lands at the start of the index (here:
// the first 8 of its slots) and sends them; under the table's own random
// seed they spread like any others, and no probe cluster grows long.
// Under the fixed seed (the code before the table had a seed of its own)
// they made one cluster of 600 slots, which every lookup of those flows,
// and of any flow whose home lay in it, walked.
func TestCTHashFloodSpreads(t *testing.T) {
	const flows, size = 600, 4096
	s := newSFRig(t, ctYAML(fmt.Sprintf(", size: %d", size), ""))
	s.one(sfUDP(t, cli, srv, 1, 53, 1)) // the table, made on first use
	tab := s.ctTable()
	if tab.seed == ctSeed {
		t.Fatalf("the table's seed is the fixed one")
	}
	// The attacker's search: UDP tuples from spoofed sources whose home
	// slot under ctSeed is one of the first 8.
	var pkts [][]byte
	dst := netip.MustParseAddr(srv).As4()
	for n := uint32(0); len(pkts) < flows; n++ {
		src := [4]byte{198, 18, byte(n >> 8), byte(n)}
		sport := uint16(1024 + n>>16)
		var k ctTuple
		copy(k.src[:], src[:])
		copy(k.dst[:], dst[:])
		k.sport, k.dport, k.proto = sport, 53, 17
		if probeHome(k.hash(ctSeed), tab.slots) >= 8 {
			continue
		}
		pkts = append(pkts, sfUDP(t, netip.AddrFrom4(src).String(), srv, sport, 53, 1))
	}
	for len(pkts) > 0 {
		n := min(len(pkts), 64)
		for _, o := range s.send(pkts[:n]...) {
			if o.reason != "tx:out" || ctClass(o.m.CT) != "new" {
				t.Fatalf("a flow of the flood: %s %s", o.reason, ctClass(o.m.CT))
			}
		}
		pkts = pkts[n:]
	}
	if tab.n != flows+1 {
		t.Fatalf("%d flows in the table, want %d", tab.n, flows+1)
	}
	longest, run := 0, 0
	for i := range 2 * len(tab.idx) { // twice round: a cluster may wrap
		if tab.idx[i%len(tab.idx)] != 0 {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	// 1202 slots of 13654 in use: clusters of a dozen or two at random.
	if longest > 64 {
		t.Fatalf("the longest probe cluster is %d slots: the crafted tuples still collide", longest)
	}
	sfFuzzCheckTable(t, tab)
}

// TestCTSeedDoesNotDecide: two runs of the same packets, through tables
// with different seeds, give the same verdicts, classes and bytes, NAT's
// ports included (replay gives the same translations every run): the
// seed only places entries in the index.
func TestCTSeedDoesNotDecide(t *testing.T) {
	run := func() ([]sfOut, uint64) {
		s := newSFRig(t, natYAML(masq))
		var outs []sfOut
		for i := range 40 {
			sp := uint16(20000 + i*7)
			c := fmt.Sprintf("10.0.%d.%d", i%3, 1+i)
			syn := s.one(sfTCP(t, tcpSpec{src: c, dst: srv, sport: sp, dport: 443, flags: "S", seq: 100}))
			_, _, nsp, _ := pktTuple(syn.pkt)
			sa := s.one(sfTCP(t, tcpSpec{src: srv, dst: natIP, sport: 443, dport: nsp, flags: "SA", seq: 500, ack: 101}))
			u := s.send(sfUDP(t, c, srv, sp, 53, 8), sfUDP(t, c, srv, sp+1, 53, 8))
			outs = append(outs, syn, sa)
			outs = append(outs, u...)
			s.advance(100)
		}
		return outs, s.ctTable().seed
	}
	a, seedA := run()
	b, seedB := run()
	if seedA == seedB {
		t.Fatalf("two tables drew the same seed %#x", seedA)
	}
	for i := range a {
		if a[i].reason != b[i].reason || a[i].m.CT != b[i].m.CT || !bytes.Equal(a[i].pkt, b[i].pkt) {
			t.Fatalf("packet %d: %s %s %x against %s %s %x", i, a[i].reason, ctClass(a[i].m.CT), a[i].pkt, b[i].reason, ctClass(b[i].m.CT), b[i].pkt)
		}
	}
}

// TestCTClockJump: the packets' clock is 32 bits of ms. A gap of more
// than 2^31 ms (24.9 days: a worker that saw no packet for that long)
// looks like a step back, which the table used to ignore, keeping its
// clock, so that nothing expired for weeks more and a flow older than
// its timeout was still established. A step back of more than the
// longest timeout is now a discontinuity: the clock takes the new time
// and every entry expires. A short step back still leaves the clock
// alone (TestAttackClockWrapAndBack).
func TestCTClockJump(t *testing.T) {
	for _, tc := range []struct {
		name string
		step uint32 // added to the clock (mod 2^32)
	}{
		{"30 days on", 30 * 24 * 3600 * 1000},
		{"25 days on", 25 * 24 * 3600 * 1000},
		{"20 days back (a replay of an older capture)", 1<<32 - 20*24*3600*1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSFRig(t, ctYAML(", size: 8", ""))
			s.one(sfUDP(t, cli, srv, 1111, 53, 1))
			s.one(sfUDP(t, srv, cli, 53, 1111, 1))
			s.now += tc.step
			if o := s.one(sfUDP(t, srv, cli, 53, 1111, 1)); ctClass(o.m.CT) != "new" {
				t.Fatalf("a reply after the gap: %s, want new (the flow timed out long ago)", ctClass(o.m.CT))
			}
			if got := s.ctTable().now; got != s.now {
				t.Fatalf("table clock %d, packets' %d", got, s.now)
			}
			// The clock runs on from there: the new flow times out as
			// any does.
			s.advance(29_000)
			if o := s.one(sfUDP(t, cli, srv, 1111, 53, 1)); ctClass(o.m.CT) != "established/reply" {
				t.Fatalf("the reply of the new flow 29 s on: %s", ctClass(o.m.CT))
			}
			sfFuzzCheckTable(t, s.ctTable())
		})
	}
	// In one vector: a flow made before the gap's packet keeps its
	// timeout (its flow began after the gap, as far as the table knows).
	s := newSFRig(t, ctYAML(", size: 8", ""))
	s.one(sfUDP(t, cli, srv, 1111, 53, 1))
	s.at = []uint32{0, 30 * 24 * 3600 * 1000}
	outs := s.send(sfUDP(t, cli, srv, 2222, 53, 1), sfUDP(t, cli, srv, 3333, 53, 1))
	s.at = nil
	for _, o := range outs {
		if ctClass(o.m.CT) != "new" {
			t.Fatalf("%s", ctClass(o.m.CT))
		}
	}
	s.now += 30*24*3600*1000 + 1000
	if o := s.one(sfUDP(t, srv, cli, 53, 2222, 1)); ctClass(o.m.CT) != "established/reply" {
		t.Fatalf("the reply of the flow made in the gap's vector: %s", ctClass(o.m.CT))
	}
	sfFuzzCheckTable(t, s.ctTable())
}
