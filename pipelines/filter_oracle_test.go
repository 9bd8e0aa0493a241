package pipelines

import (
	"net/netip"

	"github.com/warpflow/warpflow/rings"
)

// The linear oracle: the filter's semantics written as directly as
// possible, rule after rule, from the parsed rules and the Meta. The
// compiled classifier must agree with it exactly; benchmarks use it as the
// in-run baseline.

// oracleMatch returns the index of the first rule m matches, or len(rules).
func oracleMatch(rules []filterRule, m *rings.Meta) int {
	for i := range rules {
		if oracleRule(&rules[i], m) {
			return i
		}
	}
	return len(rules)
}

func oracleRule(r *filterRule, m *rings.Meta) bool {
	v4 := m.Flags&rings.FlagIPv4 != 0
	v6 := !v4 && m.Flags&rings.FlagIPv6 != 0
	arp := !v4 && !v6 && m.Flags&rings.FlagARP != 0
	ip := v4 || v6
	if r.proto != nil {
		hit := false
		for _, p := range r.proto {
			switch p {
			case protoIPv4:
				hit = hit || v4
			case protoIPv6:
				hit = hit || v6
			case protoARP:
				hit = hit || arp
			default:
				hit = hit || ip && uint16(m.IPProto) == p
			}
		}
		if !hit {
			return false
		}
	}
	addrHit := func(ps []netip.Prefix, b [16]byte) bool {
		for _, p := range ps {
			if p.Addr().Is4() && v4 && p.Contains(netip.AddrFrom4([4]byte(b[:4]))) ||
				!p.Addr().Is4() && v6 && p.Contains(netip.AddrFrom16(b)) {
				return true
			}
		}
		return false
	}
	if r.src != nil && !addrHit(r.src, m.SrcIP) || r.dst != nil && !addrHit(r.dst, m.DstIP) {
		return false
	}
	l4 := ip && m.Flags&rings.FlagL4 != 0
	hasPorts := false
	switch m.IPProto {
	case 6, 17, 132, 33, 136:
		hasPorts = l4
	}
	inRanges := func(rs []portRange, v uint16) bool {
		for _, pr := range rs {
			if pr.lo <= v && v <= pr.hi {
				return true
			}
		}
		return false
	}
	if r.srcPort != nil && !(hasPorts && inRanges(r.srcPort, m.SrcPort)) ||
		r.dstPort != nil && !(hasPorts && inRanges(r.dstPort, m.DstPort)) {
		return false
	}
	if r.hasVLAN {
		if m.NumVLANs == 0 && !r.vlanNone || m.NumVLANs > 0 && !inRanges(r.vlan, m.VLANs[0]&0xfff) {
			return false
		}
	}
	if r.hasTCP {
		if !l4 || m.IPProto != 6 || m.TCPFlags&r.tcpSet != r.tcpSet || m.TCPFlags&r.tcpClear != 0 {
			return false
		}
	}
	if r.hasClass && r.class[m.Class/64]&(1<<(m.Class%64)) == 0 {
		return false
	}
	if r.hasFrag && (m.Flags&rings.FlagFragment != 0) != r.frag {
		return false
	}
	if r.ctStates != 0 && r.ctStates&(1<<(m.CT&rings.CTStateMask)) == 0 {
		return false
	}
	if r.ctDirs != 0 {
		st := m.CT & rings.CTStateMask
		if st != rings.CTNew && st != rings.CTEstablished && st != rings.CTRelated {
			return false // untracked and invalid packets have no direction
		}
		if r.ctDirs == 1 && m.CT&rings.CTReply != 0 || r.ctDirs == 2 && m.CT&rings.CTReply == 0 {
			return false
		}
	}
	return true
}
