package pipelines

import "math/bits"

// Incremental Internet checksum update (RFC 1624, equation 3):
//
//	HC' = ~(~HC + ~m + m')
//
// for every 16-bit word m that changes to m'. A stage accumulates the
// ~m + m' terms of all the words it changes with csumWord/csumAddrDelta and
// applies the sum once with csumApply, so rewriting a header costs a few
// adds instead of a pass over the packet. Equation 3 (not equation 2) is the
// form that never produces -0 where a full recompute would not.

// csumWord adds the change of one 16-bit word from old to new to acc.
func csumWord(acc uint32, old, new uint16) uint32 {
	return acc + 0xffff - uint32(old) + uint32(new) // ^old is 0xffff-old
}

// csumAddrDelta returns the change of an IPv4 address from old (read as a
// big-endian uint32) to the address whose two 16-bit words sum to newSum
// (csumAddrSum): two csumWord terms, with the new address's half summed
// once at build time. The old words' complements, 0xffff-w each, are
// summed as 0x1fffe less their sum (the same number, fewer instructions).
func csumAddrDelta(old uint32, newSum uint32) uint32 {
	return 0x1fffe - (old>>16 + old&0xffff) + newSum
}

// csumAddrSum returns the sum of the two 16-bit words of IPv4 address a.
func csumAddrSum(a [4]byte) uint32 {
	return (uint32(a[0])<<8 | uint32(a[1])) + (uint32(a[2])<<8 | uint32(a[3]))
}

// csumApply returns checksum hc updated by the accumulated changes acc.
// acc must be a sum of fewer than 2^14 csumWord terms (it is: a stage adds
// at most a dozen), so that the sum fits in 32 bits. It is folded to 16
// bits with its end-around carry in one step: the high half of s plus s
// rotated by 16 is the high and low halves' sum with the carry out of the
// low half added back, what folding twice gives.
func csumApply(hc uint16, acc uint32) uint16 {
	s := 0xffff - uint32(hc) + acc // ~hc + acc: so written, the constants of acc's terms fold into one
	return ^uint16((s + bits.RotateLeft32(s, 16)) >> 16)
}
