package pipelines

import (
	"encoding/binary"
	"slices"
)

// Flow steering: which worker a packet goes to, for a pipeline with
// stateful stages and more than one worker. The engine computes it from
// the raw frame in its I/O loop, before any stage runs, so it reads the
// headers itself (Ethernet, up to two VLAN tags, IPv4 or IPv6 with its
// extension headers, the L4 ports, an ICMP error's quoted packet).
//
// The rule, for a packet's flow tuple (a, ap) <-> (b, bp):
//
//  1. replies to a SNAT pool address: the worker of the port (bp %
//     workers when b is a pool address, ap % workers when a is: an ICMP
//     error quoting a translated packet). The nat stage allocates only
//     ports that steer back to its own worker (nat.go), so the replies of
//     a translated flow reach the worker that holds its session.
//  2. flows touching a DNAT address (a rule's destination or target):
//     the hash of the other endpoint's address alone, so that the
//     client's packets to the public address and the target's replies to
//     the client meet on one worker whatever the translation.
//  3. everything else: a symmetric hash of the two addresses (not the
//     ports: a later IP fragment has none, and must reach the worker its
//     first fragment went to; not the protocol: an ICMP error about a
//     TCP flow must reach that flow's worker).
//
// So both directions of a flow, and every fragment of a datagram, go to
// one worker; the stateful stages keep per-worker tables and take no
// lock. Two limits: a later fragment of a reply to a SNAT pool address
// carries no port, so rule 1 cannot place it (it is steered by rule 3 and
// may miss its session: put the reassemble stage's full mode before
// NAT where replies arrive fragmented); and flows are spread by address
// pair, so one pair of hosts is one worker's load.
//
// Across receive queues the NIC decides, before the engine sees a frame:
// each queue runs its own engine and its own tables, and a flow whose two
// directions arrive on two queues is tracked twice, each half seeing one
// direction. The daemon does not set the RSS key: a symmetric Toeplitz key
// (the 0x6d5a pattern) set with ethtool -X, where the driver takes one,
// makes both directions arrive on one queue.
type Steering struct {
	pool    [][4]byte // SNAT pool addresses, sorted
	special [][4]byte // DNAT match and target addresses, sorted
}

// Equal reports whether s and o steer every packet alike (nil, no
// steering, equals only nil). A swap between two pipelines that steer
// otherwise cannot keep each worker's table as it is: some flows' packets
// would go to another worker from then on (dataplane's carryState).
func (s *Steering) Equal(o *Steering) bool {
	if s == nil || o == nil {
		return s == o
	}
	return slices.Equal(s.pool, o.pool) && slices.Equal(s.special, o.special)
}

// Steering returns the graph's flow steering, or nil when the graph has no
// stateful stage (any worker may take any packet).
func (g *Graph) Steering() *Steering {
	if len(g.StatefulStages()) == 0 {
		return nil
	}
	s := &Steering{}
	for i := range g.nodes {
		nt, ok := g.nodes[i].tmpl.(*natTemplate)
		if !ok {
			continue
		}
		for _, r := range nt.snat {
			s.pool = append(s.pool, r.addrs...)
		}
		for _, r := range nt.dnat {
			s.special = append(s.special, r.addrs...)
			for _, p := range r.m.dst {
				if p.Bits() == 32 {
					s.special = append(s.special, p.Addr().As4())
				} else {
					// A DNAT rule over a prefix: every address in it
					// (bounded: a /16 at most is listed; wider prefixes
					// are steered by rule 3, see stateful limits).
					if p.Bits() >= 16 {
						for a := p.Masked().Addr(); p.Contains(a); a = a.Next() {
							s.special = append(s.special, a.As4())
						}
					}
				}
			}
		}
	}
	cmp4 := func(a, b [4]byte) int { return slices.Compare(a[:], b[:]) }
	slices.SortFunc(s.pool, cmp4)
	s.pool = slices.Compact(s.pool)
	slices.SortFunc(s.special, cmp4)
	s.special = slices.Compact(s.special)
	return s
}

func in4(set [][4]byte, a *[16]byte, v6 bool) bool {
	if v6 || len(set) == 0 {
		return false
	}
	_, found := slices.BinarySearchFunc(set, [4]byte(a[:4]), func(x, y [4]byte) int { return slices.Compare(x[:], y[:]) })
	return found
}

// TupleWorker returns the worker (of n) of a flow with endpoints (a, ap)
// and (b, bp), IPv4 addresses in the first four bytes; ports says whether
// ap and bp are known (not for a later fragment). Both directions of a
// flow give the same worker.
func (s *Steering) TupleWorker(a, b *[16]byte, ap, bp uint16, ports bool, proto uint8, v6 bool, n int) int {
	if n <= 1 {
		return 0
	}
	if ports {
		if in4(s.pool, b, v6) {
			return int(bp) % n
		}
		if in4(s.pool, a, v6) {
			return int(ap) % n
		}
	}
	as, bs := in4(s.special, a, v6), in4(s.special, b, v6)
	var h uint64
	switch {
	case as && !bs:
		h = steerHash1(b, v6)
	case bs && !as:
		h = steerHash1(a, v6)
	default:
		h = steerHash2(a, b, v6)
	}
	return int((uint64(uint32(h)) * uint64(n)) >> 32)
}

