package afxdp

import (
	"math/rand/v2"
	"testing"
)

// TestChainSplit: the frames of a ring pair, between the consumer index
// the engine published (lo) and the producer index it published (hi),
// split at the kernel's two indices read afterwards, are never negative
// and always sum to hi - lo, whatever the kernel did since the
// publication (took frames produced after it, so that its indices passed
// hi) and wherever the 32-bit indices wrap. A plain difference of the
// indices read at different times is what read 4294967283 frames in
// kernel_tx under load.
func TestChainSplit(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	const size = 2048
	for i := range 1_000_000 {
		// lo near a wrap half the time; the chain holds at most size.
		lo := rnd.Uint32()
		if i%2 == 0 {
			lo = -uint32(rnd.IntN(3 * size))
		}
		span := uint32(rnd.IntN(size + 1))
		hi := lo + span
		// The kernel's indices as read: a (downstream) first, then b;
		// each grows, b >= a at any one instant, and each may have run
		// past hi by what the engine produced after publishing.
		a := lo + uint32(rnd.IntN(int(span)+size/2+1))
		b := a + uint32(rnd.IntN(int(hi-lo)+size/2+1))
		first, mid, last := chain(lo, a, b, hi)
		if first < 0 || mid < 0 || last < 0 || first+mid+last != int(span) || first > size || mid > size || last > size {
			t.Fatalf("chain(lo %d, a %d, b %d, hi %d) = %d %d %d: want three counts from 0 summing to %d", lo, a, b, hi, first, mid, last, span)
		}
		// While the kernel's indices are within the chain, the split is
		// exactly theirs.
		if a-lo <= span && b-lo <= span && (first != int(a-lo) || mid != int(b-a) || last != int(hi-b)) {
			t.Fatalf("chain(lo %d, a %d, b %d, hi %d) = %d %d %d: want %d %d %d", lo, a, b, hi, first, mid, last, a-lo, b-a, hi-b)
		}
	}
}
