package pipelines

import (
	"encoding/binary"
	"testing"

	"github.com/warpflow/warpflow/rings"
)

// Fuzz targets for the stateful stages: arbitrary packet sequences, at
// arbitrary times, through reassemble, conntrack, a ct filter and nat.
// Nothing may panic or leave a packet outside its frame; after every batch
// the flow table must be consistent (every live entry found, both
// directions, by its own tuples; the live count and the index agree); and
// a packet that leaves translated must have valid checksums when it came
// in with them.

// The fuzz input is a sequence of records: an op byte, a 2-byte length
// (taken modulo sfFuzzMaxLen) and that many packet bytes (fewer at the
// end of the input). Op bit 7 ends the batch before the packet; bits 0-4
// then advance the clock by 2^bits - 1 ms (up to 24 days: every timeout
// and the clock's wrap).
const sfFuzzMaxLen = 1600

type sfFuzzPkt struct {
	newBatch bool
	advance  uint32
	pkt      []byte
}

func sfFuzzDecode(data []byte) []sfFuzzPkt {
	var out []sfFuzzPkt
	for len(data) >= 3 && len(out) < 512 {
		op := data[0]
		n := int(binary.BigEndian.Uint16(data[1:])) % sfFuzzMaxLen
		data = data[3:]
		n = min(n, len(data))
		p := sfFuzzPkt{newBatch: op&0x80 != 0, pkt: data[:n]}
		if p.newBatch {
			p.advance = uint32(1)<<(op&31) - 1
		}
		out = append(out, p)
		data = data[n:]
	}
	return out
}

func sfFuzzEncode(newBatch bool, exp uint8, pkt []byte) []byte {
	op := exp & 31
	if newBatch {
		op |= 0x80
	}
	return append([]byte{op, byte(len(pkt) >> 8), byte(len(pkt))}, pkt...)
}

// sfFuzzSeeds are conversations in the record format: a TCP handshake,
// data, close and reset, replies through SNAT and DNAT, UDP, ICMP echo
// and an error quoting a flow, IPv6, and fragments in and out of order.
func sfFuzzSeeds(t testing.TB) [][]byte {
	c, s := "10.0.0.1", "203.0.113.9"
	syn := sfTCP(t, tcpSpec{src: c, dst: s, sport: 40000, dport: 80, flags: "S", seq: 100, wscale: 7})
	synack := sfTCP(t, tcpSpec{src: s, dst: natIP, sport: 80, dport: 40000, flags: "SA", seq: 900, ack: 101, wscale: 7})
	ack := sfTCP(t, tcpSpec{src: c, dst: s, sport: 40000, dport: 80, flags: "A", seq: 101, ack: 901})
	data := sfTCP(t, tcpSpec{src: c, dst: s, sport: 40000, dport: 80, flags: "PA", seq: 101, ack: 901, payload: 100})
	fin := sfTCP(t, tcpSpec{src: c, dst: s, sport: 40000, dport: 80, flags: "FA", seq: 201, ack: 901})
	rst := sfTCP(t, tcpSpec{src: s, dst: natIP, sport: 80, dport: 40000, flags: "R", seq: 901})
	dsyn := sfTCP(t, tcpSpec{src: s, dst: "198.51.100.1", sport: 5555, dport: 80, flags: "S", seq: 7})
	dsynack := sfTCP(t, tcpSpec{src: "10.0.0.5", dst: s, sport: 8080, dport: 5555, flags: "SA", seq: 70, ack: 8})
	udp := sfUDP(t, c, s, 5353, 53, 40)
	udpR := sfUDP(t, s, natIP, 53, 5353, 80)
	echo := sfICMP4(t, c, s, 8, 0, 77, nil)
	echoR := sfICMP4(t, s, natIP, 0, 0, 77, nil)
	unreach := sfICMP4(t, "198.18.0.1", natIP, 3, 3, 0, ipPart(udpR, 0)[:28])
	v6 := sfUDP(t, "2001:db8::1", "2001:db8::2", 1000, 2000, 30)
	v6r := sfUDP(t, "2001:db8::2", "2001:db8::1", 2000, 1000, 30)
	big := sfUDP(t, c, s, 6000, 7000, 1000)
	frags := fragV4(t, big, 296, 296)
	big6 := sfUDP(t, "2001:db8::1", "2001:db8::2", 1001, 2001, 1000)
	frags6 := fragV6(t, big6, 9, 296, 296)
	// A packet to itself: its flow's two tuples coincide (CI found a
	// generic-protocol one).
	self := sfUDP(t, c, c, 7, 7, 20)
	self6 := sfUDP(t, "2001:db8::1", "2001:db8::1", 9, 9, 20)

	rec := func(pkts ...[]byte) []byte {
		var out []byte
		for i, p := range pkts {
			out = append(out, sfFuzzEncode(i%3 == 0, uint8(i%4), p)...)
		}
		return out
	}
	return [][]byte{
		rec(syn, synack, ack, data, fin, rst),
		rec(dsyn, dsynack, syn, synack),
		rec(udp, udpR, echo, echoR, unreach),
		rec(v6, v6r, udp),
		append(rec(frags[2], frags[0], frags[1]), rec(frags6...)...),
		append(sfFuzzEncode(true, 31, syn), sfFuzzEncode(true, 31, synack)...),
		rec(self, self6, self),
	}
}

