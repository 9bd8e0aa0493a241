package rings

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/warpflow/warpflow/internal/allocs"
)

// dirty fills every Meta of b's capacity with non-zero values, as a
// worker's pipeline leaves them.
func dirty(b *Batch) {
	m := b.Meta[:cap(b.Meta)]
	for i := range m {
		m[i] = Meta{Seq: 999, InPort: 9, Verdict: VerdictDrop, Target: 3, Hash: 7, SampleMask: 1, TTL: 64}
	}
}

// TestBatchDeferMetaMatchesEager fills a deferring batch and an eager one
// with the same random mix of Append and AppendRun (runs that follow on,
// gaps in the sequence, other input ports, more runs than are deferred,
// shrinking SetLen) over dirty metadata, and checks that after SettleMeta
// the two hold the same descriptors and metadata.
func TestBatchDeferMetaMatchesEager(t *testing.T) {
	a := newTestArena(t, 64, 2048, 256)
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]Desc, 64)
	for i := range src {
		src[i] = Desc{Addr: uint64(i) * 2048, Len: uint32(60 + i)}
	}
	lazy, eager := NewBatch(64, a), NewBatch(64, a)
	lazy.DeferMeta(true)
	for round := range 2000 {
		dirty(lazy)
		dirty(eager)
		lazy.Clear()
		eager.Clear()
		seq := uint64(round) * 1000
		for lazy.Len() < lazy.Cap() && rng.IntN(8) != 0 {
			port := uint16(rng.IntN(2))
			if rng.IntN(4) == 0 {
				seq += uint64(rng.IntN(3)) // a gap, or none
			}
			switch rng.IntN(3) {
			case 0:
				d := src[rng.IntN(len(src))]
				lazy.Append(d, seq, port)
				eager.Append(d, seq, port)
				seq++
			case 1:
				k := rng.IntN(12)
				from := rng.IntN(len(src) - k)
				n1 := lazy.AppendRun(src[from:from+k], seq, port)
				n2 := eager.AppendRun(src[from:from+k], seq, port)
				if n1 != n2 {
					t.Fatalf("round %d: AppendRun %d and %d", round, n1, n2)
				}
				seq += uint64(n1)
			case 2:
				if lazy.Len() > 0 {
					n := rng.IntN(lazy.Len())
					lazy.SetLen(n)
					eager.SetLen(n)
				}
			}
		}
		lazy.SettleMeta()
		if !reflect.DeepEqual(lazy.Descs, eager.Descs) || !reflect.DeepEqual(lazy.Meta, eager.Meta) {
			t.Fatalf("round %d: deferred batch differs from eager one\n%+v\n%+v", round, lazy.Meta, eager.Meta)
		}
	}
}

// TestBatchDeferMetaDefersWrites proves the point of DeferMeta: until
// SettleMeta, appending writes no Meta (the producer's core leaves the
// lines alone), and settling twice changes nothing.
func TestBatchDeferMetaDefersWrites(t *testing.T) {
	a := newTestArena(t, 8, 2048, 256)
	b := NewBatch(8, a)
	b.DeferMeta(true)
	dirty(b)
	b.Clear()
	b.AppendRun([]Desc{{Addr: 0, Len: 60}, {Addr: 2048, Len: 61}}, 10, 1)
	b.Append(Desc{Addr: 4096, Len: 62}, 12, 1)
	if b.Len() != 3 || len(b.Meta) != 3 {
		t.Fatalf("len %d, meta %d, want 3", b.Len(), len(b.Meta))
	}
	if b.Meta[0].Seq != 999 || b.Meta[2].Verdict != VerdictDrop {
		t.Fatalf("metadata written before SettleMeta: %+v", b.Meta[:3])
	}
	b.SettleMeta()
	b.SettleMeta()
	for i, m := range b.Meta {
		if want := (Meta{Seq: 10 + uint64(i), InPort: 1}); m != want {
			t.Fatalf("meta %d = %+v, want %+v", i, m, want)
		}
	}
	// Turning deferral off settles what is pending.
	dirty(b)
	b.Clear()
	b.Append(Desc{Addr: 0, Len: 60}, 5, 0)
	b.DeferMeta(false)
	if m := b.Meta[0]; m != (Meta{Seq: 5}) {
		t.Fatalf("DeferMeta(false) left %+v", m)
	}
}

func TestBatchDeferMetaNoAllocs(t *testing.T) {
	a := newTestArena(t, 64, 2048, 256)
	b := NewBatch(64, a)
	b.DeferMeta(true)
	src := make([]Desc, 64)
	n := allocs.Count(100, func() {
		b.Clear()
		b.AppendRun(src[:40], 0, 0)
		b.Append(src[0], 50, 0)
		b.SettleMeta()
	})
	if n != 0 {
		t.Fatalf("%d allocations in 100 batches, want 0", n)
	}
}
