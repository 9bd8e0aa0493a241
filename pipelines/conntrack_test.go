package pipelines

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/rings"
)

const (
	cli = "10.0.0.1"
	srv = "198.51.100.7"
)

// ctTable returns the rig's conntrack table (stage "ct").
func (s *sfRig) ctTable() *ctTable { return s.stage("ct").(*ctStage).table() }

// ctState returns the TCP state name of the flow whose original tuple is
// (src:sport -> dst:dport), or "" when there is none.
func (s *sfRig) ctFlow(proto uint8, src string, sport uint16, dst string, dport uint16) (*ctEntry, bool) {
	st := s.stage("ct").(*ctStage)
	t := st.table()
	var k ctTuple
	m := stMeta(sfUDP(s.t, src, dst, sport, dport, 0))
	ctAddrs(&m, &k)
	k.proto, k.sport, k.dport = proto, sport, dport
	e, dir, ok := t.lookup(&k, k.hash(t.seed), -1)
	if !ok || dir != 0 {
		return nil, false
	}
	return &t.ent[e], true
}

func (s *sfRig) tcpState(src string, sport uint16, dst string, dport uint16) string {
	en, ok := s.ctFlow(6, src, sport, dst, dport)
	if !ok {
		return ""
	}
	return tcpStateNames[en.state]
}

// TestConntrackTCPHandshakeAndClose walks a connection through Linux's
// states, checking each packet's class and the flow's state and timeout.
func TestConntrackTCPHandshakeAndClose(t *testing.T) {
	s := newSFRig(t, ctYAML("", ""))
	c2s := func(flags string, seq, ack uint32, n int) []byte {
		return sfTCP(t, tcpSpec{src: cli, dst: srv, sport: 40000, dport: 80, flags: flags, seq: seq, ack: ack, payload: n, wscale: 7, sackPerm: true})
	}
	s2c := func(flags string, seq, ack uint32, n int) []byte {
		return sfTCP(t, tcpSpec{src: srv, dst: cli, sport: 80, dport: 40000, flags: flags, seq: seq, ack: ack, payload: n, wscale: 7, sackPerm: true})
	}
	steps := []struct {
		pkt     []byte
		class   string
		state   string
		timeout uint32 // seconds, 0: not checked
	}{
		{c2s("S", 1000, 0, 0), "new", "SYN_SENT", 120},
		{s2c("SA", 5000, 1001, 0), "established/reply", "SYN_RECV", 60},
		{c2s("A", 1001, 5001, 0), "established", "ESTABLISHED", 432000},
		{c2s("PA", 1001, 5001, 100), "established", "ESTABLISHED", 300}, // unacknowledged data: UNACK timeout
		{s2c("A", 5001, 1101, 0), "established/reply", "ESTABLISHED", 432000},
		{c2s("FA", 1101, 5001, 0), "established", "FIN_WAIT", 120},
		{s2c("A", 5001, 1102, 0), "established/reply", "CLOSE_WAIT", 60},
		{s2c("FA", 5001, 1102, 0), "established/reply", "LAST_ACK", 30},
		{c2s("A", 1102, 5002, 0), "established", "TIME_WAIT", 120},
	}
	for i, st := range steps {
		o := s.one(st.pkt)
		if got := ctClass(o.m.CT); got != st.class {
			t.Fatalf("step %d: class %s, want %s", i, got, st.class)
		}
		if got := s.tcpState(cli, 40000, srv, 80); got != st.state {
			t.Fatalf("step %d: state %s, want %s", i, got, st.state)
		}
		en, _ := s.ctFlow(6, cli, 40000, srv, 80)
		if left := en.expires - s.ctTable().now; st.timeout != 0 && left != st.timeout*1000 {
			t.Fatalf("step %d: timeout %d ms, want %d s", i, left, st.timeout)
		}
		s.advance(1)
	}
	en, _ := s.ctFlow(6, cli, 40000, srv, 80)
	if en.status&ctStAssured == 0 {
		t.Fatal("a completed handshake did not make the flow assured")
	}
	// TIME_WAIT ends after 120 s: a packet then finds no flow, and a new
	// SYN starts one.
	s.advance(120_000)
	if o := s.one(c2s("S", 9000, 0, 0)); ctClass(o.m.CT) != "new" {
		t.Fatalf("SYN after TIME_WAIT expired: %s", ctClass(o.m.CT))
	}
	if got := stCounter(s.stage("ct"), "expiries"); got != 1 {
		t.Fatalf("expiries = %d, want 1", got)
	}
}

