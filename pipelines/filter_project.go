package pipelines

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
	"slices"

	"github.com/warpflow/warpflow/rings"
)

// The classifier's build, first step: each rule projected onto the key
// dimensions as sets of intervals (filter_keydim.go names the
// dimensions). filter_group.go groups the projected rules into trees,
// filter_tree.go cuts each group's key space; filter_classify.go runs
// the result.

// projRule is a rule projected onto the key dimensions: nil means the
// dimension is unconstrained. exact says the box product is the rule.
type projRule struct {
	dims  [nDims][]ival
	exact bool
	never bool // some dimension's set is empty: the rule matches nothing
	ex    *filterExact
}

// projectRule turns a parsed rule into interval sets per dimension.
func projectRule(r *filterRule) projRule {
	var p projRule
	p.exact = true
	famRange := func(f uint64) ival { return ival{f << 9, f<<9 | 511} }
	if r.proto != nil {
		var l3 []ival
		for _, t := range r.proto {
			switch t {
			case protoIPv4:
				l3 = append(l3, famRange(famV4))
			case protoIPv6:
				l3 = append(l3, famRange(famV6))
			case protoARP:
				l3 = append(l3, famRange(famARP))
			default:
				l3 = append(l3, ival{famV4<<9 | uint64(t), famV4<<9 | uint64(t)},
					ival{famV6<<9 | uint64(t), famV6<<9 | uint64(t)})
			}
		}
		p.dims[dL3] = normIvals(l3)
	}
	addr := func(ps []netip.Prefix, hiDim, loDim int, ex4 *[]ival, ex6 *[]ival128) bool {
		if ps == nil {
			return true
		}
		var hi, lo, fams []ival
		loFull, v4, v6, long6 := false, false, 0, false
		for _, pf := range ps {
			a := pf.Addr()
			if a.Is4() {
				v4 = true
				fams = append(fams, famRange(famV4))
				b := a.As4()
				x := uint64(binary.BigEndian.Uint32(b[:]))
				m := uint64(1)<<(32-pf.Bits()) - 1
				iv := ival{(x &^ m) << 32, (x | m) << 32}
				hi = append(hi, iv)
				*ex4 = append(*ex4, iv)
				loFull = true
				continue
			}
			v6++
			fams = append(fams, famRange(famV6))
			b := a.As16()
			h, l := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
			var iv ival128
			if n := pf.Bits(); n <= 64 {
				m := maxUint64 >> n
				if n == 0 {
					m = maxUint64
				}
				hi = append(hi, ival{h &^ m, h | m})
				loFull = true
				iv = ival128{h &^ m, 0, h | m, maxUint64}
			} else {
				long6 = true
				m := maxUint64 >> (n - 64)
				if n == 128 {
					m = 0
				}
				hi = append(hi, ival{h, h})
				lo = append(lo, ival{l &^ m, l | m})
				iv = ival128{h, l &^ m, h, l | m}
			}
			*ex6 = append(*ex6, iv)
		}
		p.dims[hiDim] = normIvals(hi)
		if !loFull {
			p.dims[loDim] = normIvals(lo)
		}
		p.dims[dL3] = intersectIvals(p.dims[dL3], normIvals(fams))
		return !(v4 && v6 > 0) && !(v6 > 1 && long6)
	}
	var ex filterExact
	ex.src = !addr(r.src, dSrcHi, dSrcLo, &ex.src4, &ex.src6)
	ex.dst = !addr(r.dst, dDstHi, dDstLo, &ex.dst4, &ex.dst6)
	if ex.src || ex.dst {
		p.exact = false
		ex.src4, ex.dst4 = normIvals(ex.src4), normIvals(ex.dst4)
		if !ex.src {
			ex.src4, ex.src6 = nil, nil
		}
		if !ex.dst {
			ex.dst4, ex.dst6 = nil, nil
		}
		p.ex = &ex
	}
	ports := func(rs []portRange) []ival {
		if rs == nil {
			return nil
		}
		out := make([]ival, len(rs))
		for i, pr := range rs {
			out[i] = ival{uint64(pr.lo), uint64(pr.hi)}
		}
		return normIvals(out)
	}
	p.dims[dSport] = ports(r.srcPort)
	p.dims[dDport] = ports(r.dstPort)
	if r.hasVLAN {
		v := ports(r.vlan)
		if r.vlanNone {
			v = normIvals(append(v, ival{noVLAN, noVLAN}))
		}
		p.dims[dVLAN] = v
	}
	if r.hasClass {
		var cl []ival
		for c := range uint64(256) {
			if r.class[c/64]&(1<<(c%64)) != 0 {
				cl = append(cl, ival{c, c})
			}
		}
		p.dims[dClass] = normIvals(cl)
	}
	if r.hasTCP {
		var tf []ival
		for f := range uint64(256) {
			if uint8(f)&r.tcpSet == r.tcpSet && uint8(f)&r.tcpClear == 0 {
				tf = append(tf, ival{f, f})
			}
		}
		p.dims[dTCP] = normIvals(tf)
	}
	if r.hasFrag {
		f := uint64(0)
		if r.frag {
			f = 1
		}
		p.dims[dFrag] = []ival{{f, f}}
	}
	if r.hasCT() {
		var cv []ival
		for v := range uint64(16) {
			if uint8(v)&^(rings.CTStateMask|rings.CTReply) == 0 && r.ctMatch(uint8(v)) {
				cv = append(cv, ival{v, v})
			}
		}
		p.dims[dCT] = normIvals(cv)
	}
	for d := range p.dims {
		if p.dims[d] != nil && len(p.dims[d]) == 0 {
			p.never = true
		}
	}
	return p
}

// normIvals sorts s and merges overlapping or adjacent intervals. It returns
// a non-nil slice (empty when s is empty), so "constrained to nothing"
// differs from "unconstrained".
func normIvals(s []ival) []ival {
	if len(s) == 0 {
		return []ival{}
	}
	slices.SortFunc(s, func(a, b ival) int {
		switch {
		case a.lo < b.lo:
			return -1
		case a.lo > b.lo:
			return 1
		}
		return 0
	})
	out := s[:1]
	for _, iv := range s[1:] {
		last := &out[len(out)-1]
		if last.hi == maxUint64 || iv.lo <= last.hi+1 {
			last.hi = max(last.hi, iv.hi)
			continue
		}
		out = append(out, iv)
	}
	return out
}

// intersectIvals intersects two normalised sets (nil = everything).
func intersectIvals(a, b []ival) []ival {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	out := []ival{}
	for i, j := 0, 0; i < len(a) && j < len(b); {
		lo, hi := max(a[i].lo, b[j].lo), min(a[i].hi, b[j].hi)
		if lo <= hi {
			out = append(out, ival{lo, hi})
		}
		if a[i].hi < b[j].hi {
			i++
		} else {
			j++
		}
	}
	return out
}

// measure is the number of values in s less its number of intervals (so 0
// for a single value), saturating: a size to compare, not a count.
func measure(s []ival) uint64 {
	var m uint64
	for _, iv := range s {
		s, c := bits.Add64(m, iv.hi-iv.lo, 0)
		if c != 0 {
			return maxUint64
		}
		m = s
	}
	return m
}
