package pipelines

import (
	"encoding/binary"
	"fmt"
	"testing"
)

// Adversarial tests of the conntrack and nat stages: inputs a hostile
// sender (or a hostile clock, or a careless config) can produce.

// TestAttackDNATIdentity: a DNAT rule whose target is where a flow is
// already going (a client that reaches the forwarded server by its own
// address, through a rule that matches on the port alone) changes
// nothing in the flow's tuples; the flow must pass, not be refused as
// nat_ports_exhausted because its reply tuple is its own.
func TestAttackDNATIdentity(t *testing.T) {
	for _, rule := range []string{
		`dnat: [{match: {proto: tcp, dst_port: 80}, to: 10.0.0.5}]`,
		`dnat: [{match: {proto: tcp, dst_port: 80}, to: 10.0.0.5, port: 80}]`,
		`dnat: [{match: {proto: udp}, to: 10.0.0.5}]`,
	} {
		s := newSFRig(t, natYAML(rule))
		var o sfOut
		if containsStr(rule, "udp") {
			o = s.one(sfUDP(t, "203.0.113.9", "10.0.0.5", 4000, 80, 10))
		} else {
			o = s.one(sfTCP(t, tcpSpec{src: "203.0.113.9", dst: "10.0.0.5", sport: 4000, dport: 80, flags: "S", seq: 1}))
		}
		if o.reason != "tx:out" {
			t.Errorf("%s: a flow already going to the DNAT target: %s, want tx:out", rule, o.reason)
			continue
		}
		if a, b, sp, dp := pktTuple(o.pkt); a != "203.0.113.9" || b != "10.0.0.5" || sp != 4000 || dp != 80 {
			t.Errorf("%s: went out as %s:%d > %s:%d", rule, a, sp, b, dp)
		}
		if n := stCounter(s.stage("nat"), "ports_exhausted"); n != 0 {
			t.Errorf("%s: ports_exhausted %d", rule, n)
		}
		sfFuzzCheckTable(t, s.ctTable())
	}
}

// TestAttackHairpin: a LAN client reaches a forwarded server by the
// public address (DNAT and SNAT on one flow); the server's reply goes
// back to the client as if from the public address.
func TestAttackHairpin(t *testing.T) {
	s := newSFRig(t, natYAML(`dnat: [{match: {proto: tcp, dst: 198.51.100.1, dst_port: 80}, to: 10.0.0.5, port: 8080}]
snat: [{match: {src: 10.0.0.0/8}, to: 198.51.100.1}]`))
	syn := sfTCP(t, tcpSpec{src: "10.0.0.2", dst: "198.51.100.1", sport: 5555, dport: 80, flags: "S", seq: 1})
	o := s.one(syn)
	a, b, sp, dp := pktTuple(o.pkt)
	if o.reason != "tx:out" || a != "198.51.100.1" || b != "10.0.0.5" || dp != 8080 {
		t.Fatalf("hairpin SYN: %s as %s:%d > %s:%d", o.reason, a, sp, b, dp)
	}
	if err := checksumsOK(o.pkt); err != nil {
		t.Fatal(err)
	}
	sa := sfTCP(t, tcpSpec{src: "10.0.0.5", dst: "198.51.100.1", sport: 8080, dport: sp, flags: "SA", seq: 50, ack: 2})
	r := s.one(sa)
	if ra, rb, rsp, rdp := pktTuple(r.pkt); r.reason != "tx:out" || ra != "198.51.100.1" || rb != "10.0.0.2" || rsp != 80 || rdp != 5555 {
		t.Fatalf("hairpin SYN-ACK: %s as %s:%d > %s:%d", r.reason, ra, rsp, rb, rdp)
	}
	if ctClass(r.m.CT) != "established/reply" {
		t.Fatalf("class %s", ctClass(r.m.CT))
	}
	if err := checksumsOK(r.pkt); err != nil {
		t.Fatal(err)
	}
	sfFuzzCheckTable(t, s.ctTable())
}

