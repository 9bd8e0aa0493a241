package pipelines

import (
	"net/netip"

	"github.com/warpflow/warpflow/rings"
)

// Random rule sets and packets for the differential test, the fuzz target
// and the benchmarks. Values are drawn from small pools so that rules and
// packets collide often: prefixes nest, ranges share ends, families mix.

// intner is the randomness the generators need: *rand.Rand, or a fuzz
// input read as a stream of choices.
type intner interface{ IntN(n int) int }

var (
	genV4Bases = []netip.Addr{
		netip.MustParseAddr("10.0.0.0"), netip.MustParseAddr("10.0.1.0"),
		netip.MustParseAddr("10.1.0.0"), netip.MustParseAddr("192.168.1.0"),
		netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("255.255.255.255"),
	}
	genV6Bases = []netip.Addr{
		netip.MustParseAddr("2001:db8::"), netip.MustParseAddr("2001:db8::1:0"),
		netip.MustParseAddr("2001:db8:0:1::"), netip.MustParseAddr("fe80::"),
		netip.MustParseAddr("::ffff:10.0.0.0"), netip.MustParseAddr("::"),
	}
	genV4Bits  = []int{0, 1, 8, 16, 23, 24, 30, 32}
	genV6Bits  = []int{0, 1, 32, 48, 63, 64, 65, 96, 120, 127, 128}
	genPorts   = []uint16{0, 1, 22, 53, 80, 443, 1023, 1024, 8080, 65534, 65535}
	genVLANs   = []uint16{0, 1, 2, 10, 11, 100, 4094, 4095}
	genProtos  = []uint16{1, 6, 17, 58, 132, 47, 0, 33, 136, 255, protoIPv4, protoIPv6, protoARP}
	genIPProto = []uint8{1, 6, 17, 58, 132, 47, 0, 33, 136, 255}
)

// genAddr returns an address near a pool base: the base with its last bits
// perturbed, so it falls inside or just outside pool prefixes.
func genAddr(r intner, v6 bool) netip.Addr {
	if !v6 {
		b := genV4Bases[r.IntN(len(genV4Bases))].As4()
		b[3] ^= byte(r.IntN(4))
		if r.IntN(4) == 0 {
			b[2] ^= byte(r.IntN(256))
		}
		return netip.AddrFrom4(b)
	}
	b := genV6Bases[r.IntN(len(genV6Bases))].As16()
	b[15] ^= byte(r.IntN(4))
	switch r.IntN(4) {
	case 0:
		b[7] ^= byte(r.IntN(256))
	case 1:
		b[8] ^= 0x80
	}
	return netip.AddrFrom16(b)
}

func genPrefixes(r intner) []netip.Prefix {
	n := 1 + r.IntN(3)
	out := make([]netip.Prefix, n)
	fam := r.IntN(3) // 0 v4, 1 v6, 2 mixed
	for i := range out {
		v6 := fam == 1 || fam == 2 && r.IntN(2) == 0
		a := genAddr(r, v6)
		bits := genV4Bits[r.IntN(len(genV4Bits))]
		if v6 {
			bits = genV6Bits[r.IntN(len(genV6Bits))]
		}
		out[i] = netip.PrefixFrom(a, bits).Masked()
	}
	return out
}

func genRanges(r intner, pool []uint16) []portRange {
	out := make([]portRange, 1+r.IntN(3))
	for i := range out {
		a, b := pool[r.IntN(len(pool))], pool[r.IntN(len(pool))]
		if r.IntN(2) == 0 {
			b = a
		}
		out[i] = portRange{min(a, b), max(a, b)}
	}
	return out
}