// sfFuzzConfigs: full reassembly with a tiny table (eviction, table
// full) and a two-port SNAT pool (exhaustion); shallow reassembly with
// loose pickup, VLAN zones and DNAT.
var sfFuzzConfigs = []string{
	"name: fz1\nsettings: {batch_size: 256}\nstages:\n  - {name: parse, type: parse}\n" +
		"  - {name: defrag, type: reassemble, mode: full, max_datagrams: 4, max_fragments: 8}\n" +
		"  - {name: ct, type: conntrack, size: 16}\n" +
		"  - {name: acl, type: filter, rules: [{ct: invalid, action: \"drop:invalid\"}, {ct: new, ct_dir: reply, action: \"drop:odd\"}]}\n" +
		"  - name: nat\n    type: nat\n    conntrack: ct\n" +
		"    dnat: [{match: {proto: tcp, dst: 198.51.100.1, dst_port: 80}, to: 10.0.0.5, port: 8080}]\n" +
		"    snat: [{match: {src: 10.0.0.0/8}, to: 192.0.2.1, ports: 40000-40001}]\n" +
		"  - {name: out, type: tx, port: out}\n",
	"name: fz2\nsettings: {batch_size: 256}\nstages:\n  - {name: parse, type: parse}\n" +
		"  - {name: defrag, type: reassemble, mode: shallow, max_datagrams: 4}\n" +
		"  - {name: ct, type: conntrack, size: 64, loose: true, zone: vlan}\n" +
		"  - {name: acl, type: filter, rules: [{ct: invalid, action: \"drop:invalid\"}]}\n" +
		"  - name: nat\n    type: nat\n    conntrack: ct\n" +
		"    dnat: [{match: {dst: 198.51.100.1}, to: 10.0.0.5}]\n" +
		"    snat: [{match: {src: 10.0.0.0/8}, to: 192.0.2.1-192.0.2.2}]\n" +
		"  - {name: out, type: tx, port: out}\n",
}

// fixIndexSeed makes the stateful stages' index seeds fixed for the
// rest of the test (see indexSeed).
func fixIndexSeed(tb testing.TB) {
	was := indexSeed
	indexSeed = func() uint64 { return ctSeed }
	tb.Cleanup(func() { indexSeed = was })
}