// TestAttackOwnTranslatedAddress: a client sends to its own NAT address
// and port (the translated tuple's reply would be its own original): no
// panic, no tuple taken twice.
func TestAttackOwnTranslatedAddress(t *testing.T) {
	s := newSFRig(t, natYAML(masq))
	o := s.one(sfUDP(t, cli, natIP, 5000, 5000, 10))
	if o.reason != "tx:out" {
		t.Fatalf("%s", o.reason)
	}
	a, b, sp, dp := pktTuple(o.pkt)
	if a != natIP || b != natIP || dp != 5000 {
		t.Fatalf("out as %s:%d > %s:%d", a, sp, b, dp)
	}
	// Its "reply", the packet as it went out, arriving back.
	r := s.one(o.pkt[:len(o.pkt):len(o.pkt)])
	ra, rb, rsp, rdp := pktTuple(r.pkt)
	t.Logf("back: %s %s as %s:%d > %s:%d", r.reason, ctClass(r.m.CT), ra, rsp, rb, rdp)
	sfFuzzCheckTable(t, s.ctTable())
}

// TestAttackSYNFloodKeepsAssured: a table full of assured flows refuses
// a flood of SYNs from spoofed sources under drop:ct_table_full and
// keeps every assured flow.
func TestAttackSYNFloodKeepsAssured(t *testing.T) {
	const n = 16
	s := newSFRig(t, ctYAML(fmt.Sprintf(", size: %d", n), ""))
	for i := range n {
		sp := uint16(10000 + i)
		s.one(sfUDP(t, cli, srv, sp, 53, 1))
		s.one(sfUDP(t, srv, cli, 53, sp, 1))
	}
	s.advance(3000)
	for i := range n {
		sp := uint16(10000 + i)
		s.one(sfUDP(t, cli, srv, sp, 53, 1))
		s.one(sfUDP(t, srv, cli, 53, sp, 1)) // older than 2 s, replied: assured
	}
	var flood [][]byte
	for i := range 256 {
		flood = append(flood, sfTCP(t, tcpSpec{src: fmt.Sprintf("198.18.%d.%d", i/256, i%256), dst: srv, sport: uint16(i), dport: 80, flags: "S", seq: uint32(i)}))
	}
	for range 4 {
		for _, o := range s.send(flood...) {
			if o.reason != "drop:ct_table_full" {
				t.Fatalf("a SYN with the table full of assured flows: %s", o.reason)
			}
		}
		s.advance(100)
	}
	for i := range n {
		o := s.one(sfUDP(t, cli, srv, uint16(10000+i), 53, 1))
		if ctClass(o.m.CT) != "established" {
			t.Fatalf("assured flow %d after the flood: %s", i, ctClass(o.m.CT))
		}
	}
	if c := stCounter(s.stage("ct"), "table_full"); c != 4*256 {
		t.Fatalf("table_full %d", c)
	}
	if c := stCounter(s.stage("ct"), "evictions"); c != 0 {
		t.Fatalf("evictions %d", c)
	}
}

// TestAttackSYNFloodChurn: unassured flows under a SYN flood are evicted,
// counted, and the table stays consistent.
func TestAttackSYNFloodChurn(t *testing.T) {
	s := newSFRig(t, "name: churn\nsettings: {batch_size: 256}\nstages:\n  - {name: parse, type: parse}\n"+
		"  - {name: ct, type: conntrack, size: 64}\n"+
		"  - name: nat\n    type: nat\n    conntrack: ct\n    snat: [{match: {src: 10.0.0.0/8}, to: 192.0.2.1, ports: 1000-1063}]\n"+
		"  - {name: out, type: tx, port: out}\n")
	for round := range 50 {
		var flood [][]byte
		for i := range 200 {
			flood = append(flood, sfTCP(t, tcpSpec{src: fmt.Sprintf("10.%d.%d.%d", round, i/256, i%256), dst: srv, sport: uint16(round*200 + i), dport: 80, flags: "S", seq: uint32(i)}))
		}
		for _, o := range s.send(flood...) {
			switch o.reason {
			case "tx:out", "drop:ct_table_full", "drop:nat_ports_exhausted":
			default:
				t.Fatalf("%s", o.reason)
			}
		}
		sfFuzzCheckTable(t, s.ctTable())
		s.advance(uint32(round * 997))
	}
}

