package pipelines

import (
	"encoding/binary"
	"math/bits"

	"github.com/warpflow/warpflow/rings"
)

// Reading a packet's tuple and L4 facts for the conntrack stage, from the
// parse stage's metadata and the packet bytes it points at.

// ICMP types with a reply that conntrack tracks as a flow (Linux
// valid_new and invmap), by request type: the reply type, or 0 when the
// type starts no flow. Echo request (8) maps to echo reply (0), which is
// why the table holds reply+1.
var icmp4Pair = func() (p [256]uint8) {
	for _, rr := range [][2]uint8{{8, 0}, {13, 14}, {15, 16}, {17, 18}} {
		p[rr[0]] = rr[1] + 1
	}
	return p
}()

// icmp4Req maps a reply type to its request type + 1.
var icmp4Req = func() (p [256]uint8) {
	for _, rr := range [][2]uint8{{8, 0}, {13, 14}, {15, 16}, {17, 18}} {
		p[rr[1]] = rr[0] + 1
	}
	return p
}()

// ICMPReplyType returns the type of the reply to ICMP (ICMPv6 with v6)
// query type t, and false when t is no query type conntrack tracks: what
// a listing prints for a flow's reply direction, which is keyed by the
// request's type.
func ICMPReplyType(t uint8, v6 bool) (uint8, bool) {
	pair := &icmp4Pair
	if v6 {
		pair = &icmp6Pair
	}
	return pair[t] - 1, pair[t] != 0
}

var icmp6Pair = func() (p [256]uint8) {
	for _, rr := range [][2]uint8{{128, 129}, {139, 140}} {
		p[rr[0]] = rr[1] + 1
	}
	return p
}()

var icmp6Req = func() (p [256]uint8) {
	for _, rr := range [][2]uint8{{128, 129}, {139, 140}} {
		p[rr[1]] = rr[0] + 1
	}
	return p
}()

// icmp4Error reports whether ICMP type t is an error that quotes a packet.
func icmp4Error(t uint8) bool {
	switch t {
	case 3, 4, 5, 11, 12:
		return true
	}
	return false
}

// icmp6Untracked reports whether ICMPv6 type t is one Linux leaves
// untracked (noct_valid_new: MLD and neighbour discovery).
func icmp6Untracked(t uint8) bool {
	switch t {
	case 130, 131, 132, 133, 134, 135, 136, 137, 143:
		return true
	}
	return false
}

// ctIPEnd returns the end offset of the IP packet whose header is at
// l3 (by its length field, clamped to the frame), for payload lengths.
func ctIPEnd(p []byte, l3 int, v6 bool) int {
	var end int
	if v6 {
		if l3+ipv6HdrLen > len(p) {
			return len(p)
		}
		end = l3 + ipv6HdrLen + int(binary.BigEndian.Uint16(p[l3+4:l3+6]))
	} else {
		if l3+ipv4MinHdr > len(p) {
			return len(p)
		}
		end = l3 + int(binary.BigEndian.Uint16(p[l3+2:l3+4])) // [2:4], not [2:]: no pointer masking
	}
	return min(end, len(p))
}

// inetSum adds b to the one's complement sum acc (not folded).
func inetSum(b []byte, acc uint64) uint64 {
	for len(b) >= 8 {
		v := binary.BigEndian.Uint64(b)
		acc += v >> 32
		acc += v & 0xffffffff
		b = b[8:]
	}
	for len(b) >= 2 {
		acc += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint64(b[0]) << 8
	}
	return acc
}

// inetFold folds a sum to 16 bits.
func inetFold(acc uint64) uint16 {
	for acc>>16 != 0 {
		acc = acc&0xffff + acc>>16
	}
	return uint16(acc)
}

// l4ChecksumOK verifies the checksum of the L4 segment p[l4:end] of
// protocol proto, with the pseudo-header of the IP header at l3 (ICMPv4
// has none). A UDP checksum of zero over IPv4 means "none" and passes.
func l4ChecksumOK(p []byte, l3, l4, end int, v6 bool, proto uint8) bool {
	return l4Checksums(p, l3, l4, end, v6, proto, false)
}