// TestConntrackTCPInvalid checks the invalid classes Linux gives, with
// their reasons.
func TestConntrackTCPInvalid(t *testing.T) {
	cases := []struct {
		name   string
		opts   string
		pkts   []tcpSpec
		class  string // of the last packet
		reason string
	}{
		{"mid-stream ack, loose off", "", []tcpSpec{{flags: "A", seq: 5, ack: 9}}, "invalid", "tcp_new"},
		{"synack first", "", []tcpSpec{{flags: "SA", seq: 5, ack: 9}}, "invalid", "tcp_new"},
		{"rst first", "", []tcpSpec{{flags: "R", seq: 5}}, "invalid", "tcp_new"},
		{"syn+fin", "", []tcpSpec{{flags: "SF", seq: 5}}, "invalid", "tcp_flags"},
		{"no flags", "", []tcpSpec{{flags: "", seq: 5}}, "invalid", "tcp_flags"},
		{"syn then synack from the originator", "", []tcpSpec{{flags: "S", seq: 1}, {flags: "SA", seq: 1, ack: 1}}, "invalid", "tcp_state"},
		{"ack over the upper bound", "", []tcpSpec{
			{flags: "S", seq: 1000, win: 1000},
			{reply: true, flags: "SA", seq: 5000, ack: 1001, win: 1000},
			{flags: "A", seq: 1001, ack: 90001, win: 1000},
		}, "invalid", "tcp_window"},
		{"seq over the upper bound", "", []tcpSpec{
			{flags: "S", seq: 1000, win: 1000},
			{reply: true, flags: "SA", seq: 5000, ack: 1001, win: 1000},
			{flags: "A", seq: 1001, ack: 5001, win: 1000},
			{flags: "PA", seq: 900001, ack: 5001, win: 1000, payload: 10},
		}, "invalid", "tcp_window"},
		{"mid-stream ack, loose on", ", loose: true", []tcpSpec{{flags: "A", seq: 5, ack: 9}}, "new", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSFRig(t, ctYAML(c.opts, ""))
			var o sfOut
			for _, p := range c.pkts {
				p.src, p.dst, p.sport, p.dport = cli, srv, 40000, 443
				if p.reply {
					p.src, p.dst, p.sport, p.dport = srv, cli, 443, 40000
				}
				o = s.one(sfTCP(t, p))
			}
			if got := ctClass(o.m.CT); got != c.class {
				t.Fatalf("class %s, want %s", got, c.class)
			}
			if c.reason != "" {
				if n := stCounter(s.stage("ct"), "invalid="+c.reason); n != 1 {
					t.Fatalf("invalid=%s = %d, want 1 (counters %v)", c.reason, n, stReport(s.stage("ct")))
				}
			}
		})
	}
}

// TestConntrackRSTClosesFlow: an in-window RST moves an established flow
// to CLOSE with the 10 s timeout; one below the peer's highest ack is
// invalid and changes nothing.
func TestConntrackRSTClosesFlow(t *testing.T) {
	s := newSFRig(t, ctYAML("", ""))
	hs := []tcpSpec{
		{flags: "S", seq: 1000},
		{reply: true, flags: "SA", seq: 5000, ack: 1001},
		{flags: "A", seq: 1001, ack: 5001},
		{reply: true, flags: "PA", seq: 5001, ack: 1001, payload: 100},
		{flags: "A", seq: 1001, ack: 5101},
	}
	send := func(p tcpSpec) sfOut {
		p.src, p.dst, p.sport, p.dport = cli, srv, 40001, 22
		if p.reply {
			p.src, p.dst, p.sport, p.dport = srv, cli, 22, 40001
		}
		return s.one(sfTCP(t, p))
	}
	for _, p := range hs {
		send(p)
	}
	// The client acked 5101: a server RST at seq 5050 is below it.
	if o := send(tcpSpec{reply: true, flags: "R", seq: 5050}); ctClass(o.m.CT) != "invalid" {
		t.Fatalf("RST below max ack: class %s, want invalid", ctClass(o.m.CT))
	}
	if st := s.tcpState(cli, 40001, srv, 22); st != "ESTABLISHED" {
		t.Fatalf("after an invalid RST: %s", st)
	}
	if o := send(tcpSpec{reply: true, flags: "R", seq: 5101}); ctClass(o.m.CT) != "established/reply" {
		t.Fatalf("in-window RST: class %s", ctClass(o.m.CT))
	}
	en, _ := s.ctFlow(6, cli, 40001, srv, 22)
	if tcpStateNames[en.state] != "CLOSE" || en.expires-s.ctTable().now != 10_000 {
		t.Fatalf("after RST: state %s, timeout %d ms", tcpStateNames[en.state], en.expires-s.ctTable().now)
	}
}

// TestConntrackCommit: a SYN a later filter drops leaves no flow, so a
// forged SYN/ACK that follows is invalid, as in Linux, where the
// unconfirmed entry dies with the dropped packet.
func TestConntrackCommit(t *testing.T) {
	rules := indent(`- {ct: new, dst_port: 22, action: "drop:ssh"}
- {ct: invalid, action: "drop:invalid"}`, 6)
	s := newSFRig(t, ctYAML("", rules))
	syn := sfTCP(t, tcpSpec{src: cli, dst: srv, sport: 40002, dport: 22, flags: "S", seq: 1})
	synack := sfTCP(t, tcpSpec{src: srv, dst: cli, sport: 22, dport: 40002, flags: "SA", seq: 7, ack: 2})
	if o := s.one(syn); o.reason != "drop:ssh" {
		t.Fatalf("SYN to 22: %s", o.reason)
	}
	if s.ctTable().n != 0 {
		t.Fatalf("a dropped SYN left %d flows", s.ctTable().n)
	}
	if o := s.one(synack); o.reason != "drop:invalid" || ctClass(o.m.CT) != "invalid" {
		t.Fatalf("forged SYN/ACK: %s, class %s", o.reason, ctClass(o.m.CT))
	}
	// An accepted SYN confirms its flow: inserts and entries count it.
	ok := sfTCP(t, tcpSpec{src: cli, dst: srv, sport: 40003, dport: 443, flags: "S", seq: 1})
	if o := s.one(ok); o.reason != "tx:out" {
		t.Fatalf("SYN to 443: %s", o.reason)
	}
	if st := s.stage("ct"); stCounter(st, "inserts") != 1 || stCounter(st, "entries") != 1 || s.ctTable().n != 1 {
		t.Fatalf("inserts %d entries %d table %d, want 1 1 1", stCounter(st, "inserts"), stCounter(st, "entries"), s.ctTable().n)
	}
}

