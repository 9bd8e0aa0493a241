package pipelines

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/warpflow/warpflow/rings"
)

// Adversarial tests of the reassemble stage: crafted fragments, built
// byte by byte, through a whole compiled pipeline (parse, reassemble,
// conntrack, tx) as reassemble_test.go runs it.

// raEth is an Ethernet header for EtherType et.
func raEth(et uint16) []byte {
	h := make([]byte, 14)
	copy(h[0:6], sfMACs[1])
	copy(h[6:12], sfMACs[0])
	binary.BigEndian.PutUint16(h[12:], et)
	return h
}

// raV4 builds an IPv4 fragment: src 10.0.0.1 (last byte srcLo), dst
// 198.51.100.7, protocol proto, identification id, byte offset off (a
// multiple of 8), MF more, ihl header bytes (20..60, options zero) and
// payload.
func raV4(proto uint8, id uint16, off int, more bool, ihl int, payload []byte) []byte {
	return raV4From([4]byte{10, 0, 0, 1}, proto, id, off, more, ihl, payload)
}

func raV4From(src [4]byte, proto uint8, id uint16, off int, more bool, ihl int, payload []byte) []byte {
	h := make([]byte, ihl)
	h[0] = 0x40 | byte(ihl/4)
	binary.BigEndian.PutUint16(h[2:], uint16(ihl+len(payload)))
	binary.BigEndian.PutUint16(h[4:], id)
	fo := uint16(off / 8)
	if more {
		fo |= 0x2000
	}
	binary.BigEndian.PutUint16(h[6:], fo)
	h[8], h[9] = 64, proto
	copy(h[12:16], src[:])
	copy(h[16:20], []byte{198, 51, 100, 7})
	for i := 20; i < ihl; i++ {
		h[i] = 1 // NOP options
	}
	binary.BigEndian.PutUint16(h[10:], ^inetFold(inetSum(h, 0)))
	return append(append(raEth(0x0800), h...), payload...)
}

// raV6 builds an IPv6 packet 2001:db8::1 > 2001:db8::2 whose first next
// header is nh and whose payload (extension headers included) is body.
func raV6(nh uint8, body []byte) []byte {
	h := make([]byte, 40)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(body)))
	h[6], h[7] = nh, 64
	h[8], h[9], h[23] = 0x20, 0x01, 1
	h[10], h[11] = 0x0d, 0xb8
	h[24], h[25], h[39] = 0x20, 0x01, 2
	h[26], h[27] = 0x0d, 0xb8
	return append(append(raEth(0x86dd), h...), body...)
}

// raFH is an IPv6 fragment header.
func raFH(nh uint8, off int, more bool, id uint32) []byte {
	h := make([]byte, 8)
	h[0] = nh
	fo := uint16(off/8) << 3
	if more {
		fo |= 1
	}
	binary.BigEndian.PutUint16(h[2:], fo)
	binary.BigEndian.PutUint32(h[4:], id)
	return h
}

// raOpts is an extension header (hop-by-hop or destination options) of
// n*8 bytes naming nh next, padded with PadN.
func raOpts(nh uint8, n int) []byte {
	h := make([]byte, n*8)
	h[0], h[1] = nh, byte(n-1)
	h[2], h[3] = 1, byte(n*8-4) // PadN
	return h
}

func raTCPHdr(sport, dport uint16) []byte {
	h := make([]byte, 20)
	binary.BigEndian.PutUint16(h[0:], sport)
	binary.BigEndian.PutUint16(h[2:], dport)
	h[12], h[13] = 5<<4, 0x02
	return h
}

func raUDPHdr(sport, dport uint16, n int) []byte {
	h := make([]byte, 8, 8+n)
	binary.BigEndian.PutUint16(h[0:], sport)
	binary.BigEndian.PutUint16(h[2:], dport)
	binary.BigEndian.PutUint16(h[4:], uint16(8+n))
	return append(h, make([]byte, n)...)
}

