package pipelines

import "testing"

// The nat stage reads, for every packet of a vector, the entry the
// conntrack stage tracked it to (ctStage.cur), after conntrack has
// tracked the whole vector. An entry one packet of the vector was
// tracked to must therefore stay that flow's until the vector is done:
// conntrack may not evict it for a new flow, nor free it (an RST that
// kills the flow, an expiry) where a later packet's new flow could take
// it, or nat would translate the earlier packet with the other flow's
// mapping, or not at all.

// natSizedYAML is natYAML with a conntrack table of size flows.
func natSizedYAML(size int, natOpts string) string {
	return "name: nat-test\nsettings: {batch_size: 256}\nstages:\n" +
		"  - {name: parse, type: parse}\n" +
		"  - {name: ct, type: conntrack, size: " + itoa(size) + "}\n" +
		"  - {name: acl, type: filter, rules: [{ct: invalid, action: \"drop:invalid\"}]}\n" +
		"  - name: nat\n    type: nat\n    conntrack: ct\n" + indent(natOpts, 4) +
		"  - {name: out, type: tx, port: out}\n"
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var d []byte
	for ; n > 0; n /= 10 {
		d = append([]byte{byte('0' + n%10)}, d...)
	}
	return string(d)
}

func wantOut(t *testing.T, what string, o sfOut, src string, sport uint16, dst string, dport uint16) {
	t.Helper()
	if o.reason != "tx:out" {
		t.Fatalf("%s: %s, want tx:out", what, o.reason)
	}
	if a, b, sp, dp := pktTuple(o.pkt); a != src || sp != sport || b != dst || dp != dport {
		t.Fatalf("%s: out as %s:%d > %s:%d, want %s:%d > %s:%d", what, a, sp, b, dp, src, sport, dst, dport)
	}
	if err := checksumsOK(o.pkt); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestNATEvictionSparesTrackedEntry: a full table of unassured flows; a
// vector whose first packet belongs to the flow the eviction scan would
// pick (the one with the least time left) and whose second opens a new
// flow. The new flow must evict another entry: the first packet keeps
// its own flow's mapping.
func TestNATEvictionSparesTrackedEntry(t *testing.T) {
	s := newSFRig(t, natSizedYAML(4, masq))
	// F: UDP (30 s), the least time left; three TCP SYNs (120 s), all
	// unassured. The table is full.
	f := sfUDP(t, cli, srv, 1001, 53, 8)
	fill := [][]byte{f}
	for k := range 3 {
		fill = append(fill, sfTCP(t, tcpSpec{src: "10.0.0." + itoa(2+k), dst: srv, sport: 3000, dport: 80, flags: "S", seq: 100}))
	}
	for k, o := range s.send(fill...) {
		if o.reason != "tx:out" {
			t.Fatalf("fill %d: %s", k, o.reason)
		}
	}
	if n := s.ctTable().n; n != 4 {
		t.Fatalf("table holds %d flows, want 4", n)
	}
	s.advance(1000)
	// F again (refreshed to 30 s: still the least left), then a new
	// flow X whose mapping differs from F's.
	x := sfUDP(t, "10.0.0.9", srv, 2002, 53, 8)
	out := s.send(f, x)
	wantOut(t, "F's packet", out[0], natIP, 1001, srv, 53)
	wantOut(t, "X's packet", out[1], natIP, 2002, srv, 53)
	if n := stCounter(s.stage("ct"), "evictions"); n != 1 {
		t.Fatalf("evictions %d, want 1", n)
	}
	if n := stCounter(s.stage("nat"), "snat"); n != 5 {
		t.Fatalf("snat sessions %d, want 5", n)
	}
	// Both flows are still there: F's reply comes back to F's client.
	s.advance(1000)
	r := s.one(sfUDP(t, srv, natIP, 53, 1001, 8))
	wantOut(t, "F's reply", r, srv, 53, cli, 1001)
	if ctClass(r.m.CT) != "established/reply" {
		t.Fatalf("F's reply: class %s", ctClass(r.m.CT))
	}
	r = s.one(sfUDP(t, srv, natIP, 53, 2002, 8))
	wantOut(t, "X's reply", r, srv, 53, "10.0.0.9", 2002)
}

// TestNATKillSparesTrackedEntry: a SYN retransmission, then the
// server's RST that kills the flow (no reply but the RST), then a new
// flow, in one vector. The freed entry must not be the new flow's
// before the vector is through nat: the SYN goes out with its own
// mapping, and the RST comes back to the client (as in Linux, where the
// killed entry stays the packets' until they are through).
func TestNATKillSparesTrackedEntry(t *testing.T) {
	s, syn, rst, other := killRig(t)
	out := s.send(syn, rst, other)
	wantOut(t, "retransmitted SYN", out[0], natIP, 40000, srv, 80)
	wantOut(t, "RST", out[1], srv, 80, cli, 40000)
	wantOut(t, "other SYN", out[2], natIP, 5555, srv, 80)
	if n := stCounter(s.stage("ct"), "deletes"); n != 1 {
		t.Fatalf("deletes %d, want 1", n)
	}
	if n := s.ctTable().n; n != 1 {
		t.Fatalf("table holds %d flows, want 1 (the other)", n)
	}
	if n := stCounter(s.stage("nat"), "snat"); n != 2 {
		t.Fatalf("snat sessions %d, want 2", n)
	}
	// The freed entry is free again after the vector: flows fill the
	// table to its size.
	s.advance(1000)
	var more [][]byte
	for k := range 15 {
		more = append(more, sfUDP(t, "10.0.1."+itoa(1+k), srv, 7, 53, 8))
	}
	for k, o := range s.send(more...) {
		if o.reason != "tx:out" {
			t.Fatalf("flow %d: %s", k, o.reason)
		}
	}
	if n := s.ctTable().n; n != 16 {
		t.Fatalf("table holds %d flows, want 16", n)
	}
}

// TestNATSweepSparesTrackedEntry: a vector whose packets are 31 s apart
// (a replay): the first refreshes its UDP flow to 30 s, the second
// moves the clock past that, and the sweep at the end of the vector
// finds the flow expired. It must not free it before nat has
// translated the first packet with it.
func TestNATSweepSparesTrackedEntry(t *testing.T) {
	s := newSFRig(t, natSizedYAML(16, masq))
	f := sfUDP(t, cli, srv, 1001, 53, 8)
	wantOut(t, "F", s.one(f), natIP, 1001, srv, 53)
	s.advance(1000)
	s.at = []uint32{0, 31_000}
	out := s.send(f, sfUDP(t, "172.16.0.1", srv, 9, 53, 8))
	s.at = nil
	wantOut(t, "F's packet", out[0], natIP, 1001, srv, 53)
	wantOut(t, "other", out[1], "172.16.0.1", 9, srv, 53)
}

// TestNATKillAloneSparesEntry: the RST that kills its flow is the only
// packet of the vector tracked to the entry, and a new flow follows it:
// the RST still comes back to its client, not to the new flow's.
func TestNATKillAloneSparesEntry(t *testing.T) {
	s, _, rst, other := killRig(t)
	out := s.send(rst, other)
	wantOut(t, "RST", out[0], srv, 80, cli, 40000)
	wantOut(t, "other SYN", out[1], natIP, 5555, srv, 80)
	if n := s.ctTable().n; n != 1 {
		t.Fatalf("table holds %d flows, want 1 (the other)", n)
	}
}

// killRig is the RST tests' setup: a flow opened by a SYN (its mapping
// checked), the clock moved on, then the packets of the vector under test:
// the SYN again, the server's RST that kills the flow, and another
// client's SYN that opens a new flow.
func killRig(t *testing.T) (s *sfRig, syn, rst, other []byte) {
	t.Helper()
	s = newSFRig(t, natSizedYAML(16, masq))
	syn = sfTCP(t, tcpSpec{src: cli, dst: srv, sport: 40000, dport: 80, flags: "S", seq: 100})
	wantOut(t, "SYN", s.one(syn), natIP, 40000, srv, 80)
	s.advance(1000)
	rst = sfTCP(t, tcpSpec{src: srv, dst: natIP, sport: 80, dport: 40000, flags: "RA", seq: 0, ack: 101})
	other = sfTCP(t, tcpSpec{src: "10.0.0.2", dst: srv, sport: 5555, dport: 80, flags: "S", seq: 7})
	return s, syn, rst, other
}