// ipv4ChecksumsOK is ipv4HeaderOK(p, l3) && l4ChecksumOK(p, l3, l4, end,
// false, proto) in one call: the tracking of an IPv4 TCP or UDP packet
// that is not a fragment checks both where it checks the L4 checksum
// (ctStage.tcp, udp), instead of the header first in track (a call there
// cost some 25 instructions a packet of registers saved and restored
// around it).
//
// The common packet, an optionless header with its segment right after
// it, of an even length of 8 bytes or more (a TCP segment, a UDP
// datagram), is checked here, without a further call; any other takes
// l4Checksums. Both sums are 64-bit ones' complement sums of
// little-endian words (an add and an add of the carry a word, where the
// 32-bit halves took five instructions): such a sum is the true sum mod
// 2^64-1, which 65535 divides, so it is a multiple of 65535 exactly when
// the true one is (see onesValidLE), and neither is ever zero (the
// header holds its version, the pseudo-header the protocol).
func ipv4ChecksumsOK(p []byte, l3, l4, end int, proto uint8) bool {
	n := end - l4
	if l3 < 0 || l4 != l3+ipv4MinHdr || end > len(p) || n < 8 || n&1 != 0 || p[l3] != 0x45 {
		return l4Checksums(p, l3, l4, end, false, proto, true)
	}
	le := binary.LittleEndian
	h := (*[ipv4MinHdr]byte)(p[l3 : l3+ipv4MinHdr]) // a constant length: no pointer masking
	s, c := bits.Add64(le.Uint64(h[0:8]), le.Uint64(h[8:16]), 0)
	s, c = bits.Add64(s, uint64(le.Uint32(h[16:20])), c)
	if (s+c)%0xffff != 0 { // s+c cannot carry: s < 2^32 when c is 1
		return false
	}
	seg := p[l4:end:end] // a capacity of n, not 0: no pointer masking
	if proto == 17 && seg[6] == 0 && seg[7] == 0 {
		return true // UDP over IPv4 without a checksum
	}
	// The pseudo-header (the addresses as one word) and the segment's
	// whole words from its end, their carries counted apart; then its
	// first n%8 bytes as the top of its first word (an even number of
	// bytes shifted up keeps every byte's place in its 16-bit word).
	if n == tcpMinHdr {
		// A TCP header without options, the most common segment: its
		// five words in one chain of carries, each into the next add,
		// the last added back (end-around), where the loop's counted
		// carries and shifted first word took some 20 instructions more.
		sg := (*[tcpMinHdr]byte)(seg)
		s, c = bits.Add64(le.Uint64(h[12:20]), (tcpMinHdr+uint64(proto))<<8, 0)
		s, c = bits.Add64(s, le.Uint64(sg[0:8]), c)
		s, c = bits.Add64(s, le.Uint64(sg[8:16]), c)
		s, c = bits.Add64(s, uint64(le.Uint32(sg[16:20])), c)
		return (s+c)%0xffff == 0 // s+c cannot carry: when the last add carries, s is below its 32-bit word + 1
	}
	s, c = bits.Add64(le.Uint64(h[12:20]), (uint64(n)+uint64(proto))<<8, 0)
	carries := c
	i := len(seg)
	for ; i >= 8; i -= 8 {
		s, c = bits.Add64(s, le.Uint64(seg[i-8:i]), 0)
		carries += c
	}
	if i != 0 {
		s, c = bits.Add64(s, le.Uint64(seg[0:8])<<(uint(64-8*i)&63), 0) // i is 2, 4 or 6
		carries += c
	}
	s, c = bits.Add64(s, carries, 0)
	return (s+c)%0xffff == 0
}

