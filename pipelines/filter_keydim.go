package pipelines

import (
	"encoding/binary"

	"github.com/warpflow/warpflow/rings"
)

// preKey writes the dimensions of m's classifier key that need names (bit d
// for dimension d, among gateDims), each with the value filterKey gives it,
// and leaves the others alone. The pre-gates test two or three dimensions
// and most packets stop there, so building the whole key (eleven stores
// behind a family switch, then loads of the few the gates need) would be
// wasted on them. need is the same for every packet of a filter, so its
// tests are predicted. TestFilterPreKeyAgrees checks it against filterKey.
func preKey(m *rings.Meta, need uint16, k *[nDims]uint64) {
	f := m.Flags
	ip := f&(rings.FlagIPv4|rings.FlagIPv6) != 0
	if need&(1<<dSrcHi|1<<dDstHi) != 0 {
		var s, d uint64
		switch {
		case f&rings.FlagIPv4 != 0:
			s = uint64(binary.BigEndian.Uint32(m.SrcIP[:4])) << 32
			d = uint64(binary.BigEndian.Uint32(m.DstIP[:4])) << 32
		case f&rings.FlagIPv6 != 0:
			s = binary.BigEndian.Uint64(m.SrcIP[:8])
			d = binary.BigEndian.Uint64(m.DstIP[:8])
		}
		k[dSrcHi], k[dDstHi] = s, d
	}
	if need&(1<<dSport|1<<dDport) != 0 {
		k[dSport], k[dDport] = noPort, noPort
		if ip && f&rings.FlagL4 != 0 && portedProto(m.IPProto) {
			k[dSport], k[dDport] = uint64(m.SrcPort), uint64(m.DstPort)
		}
	}
	if need&(1<<dClass) != 0 {
		k[dClass] = uint64(m.Class)
	}
	if need&(1<<dL3|1<<dVLAN|1<<dTCP|1<<dFrag) != 0 {
		preKeyRest(m, need, k)
	}
}

// preKeyRest is preKey for the dimensions pre-gates test least often, kept
// out of line so preKey stays small enough to inline.
func preKeyRest(m *rings.Meta, need uint16, k *[nDims]uint64) {
	f := m.Flags
	ip := f&(rings.FlagIPv4|rings.FlagIPv6) != 0
	if need&(1<<dL3) != 0 {
		proto := uint64(noProto)
		if ip {
			proto = uint64(m.IPProto)
		}
		k[dL3] = filterFamily(f)<<9 | proto
	}
	if need&(1<<dVLAN) != 0 {
		k[dVLAN] = noVLAN
		if m.NumVLANs > 0 {
			k[dVLAN] = uint64(m.VLANs[0] & 0xfff)
		}
	}
	if need&(1<<dTCP) != 0 {
		k[dTCP] = noTCP
		if ip && f&rings.FlagL4 != 0 && m.IPProto == 6 {
			k[dTCP] = uint64(m.TCPFlags)
		}
	}
	if need&(1<<dFrag) != 0 {
		k[dFrag] = 0
		if f&rings.FlagFragment != 0 {
			k[dFrag] = 1
		}
	}
}

// prePassMeta is prePass on m's key, computing only the dimensions the
// pre-gates test.
func (c *filterClassifier) prePassMeta(m *rings.Meta) bool {
	if len(c.pre) == 0 {
		return true
	}
	var k [nDims]uint64
	preKey(m, c.preNeed, &k)
	return c.prePass(&k)
}

// keyDim returns filterKey(m)[d] alone (d among gateDims), for the
// pre-gate loops of the dimensions preHits has no loop of its own for.
func keyDim(m *rings.Meta, d uint8) uint64 {
	var k [nDims]uint64
	if int(d) < nDims {
		preKey(m, 1<<d, &k)
		return k[d]
	}
	return 0
}

// portKey is filterKey's dSport (or dDport) value: port of a packet m
// whose protocol carries ports, else noPort.
func portKey(m *rings.Meta, port uint16) uint64 {
	if m.Flags&(rings.FlagIPv4|rings.FlagIPv6) != 0 && m.Flags&rings.FlagL4 != 0 && portedProto(m.IPProto) {
		return uint64(port)
	}
	return noPort
}

// addrHi is filterKey's dSrcHi (or dDstHi) value of address a of a packet
// with flags f.
func addrHi(f rings.Flags, a *[16]byte) uint64 {
	switch {
	case f&rings.FlagIPv4 != 0:
		return uint64(binary.BigEndian.Uint32(a[:4])) << 32
	case f&rings.FlagIPv6 != 0:
		return binary.BigEndian.Uint64(a[:8])
	}
	return 0
}

// preHits sets bit 0 of hit[k] when packet idx[k] passes some pre-gate (or
// there are none), and clears it otherwise. It runs gate by gate over the
// whole vector rather than packet by packet: a gate's parameters stay in
// registers, the dimensions gates test most get loops of their own that
// read just the metadata they need, and the packets' loads are
// independent, so the loop runs at load throughput instead of one
// packet's chain of dependent loads at a time.
func (c *filterClassifier) preHits(meta []rings.Meta, idx []uint16, hit []uint64) {
	hit = hit[:len(idx)]
	if len(c.pre) == 0 {
		for k := range hit {
			hit[k] = 1
		}
		return
	}
	clear(hit)
	for gi := range c.pre {
		g := &c.pre[gi]
		base, sh, nb := g.base, g.shift&63, uint64(g.nbits)
		bm := c.gateBits[g.off : uint64(g.off)+nb>>6+1]
		switch g.dim {
		case dSrcHi:
			for k, i := range idx {
				m := &meta[i]
				x := min((addrHi(m.Flags, &m.SrcIP)-base)>>sh, nb)
				hit[k] |= bm[x>>6] >> (x & 63)
			}
		case dDstHi:
			for k, i := range idx {
				m := &meta[i]
				x := min((addrHi(m.Flags, &m.DstIP)-base)>>sh, nb)
				hit[k] |= bm[x>>6] >> (x & 63)
			}
		case dClass:
			for k, i := range idx {
				x := min((uint64(meta[i].Class)-base)>>sh, nb)
				hit[k] |= bm[x>>6] >> (x & 63)
			}
		case dDport:
			for k, i := range idx {
				m := &meta[i]
				x := min((portKey(m, m.DstPort)-base)>>sh, nb)
				hit[k] |= bm[x>>6] >> (x & 63)
			}
		case dSport:
			for k, i := range idx {
				m := &meta[i]
				x := min((portKey(m, m.SrcPort)-base)>>sh, nb)
				hit[k] |= bm[x>>6] >> (x & 63)
			}
		default:
			for k, i := range idx {
				x := min((keyDim(&meta[i], g.dim)-base)>>sh, nb)
				hit[k] |= bm[x>>6] >> (x & 63)
			}
		}
	}
}