// TestConntrackUDPAndTimeouts: UDP is new until a reply; the unreplied
// and stream timeouts and assured follow Linux (stream after 2 s).
func TestConntrackUDPAndTimeouts(t *testing.T) {
	s := newSFRig(t, ctYAML(", timeouts: {udp: 5, udp_stream: 50}", ""))
	q := sfUDP(t, cli, srv, 5353, 53, 20)
	a := sfUDP(t, srv, cli, 53, 5353, 40)
	for i, want := range []string{"new", "new"} {
		if o := s.one(q); ctClass(o.m.CT) != want {
			t.Fatalf("query %d: %s", i, ctClass(o.m.CT))
		}
	}
	if o := s.one(a); ctClass(o.m.CT) != "established/reply" {
		t.Fatalf("answer: %s", ctClass(o.m.CT))
	}
	if o := s.one(q); ctClass(o.m.CT) != "established" {
		t.Fatalf("query after answer: %s", ctClass(o.m.CT))
	}
	en, _ := s.ctFlow(17, cli, 5353, srv, 53)
	if en.status&ctStAssured != 0 || en.expires-s.ctTable().now != 5000 {
		t.Fatalf("young replied flow: assured %v timeout %d", en.status&ctStAssured != 0, en.expires-s.ctTable().now)
	}
	s.advance(3000) // older than 2 s: a stream
	s.one(a)
	if en.status&ctStAssured == 0 || en.expires-s.ctTable().now != 50_000 {
		t.Fatalf("stream: assured %v timeout %d", en.status&ctStAssured != 0, en.expires-s.ctTable().now)
	}
	s.advance(50_000)
	if o := s.one(q); ctClass(o.m.CT) != "new" {
		t.Fatalf("after the stream timeout: %s", ctClass(o.m.CT))
	}
}

// TestConntrackICMP: echo request/reply are a flow; a reply without a
// request is invalid; an error quoting a tracked flow is related, in the
// direction it travels, and one quoting nothing tracked is invalid.
func TestConntrackICMP(t *testing.T) {
	s := newSFRig(t, ctYAML("", ""))
	if o := s.one(sfICMP4(t, cli, srv, 0, 0, 77, nil)); ctClass(o.m.CT) != "invalid" {
		t.Fatalf("lone echo reply: %s", ctClass(o.m.CT))
	}
	if o := s.one(sfICMP4(t, cli, srv, 8, 0, 77, nil)); ctClass(o.m.CT) != "new" {
		t.Fatalf("echo request: %s", ctClass(o.m.CT))
	}
	if o := s.one(sfICMP4(t, srv, cli, 0, 0, 77, nil)); ctClass(o.m.CT) != "established/reply" {
		t.Fatalf("echo reply: %s", ctClass(o.m.CT))
	}
	// The server pinging the client with the same id is another flow.
	if o := s.one(sfICMP4(t, srv, cli, 8, 0, 77, nil)); ctClass(o.m.CT) != "new" {
		t.Fatalf("reverse echo request: %s", ctClass(o.m.CT))
	}
	udp := sfUDP(t, cli, srv, 6000, 9999, 10)
	s.one(udp)
	unreach := sfICMP4(t, srv, cli, 3, 3, 0, ipPart(udp, 28))
	if o := s.one(unreach); ctClass(o.m.CT) != "related/reply" {
		t.Fatalf("port unreachable for a tracked flow: %s", ctClass(o.m.CT))
	}
	// A router near the server reporting the server's packet to the client
	// travels in the original direction.
	back := sfUDP(t, srv, cli, 9999, 6000, 10)
	s.one(back)
	ttl := sfICMP4(t, "192.0.2.9", srv, 11, 0, 0, ipPart(back, 28))
	if o := s.one(ttl); ctClass(o.m.CT) != "related" {
		t.Fatalf("time exceeded about a reply: %s", ctClass(o.m.CT))
	}
	other := sfICMP4(t, srv, cli, 3, 3, 0, ipPart(sfUDP(t, cli, srv, 6001, 9999, 10), 28))
	if o := s.one(other); ctClass(o.m.CT) != "invalid" {
		t.Fatalf("error about no flow: %s", ctClass(o.m.CT))
	}
	if n := stCounter(s.stage("ct"), "invalid=icmp_error_no_flow"); n != 1 {
		t.Fatalf("icmp_error_no_flow = %d", n)
	}
	// An error about an ICMP query flow.
	echo := sfICMP4(t, cli, srv, 8, 0, 77, nil)
	if o := s.one(sfICMP4(t, "192.0.2.9", cli, 11, 0, 0, ipPart(echo, 28))); ctClass(o.m.CT) != "related/reply" {
		t.Fatalf("time exceeded about an echo request: %s", ctClass(o.m.CT))
	}
}