// TestAttackUDPZeroChecksumNAT: a UDP datagram without a checksum is
// translated both ways with its checksum left 0.
func TestAttackUDPZeroChecksumNAT(t *testing.T) {
	s := newSFRig(t, natYAML(`dnat: [{match: {dst: 198.51.100.1}, to: 10.0.0.5, port: 8080}]
snat: [{match: {src: 10.0.0.0/8}, to: 192.0.2.1, ports: 3000-3000}]`))
	zero := func(p []byte) []byte {
		q := append([]byte(nil), p...)
		binary.BigEndian.PutUint16(q[14+20+6:], 0)
		return q
	}
	for _, n := range []int{0, 4, 12, 100} {
		s.advance(100_000)
		o := s.one(zero(sfUDP(t, cli, srv, 7000, 53, n)))
		if o.reason != "tx:out" || binary.BigEndian.Uint16(o.pkt[14+20+6:]) != 0 {
			t.Fatalf("len %d: %s checksum %#x", n, o.reason, binary.BigEndian.Uint16(o.pkt[14+20+6:]))
		}
		if err := checksumsOK(o.pkt); err != nil {
			t.Fatal(err)
		}
		r := s.one(zero(sfUDP(t, srv, natIP, 53, 3000, n)))
		if r.reason != "tx:out" || binary.BigEndian.Uint16(r.pkt[14+20+6:]) != 0 {
			t.Fatalf("len %d reply: %s checksum %#x", n, r.reason, binary.BigEndian.Uint16(r.pkt[14+20+6:]))
		}
		if a, b, sp, dp := pktTuple(r.pkt); a != srv || b != cli || sp != 53 || dp != 7000 {
			t.Fatalf("reply as %s:%d > %s:%d", a, sp, b, dp)
		}
		d := s.one(zero(sfUDP(t, "203.0.113.7", "198.51.100.1", 9000, 53, n)))
		if d.reason != "tx:out" || binary.BigEndian.Uint16(d.pkt[14+20+6:]) != 0 {
			t.Fatalf("len %d dnat: %s checksum %#x", n, d.reason, binary.BigEndian.Uint16(d.pkt[14+20+6:]))
		}
	}
}

// TestAttackClockWrapAndBack: the uint32 ms clock wraps with traffic
// flowing (entries expire across the wrap as before it), and a packet
// from the past (a looping replay) neither expires nor renews anything
// wrongly.
func TestAttackClockWrapAndBack(t *testing.T) {
	s := newSFRig(t, ctYAML(", size: 8", ""))
	s.now = ^uint32(0) - 10_000
	s.one(sfUDP(t, cli, srv, 1111, 53, 1))
	s.advance(20_000) // across the wrap, within the 30 s timeout
	if o := s.one(sfUDP(t, srv, cli, 53, 1111, 1)); ctClass(o.m.CT) != "established/reply" {
		t.Fatalf("reply 20 s on, across the wrap: %s", ctClass(o.m.CT))
	}
	s.advance(31_000)
	if o := s.one(sfUDP(t, srv, cli, 53, 1111, 1)); ctClass(o.m.CT) != "new" {
		t.Fatalf("reply 31 s after the last packet, across the wrap: %s", ctClass(o.m.CT))
	}
	// Back in time by an hour: the table keeps its clock.
	now := s.ctTable().now
	s.now -= 3600_000
	s.one(sfUDP(t, cli, srv, 2222, 53, 1))
	if s.ctTable().now != now {
		t.Fatalf("clock went back: %d -> %d", now, s.ctTable().now)
	}
	s.now += 3600_000 + 29_000
	if o := s.one(sfUDP(t, srv, cli, 53, 2222, 1)); ctClass(o.m.CT) != "established/reply" {
		t.Fatalf("flow made by a packet from the past: %s", ctClass(o.m.CT))
	}
	sfFuzzCheckTable(t, s.ctTable())
}

