package pipelines

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/warpflow/warpflow/rings"
)

// realisticRules returns an ACL shaped like real ones: mostly host (/32,
// /128) and subnet (/24, /64) rules with protocols and port ranges, some
// service-wide rules on ports alone, some VLAN, TCP-flag and class rules.
func realisticRules(rnd *rand.Rand, n int) []filterRule {
	services := []uint16{22, 23, 25, 53, 110, 143, 161, 389, 445, 1433, 3306, 3389, 5432, 6379, 8443, 11211}
	actions := []filterRule{
		{}, // accept
		{action: Target{Drop: "blocked"}}, {action: Target{Drop: "policy"}},
		{action: Target{Stage: "svc"}}, {action: Target{Stage: "mirror"}},
	}
	rules := make([]filterRule, n)
	for i := range rules {
		r := actions[rnd.IntN(len(actions))]
		proto := []uint16{6, 17}[rnd.IntN(2)]
		port := func() []portRange {
			if rnd.IntN(3) == 0 {
				lo := uint16(1024 + rnd.IntN(60000))
				return []portRange{{lo, lo + uint16(rnd.IntN(500))}}
			}
			p := services[rnd.IntN(len(services))]
			return []portRange{{p, p}}
		}
		switch k := rnd.IntN(100); {
		case k < 40: // host rules
			a := netip.AddrFrom4([4]byte{10, byte(rnd.IntN(64)), byte(rnd.IntN(256)), byte(rnd.IntN(256))})
			r.src = []netip.Prefix{netip.PrefixFrom(a, 32)}
			r.proto = []uint16{proto}
			r.dstPort = port()
		case k < 70: // subnet rules
			a := netip.AddrFrom4([4]byte{172, byte(16 + rnd.IntN(16)), byte(rnd.IntN(256)), 0})
			r.dst = []netip.Prefix{netip.PrefixFrom(a, 24)}
			r.proto = []uint16{proto}
			r.dstPort = port()
		case k < 80: // IPv6 hosts and /64s
			b := netip.MustParseAddr("2001:db8::").As16()
			b[4], b[5], b[15] = byte(rnd.IntN(256)), byte(rnd.IntN(256)), byte(rnd.IntN(256))
			bits := []int{64, 128}[rnd.IntN(2)]
			r.src = []netip.Prefix{netip.PrefixFrom(netip.AddrFrom16(b), bits).Masked()}
			r.proto = []uint16{proto}
			r.dstPort = port()
		case k < 88: // service-wide
			p := services[rnd.IntN(len(services))]
			r.proto = []uint16{proto}
			r.dstPort = []portRange{{p, p}}
		case k < 95: // per-VLAN subnets
			r.hasVLAN = true
			r.vlan = []portRange{{uint16(1 + rnd.IntN(4000)), 0}}
			r.vlan[0].hi = r.vlan[0].lo
			a := netip.AddrFrom4([4]byte{10, byte(rnd.IntN(256)), 0, 0})
			r.src = []netip.Prefix{netip.PrefixFrom(a, 16)}
		case k < 98: // SYN-only to a subnet
			a := netip.AddrFrom4([4]byte{172, byte(16 + rnd.IntN(16)), byte(rnd.IntN(256)), 0})
			r.dst = []netip.Prefix{netip.PrefixFrom(a, 24)}
			r.hasTCP, r.tcpSet, r.tcpClear = true, 0x02, 0x10
		default: // malformed classes
			r.hasClass = true
			r.class = malformedClasses()
			r.action = Target{Drop: "malformed"}
		}
		rules[i] = r
	}
	return rules
}

// realisticMetas returns count packets: half built to match one of the last
// tenth of rules (the slow end for a linear scan), half matching nothing.
func realisticMetas(rnd *rand.Rand, rules []filterRule, count int) []rings.Meta {
	metas := make([]rings.Meta, count)
	for i := range metas {
		m := &metas[i]
		m.Class, m.Flags, m.IPProto = rings.ClassOK, rings.FlagIPv4|rings.FlagL4, 6
		m.SrcIP = [16]byte{192, 0, 2, byte(i)}
		m.DstIP = [16]byte{198, 51, 100, byte(i)}
		m.SrcPort, m.DstPort, m.TCPFlags = 40000, 9, 0x18
		if i%2 == 1 || len(rules) == 0 {
			continue // matches nothing
		}
		r := &rules[len(rules)-1-rnd.IntN(len(rules)/10+1)]
		for _, p := range r.proto {
			if p < 256 {
				m.IPProto = uint8(p)
			}
		}
		for _, a := range []struct {
			ps  []netip.Prefix
			dst *[16]byte
		}{{r.src, &m.SrcIP}, {r.dst, &m.DstIP}} {
			if a.ps == nil {
				continue
			}
			if ad := a.ps[0].Addr(); ad.Is4() {
				b := ad.As4()
				*a.dst = [16]byte{b[0], b[1], b[2], b[3]}
			} else {
				*a.dst = ad.As16()
				m.Flags = rings.FlagIPv6 | rings.FlagL4
			}
		}
		if r.dstPort != nil {
			m.DstPort = r.dstPort[0].hi
		}
		if r.hasVLAN && len(r.vlan) > 0 {
			m.NumVLANs, m.VLANs[0] = 1, r.vlan[0].lo
		}
		if r.hasTCP {
			m.TCPFlags = r.tcpSet
		}
	}
	return metas
}

// BenchmarkFilter measures the compiled filter stage on batches of 64
// packets against the linear oracle, for growing rule counts.
func BenchmarkFilter(b *testing.B) {
	a, err := rings.NewArena(rings.ArenaOptions{Frames: 64, FrameSize: 2048})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{10, 1000, 10000} {
		rnd := rand.New(rand.NewPCG(uint64(n), 1))
		rules := realisticRules(rnd, n)
		metas := realisticMetas(rnd, rules, 64)
		tpl, bad := newFilterTemplate(rules, Target{}, Target{Stage: "next"})
		if bad != nil {
			b.Fatal(bad)
		}
		st := tpl.NewInstance()
		batch := rings.NewBatch(64, a)
		batch.SetLen(64)
		copy(batch.Meta, metas)
		idx := make([]uint16, 64)
		for i := range idx {
			idx[i] = uint16(i)
			batch.Descs[i].Len = 64
		}
		next := make([]Edge, 64)
		perPacket := func(b *testing.B) {
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N*64)
			b.ReportMetric(ns, "ns/pkt")
			b.ReportMetric(1e3/ns, "Mpps")
		}
		b.Run(fmt.Sprintf("rules=%d/compiled", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				st.Process(batch, idx, next)
			}
			perPacket(b)
		})
		b.Run(fmt.Sprintf("rules=%d/linear", n), func(b *testing.B) {
			b.ReportAllocs()
			sink := 0
			for b.Loop() {
				for i := range metas {
					sink += oracleMatch(rules, &metas[i])
				}
			}
			perPacket(b)
			_ = sink
		})
	}
}

// BenchmarkFilterBuild measures compiling the realistic rule sets.
func BenchmarkFilterBuild(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		rules := realisticRules(rand.New(rand.NewPCG(uint64(n), 1)), n)
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				buildClassifier(rules)
			}
		})
	}
}