// TestConntrackICMPv6: echo is a flow; neighbour discovery is untracked;
// an error about a tracked TCP flow is related.
func TestConntrackICMPv6(t *testing.T) {
	const c6, s6 = "2001:db8::1", "2001:db8:1::7"
	s := newSFRig(t, ctYAML("", ""))
	if o := s.one(sfICMP6(t, c6, s6, 128, 0, 5, nil)); ctClass(o.m.CT) != "new" {
		t.Fatalf("echo request: %s", ctClass(o.m.CT))
	}
	if o := s.one(sfICMP6(t, s6, c6, 129, 0, 5, nil)); ctClass(o.m.CT) != "established/reply" {
		t.Fatalf("echo reply: %s", ctClass(o.m.CT))
	}
	if o := s.one(sfICMP6(t, "fe80::1", "ff02::1", 135, 0, 0, make([]byte, 20))); ctClass(o.m.CT) != "untracked" {
		t.Fatalf("neighbour solicitation: %s", ctClass(o.m.CT))
	}
	syn := sfTCP(t, tcpSpec{src: c6, dst: s6, sport: 1234, dport: 80, flags: "S", seq: 1})
	s.one(syn)
	if o := s.one(sfICMP6(t, s6, c6, 1, 4, 0, ipPart(syn, 60))); ctClass(o.m.CT) != "related/reply" {
		t.Fatalf("unreachable about a tracked SYN: %s", ctClass(o.m.CT))
	}
}

// TestConntrackChecksum: a bad TCP checksum is invalid (bad_checksum)
// and creates nothing, unless checksum: false.
func TestConntrackChecksum(t *testing.T) {
	for _, check := range []bool{true, false} {
		s := newSFRig(t, ctYAML(fmt.Sprintf(", checksum: %v", check), ""))
		p := sfTCP(t, tcpSpec{src: cli, dst: srv, sport: 1, dport: 2, flags: "S", seq: 1})
		p[14+20+16] ^= 0xff // the TCP checksum
		o := s.one(p)
		want := "invalid"
		if !check {
			want = "new"
		}
		if ctClass(o.m.CT) != want {
			t.Fatalf("checksum %v: %s, want %s", check, ctClass(o.m.CT), want)
		}
	}
}

// TestConntrackTableFull: a full table evicts the unassured flow nearest
// to expiry among those at the sweep hand; when all are assured, the new
// flow is dropped as ct_table_full and no assured flow is lost.
func TestConntrackTableFull(t *testing.T) {
	s := newSFRig(t, ctYAML(", size: 8", ""))
	for i := range 8 {
		s.one(sfUDP(t, cli, srv, uint16(1000+i), 53, 1))
		s.advance(10)
	}
	if s.ctTable().n != 8 {
		t.Fatalf("%d flows, want 8", s.ctTable().n)
	}
	// The oldest (1000) is nearest to expiry: it goes for the ninth.
	if o := s.one(sfUDP(t, cli, srv, 2000, 53, 1)); o.reason != "tx:out" || ctClass(o.m.CT) != "new" {
		t.Fatalf("ninth flow: %s %s", o.reason, ctClass(o.m.CT))
	}
	if _, ok := s.ctFlow(17, cli, 1000, srv, 53); ok {
		t.Fatal("the flow nearest to expiry was not the one evicted")
	}
	if n := stCounter(s.stage("ct"), "evictions"); n != 1 {
		t.Fatalf("evictions = %d", n)
	}
	// Make every flow assured (TCP handshakes), then a new flow is refused.
	s2 := newSFRig(t, ctYAML(", size: 4", ""))
	for i := range 4 {
		sp := uint16(3000 + i)
		s2.one(sfTCP(t, tcpSpec{src: cli, dst: srv, sport: sp, dport: 80, flags: "S", seq: 1}))
		s2.one(sfTCP(t, tcpSpec{src: srv, dst: cli, sport: 80, dport: sp, flags: "SA", seq: 9, ack: 2}))
		s2.one(sfTCP(t, tcpSpec{src: cli, dst: srv, sport: sp, dport: 80, flags: "A", seq: 2, ack: 10}))
	}
	o := s2.one(sfUDP(t, cli, srv, 9, 9, 1))
	if o.reason != "drop:ct_table_full" {
		t.Fatalf("new flow into a table of assured flows: %s", o.reason)
	}
	if s2.ctTable().n != 4 || stCounter(s2.stage("ct"), "table_full") != 1 {
		t.Fatalf("table %d flows, table_full %d", s2.ctTable().n, stCounter(s2.stage("ct"), "table_full"))
	}
}