// TestAttackDroppedCreatorKeptFlow: in one vector, a flow's first packet
// is dropped by a rule after conntrack and a second packet of the same
// flow gets through, translated. The flow's entry (and its translation)
// must outlive the batch: otherwise a packet left with a translated
// tuple that no entry holds, its replies are not translated back, and
// the port can go to another flow.
func TestAttackDroppedCreatorKeptFlow(t *testing.T) {
	s := newSFRig(t, "name: dc\nsettings: {batch_size: 256}\nstages:\n  - {name: parse, type: parse}\n"+
		"  - {name: ct, type: conntrack}\n"+
		"  - {name: acl, type: filter, rules: [{ct: invalid, action: \"drop:invalid\"}, {tcp_flags: \"syn,ece\", action: \"drop:ecn_syn\"}]}\n"+
		"  - name: nat\n    type: nat\n    conntrack: ct\n    snat: [{match: {src: 10.0.0.0/8}, to: 192.0.2.1, ports: 3000-3999}]\n"+
		"  - {name: out, type: tx, port: out}\n")
	ecnSyn := sfTCP(t, tcpSpec{src: cli, dst: srv, sport: 40000, dport: 80, flags: "S", seq: 100})
	ecnSyn[14+20+13] |= 0x40 // ECE
	fixTCPSum(ecnSyn)
	syn := sfTCP(t, tcpSpec{src: cli, dst: srv, sport: 40000, dport: 80, flags: "S", seq: 100})
	out := s.send(ecnSyn, syn)
	if out[0].reason != "drop:ecn_syn" || out[1].reason != "tx:out" {
		t.Fatalf("%s, %s", out[0].reason, out[1].reason)
	}
	_, _, np, _ := pktTuple(out[1].pkt)
	sa := s.one(sfTCP(t, tcpSpec{src: srv, dst: natIP, sport: 80, dport: np, flags: "SA", seq: 900, ack: 101}))
	if sa.reason != "tx:out" || ctClass(sa.m.CT) != "established/reply" {
		t.Fatalf("the SYN-ACK to the SYN that got through: %s %s", sa.reason, ctClass(sa.m.CT))
	}
	if _, b, _, dp := pktTuple(sa.pkt); b != cli || dp != 40000 {
		t.Fatalf("SYN-ACK went to %s:%d", b, dp)
	}
	sfFuzzCheckTable(t, s.ctTable())
	// A reply in the vector of a dropped SYN keeps nothing: the flow
	// goes with its SYN, and a later forged reply finds none.
	syn2 := sfTCP(t, tcpSpec{src: cli, dst: srv, sport: 40001, dport: 80, flags: "S", seq: 100})
	syn2[14+20+13] |= 0x40
	fixTCPSum(syn2)
	forged := sfTCP(t, tcpSpec{src: srv, dst: cli, sport: 80, dport: 40001, flags: "SA", seq: 900, ack: 101})
	s2 := newSFRig(t, ctYAML("", "      - {tcp_flags: \"syn,ece\", action: \"drop:ecn_syn\"}\n"))
	out = s2.send(syn2, forged)
	if out[0].reason != "drop:ecn_syn" || ctClass(out[1].m.CT) != "established/reply" {
		t.Fatalf("%s, %s", out[0].reason, ctClass(out[1].m.CT))
	}
	s2.advance(10)
	if o := s2.one(forged); ctClass(o.m.CT) != "invalid" {
		t.Fatalf("a forged SYN-ACK after its SYN was dropped: %s", ctClass(o.m.CT))
	}
	if n := s2.ctTable().n; n != 0 {
		t.Fatalf("%d flows, want 0", n)
	}
}

// fixTCPSum recomputes the TCP checksum of an untagged IPv4 packet.
func fixTCPSum(p []byte) {
	ihl := int(p[14]&15) * 4
	l4 := 14 + ihl
	end := ctIPEnd(p, 14, false)
	binary.BigEndian.PutUint16(p[l4+16:], 0)
	acc := inetSum(p[14+12:14+20], 0) + uint64(end-l4) + 6
	binary.BigEndian.PutUint16(p[l4+16:], ^inetFold(inetSum(p[l4:end], acc)))
}