func steerHash1(a *[16]byte, v6 bool) uint64 {
	h := balanceMix(uint64(ctSeed)^0x51, binary.LittleEndian.Uint64(a[0:8]))
	if v6 {
		h = balanceMix(h, binary.LittleEndian.Uint64(a[8:16]))
	}
	return uint64(balanceFinal(h))
}

// steerHash2 is symmetric in a and b.
func steerHash2(a, b *[16]byte, v6 bool) uint64 {
	a0, a1 := binary.BigEndian.Uint64(a[0:8]), binary.BigEndian.Uint64(a[8:16])
	b0, b1 := binary.BigEndian.Uint64(b[0:8]), binary.BigEndian.Uint64(b[8:16])
	if a0 > b0 || a0 == b0 && a1 > b1 {
		a0, a1, b0, b1 = b0, b1, a0, a1
	}
	h := uint64(ctSeed)
	h = balanceMix(h, a0)
	h = balanceMix(h, b0)
	if v6 {
		h = balanceMix(h, a1)
		h = balanceMix(h, b1)
	}
	return uint64(balanceFinal(h))
}

// Worker returns the worker (of n) frame p goes to. It reads only p's
// headers, allocates nothing, and never fails: a frame it cannot read as
// IP is steered by a hash of its addresses, or of its first bytes.
func (s *Steering) Worker(p []byte, n int) int {
	if n <= 1 {
		return 0
	}
	var a, b [16]byte
	var ap, bp uint16
	ports, proto, v6, ok := steerParse(p, &a, &b, &ap, &bp)
	if !ok {
		// Not IP: the ordered MAC pair, so both directions meet.
		if len(p) < 12 {
			return 0
		}
		copy(a[:6], p[0:6])
		copy(b[:6], p[6:12])
		return int((uint64(uint32(steerHash2(&a, &b, true))) * uint64(n)) >> 32)
	}
	return s.TupleWorker(&a, &b, ap, bp, ports, proto, v6, n)
}

// steerParse reads frame p's flow tuple as conntrack keys it (an ICMP
// error: the quoted packet's).
func steerParse(p []byte, a, b *[16]byte, ap, bp *uint16) (ports bool, proto uint8, v6, ok bool) {
	if len(p) < 14 {
		return false, 0, false, false
	}
	be := binary.BigEndian
	o := 12
	et := be.Uint16(p[o:])
	for range 2 {
		if et != 0x8100 && et != 0x88a8 {
			break
		}
		if o+6 > len(p) {
			return false, 0, false, false
		}
		o += 4
		et = be.Uint16(p[o:])
	}
	o += 2
	switch et {
	case 0x0800:
		return steerIP(p, o, false, a, b, ap, bp, true)
	case 0x86dd:
		return steerIP(p, o, true, a, b, ap, bp, true)
	}
	return false, 0, false, false
}

// steerIP reads the IP packet at o; outer says whether an ICMP error's
// quoted packet may be followed (once).
func steerIP(p []byte, o int, v6 bool, a, b *[16]byte, ap, bp *uint16, outer bool) (ports bool, proto uint8, isV6, ok bool) {
	be := binary.BigEndian
	end := len(p)
	var l4 int
	later := false
	if !v6 {
		if o+ipv4MinHdr > end || p[o]>>4 != 4 {
			return false, 0, false, false
		}
		ihl := int(p[o]&0x0f) * 4
		if ihl < ipv4MinHdr {
			return false, 0, false, false
		}
		*a, *b = [16]byte{}, [16]byte{}
		copy(a[:4], p[o+12:o+16])
		copy(b[:4], p[o+16:o+20])
		proto = p[o+9]
		later = be.Uint16(p[o+6:])&0x1fff != 0
		l4 = o + ihl
	} else {
		if o+ipv6HdrLen > end || p[o]>>4 != 6 {
			return false, 0, false, false
		}
		*a, *b = [16]byte(p[o+8:o+24]), [16]byte(p[o+24:o+40])
		lo, nh, frag, c := walkIPv6Ext(p, o+ipv6HdrLen, end, p[o+6])
		proto, l4 = nh, lo
		later = frag == fragNonFirst
		if c != 0 && !later { // a walk that did not finish: addresses only
			return false, proto, true, true
		}
	}
	if later {
		return false, proto, v6, true
	}
	switch proto {
	case 6, 17, 132, 33, 136:
		if l4+4 <= end {
			*ap, *bp = be.Uint16(p[l4:]), be.Uint16(p[l4+2:])
			return true, proto, v6, true
		}
	case 1, 58:
		if l4+8 > end || (proto == 1) == v6 {
			break
		}
		t := p[l4]
		isErr := !v6 && icmp4Error(t) || v6 && t >= 1 && t <= 4
		if isErr {
			if outer {
				var ia, ib [16]byte
				var iap, ibp uint16
				if ip, iq, iv, iok := steerIP(p, l4+8, v6, &ia, &ib, &iap, &ibp, false); iok {
					*a, *b, *ap, *bp = ia, ib, iap, ibp
					return ip, iq, iv, true
				}
			}
			return false, proto, v6, true
		}
		var k ctTuple
		if _, good := icmpKey(t, p[l4+1], be.Uint16(p[l4+4:]), v6, &k); good {
			*ap, *bp = k.sport, k.dport
			return true, proto, v6, true
		}
	}
	return false, proto, v6, true
}
