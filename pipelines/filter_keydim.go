package pipelines

import (
	"encoding/binary"

	"github.com/warpflow/warpflow/rings"
)

// preKey writes the dimensions of m's classifier key that need names (bit d
// for dimension d, among gateDims), each with the value filterKey gives it,
// and leaves the others alone: the pre-gates test two or three dimensions
// and most packets stop there, so building the whole key would be wasted
// on them. TestFilterPreKeyAgrees checks it against filterKey.
func preKey(m *rings.Meta, need uint16, k *[nDims]uint64) {
	for _, d := range gateDims {
		if need&(1<<d) != 0 {
			k[d] = keyDim(m, uint8(d))
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

// keyDim returns filterKey(m)[d] alone for d among gateDims (0 for the
// others), for preKey and the pre-gate loops of the dimensions preHits has
// no loop of its own for.
func keyDim(m *rings.Meta, d uint8) uint64 {
	f := m.Flags
	ip := f&(rings.FlagIPv4|rings.FlagIPv6) != 0
	switch d {
	case dSrcHi:
		return addrHi(f, &m.SrcIP)
	case dDstHi:
		return addrHi(f, &m.DstIP)
	case dSport:
		return portKey(m, m.SrcPort)
	case dDport:
		return portKey(m, m.DstPort)
	case dClass:
		return uint64(m.Class)
	case dL3:
		proto := uint64(noProto)
		if ip {
			proto = uint64(m.IPProto)
		}
		return filterFamily(f)<<9 | proto
	case dVLAN:
		if m.NumVLANs > 0 {
			return uint64(m.VLANs[0] & 0xfff)
		}
		return noVLAN
	case dTCP:
		if ip && f&rings.FlagL4 != 0 && m.IPProto == 6 {
			return uint64(m.TCPFlags)
		}
		return noTCP
	case dFrag:
		if f&rings.FlagFragment != 0 {
			return 1
		}
	case dCT:
		return uint64(m.CT & (rings.CTStateMask | rings.CTReply))
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
		case dCT:
			// The stateful pipelines' gate (ct: invalid, ct: new, ...):
			// its 16 keys' bits looked up when it was built.
			pass := &c.preCT
			for k, i := range idx {
				hit[k] |= uint64(pass[meta[i].CT&(rings.CTStateMask|rings.CTReply)])
			}
		default:
			for k, i := range idx {
				x := min((keyDim(&meta[i], g.dim)-base)>>sh, nb)
				hit[k] |= bm[x>>6] >> (x & 63)
			}
		}
	}
}
