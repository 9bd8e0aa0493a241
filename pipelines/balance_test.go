package pipelines

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/gopacket/gopacket/layers"
	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/rings"
)

func TestBalanceBuild(t *testing.T) {
	tpl := stMustBuild(t, balanceKind, `{to: [a, "drop:overflow", b]}`)
	var got []string
	for _, e := range tpl.Edges() {
		got = append(got, e.String())
	}
	if len(got) != 3 || got[0] != "a" || got[1] != "drop:overflow" || got[2] != "b" {
		t.Fatalf("edges %v", got)
	}
	if tpl.Edges()[1].Pos.Line != 1 || tpl.Edges()[1].Pos.Col < 10 {
		t.Fatalf("target position %v", tpl.Edges()[1].Pos)
	}
	many := "{to: [s0"
	for i := 1; i < 65; i++ {
		many += ", s" + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	many += "]}"
	for _, tc := range []struct{ yaml, want string }{
		{`{}`, "balance needs to"},
		{`{to: a}`, "want a list"},
		{`{to: [a]}`, "1 targets, want 2..64"},
		{many, "65 targets, want 2..64"},
		{`{to: [a, "b c"]}`, `edge target "b c"`},
		{`{to: [a, "drop:"]}`, `drop reason ""`},
		{`{to: [a, [b]]}`, "want a stage name"},
		{`{to: [a, b], by: x}`, `unknown option "by"`},
	} {
		t.Run(tc.want, func(t *testing.T) { stWantBuildError(t, balanceKind, tc.yaml, tc.want) })
	}
}

// reversed returns the spec of the other direction of s's flow.
func reversed(s rwPkt) rwPkt {
	r := s.clone()
	r.srcMAC, r.dstMAC = s.dstMAC, s.srcMAC
	r.srcIP, r.dstIP = r.dstIP, r.srcIP
	r.sport, r.dport = s.dport, s.sport
	if s.proto == layers.IPProtocolICMPv4 {
		r.sport, r.dport = s.sport, s.dport // same echo identifier both ways
	}
	return r
}

// TestBalanceSymmetric checks that both directions of random flows (TCP,
// UDP, ICMP echo, IPv4 and IPv6, fragments) get the same hash and edge.
func TestBalanceSymmetric(t *testing.T) {
	tpl := stMustBuild(t, balanceKind, `{to: [a, b, c, d, e, f, g]}`)
	st := tpl.NewInstance()
	r := rand.New(rand.NewPCG(5, 6))
	const n = 400
	var pkts [][]byte
	for i := 0; i < n; i++ {
		s := rwRandPkt(r)
		if i%10 == 0 {
			s.dstIP = s.srcIP // same address both ways: ports decide the order
		}
		pkts = append(pkts, s.bytes(t), reversed(s).bytes(t))
	}
	// Non-IP: ARP-like frames with swapped MACs.
	for i := 0; i < 50; i++ {
		f := make([]byte, 60)
		for j := 0; j < 12; j++ {
			f[j] = byte(r.Uint32())
		}
		f[12], f[13] = 0x88, 0xb5 // local experimental ethertype
		g := append([]byte(nil), f...)
		copy(g[0:6], f[6:12])
		copy(g[6:12], f[0:6])
		pkts = append(pkts, f, g)
	}
	b := stFillBatchBig(t, pkts)
	edges := stRunAll(st, b)
	distinct := map[uint32]bool{}
	for i := 0; i < len(pkts); i += 2 {
		if b.Meta[i].Hash != b.Meta[i+1].Hash || edges[i] != edges[i+1] {
			t.Fatalf("flow %d: hashes %#x/%#x, edges %d/%d\n%x\n%x", i/2, b.Meta[i].Hash, b.Meta[i+1].Hash, edges[i], edges[i+1], pkts[i], pkts[i+1])
		}
		distinct[b.Meta[i].Hash] = true
	}
	if len(distinct) < len(pkts)/2-2 {
		t.Fatalf("only %d distinct hashes over %d flows", len(distinct), len(pkts)/2)
	}
}

// TestBalanceFragments checks that every fragment of a datagram hashes like
// its first fragment, ports or no ports.
func TestBalanceFragments(t *testing.T) {
	s := rwPkt{ttl: 9, srcIP: net.IP{1, 2, 3, 4}, dstIP: net.IP{5, 6, 7, 8}, proto: layers.IPProtocolUDP, sport: 1000, dport: 53, payload: make([]byte, 40)}
	first := s.clone()
	first.moreFrags = true
	later := s.clone()
	later.fragOff = 5
	b := stFillBatchBig(t, [][]byte{first.bytes(t), later.bytes(t)})
	stRunAll(stMustBuild(t, balanceKind, `{to: [a, b]}`).NewInstance(), b)
	if b.Meta[0].Flags&rings.FlagL4 == 0 || b.Meta[1].Flags&rings.FlagL4 != 0 {
		t.Fatalf("test setup: flags %v %v", b.Meta[0].Flags, b.Meta[1].Flags)
	}
	if b.Meta[0].Hash != b.Meta[1].Hash {
		t.Fatalf("fragments hash apart: %#x %#x", b.Meta[0].Hash, b.Meta[1].Hash)
	}
}

// TestBalanceDeterministic pins the hash of a fixed packet: the hash has no
// per-process seed, so edges are the same in every run and on every worker.
func TestBalanceDeterministic(t *testing.T) {
	s := rwPkt{ttl: 9, srcIP: net.IP{10, 0, 0, 1}, dstIP: net.IP{10, 0, 0, 2}, proto: layers.IPProtocolTCP, sport: 40000, dport: 443}
	p := s.bytes(t)
	m := stMeta(p)
	h := balanceHash(&m, p)
	const want = 0xd157a14b
	if h != want {
		t.Errorf("hash %#x, want %#x (changing the hash moves every flow)", h, uint32(want))
	}
	tpl := stMustBuild(t, balanceKind, `{to: [a, b, c]}`)
	b1 := stFillBatchBig(t, [][]byte{p, p})
	e1 := stRunAll(tpl.NewInstance(), b1)
	e2 := stRunAll(tpl.NewInstance(), b1)
	if e1[0] != e1[1] || e1[0] != e2[0] || b1.Meta[0].Hash != h {
		t.Fatalf("edges %v %v, hash %#x", e1, e2, b1.Meta[0].Hash)
	}
}

// chiSquare returns the chi-square statistic of counts against a uniform
// distribution.
func chiSquare(counts []int, total int) float64 {
	exp := float64(total) / float64(len(counts))
	var x float64
	for _, c := range counts {
		d := float64(c) - exp
		x += d * d / exp
	}
	return x
}

// TestBalanceDistribution feeds many flows, random and sequential, and
// checks the chi-square statistic of the bucket counts against a bound well
// above the 99.9% quantile for the degrees of freedom (the inputs are
// fixed, so the test is deterministic).
func TestBalanceDistribution(t *testing.T) {
	const flows = 64000
	gens := []struct {
		name string
		gen  func(i int, m *rings.Meta)
	}{
		{"random_v4", func(i int, m *rings.Meta) {}},
		{"sequential_ports", func(i int, m *rings.Meta) {
			*m = rings.Meta{Flags: rings.FlagIPv4 | rings.FlagL4, IPProto: 6, SrcIP: [16]byte{10, 0, 0, 1}, DstIP: [16]byte{10, 0, 0, 2},
				SrcPort: uint16(1024 + i), DstPort: 80}
		}},
		{"sequential_hosts", func(i int, m *rings.Meta) {
			*m = rings.Meta{Flags: rings.FlagIPv4 | rings.FlagL4, IPProto: 17, SrcIP: [16]byte{10, byte(i >> 16), byte(i >> 8), byte(i)},
				DstIP: [16]byte{192, 168, 0, 1}, SrcPort: 5000, DstPort: 53}
		}},
		{"v6_hosts", func(i int, m *rings.Meta) {
			*m = rings.Meta{Flags: rings.FlagIPv6 | rings.FlagL4, IPProto: 6, SrcIP: [16]byte{0x20, 1, 0xd, 0xb8, 15: byte(i), 14: byte(i >> 8)},
				DstIP: [16]byte{0x20, 1, 0xd, 0xb8, 15: 1}, SrcPort: 443, DstPort: 443}
		}},
	}
	// 99.9% chi-square quantiles: df 2: 13.8, df 7: 24.3, df 63: 103.4.
	bounds := []struct {
		buckets int
		max     float64
	}{{3, 20}, {8, 32}, {64, 120}}
	r := rand.New(rand.NewPCG(7, 8))
	for _, g := range gens {
		name, gen := g.name, g.gen
		for _, bd := range bounds {
			nb, bound := bd.buckets, bd.max
			counts := make([]int, nb)
			for i := 0; i < flows; i++ {
				var m rings.Meta
				m.Flags = rings.FlagIPv4 | rings.FlagL4
				m.IPProto = 6
				binary.BigEndian.PutUint32(m.SrcIP[:], r.Uint32())
				binary.BigEndian.PutUint32(m.DstIP[:], r.Uint32())
				m.SrcPort, m.DstPort = uint16(r.Uint32()), uint16(r.Uint32())
				gen(i, &m)
				h := balanceHash(&m, nil)
				counts[(uint64(h)*uint64(nb))>>32]++
			}
			if x := chiSquare(counts, flows); x > bound || math.IsNaN(x) {
				t.Errorf("%s over %d buckets: chi-square %.1f > %.0f (counts %v)", name, nb, x, bound, counts)
			} else {
				t.Logf("%s over %d buckets: chi-square %.1f", name, nb, x)
			}
		}
	}
}

func TestBalanceZeroAlloc(t *testing.T) {
	st := stMustBuild(t, balanceKind, `{to: [a, b, c, d]}`).NewInstance()
	b := stFillBatch(t, stArena(t), stBenchPackets(t, 64))
	idx, next := stDense(b.Len())
	if n := allocs.Count(100, func() { st.Process(b, idx, next) }); n != 0 {
		t.Fatalf("Process allocated %d times in 100 batches, want 0", n)
	}
}

func BenchmarkBalance(b *testing.B) {
	st := stMustBuild(b, balanceKind, `{to: [a, b, c, d]}`).NewInstance()
	const n = 64
	batch := stFillBatch(b, stArena(b), stBenchPackets(b, n))
	idx, next := stDense(n)
	b.ReportAllocs()
	for b.Loop() {
		st.Process(batch, idx, next)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/pkt")
}