// l4Checksums is l4ChecksumOK, and with hdr the IPv4 header's checksum
// too (ipv4ChecksumsOK).
func l4Checksums(p []byte, l3, l4, end int, v6 bool, proto uint8, hdr bool) bool {
	if hdr {
		if l3 >= 0 && l3 <= len(p)-ipv4MinHdr && p[l3] == 0x45 {
			if !ipv4Header20OK((*[ipv4MinHdr]byte)(p[l3 : l3+ipv4MinHdr])) {
				return false
			}
		} else if !ipv4HeaderOKGeneral(p, l3) {
			return false
		}
	}
	if l4 > end || end > len(p) {
		return false
	}
	seg := p[l4:end]
	var acc uint64
	switch {
	case proto == 1: // ICMP: no pseudo-header
	case v6:
		acc = inetSum(p[l3+8:l3+40], 0)
		acc += uint64(len(seg)) + uint64(proto)
	default:
		if proto == 17 && len(seg) >= 8 && binary.BigEndian.Uint16(seg[6:]) == 0 {
			return true
		}
		if n := len(seg); n <= 64 && l3+20 <= len(p) {
			// The common small segment (a TCP header, options or not,
			// a short UDP datagram): little-endian words, no
			// byte swaps, one fixed-cost test.
			a := binary.LittleEndian.Uint64(p[l3+12:]) // the addresses
			acc = a&0xffffffff + a>>32 + (uint64(n)+uint64(proto))<<8
			// The segment's little-endian words: eight bytes a step as
			// two 32-bit halves, then a 4-, 2- and 1-byte tail, each at
			// an even offset, so every byte keeps its place in its word.
			// Indexes, not reslices (a reslice costs the pointer masking
			// of a slice that may end empty: six of a step's 13
			// instructions), and here rather than in a function of its
			// own, which would be too big to inline.
			i := 0
			for ; i <= n-8; i += 8 {
				w := binary.LittleEndian.Uint64(seg[i : i+8])
				acc += w&0xffffffff + w>>32
			}
			if i <= n-4 {
				acc += uint64(binary.LittleEndian.Uint32(seg[i : i+4]))
				i += 4
			}
			if i <= n-2 {
				acc += uint64(binary.LittleEndian.Uint16(seg[i : i+2]))
				i += 2
			}
			if i < n {
				acc += uint64(seg[i])
			}
			return onesValidLE(acc)
		}
		acc = inetSum(p[l3+12:l3+20], 0)
		acc += uint64(len(seg)) + uint64(proto)
	}
	acc = inetSum(seg, acc)
	return inetFold(acc) == 0xffff
}

// ipv4HeaderOK verifies an IPv4 header checksum. The common header, 20
// bytes without options, is checked here in a leaf (ipv4Header20OK); any
// other takes ipv4HeaderOKGeneral.
func ipv4HeaderOK(p []byte, l3 int) bool {
	if l3 >= 0 && l3 <= len(p)-ipv4MinHdr && p[l3] == 0x45 {
		return ipv4Header20OK((*[ipv4MinHdr]byte)(p[l3 : l3+ipv4MinHdr]))
	}
	return ipv4HeaderOKGeneral(p, l3)
}

// ipv4Header20OK verifies the checksum of an IPv4 header without options.
func ipv4Header20OK(h *[ipv4MinHdr]byte) bool {
	a, b := binary.LittleEndian.Uint64(h[0:8]), binary.LittleEndian.Uint64(h[8:16])
	return onesValidLE(a&0xffffffff + a>>32 + b&0xffffffff + b>>32 + uint64(binary.LittleEndian.Uint32(h[16:20])))
}

// ipv4HeaderOKGeneral verifies any IPv4 header's checksum.
func ipv4HeaderOKGeneral(p []byte, l3 int) bool {
	if l3 < 0 || l3+ipv4MinHdr > len(p) {
		return false
	}
	ihl := int(p[l3]&0x0f) * 4
	if ihl < ipv4MinHdr || l3+ihl > len(p) {
		return false
	}
	return inetFold(inetSum(p[l3:l3+ihl], 0)) == 0xffff
}

// The fast checksum paths sum little-endian words where inetSum sums
// big-endian ones. In ones' complement arithmetic (mod 65535, where
// 2^16 and 2^32 are 1) a little-endian word's value is 256 times its
// big-endian one, so a little-endian sum is 256 times the big-endian
// sum: it is 0 mod 65535 exactly when that one is, and it is zero
// exactly when every byte is, so "folds to 0xffff" (a valid checksum)
// is the same test in both orders. A big-endian number added to such a
// sum (the pseudo-header's length and protocol) goes in times 256: << 8.