// TestConntrackBytesPerFlow states the table's memory: one entry is 96
// bytes and a flow costs at most 128 with the index, at every size.
func TestConntrackBytesPerFlow(t *testing.T) {
	if ctEntryBytes != 96 {
		t.Fatalf("ctEntry is %d bytes, CONFIG.md says 96", ctEntryBytes)
	}
	for _, n := range []int{1, 2, 3, 7, 100, 1000, 65536, 262144, 1_000_000, 1 << 20, ctMaxSize} {
		if b := ctBytesPerFlow(n); b > 128 {
			t.Fatalf("size %d: %.1f bytes per flow", n, b)
		}
	}
	tab := newCTTable(1_000_000)
	if got := float64(tab.bytes()) / 1e6; got > 128 || got != ctBytesPerFlow(1_000_000) {
		t.Fatalf("a table of a million flows holds %.1f bytes per flow", got)
	}
}

// TestConntrackIndexChurn inserts and removes flows at random against a
// map, so the backward-shift deletion is checked on long probe runs.
func TestConntrackIndexChurn(t *testing.T) {
	tab := newCTTable(512)
	live := map[uint16]uint32{} // sport -> entry
	rnd := uint64(1)
	next := func() uint64 { rnd ^= rnd << 13; rnd ^= rnd >> 7; rnd ^= rnd << 17; return rnd }
	key := func(p uint16) ctTuple {
		k := ctTuple{proto: 17, sport: p, dport: 53}
		copy(k.src[:4], []byte{10, 0, 0, 1})
		copy(k.dst[:4], []byte{10, 0, 0, 2})
		return k
	}
	for range 200_000 {
		p := uint16(next() % 700)
		k := key(p)
		if e, ok := live[p]; ok && next()%2 == 0 {
			tab.remove(e)
			delete(live, p)
			continue
		}
		if _, ok := live[p]; ok {
			continue
		}
		e, ok := tab.alloc()
		if !ok {
			continue
		}
		tab.ent[e] = ctEntry{src: k.src, dst: k.dst, sport: k.sport, dport: k.dport, proto: 17, status: ctStUsed}
		tab.add(e)
		live[p] = e
	}
	for p := range uint16(700) {
		k := key(p)
		e, dir, ok := tab.lookup(&k, k.hash(tab.seed), -1)
		want, in := live[p]
		if ok != in || ok && (e != want || dir != 0) {
			t.Fatalf("port %d: lookup (%d %d %v), map (%d %v)", p, e, dir, ok, want, in)
		}
		k.invert()
		if _, dir, ok := tab.lookup(&k, k.hash(tab.seed), -1); ok != in || ok && dir != 1 {
			t.Fatalf("port %d reply: %v %d", p, ok, dir)
		}
	}
	if tab.n != len(live) {
		t.Fatalf("table counts %d, map %d", tab.n, len(live))
	}
}

// TestConntrackZeroAlloc: tracking allocates nothing per packet, new
// flows, established ones and expiries alike.
func TestConntrackZeroAlloc(t *testing.T) {
	s := newSFRig(t, ctYAML(", size: 4096", indent(`- {ct: invalid, action: "drop:invalid"}`, 6)))
	var pkts [][]byte
	for i := range 64 {
		pkts = append(pkts, sfUDP(t, cli, srv, uint16(2000+i), 53, 10), sfUDP(t, srv, cli, 53, uint16(2000+i), 10))
	}
	b := stFillBatch(t, s.a, pkts)
	// Parse and filter write Meta; the batch is re-run as it is.
	s.r.Process(b)
	n := allocs.Count(200, func() {
		for i := range b.Meta {
			b.Meta[i].Time += 40_000 // every other run finds its flows expired
		}
		s.r.Process(b)
	})
	if n != 0 {
		t.Fatalf("%d allocations in 200 batches, want 0", n)
	}
}

func TestConntrackBuildErrors(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{`{size: 0}`, "size 0"},
		{`{size: 100000000}`, "size 100000000"},
		{`{zone: port}`, `zone "port"`},
		{`{timeouts: {tcp_syn_sent: 0}}`, "tcp_syn_sent"},
		{`{timeouts: {tcp_bogus: 3}}`, `unknown "tcp_bogus"`},
		{`{timeouts: [1]}`, "want a mapping"},
		{`{loose: maybe}`, "maybe"},
	} {
		t.Run(c.src, func(t *testing.T) { stWantBuildError(t, conntrackKind, c.src, c.want) })
	}
}

// TestFilterCTRules: ct and ct_dir match Meta.CT; a bad value is an error.
func TestFilterCTRules(t *testing.T) {
	tpl := stMustBuild(t, filterKind, `{default: "drop:other", rules: [
		{ct: [established, related], action: accept},
		{ct: new, ct_dir: original, dst_port: 80, action: accept},
		{ct_dir: reply, action: "drop:reply"},
		{ct: untracked, action: "drop:untracked"}]}`)
	st := tpl.NewInstance()
	m := stMeta(sfTCP(t, tcpSpec{src: cli, dst: srv, sport: 1, dport: 80, flags: "S"}))
	for _, c := range []struct {
		ct   uint8
		want string
	}{
		{rings.CTEstablished, "next"}, {rings.CTRelated | rings.CTReply, "next"}, {rings.CTNew, "next"},
		{rings.CTNew | rings.CTReply, "reply"}, {rings.CTInvalid, "other"}, {rings.CTUntracked, "untracked"},
	} {
		mm := m
		mm.CT = c.ct
		b := stFillBatch(t, stArena(t), [][]byte{sfTCP(t, tcpSpec{src: cli, dst: srv, sport: 1, dport: 80, flags: "S"})})
		b.Meta[0] = mm
		if got := stEdgeName(tpl, stRunAll(st, b)[0]); got != c.want {
			t.Fatalf("ct %s: %s, want %s", ctClass(c.ct), got, c.want)
		}
	}
	stWantBuildError(t, filterKind, `{rules: [{ct: bogus, action: accept}]}`, `ct "bogus"`)
	stWantBuildError(t, filterKind, `{rules: [{ct_dir: sideways, action: accept}]}`, `ct_dir "sideways"`)
	if !strings.Contains(fmt.Sprint(ctStateNames), "untracked") {
		t.Fatal("state names")
	}
}