// genRule returns a random rule with each field present with probability
// about 1/3 (so many rules are wide), pointing at one of a few actions.
func genRule(r intner) filterRule {
	var fr filterRule
	f := func() bool { return r.IntN(3) == 0 }
	if f() {
		for range 1 + r.IntN(2) {
			fr.proto = append(fr.proto, genProtos[r.IntN(len(genProtos))])
		}
	}
	if f() {
		fr.src = genPrefixes(r)
	}
	if f() {
		fr.dst = genPrefixes(r)
	}
	if f() {
		fr.srcPort = genRanges(r, genPorts)
	}
	if f() {
		fr.dstPort = genRanges(r, genPorts)
	}
	if f() {
		fr.hasVLAN = true
		fr.vlanNone = r.IntN(3) == 0
		if !fr.vlanNone || r.IntN(2) == 0 {
			fr.vlan = genRanges(r, genVLANs)
		}
	}
	if r.IntN(6) == 0 {
		fr.hasTCP = true
		// The AND of two draws keeps about a quarter of the flags set.
		set1, set2, clear1, clear2 := uint8(r.IntN(256)), uint8(r.IntN(256)), uint8(r.IntN(256)), uint8(r.IntN(256))
		fr.tcpSet = set1 & set2
		fr.tcpClear = clear1 & clear2 &^ fr.tcpSet
	}
	if r.IntN(6) == 0 {
		fr.hasClass = true
		for range 1 + r.IntN(2) {
			c := r.IntN(rings.NumClasses + 1)
			fr.class[c/64] |= 1 << (c % 64)
		}
	}
	if r.IntN(6) == 0 {
		fr.hasFrag, fr.frag = true, r.IntN(2) == 0
	}
	if r.IntN(6) == 0 {
		fr.ctStates = uint8(r.IntN(32)) // may stay 0: only ct_dir
		if r.IntN(3) == 0 {
			fr.ctDirs = uint8(1 + r.IntN(2))
		}
	}
	switch r.IntN(3) {
	case 0: // accept: the zero Target
	case 1:
		fr.action = Target{Drop: "d" + string(rune('a'+r.IntN(3)))}
	default:
		fr.action = Target{Stage: "s" + string(rune('a'+r.IntN(3)))}
	}
	return fr
}

// genMeta returns a random Meta, usually self-consistent (one family, ports
// only with L4) but sometimes with arbitrary flags.
func genMeta(r intner) rings.Meta {
	var m rings.Meta
	switch r.IntN(6) {
	case 0, 1:
		m.Flags = rings.FlagIPv4
	case 2, 3:
		m.Flags = rings.FlagIPv6
	case 4:
		m.Flags = rings.FlagARP
	default:
		m.Flags = rings.Flags(r.IntN(1 << 10))
	}
	if r.IntN(4) != 0 {
		m.Flags |= rings.FlagL4
	}
	if r.IntN(6) == 0 {
		m.Flags |= rings.FlagFragment
	}
	m.Class = rings.Class(r.IntN(rings.NumClasses + 2))
	if r.IntN(2) == 0 {
		m.Class = rings.ClassOK
	}
	m.IPProto = genIPProto[r.IntN(len(genIPProto))]
	v6 := m.Flags&rings.FlagIPv4 == 0 && m.Flags&rings.FlagIPv6 != 0
	for _, dst := range []*[16]byte{&m.SrcIP, &m.DstIP} {
		a := genAddr(r, v6)
		if a.Is4() {
			b := a.As4()
			copy(dst[:], b[:])
		} else {
			*dst = a.As16()
		}
	}
	m.SrcPort = genPorts[r.IntN(len(genPorts))] + uint16(r.IntN(2))
	m.DstPort = genPorts[r.IntN(len(genPorts))] - uint16(r.IntN(2))
	m.NumVLANs = uint8(r.IntN(3))
	m.VLANs = [2]uint16{genVLANs[r.IntN(len(genVLANs))], uint16(r.IntN(4096))}
	if r.IntN(8) == 0 {
		m.VLANs[0] |= 0xf000 // PCP/DEI bits must not matter
	}
	m.TCPFlags = uint8(r.IntN(256))
	if r.IntN(2) == 0 {
		// A conntrack state and direction, and sometimes stray bits
		// above them that must not matter.
		m.CT = uint8(r.IntN(5)) | uint8(r.IntN(2))<<3
		if r.IntN(8) == 0 {
			m.CT |= 0xf0
		}
	}
	return m
}

// byteRand reads a fuzz input as a stream of choices; when it runs out,
// every choice is 0.
type byteRand struct{ b []byte }

func (r *byteRand) IntN(n int) int {
	if len(r.b) == 0 || n <= 1 {
		return 0
	}
	v := int(r.b[0])
	r.b = r.b[1:]
	if n > 256 {
		if len(r.b) > 0 {
			v = v<<8 | int(r.b[0])
			r.b = r.b[1:]
		}
	}
	return v % n
}

// genRules draws n rules with genRule.
func genRules(r intner, n int) []filterRule {
	rules := make([]filterRule, n)
	for i := range rules {
		rules[i] = genRule(r)
	}
	return rules
}

// genMetas draws n packets' metadata with genMeta.
func genMetas(r intner, n int) []rings.Meta {
	metas := make([]rings.Meta, n)
	for i := range metas {
		metas[i] = genMeta(r)
	}
	return metas
}