// onesValidLE reports whether a ones' complement sum (unfolded, of
// fewer than 2^40 words) folds to 0xffff, the mark of a valid checksum:
// a fold keeps the value mod 65535 and leaves zero only for zero, so it
// is 0xffff exactly when the sum is a nonzero multiple of 65535 (one
// multiplication, where the fold's four steps are a dozen instructions).
func onesValidLE(s uint64) bool { return s != 0 && s%0xffff == 0 }

// ctAddrs fills k's addresses and family from m.
func ctAddrs(m *rings.Meta, k *ctTuple) {
	k.v6 = m.Flags&rings.FlagIPv6 != 0
	k.src, k.dst = m.SrcIP, m.DstIP
	if !k.v6 {
		clear(k.src[4:])
		clear(k.dst[4:])
	}
}

// icmpKey sets k's ports for an ICMP(v6) query or reply of type t, code c
// and identifier id, as ctEntry stores them: a request is (sport id,
// dport type<<8|code); a reply is written as its request reversed
// (sport reqType<<8|code, dport id), so that it matches the reply
// direction of the request's entry. isReply says which form it is; ok is
// false for a type that is neither.
func icmpKey(t, c uint8, id uint16, v6 bool, k *ctTuple) (isReply, ok bool) {
	pair, req := &icmp4Pair, &icmp4Req
	if v6 {
		pair, req = &icmp6Pair, &icmp6Req
	}
	if pair[t] != 0 {
		k.sport, k.dport = id, uint16(t)<<8|uint16(c)
		return false, true
	}
	if r := req[t]; r != 0 {
		k.sport, k.dport = uint16(r-1)<<8|uint16(c), id
		return true, true
	}
	return false, false
}

// ctInner reads the packet an ICMP error quotes (its IP header at o,
// bounded by end) into k as that packet's own tuple, and reports whether
// it could. wantDir is -1, or the direction the tuple must have in its
// entry (an ICMP query quoted is in request or reply form).
func ctInner(p []byte, o, end int, v6 bool, k *ctTuple) (wantDir int8, ok bool) {
	wantDir = -1
	var proto uint8
	var l4 int
	if v6 {
		if o+ipv6HdrLen > end || p[o]>>4 != 6 {
			return wantDir, false
		}
		k.src, k.dst = [16]byte(p[o+8:o+24]), [16]byte(p[o+24:o+40])
		lo, nh, frag, c := walkIPv6Ext(p, o+ipv6HdrLen, end, p[o+6])
		if c != rings.ClassOK || frag == fragNonFirst {
			return wantDir, false
		}
		proto, l4 = nh, lo
	} else {
		if o+ipv4MinHdr > end || p[o]>>4 != 4 {
			return wantDir, false
		}
		ihl := int(p[o]&0x0f) * 4
		if ihl < ipv4MinHdr || o+ihl > end {
			return wantDir, false
		}
		if binary.BigEndian.Uint16(p[o+6:])&0x1fff != 0 {
			return wantDir, false // a later fragment quoted: no ports
		}
		k.src, k.dst = [16]byte{}, [16]byte{}
		copy(k.src[:4], p[o+12:o+16])
		copy(k.dst[:4], p[o+16:o+20])
		proto, l4 = p[o+9], o+ihl
	}
	k.v6, k.proto = v6, proto
	k.sport, k.dport = 0, 0
	switch proto {
	case 6, 17, 132, 33, 136: // TCP, UDP, SCTP, DCCP, UDP-Lite: ports in the first 4 bytes
		if l4+4 > end {
			return wantDir, false
		}
		k.sport, k.dport = binary.BigEndian.Uint16(p[l4:]), binary.BigEndian.Uint16(p[l4+2:])
	case 1, 58:
		if (proto == 1) == v6 || l4+8 > end {
			return wantDir, false
		}
		isReply, good := icmpKey(p[l4], p[l4+1], binary.BigEndian.Uint16(p[l4+4:]), v6, k)
		if !good {
			return wantDir, false // an error about an error (or an untracked type)
		}
		wantDir = 0
		if isReply {
			wantDir = 1
		}
	}
	return wantDir, true
}

// invert swaps k's direction in place.
func (k *ctTuple) invert() {
	k.src, k.dst = k.dst, k.src
	k.sport, k.dport = k.dport, k.sport
}