func cat(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

func raModes(t *testing.T, f func(t *testing.T, opts string)) {
	for _, opts := range []string{"", ", mode: full"} {
		t.Run("opts="+opts, func(t *testing.T) { f(t, opts) })
	}
}

// TestRAAttackV6HeaderChainSplit: RFC 7112 / RFC 8200 4.5: a first
// fragment must carry the whole header chain through the upper-layer
// header. Here the first fragment ends after a destination options header
// that follows the fragment header, and the TCP header (port 22) is in the
// second fragment: a filter on ports would never see them.
func TestRAAttackV6HeaderChainSplit(t *testing.T) {
	raModes(t, func(t *testing.T, opts string) {
		for _, n := range []int{1, 2} { // DstOpts wholly in, or cut
			s := newSFRig(t, raYAML(opts))
			dst := raOpts(6, n)
			first := raV6(protoFragment, cat(raFH(60, 0, true, 7), dst[:8]))
			rest := cat(dst[8:], raTCPHdr(40000, 22), make([]byte, 16))
			second := raV6(protoFragment, cat(raFH(60, 8, false, 7), rest))
			o1, o2 := s.one(first), s.one(second)
			if o1.reason != "drop:frag_tiny" {
				t.Errorf("dstopts %d: first fragment without the upper-layer header: %s, want drop:frag_tiny", n, o1.reason)
			}
			if o2.reason == "tx:out" {
				t.Errorf("dstopts %d: second fragment of a tiny datagram forwarded (ports %d>%d)", n, o2.m.SrcPort, o2.m.DstPort)
			}
		}
	})
}

// TestRAAttackV4AHSplit: the same over IPv4 with an AH header: the first
// fragment holds AH only, TCP's header is in the second.
func TestRAAttackV4AHSplit(t *testing.T) {
	raModes(t, func(t *testing.T, opts string) {
		for _, cut := range []int{16, 8} { // AH whole, or cut
			s := newSFRig(t, raYAML(opts))
			ah := make([]byte, 16)
			ah[0], ah[1] = 6, 2 // next TCP, (2+2)*4 = 16 bytes
			first := raV4(protoAH, 9, 0, true, 20, ah[:cut])
			second := raV4(protoAH, 9, cut, false, 20, cat(ah[cut:], raTCPHdr(40000, 22), make([]byte, 16)))
			if o := s.one(first); o.reason != "drop:frag_tiny" {
				t.Errorf("AH first fragment of %d bytes: %s, want drop:frag_tiny", cut, o.reason)
			}
			if o := s.one(second); o.reason == "tx:out" {
				t.Errorf("AH %d: second fragment forwarded", cut)
			}
		}
	})
}

// TestRAAttackV6NestedFragmentHeaders: a fragment header inside a
// fragment: the parse stage reads the inner (a later fragment), the
// stage must not take the outer for a whole first fragment.
func TestRAAttackV6NestedFragmentHeaders(t *testing.T) {
	raModes(t, func(t *testing.T, opts string) {
		for _, outerMore := range []bool{true, false} { // first fragment, or atomic
			s := newSFRig(t, raYAML(opts))
			p := raV6(protoFragment, cat(raFH(protoFragment, 0, outerMore, 1), raFH(17, 64, false, 2), raUDPHdr(1, 53, 8)))
			o := s.one(p)
			if o.reason == "tx:out" || o.reason == "drop:frag_merged" {
				t.Errorf("outer M=%v: nested fragment header: %s (flags %#x), want a drop", outerMore, o.reason, o.m.Flags)
			}
		}
	})
}

// TestRAAttackOversize: the ping of death: fragments whose datagram,
// header included, is over 65535 bytes (RFC 791's total length; RFC
// 8200's payload length with the unfragmentable part), though the
// fragmentable part alone ends within 65535.
func TestRAAttackOversize(t *testing.T) {
	// IPv4: 20 + 65532 = 65552.
	s := newSFRig(t, raYAML(""))
	if o := s.one(raV4(17, 5, 0, true, 20, raUDPHdr(1, 53, 0))); o.reason != "tx:out" {
		t.Fatalf("first: %s", o.reason)
	}
	if o := s.one(raV4(17, 5, 65512, false, 20, make([]byte, 20))); o.reason != "drop:frag_inconsistent" {
		t.Errorf("IPv4 fragment ending the datagram at 65552 bytes: %s, want drop:frag_inconsistent", o.reason)
	}
	// With options on the first fragment only: 60 + 65512 = 65572.
	s = newSFRig(t, raYAML(""))
	s.one(raV4(17, 5, 0, true, 60, raUDPHdr(1, 53, 0)))
	if o := s.one(raV4(17, 5, 65504, false, 20, make([]byte, 8))); o.reason != "drop:frag_inconsistent" {
		t.Errorf("IPv4 with a 60-byte first header, datagram of 65572 bytes: %s, want drop:frag_inconsistent", o.reason)
	}
	// And the last fragment first, then the first with options.
	s = newSFRig(t, raYAML(", mode: full, max_bytes: 65535"))
	if o := s.one(raV4(17, 5, 65480, false, 20, make([]byte, 32))); o.reason != "drop:frag_merged" {
		t.Fatalf("last fragment first: %s", o.reason)
	}
	if o := s.one(raV4(17, 5, 0, true, 60, raUDPHdr(1, 53, 0))); o.reason != "drop:frag_inconsistent" {
		t.Errorf("IPv4 first fragment of 60-byte header after a last ending at 65512: %s, want drop:frag_inconsistent", o.reason)
	}
	// The same with a zero-length last fragment.
	s = newSFRig(t, raYAML(", mode: full, max_bytes: 65535"))
	s.one(raV4(17, 5, 65512, false, 20, nil))
	if o := s.one(raV4(17, 5, 0, true, 60, raUDPHdr(1, 53, 0))); o.reason != "drop:frag_inconsistent" {
		t.Errorf("IPv4 first fragment of 60-byte header after an empty last at 65512: %s, want drop:frag_inconsistent", o.reason)
	}
	// The largest legal one still passes: 20 + 65515.
	s = newSFRig(t, raYAML(""))
	s.one(raV4(17, 6, 0, true, 20, raUDPHdr(1, 53, 0)))
	if o := s.one(raV4(17, 6, 65512, false, 20, make([]byte, 3))); o.reason != "tx:out" {
		t.Errorf("IPv4 datagram of 65535 bytes: %s, want tx:out", o.reason)
	}
	// IPv6 with 8 bytes of hop-by-hop before the fragment header: 8 + 65532.
	s = newSFRig(t, raYAML(""))
	s.one(raV6(protoHopByHop, cat(raOpts(protoFragment, 1), raFH(17, 0, true, 5), raUDPHdr(1, 53, 0))))
	if o := s.one(raV6(protoHopByHop, cat(raOpts(protoFragment, 1), raFH(17, 65520, false, 5), make([]byte, 12)))); o.reason != "drop:frag_inconsistent" {
		t.Errorf("IPv6 payload length 65540: %s, want drop:frag_inconsistent", o.reason)
	}
	s = newSFRig(t, raYAML(""))
	s.one(raV6(protoHopByHop, cat(raOpts(protoFragment, 1), raFH(17, 0, true, 5), raUDPHdr(1, 53, 0))))
	if o := s.one(raV6(protoHopByHop, cat(raOpts(protoFragment, 1), raFH(17, 65520, false, 5), make([]byte, 7)))); o.reason != "tx:out" {
		t.Errorf("IPv6 payload length 65535: %s, want tx:out", o.reason)
	}
}

// TestRAAttackZeroLengthAndEnds: zero-length fragments, two ends, a
// fragment past the end, offsets not a multiple of 8 with MF.
func TestRAAttackZeroLengthAndEnds(t *testing.T) {
	raModes(t, func(t *testing.T, opts string) {
		first := raV4(17, 1, 0, true, 20, raUDPHdr(1, 53, 96)) // [0,104)
		cases := []struct {
			name string
			pkts [][]byte
			want []string
		}{
			{"zero-length middle", [][]byte{first, raV4(17, 1, 104, true, 20, nil)}, []string{"", "drop:frag_inconsistent"}},
			{"zero-length last completes", [][]byte{first, raV4(17, 1, 104, false, 20, nil)}, []string{"", "*"}},
			{"zero-length last inside", [][]byte{first, raV4(17, 1, 96, false, 20, nil)}, []string{"", "drop:frag_inconsistent"}},
			{"two ends", [][]byte{first, raV4(17, 1, 200, false, 20, make([]byte, 8)), raV4(17, 1, 208, false, 20, make([]byte, 8))}, []string{"", "", "drop:frag_inconsistent"}},
			{"past the end", [][]byte{first, raV4(17, 1, 200, false, 20, make([]byte, 8)), raV4(17, 1, 208, true, 20, make([]byte, 8))}, []string{"", "", "drop:frag_inconsistent"}},
			{"odd non-last", [][]byte{first, raV4(17, 1, 104, true, 20, make([]byte, 12))}, []string{"", "drop:frag_inconsistent"}},
			{"end before data", [][]byte{first, raV4(17, 1, 200, true, 20, make([]byte, 8)), raV4(17, 1, 160, false, 20, make([]byte, 8))}, []string{"", "", "drop:frag_inconsistent"}},
			{"over 65535", [][]byte{first, raV4(17, 1, 65528, false, 20, make([]byte, 16))}, []string{"", "drop:frag_inconsistent"}},
		}
		for _, c := range cases {
			s := newSFRig(t, raYAML(opts))
			for k, p := range c.pkts {
				o := s.one(p)
				if c.want[k] == "*" && o.reason != "tx:out" && o.reason != "drop:frag_merged" || c.want[k] != "" && c.want[k] != "*" && o.reason != c.want[k] {
					t.Errorf("%s: packet %d: %s, want %s", c.name, k, o.reason, c.want[k])
				}
			}
		}
	})
}

// TestRAAttackDuplicateAtMax: an exact duplicate is dropped alone, even
// when the datagram holds max_fragments fragments already.
func TestRAAttackDuplicateAtMax(t *testing.T) {
	raModes(t, func(t *testing.T, opts string) {
		s := newSFRig(t, raYAML(opts+", max_fragments: 3"))
		fr := fragV4(t, sfUDP(t, cli, srv, 4000, 53, 300), 104, 104) // 104+104+100
		if len(fr) != 3 {
			t.Fatalf("%d fragments", len(fr))
		}
		s.one(fr[0])
		s.one(fr[1])
		if o := s.one(fr[1]); o.reason != "drop:frag_overlap" {
			t.Errorf("duplicate of the second (2 of 3 held): %s, want drop:frag_overlap", o.reason)
		}
		if o := s.one(fr[2]); o.reason != "tx:out" {
			t.Errorf("last after a duplicate: %s, want tx:out", o.reason)
		}
		s = newSFRig(t, raYAML(opts+", max_fragments: 2"))
		fr = fragV4(t, sfUDP(t, cli, srv, 4000, 53, 300), 104, 104)
		s.one(fr[0])
		s.one(fr[1])
		if o := s.one(fr[1]); o.reason != "drop:frag_overlap" {
			t.Errorf("duplicate with max_fragments held: %s, want drop:frag_overlap (dropped alone)", o.reason)
		}
		if o := s.one(fr[2]); o.reason != "drop:frag_too_many" {
			t.Errorf("third of max 2: %s, want drop:frag_too_many", o.reason)
		}
	})
}

// TestRAAttackClockLongIdle: the clock is Meta.Time in ms, a uint32 that
// wraps every 49.7 days. After a gap of more than 2^31 ms (24.9 days)
// without fragments, the stage must still see time pass: a datagram left
// incomplete before the gap is long expired, and a new datagram with its
// key (the IPv4 ID wraps at 65536) must not be taken for it.
func TestRAAttackClockLongIdle(t *testing.T) {
	raModes(t, func(t *testing.T, opts string) {
		s := newSFRig(t, raYAML(opts))
		old := fragV4(t, sfUDP(t, cli, srv, 4000, 53, 300), 104, 104)
		s.one(old[0]) // never completed
		s.advance(30 * 86400 * 1000)
		fresh := fragV4(t, sfUDP(t, cli, srv, 4001, 53, 300), 104, 104)
		o := s.one(fresh[0])
		if want := map[string]string{"": "tx:out", ", mode: full": "drop:frag_merged"}[opts]; o.reason != want {
			t.Errorf("after 30 idle days, a new datagram's first fragment: %s, want %s", o.reason, want)
		}
		s.one(fresh[1])
		o = s.one(fresh[2])
		if o.reason != "tx:out" || opts == "" && o.m.SrcPort != 4001 {
			t.Errorf("after 30 idle days, the last fragment: %s ports %d", o.reason, o.m.SrcPort)
		}
	})
}

// TestRAAttackClockSteadyWrap: the same with fragments flowing all along
// (one datagram an hour): the datagram left incomplete must not come
// back to life when its age passes 2^31 ms.
func TestRAAttackClockSteadyWrap(t *testing.T) {
	s := newSFRig(t, raYAML(""))
	old := fragV4(t, sfUDP(t, cli, srv, 4000, 53, 300), 104, 104)
	s.one(old[0])
	other := fragV4(t, sfUDP(t, "10.9.9.9", srv, 1, 2, 300), 104, 104)
	for range 26 * 24 {
		s.advance(3600 * 1000)
		s.send(other...)
	}
	fresh := fragV4(t, sfUDP(t, cli, srv, 4001, 53, 300), 104, 104)
	for k, f := range fresh {
		if o := s.one(f); o.reason != "tx:out" || o.m.SrcPort != 4001 {
			t.Errorf("after 26 days, fragment %d of a datagram with an old one's key: %s ports %d", k, o.reason, o.m.SrcPort)
		}
	}
}

// TestRAAttackClockBackwards: time that goes back a little (packets of
// one vector out of order, a short replay loop) keeps the clock; a
// datagram is not cut short.
func TestRAAttackClockBackwards(t *testing.T) {
	s := newSFRig(t, raYAML(", timeout: 5"))
	fr := fragV4(t, sfUDP(t, cli, srv, 4000, 53, 300), 104, 104)
	s.one(fr[0])
	s.now -= 2000
	s.one(fr[1])
	s.now += 4000
	if o := s.one(fr[2]); o.reason != "tx:out" || o.m.SrcPort != 4000 {
		t.Errorf("after time went back 2 s: %s", o.reason)
	}
	st := s.stage("defrag").(*raStage)
	if stCounter(st, "datagrams") != 1 {
		t.Errorf("datagrams %d", stCounter(st, "datagrams"))
	}
}

// raOldHash is the datagram hash as an attacker reads it in the source
// when the seed was the constant ctSeed.
func raOldHash(k *raKey) uint32 {
	h := uint64(ctSeed) ^ uint64(k.id)<<8 ^ uint64(k.proto)
	h = balanceMix(h, binary.LittleEndian.Uint64(k.src[0:8]))
	h = balanceMix(h, binary.LittleEndian.Uint64(k.dst[0:8]))
	return balanceFinal(h)
}

// TestRAAttackHashFlood: an attacker who knows the hash picks (spoofed
// source, ID) pairs whose index home is one small range and fills the
// table with their first fragments: every lookup then walks one long
// cluster. The index must not be predictable from the source.
func TestRAAttackHashFlood(t *testing.T) {
	s := newSFRig(t, raYAML(", max_datagrams: 4096"))
	const want = 1500
	slots := uint64(2*4096 + 1)
	var pkts [][]byte
	var k raKey
	k.proto = 17
	copy(k.dst[:4], []byte{198, 51, 100, 7})
	for a := 0; len(pkts) < want; a++ {
		src := [4]byte{10, byte(a >> 16), byte(a >> 8), byte(a)}
		clear(k.src[:])
		copy(k.src[:4], src[:])
		for id := range 64 {
			k.id = uint32(id)
			if probeHome(raOldHash(&k), slots) < 8 {
				pkts = append(pkts, raV4From(src, 17, uint16(id), 0, true, 20, raUDPHdr(1, 53, 0)))
			}
		}
	}
	for len(pkts) > 0 {
		n := min(len(pkts), 200)
		for _, o := range s.send(pkts[:n]...) {
			if o.reason != "tx:out" {
				t.Fatalf("first fragment: %s", o.reason)
			}
		}
		pkts = pkts[n:]
	}
	st := s.stage("defrag").(*raStage)
	run, longest := 0, 0
	for i := range 2 * len(st.idx) {
		if st.idx[i%len(st.idx)] != 0 {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	if longest > 100 {
		t.Errorf("%d chosen datagrams: longest probe cluster %d slots of %d", want, longest, len(st.idx))
	}
}

// TestRAAttackTableBound: many concurrent incomplete datagrams: the table
// stays at max_datagrams, each one over it evicts one (counted), and no
// fragment is lost without a drop reason.
func TestRAAttackTableBound(t *testing.T) {
	raModes(t, func(t *testing.T, opts string) {
		s := newSFRig(t, raYAML(opts+", max_datagrams: 64"))
		sent, fwd, merged := 0, 0, 0
		for batch := range 10 {
			var pkts [][]byte
			for j := range 100 {
				a := batch*100 + j
				pkts = append(pkts, raV4From([4]byte{10, 1, byte(a >> 8), byte(a)}, 17, uint16(a), 0, true, 20, raUDPHdr(1, 53, 0)))
			}
			for _, o := range s.send(pkts...) {
				sent++
				switch o.reason {
				case "tx:out":
					fwd++
				case "drop:frag_merged":
					merged++
				default:
					t.Fatalf("%s", o.reason)
				}
			}
			s.advance(1)
		}
		st := s.stage("defrag").(*raStage)
		if len(st.free) != 0 || stCounter(st, "evictions") != uint64(sent-64) || stCounter(st, "fragments") != uint64(sent) {
			t.Errorf("free %d evictions %d fragments %d of %d sent", len(st.free), stCounter(st, "evictions"), stCounter(st, "fragments"), sent)
		}
		if len(st.recs) != 64 {
			t.Errorf("%d records", len(st.recs))
		}
	})
}

// TestRAAttackShallowVirtualProto: in shallow mode a later IPv6 fragment
// whose fragment header names a destination options header gets its
// datagram's ports, and its upper-layer protocol with them, so that
// conntrack finds the first fragment's flow.
func TestRAAttackShallowVirtualProto(t *testing.T) {
	s := newSFRig(t, raYAML(""))
	body := cat(raOpts(17, 1), raUDPHdr(4000, 53, 100)) // 8 + 108
	first := raV6(protoFragment, cat(raFH(60, 0, true, 3), body[:64]))
	second := raV6(protoFragment, cat(raFH(60, 64, false, 3), body[64:]))
	o1 := s.one(first)
	o2 := s.one(second)
	if o1.reason != "tx:out" || o2.reason != "tx:out" {
		t.Fatalf("%s, %s", o1.reason, o2.reason)
	}
	if o2.m.SrcPort != 4000 || o2.m.DstPort != 53 || o2.m.Flags&rings.FlagVirtualL4 == 0 {
		t.Fatalf("later fragment: ports %d > %d flags %#x", o2.m.SrcPort, o2.m.DstPort, o2.m.Flags)
	}
	if o2.m.IPProto != 17 || ctClass(o2.m.CT) != "new" {
		t.Errorf("later fragment: protocol %d class %s, want 17 and the first's flow (new)", o2.m.IPProto, ctClass(o2.m.CT))
	}
}

// TestRAAttackNoPanic runs random mutations of fragments through both
// modes (a quick deterministic fuzz; FuzzReassemble is the open-ended
// one).
func TestRAAttackNoPanic(t *testing.T) {
	seeds := raFuzzSeeds(t)
	raModes(t, func(t *testing.T, opts string) {
		s := newSFRig(t, raYAML(opts+", max_datagrams: 16, max_fragments: 4"))
		x := uint64(1)
		for round := range 3000 {
			p := append([]byte(nil), seeds[round%len(seeds)]...)
			for range 1 + round%4 {
				x = x*6364136223846793005 + 1442695040888963407
				i := int(x>>33) % len(p)
				p[i] ^= byte(x >> 20)
			}
			s.one(p)
			s.advance(uint32(x>>40) % 3000)
		}
	})
}

func raFuzzSeeds(t testing.TB) [][]byte {
	var out [][]byte
	out = append(out, fragV4(t, sfUDP(t, cli, srv, 4000, 53, 300), 104, 104)...)
	out = append(out, fragV6(t, sfUDP(t, "2001:db8::1", "2001:db8::2", 4000, 53, 300), 77, 104, 104)...)
	out = append(out, raV6(protoHopByHop, cat(raOpts(protoFragment, 1), raFH(60, 0, true, 5), raOpts(6, 1), raTCPHdr(1, 2), make([]byte, 4))))
	out = append(out, raV6(protoFragment, cat(raFH(protoFragment, 0, true, 1), raFH(17, 64, false, 2), raUDPHdr(1, 53, 8))))
	out = append(out, raV4(protoAH, 9, 0, true, 24, make([]byte, 16)))
	return out
}

// FuzzReassemble feeds sequences of fragments cut from the input through
// both modes: nothing may panic, and every packet ends with a verdict.
func FuzzReassemble(f *testing.F) {
	fixIndexSeed(f)
	for _, p := range raFuzzSeeds(f) {
		f.Add(p, uint8(0))
	}
	rigs := map[string]*sfRig{}
	f.Fuzz(func(t *testing.T, data []byte, knob uint8) {
		if len(data) > 3000 { // a frame holds 4096 less 256 of headroom
			return
		}
		opts := []string{"", ", mode: full"}[knob&1]
		s := rigs[opts]
		if s == nil {
			s = newSFRig(t, raYAML(opts+", max_datagrams: 8, max_fragments: 4, timeout: 1"))
			rigs[opts] = s
		}
		s.t = t
		s.advance(uint32(knob) * 10)
		// The input as one packet, and as the same with its IPv4 or
		// IPv6 fragment fields varied.
		for k := range 3 {
			p := append([]byte(nil), data...)
			if k > 0 && len(p) > 22 {
				p[20] ^= byte(k)
				p[21] ^= byte(knob)
			}
			for _, o := range s.send(p) {
				if o.reason == "" {
					t.Fatalf("no verdict: %s", fmt.Sprintf("%x", p))
				}
			}
		}
	})
}