// TestConntrackVectorMatchesSingles: the warm pass's slots are only a
// head start. A churning mix of TCP and UDP flows (opened, closed by RST,
// reopened, entries freed and reused within one vector) gets the same
// class, fate and bytes in vectors of 128 as one packet at a time, where
// no vector has a stale slot to offer.
func TestConntrackVectorMatchesSingles(t *testing.T) {
	yml := ctYAML(", size: 4096", "")
	vec, one := newSFRig(t, yml), newSFRig(t, yml)
	rnd := uint64(7)
	next := func(n uint64) uint64 { rnd ^= rnd << 13; rnd ^= rnd >> 7; rnd ^= rnd << 17; return rnd % n }
	flags := []string{"S", "SA", "A", "A", "PA", "R", "RA", "FA"}
	var pkts [][]byte
	for range 4096 {
		port := uint16(40000 + next(12))
		if next(3) == 0 {
			if next(2) == 0 {
				pkts = append(pkts, sfUDP(t, cli, srv, port, 53, 8))
			} else {
				pkts = append(pkts, sfUDP(t, srv, cli, 53, port, 8))
			}
			continue
		}
		s := tcpSpec{src: cli, dst: srv, sport: port, dport: 443, flags: flags[next(uint64(len(flags)))],
			seq: uint32(next(4)), ack: uint32(next(4))}
		if next(2) == 0 {
			s.src, s.dst, s.sport, s.dport = srv, cli, 443, port
		}
		pkts = append(pkts, sfTCP(t, s))
	}
	for i := 0; i < len(pkts); i += 128 {
		got := vec.send(pkts[i : i+128]...)
		for j, g := range got {
			w := one.one(pkts[i+j])
			if g.m.CT != w.m.CT || g.reason != w.reason || string(g.pkt) != string(w.pkt) {
				t.Fatalf("packet %d: in a vector %s %s, alone %s %s", i+j, ctClass(g.m.CT), g.reason, ctClass(w.m.CT), w.reason)
			}
		}
	}
	// The counters agree, but for flows made and closed within one
	// vector: never confirmed there, so neither inserted nor deleted.
	cv, co := vec.stage("ct").(*ctStage), one.stage("ct").(*ctStage)
	vc, oc := cv.c, co.c
	if vc[ctcInserts]-vc[ctcDeletes] != oc[ctcInserts]-oc[ctcDeletes] {
		t.Fatalf("inserts less deletes differ: vector %v, single %v", vc, oc)
	}
	vc[ctcInserts], vc[ctcDeletes], oc[ctcInserts], oc[ctcDeletes] = 0, 0, 0, 0
	if vc != oc {
		t.Fatalf("counters differ:\nvector %v\nsingle %v", cv.c, co.c)
	}
	if cv.c[ctcDeletes] == 0 || cv.c[ctcInserts] < 24 {
		t.Fatalf("the mix did not churn: %v", cv.c)
	}
}