// TestAttackICMPErrorQuotes: ICMP errors about translated flows quoting
// the packet cut short (8 bytes of UDP, 4 of TCP, 8 of an ICMP echo),
// with the quoted packet's own length field claiming more: the quoted
// addresses, ports and identifier go back, the outer packet's checksums
// are valid, the quoted IPv4 header's checksum is valid, and an error
// quoting an error is left alone (invalid).
func TestAttackICMPErrorQuotes(t *testing.T) {
	s := newSFRig(t, natYAML(`snat: [{match: {src: 10.0.0.0/8}, to: 192.0.2.1, ports: 3000-3999}]`))
	udp := sfUDP(t, cli, srv, 6000, 53, 100)
	tcp := sfTCP(t, tcpSpec{src: cli, dst: srv, sport: 6001, dport: 80, flags: "S", seq: 5})
	echo := sfICMP4(t, cli, srv, 8, 0, 4242, nil)
	for _, c := range []struct {
		name  string
		pkt   []byte
		quote int // bytes of the translated packet's IP part quoted
	}{{"udp8", udp, 28}, {"udp4", udp, 24}, {"tcp4", tcp, 24}, {"tcp8", tcp, 28}, {"tcpwhole", tcp, 0}, {"echo8", echo, 28}} {
		o := s.one(c.pkt)
		if o.reason != "tx:out" {
			t.Fatalf("%s: %s", c.name, o.reason)
		}
		q := ipPart(o.pkt, c.quote)
		e := s.one(sfICMP4(t, "198.18.0.1", natIP, 3, 1, 0, q))
		if e.reason != "tx:out" || ctClass(e.m.CT) != "related/reply" {
			t.Fatalf("%s: the error %s %s", c.name, e.reason, ctClass(e.m.CT))
		}
		if err := checksumsOK(e.pkt); err != nil {
			t.Fatalf("%s: outer: %v", c.name, err)
		}
		if a, b, _, _ := pktTuple(e.pkt); a != "198.18.0.1" || b != cli {
			t.Fatalf("%s: outer %s > %s", c.name, a, b)
		}
		inner := e.pkt[14+20+8:]
		if !ipv4HeaderOK(inner, 0) {
			t.Fatalf("%s: quoted header checksum", c.name)
		}
		want := ipPart(c.pkt, c.quote)
		if c.name == "tcp4" || c.name == "udp4" {
			// Only the ports are quoted: nothing else to compare.
			want = want[:24]
		}
		if string(inner[:len(want)]) != string(want) {
			t.Fatalf("%s: quoted\n%x\nwant\n%x", c.name, inner, want)
		}
		s.advance(1000)
	}
	// An error quoting an error about the flow.
	o := s.one(udp)
	e1 := sfICMP4(t, "198.18.0.1", natIP, 3, 1, 0, ipPart(o.pkt, 28))
	e2 := s.one(sfICMP4(t, "198.18.0.2", "198.18.0.1", 3, 1, 0, ipPart(e1, 0)))
	if ctClass(e2.m.CT) != "invalid" {
		t.Fatalf("an error quoting an error: %s", ctClass(e2.m.CT))
	}
}

// TestAttackNATPoolErrors: a pool or target that no host can use
// (0.0.0.0/8, loopback, multicast, reserved and broadcast), or an
// address twice in one pool, is a clear error naming it.
func TestAttackNATPoolErrors(t *testing.T) {
	for _, c := range []struct{ opts, want string }{
		{"snat: [{to: 0.0.0.0}]", "0.0.0.0 is not an address"},
		{"snat: [{to: 255.255.255.255}]", "255.255.255.255 is not an address"},
		{"snat: [{to: 224.0.0.1}]", "224.0.0.1 is not an address"},
		{"snat: [{to: 127.0.0.1}]", "127.0.0.1 is not an address"},
		{"snat: [{to: 126.255.255.250-128.0.0.1}]", "127.0.0.0 is not an address"},
		{"snat: [{to: 223.255.255.254-223.255.255.255}]", ""},
		{"dnat: [{to: 0.0.0.0}]", "0.0.0.0 is not an address"},
		{"snat: [{to: [192.0.2.1, 192.0.2.1]}]", "192.0.2.1 is in the pool twice"},
		{"snat: [{to: [192.0.2.1-192.0.2.9, 192.0.2.5]}]", "192.0.2.5 is in the pool twice"},
		{"snat: [{to: [192.0.2.1, 192.0.2.2]}]", ""},
	} {
		_, err := Load("t.yaml", []byte(natYAML(c.opts)))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.opts, err)
		case c.want != "" && (err == nil || !containsStr(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error with %q", c.opts, err, c.want)
		}
	}
}