func FuzzStateful(f *testing.F) {
	fixIndexSeed(f)
	for _, s := range sfFuzzSeeds(f) {
		f.Add(s)
	}
	var graphs []*Graph
	for _, y := range sfFuzzConfigs {
		g, err := Load("fuzz.yaml", []byte(y))
		if err != nil {
			f.Fatalf("load: %v", err)
		}
		graphs = append(graphs, g)
	}
	a := stArena(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		pkts := sfFuzzDecode(data)
		for gi, g := range graphs {
			s := &sfRig{t: t, g: g, r: g.NewRunner(RunnerOptions{}), a: a, b: rings.NewBatch(rings.MaxBatch, a), now: 1_000_000}
			shallow := gi == 1
			for i := 0; i < len(pkts); {
				j := i + 1
				for j < len(pkts) && !pkts[j].newBatch && j-i < 256 {
					j++
				}
				s.advance(pkts[i].advance)
				batch := make([][]byte, 0, j-i)
				for _, p := range pkts[i:j] {
					batch = append(batch, p.pkt)
				}
				out := s.send(batch...)
				if shallow {
					// Shallow mode keeps the packets: out[k] is batch[k].
					if len(out) != len(batch) {
						t.Fatalf("%s: %d packets in, %d out", g.Name(), len(batch), len(out))
					}
					for k, o := range out {
						sfFuzzCheckSums(t, batch[k], o)
					}
				}
				sfFuzzCheckTable(t, s.ctTable())
				i = j
			}
		}
	})
}

// sfFuzzCheckSums: a packet sent on translated whose IPv4 header and L4
// checksums were valid when it came in has valid ones going out.
func sfFuzzCheckSums(t *testing.T, in []byte, o sfOut) {
	if o.m.Verdict != rings.VerdictTX || o.m.Flags&rings.FlagIPv6 != 0 || len(in) < 14+20 ||
		binary.BigEndian.Uint16(in[12:]) != 0x0800 || len(in) != len(o.pkt) {
		return
	}
	if string(in) == string(o.pkt) || checksumsOK(in) != nil || !sfFuzzPlain(in) {
		return
	}
	if err := checksumsOK(o.pkt); err != nil {
		t.Fatalf("translated packet %x\nfrom %x: %v", o.pkt, in, err)
	}
}

// sfFuzzPlain: an untagged IPv4 packet whose header and L4 segment lie
// within it (what checksumsOK can judge).
func sfFuzzPlain(p []byte) bool {
	ip := p[14:]
	ihl := int(ip[0]&15) * 4
	tot := int(binary.BigEndian.Uint16(ip[2:]))
	return ip[0]>>4 == 4 && ihl >= 20 && tot >= ihl && tot <= len(ip)
}

// sfFuzzCheckTable verifies the flow table's invariants between batches.
func sfFuzzCheckTable(t *testing.T, tab *ctTable) {
	live := 0
	for e := range tab.ent {
		en := &tab.ent[e]
		if en.status&ctStUsed == 0 {
			continue
		}
		live++
		if en.status&ctStTentative != 0 {
			t.Fatalf("entry %d still tentative after the batch", e)
		}
		// An entry's two tuples can coincide: an ICMP query's, and any
		// flow from an address and port to the same address and port (a
		// packet to itself). A plain lookup of such a tuple finds one
		// direction; ask for each direction then.
		var t0, t1 ctTuple
		tab.tupleOf(en, 0, &t0)
		tab.tupleOf(en, 1, &t1)
		same := t0 == t1
		for dir := uint8(0); dir < 2; dir++ {
			var k ctTuple
			tab.tupleOf(en, dir, &k)
			want := int8(-1)
			if k.proto == 1 || k.proto == 58 || same {
				want = int8(dir)
			}
			got, gdir, ok := tab.lookup(&k, k.hash(tab.seed), want)
			if !ok || got != uint32(e) || gdir != dir {
				t.Fatalf("entry %d dir %d (%+v): lookup gives %d dir %d found %v", e, dir, k, got, gdir, ok)
			}
		}
	}
	slots := 0
	for _, v := range tab.idx {
		if v != 0 {
			slots++
		}
	}
	if live != tab.n || slots != 2*live {
		t.Fatalf("%d live entries, table counts %d, %d index slots", live, tab.n, slots)
	}
}