// TestChecksumFastPaths: the straight-line checksum paths (an IPv4
// header without options, an IPv4 TCP or UDP segment of 16 to 32 bytes,
// ipv4ChecksumsOK's header and even segment in 64-bit words) give the
// verdict of the plain big-endian sum over every length, both
// protocols, valid, corrupted and all-zero data.
func TestChecksumFastPaths(t *testing.T) {
	refL4 := func(p []byte, l3, l4, end int, proto uint8) bool {
		seg := p[l4:end]
		if proto == 17 && len(seg) >= 8 && seg[6] == 0 && seg[7] == 0 {
			return true
		}
		acc := inetSum(p[l3+12:l3+20], 0) + uint64(len(seg)) + uint64(proto)
		return inetFold(inetSum(seg, acc)) == 0xffff
	}
	refIP := func(p []byte, l3 int) bool {
		ihl := int(p[l3]&0x0f) * 4
		return inetFold(inetSum(p[l3:l3+ihl], 0)) == 0xffff
	}
	rnd := uint64(7)
	next := func() uint64 { rnd ^= rnd << 13; rnd ^= rnd >> 7; rnd ^= rnd << 17; return rnd }
	buf := make([]byte, 256)
	agree, agreeBoth, agree20 := 0, 0, 0
	for it := range 400_000 {
		l3 := int(next() % 20)
		ihl := 5
		if next()%4 == 0 {
			ihl = 5 + int(next()%11)
		}
		n := int(next() % 80)
		if it%2 == 0 {
			n = 16 + int(next()%17)
		}
		l4 := l3 + ihl*4
		end := l4 + n
		for i := range buf {
			buf[i] = byte(next())
			if it%7 == 0 {
				buf[i] &= 1 // mostly zero words
			}
		}
		if it%11 == 0 {
			clear(buf[l3:end])
		}
		buf[l3] = 0x40 | byte(ihl)
		proto := uint8(6)
		if next()%2 == 0 {
			proto = 17
		}
		csumAt := map[uint8]int{6: 16, 17: 6}[proto]
		if next()%2 == 0 && n >= csumAt+2 {
			// A valid checksum most of the time, then one bit off.
			seg := buf[l4:end]
			seg[csumAt], seg[csumAt+1] = 0, 0
			c := ^inetFold(inetSum(seg, inetSum(buf[l3+12:l3+20], 0)+uint64(n)+uint64(proto)))
			seg[csumAt], seg[csumAt+1] = byte(c>>8), byte(c)
			if next()%3 == 0 {
				seg[next()%uint64(n)] ^= 1 << (next() % 8)
			}
			buf[l3+10], buf[l3+11] = 0, 0
			h := ^inetFold(inetSum(buf[l3:l4], 0))
			buf[l3+10], buf[l3+11] = byte(h>>8), byte(h)
		}
		p := buf[:end+int(next()%8)]
		if got, want := l4ChecksumOK(p, l3, l4, end, false, proto), refL4(p, l3, l4, end, proto); got != want {
			t.Fatalf("proto %d, %d-byte segment %x: fast %v, sum %v", proto, n, p[l4:end], got, want)
		} else if want {
			agree++
		}
		if got, want := ipv4HeaderOK(p, l3), refIP(p, l3); got != want {
			t.Fatalf("%d-byte header %x: fast %v, sum %v", ihl*4, p[l3:l4], got, want)
		}
		if got, want := ipv4ChecksumsOK(p, l3, l4, end, proto), refIP(p, l3) && refL4(p, l3, l4, end, proto); got != want {
			t.Fatalf("proto %d, %d-byte header %x, %d-byte segment %x: both %v, sums %v", proto, ihl*4, p[l3:l4], n, p[l4:end], got, want)
		} else if want {
			agreeBoth++
			if n == tcpMinHdr && ihl == 5 && proto == 6 {
				agree20++ // ipv4ChecksumsOK's chain for an optionless TCP header
			}
		}
	}
	if agree < 10_000 || agreeBoth < 10_000 || agree20 < 100 {
		t.Fatalf("only %d valid segments drawn (%d with a valid header, %d of them 20-byte TCP)", agree, agreeBoth, agree20)
	}
}

// TestConntrackSweepOnTheClock: the sweep goes through the whole table
// once per ctSweepPeriod of the packets' clock, whatever the packet rate,
// and not at all while the clock stands still. Flows no packet meets
// again expire by the sweep alone: none while the clock stands, all of
// them within a period of the clock once it moves on, and the cap holds
// one batch to ctSweepMax entries.
func TestConntrackSweepOnTheClock(t *testing.T) {
	s := newSFRig(t, ctYAML(", size: 4096, timeouts: {udp: 1}", ""))
	const flows = 300
	for f := range flows {
		s.one(sfUDP(t, cli, srv, uint16(1000+f), 53, 8))
	}
	other := sfUDP(t, "10.9.9.9", srv, 7, 53, 8)
	expiries := func() uint64 { return stCounter(s.stage("ct"), "expiries") }
	// The clock stands: however many batches, the sweep looks at nothing.
	for range 1000 {
		s.one(other)
	}
	if got := expiries(); got != 0 {
		t.Fatalf("%d expiries with the clock standing", got)
	}
	// Past the timeout: one batch a 100 ms of the clock sweeps 4096*100/
	// 10000 = 40 entries, the whole table in 10 s.
	s.advance(2000)
	tab := s.ctTable()
	sweeps := 0
	for expiries() < flows {
		if sweeps++; sweeps > 2*ctSweepPeriod/100 {
			t.Fatalf("after %d ms of the clock only %d of %d idle flows expired", sweeps*100, expiries(), flows)
		}
		s.advance(100)
		s.one(other) // "other" stays live: its timeout is renewed
	}
	if sweeps*100 > ctSweepPeriod+200 {
		t.Fatalf("the sweep took %d ms of the clock to pass %d idle flows, want within %d", sweeps*100, flows, ctSweepPeriod)
	}
	// A jump of the clock owes at most one pass, taken ctSweepMax at a time.
	tab.owed = 0
	tab.sweptAt = tab.now
	tab.now += 1 << 30
	if n := tab.sweepDue(); n != ctSweepMax {
		t.Fatalf("after a jump: %d entries due, want the cap %d", n, ctSweepMax)
	}
	if max := uint64(len(tab.ent)) * ctSweepPeriod; tab.owed > max {
		t.Fatalf("owed %d entry-ms after a jump, above one pass (%d)", tab.owed, max)
	}
}

