package pipelines

import (
	"encoding/binary"
	"math/bits"

	"github.com/warpflow/warpflow/rings"
	"go.yaml.in/yaml/v3"
)

// balanceKind is the built-in "balance" stage: it spreads flows over 2 to 64
// targets by a symmetric flow hash, so both directions of a connection take
// the same edge.
//
// Option: to: [a, b, ...], stage names or drop:<reason> targets; edge k
// leads to the k-th. The stage writes the hash into Meta.Hash and picks the
// edge as (hash * N) >> 32, which spreads as evenly as hash % N without a
// division.
//
// What is hashed:
//   - IPv4/IPv6 (FlagIPv4/FlagIPv6): the address and port pairs ordered so
//     that the smaller (address, port) comes first, plus the protocol. Ports
//     count only with FlagL4 and not for fragments (FlagFragment), so that
//     every fragment of a datagram hashes alike. ICMP and ICMPv6 use the
//     echo identifier (Meta.DstPort) instead of ports: request and reply
//     carry the same identifier but different types.
//   - anything else of at least 14 bytes: the two MAC addresses, ordered,
//     and the ethertype field that follows them.
//   - shorter frames: their bytes.
//
// The hash has a fixed seed: the same packet takes the same edge in every
// run, on every worker.
var balanceKind = Kind{Name: "balance", Build: buildBalance}

type balanceOptions struct {
	To yaml.Node `yaml:"to"`
}

// Bounds on the number of balance targets.
const (
	balanceMinTargets = 2
	balanceMaxTargets = 64
)

func buildBalance(c *BuildContext) Template {
	var o balanceOptions
	if !c.Decode(&o) {
		return nil
	}
	to := c.Option("to")
	if to == nil {
		c.Errorf(nil, "balance needs to: [target, ...]")
		return nil
	}
	if to.Kind != yaml.SequenceNode {
		c.Errorf(to, "to: want a list of stage names or drop:<reason> targets")
		return nil
	}
	if n := len(to.Content); n < balanceMinTargets || n > balanceMaxTargets {
		c.Errorf(to, "to: %d targets, want %d..%d", n, balanceMinTargets, balanceMaxTargets)
		return nil
	}
	edges := make([]Target, 0, len(to.Content))
	ok := true
	for _, n := range to.Content {
		if n.Kind != yaml.ScalarNode {
			c.Errorf(n, "to: want a stage name or drop:<reason>")
			ok = false
			continue
		}
		t, good := c.ParseTarget(n.Value, n)
		ok = ok && good
		edges = append(edges, t)
	}
	if !ok {
		return nil
	}
	return &balanceStage{edges: edges, n: uint64(len(edges))}
}

// balanceStage is both the template and the instance: it keeps no state,
// so all workers share it.
type balanceStage struct {
	edges []Target
	n     uint64
}

func (s *balanceStage) Edges() []Target { return s.edges }

func (s *balanceStage) NewInstance() Stage { return s }

// Process implements Stage.
func (s *balanceStage) Process(b *rings.Batch, idx []uint16, next []Edge) {
	for k, i := range idx {
		m := &b.Meta[i]
		h := balanceHash(m, b.Packet(int(i)))
		m.Hash = h
		next[k] = Edge((uint64(h) * s.n) >> 32)
	}
}

// balanceHash returns the symmetric flow hash of a packet.
func balanceHash(m *rings.Meta, p []byte) uint32 {
	if m.Flags&(rings.FlagIPv4|rings.FlagIPv6) != 0 {
		a0, a1 := binary.BigEndian.Uint64(m.SrcIP[:8]), binary.BigEndian.Uint64(m.SrcIP[8:])
		b0, b1 := binary.BigEndian.Uint64(m.DstIP[:8]), binary.BigEndian.Uint64(m.DstIP[8:])
		var pa, pb, extra uint64
		switch {
		case m.Flags&rings.FlagL4 == 0 || m.Flags&rings.FlagFragment != 0:
		case m.IPProto == 1 || m.IPProto == 58: // ICMP, ICMPv6
			extra = uint64(m.DstPort)
		default:
			pa, pb = uint64(m.SrcPort), uint64(m.DstPort)
		}
		// Order the endpoints: (a, pa) <= (b, pb).
		if a0 > b0 || a0 == b0 && (a1 > b1 || a1 == b1 && pa > pb) {
			a0, a1, b0, b1, pa, pb = b0, b1, a0, a1, pb, pa
		}
		h := balanceSeed ^ uint64(m.IPProto)<<48 ^ extra<<16
		h = balanceMix(h, a0)
		h = balanceMix(h, a1)
		h = balanceMix(h, b0)
		h = balanceMix(h, b1)
		h = balanceMix(h, pa<<16|pb)
		return balanceFinal(h)
	}
	if len(p) >= rwEthLen {
		d := uint64(binary.BigEndian.Uint32(p[0:]))<<16 | uint64(binary.BigEndian.Uint16(p[4:]))
		s := uint64(binary.BigEndian.Uint32(p[6:]))<<16 | uint64(binary.BigEndian.Uint16(p[10:]))
		if d > s {
			d, s = s, d
		}
		h := balanceSeed ^ uint64(binary.BigEndian.Uint16(p[12:]))<<48
		h = balanceMix(h, d)
		h = balanceMix(h, s)
		return balanceFinal(h)
	}
	h := balanceSeed ^ uint64(len(p))
	for _, c := range p {
		h = balanceMix(h, uint64(c))
	}
	return balanceFinal(h)
}

// balanceSeed is fixed so that hashes, and so edges, are the same in every run.
const balanceSeed = 0x6a09e667f3bcc908

// balanceMix mixes one 64-bit word into h (a multiply-rotate step in the style
// of xxHash64's round).
func balanceMix(h, w uint64) uint64 {
	h ^= w * 0xc2b2ae3d27d4eb4f
	h = bits.RotateLeft64(h, 31) * 0x9e3779b97f4a7c15
	return h
}

// balanceFinal avalanches h (the murmur3 fmix64 finalizer) and folds it to
// 32 bits.
func balanceFinal(h uint64) uint32 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return uint32(h) ^ uint32(h>>32)
}

// KeepsLength implements LengthKeeper: balancing only reads packets.
func (s *balanceStage) KeepsLength() bool { return true }
