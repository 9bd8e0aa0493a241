package pipelines

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/warpflow/warpflow/rings"
)

// benchShapedRules mirrors benchshape.Default's rule set as rules: a
// class rule, then IPv4 /32 and /24 source rules with ports, IPv4 /32
// destinations and IPv6 /48 sources, in turn.
func benchShapedRules(n int) []filterRule {
	rules := []filterRule{{hasClass: true, class: malformedClasses(), action: Target{Drop: "malformed"}}}
	for i := 1; i < n; i++ {
		r := filterRule{action: Target{Drop: fmt.Sprintf("r%d", i%8)}}
		switch i % 4 {
		case 0:
			r.proto = []uint16{6}
			r.src = []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i / 256), byte(i)}), 32)}
			p := uint16(1 + i%60000)
			r.dstPort = []portRange{{p, p}}
		case 1:
			r.proto = []uint16{17}
			r.src = []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(i), 0}), 24)}
			r.dstPort = []portRange{{uint16(2000 + i%1000), uint16(2100 + i%1000)}}
		case 2:
			r.dst = []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{203, 0, byte(i / 256), byte(i)}), 32)}
		case 3:
			r.src = []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("2001:db8:%x::/48", i))}
			p := uint16(1 + i%60000)
			r.dstPort = []portRange{{p, p}}
		}
		rules = append(rules, r)
	}
	return rules
}

// missMetas returns UDP/IPv4 packets like the bench capture's: 1024
// sources in 10.1.0.0/16 to one destination and port, matching no rule of
// either rule set above.
func missMetas(count int) []rings.Meta {
	metas := make([]rings.Meta, count)
	for i := range metas {
		m := &metas[i]
		m.Class, m.Flags, m.IPProto = rings.ClassOK, rings.FlagIPv4|rings.FlagL4, 17
		m.SrcIP = [16]byte{10, 1, byte(i % 1024 / 128), byte(i * 37)}
		m.DstIP = [16]byte{10, 255, 0, 1}
		m.SrcPort, m.DstPort = uint16(1024+i%1024), 5001
	}
	return metas
}

// BenchmarkFilterMiss measures lookups of traffic that matches no rule,
// the common case for an ACL and the bench's default pipeline: the
// bench-shaped rules, and the realistic ones (random sources and
// destinations outside them).
func BenchmarkFilterMiss(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		rnd := rand.New(rand.NewPCG(uint64(n), 3))
		for _, set := range []struct {
			name  string
			rules []filterRule
			metas []rings.Meta
		}{
			{"bench", benchShapedRules(n), missMetas(64)},
			{"realistic", realisticRules(rnd, n), randomMissMetas(rnd, 64)},
		} {
			c := buildClassifier(set.rules)
			for i := range set.metas {
				if r := c.lookup(&set.metas[i]); r != c.n {
					b.Fatalf("%s: packet %d matches rule %d", set.name, i, r)
				}
			}
			b.Run(fmt.Sprintf("%s/rules=%d", set.name, n), func(b *testing.B) {
				b.ReportAllocs()
				sink := int32(0)
				for b.Loop() {
					for i := range set.metas {
						sink += c.lookup(&set.metas[i])
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(set.metas)), "ns/pkt")
				_ = sink
			})
		}
	}
}

// randomMissMetas returns TCP/IPv4 packets between random addresses in
// 192.0.2.0/24-like space outside the realistic rules' 10/8 and 172.16/12,
// to ports no service rule names.
func randomMissMetas(rnd *rand.Rand, count int) []rings.Meta {
	metas := make([]rings.Meta, count)
	for i := range metas {
		m := &metas[i]
		m.Class, m.Flags, m.IPProto = rings.ClassOK, rings.FlagIPv4|rings.FlagL4, 6
		m.SrcIP = [16]byte{byte(100 + rnd.IntN(60)), byte(rnd.IntN(256)), byte(rnd.IntN(256)), byte(rnd.IntN(256))}
		m.DstIP = [16]byte{byte(100 + rnd.IntN(60)), byte(rnd.IntN(256)), byte(rnd.IntN(256)), byte(rnd.IntN(256))}
		m.SrcPort, m.DstPort, m.TCPFlags = uint16(30000+rnd.IntN(30000)), 9, 0x18
	}
	return metas
}

// BenchmarkFilterMissStage is BenchmarkFilterMiss's bench set through the
// stage's Process, with its per-rule hit counters.
func BenchmarkFilterMissStage(b *testing.B) {
	a, err := rings.NewArena(rings.ArenaOptions{Frames: 64, FrameSize: 2048})
	if err != nil {
		b.Fatal(err)
	}
	const n = 64
	tpl, bad := newFilterTemplate(benchShapedRules(1000), Target{}, Target{Stage: "next"})
	if bad != nil {
		b.Fatal(bad)
	}
	st := tpl.NewInstance()
	batch := rings.NewBatch(n, a)
	batch.SetLen(n)
	copy(batch.Meta, missMetas(n))
	idx := make([]uint16, n)
	for i := range idx {
		idx[i] = uint16(i)
		batch.Descs[i].Len = 64
	}
	next := make([]Edge, n)
	b.ReportAllocs()
	for b.Loop() {
		st.Process(batch, idx, next)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/pkt")
}