// TestConntrackHeaderChecksumFirst: a bad IPv4 header checksum is
// invalid=bad_checksum whatever else is wrong with the packet, as when
// track checked every header first, now that an IPv4 TCP or UDP
// packet's header is checked with its L4 checksum (ipv4ChecksumsOK):
// with a good or bad L4 checksum, and with an L4 header the tracker
// finds malformed after the parse stage has passed it (bytes a stage
// between the two changed); and the header of a packet of another
// protocol, or a fragment, is still checked. A good header with a
// malformed L4 header stays malformed.
func TestConntrackHeaderChecksumFirst(t *testing.T) {
	tcp := func() []byte {
		return sfTCP(t, tcpSpec{src: cli, dst: srv, sport: 40000, dport: 443, flags: "S", seq: 1})
	}
	udp := func() []byte { return sfUDP(t, cli, srv, 5000, 53, 8) }
	badIP := func(p []byte) { p[14+10] ^= 0x40 }
	badL4 := func(p []byte) { p[14+20+1] ^= 1 } // the source port's low byte
	frag := func(p []byte) {                    // a first fragment (MF), header checksum fixed up
		p[14+6] |= 0x20
		p[14+10], p[14+11] = 0, 0
		binary.BigEndian.PutUint16(p[14+10:], ^inetFold(inetSum(p[14:34], 0)))
	}
	cases := []struct {
		name string
		pkt  func() []byte
		pre  []func([]byte) // before the parse stage
		post []func([]byte) // between the parse and conntrack stages
		want string         // invalid reason, "" for tracked
	}{
		{"tcp good", tcp, nil, nil, ""},
		{"tcp bad header", tcp, []func([]byte){badIP}, nil, "bad_checksum"},
		{"tcp bad header and segment", tcp, []func([]byte){badIP, badL4}, nil, "bad_checksum"},
		{"tcp bad segment", tcp, []func([]byte){badL4}, nil, "bad_checksum"},
		{"tcp data offset past the end, good header", tcp, nil, []func([]byte){func(p []byte) { p[14+20+12] = 0xf0 }}, "malformed"},
		{"tcp data offset past the end, bad header", tcp, []func([]byte){badIP}, []func([]byte){func(p []byte) { p[14+20+12] = 0xf0 }}, "bad_checksum"},
		{"tcp first fragment, bad header", tcp, []func([]byte){frag, badIP}, nil, "bad_checksum"},
		{"udp good", udp, nil, nil, ""},
		{"udp bad header", udp, []func([]byte){badIP}, nil, "bad_checksum"},
		{"udp bad segment", udp, []func([]byte){badL4}, nil, "bad_checksum"},
		{"udp bad header, no checksum", udp, []func([]byte){func(p []byte) { p[14+20+6], p[14+20+7] = 0, 0 }, badIP}, nil, "bad_checksum"},
		{"icmp bad header", func() []byte { return sfICMP4(t, cli, srv, 8, 0, 7, nil) }, []func([]byte){badIP}, nil, "bad_checksum"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSFRig(t, ctYAML("", ""))
			p := c.pkt()
			for _, f := range c.pre {
				f(p)
			}
			b := s.b
			b.Clear()
			b.SetTime(s.now)
			addr, _ := s.a.Alloc()
			off := int(addr) & (s.a.FrameSize() - 1)
			copy(s.a.Frame(addr)[off:], p)
			b.Append(rings.Desc{Addr: addr, Len: uint32(len(p))}, 1, 0)
			idx, next := []uint16{0}, make([]Edge, 1)
			s.stage("parse").Process(b, idx, next)
			if b.Meta[0].Class != rings.ClassOK {
				t.Fatalf("parse classed it %d", b.Meta[0].Class)
			}
			for _, f := range c.post {
				f(b.Packet(0))
			}
			s.stage("ct").Process(b, idx, next)
			got := ""
			if b.Meta[0].CT&rings.CTStateMask == rings.CTInvalid {
				got = "?"
				for _, r := range []string{"malformed", "bad_checksum"} {
					if stCounter(s.stage("ct"), "invalid="+r) == 1 {
						got = r
					}
				}
			}
			if got != c.want {
				t.Fatalf("invalid reason %q, want %q (counters %v)", got, c.want, stReport(s.stage("ct")))
			}
		})
	}
}

// TestConntrackLiveCounters: after every vector and a Publish, the
// conntrack stage's live counters are its own. classify marks its two
// counters (new, established) moved once a vector, in Process, not for
// every packet: a vector of new flows, one of their replies, one of
// both directions again.
func TestConntrackLiveCounters(t *testing.T) {
	s := newSFRig(t, ctYAML("", ""))
	var orig, reply [][]byte
	for f := range 5 {
		orig = append(orig, sfUDP(t, cli, srv, uint16(1000+f), 53, 8))
		reply = append(reply, sfUDP(t, srv, cli, 53, uint16(1000+f), 8))
	}
	for round, vec := range [][][]byte{orig, reply, append(orig, reply...)} {
		s.send(vec...)
		s.r.Publish()
		want, got := liveMap(runnerList(s.r, false)), liveMap(runnerList(s.r, true))
		for _, key := range []string{"ct/ct=new", "ct/ct=established"} {
			if got[key] != want[key] || round == 2 && want[key].Packets == 0 {
				t.Fatalf("round %d: %s live %v, want %v", round, key, got[key], want[key])
			}
		}
		if len(got) != len(want) {
			t.Fatalf("round %d: live %v\nwant %v", round, got, want)
		}
	}
}
