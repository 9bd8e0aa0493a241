package workers

import (
	"testing"
	"time"

	"github.com/warpflow/warpflow/rings"
)

// TestPoolSettlesDeferredMeta: a producer that fills its slots with the
// metadata deferred (rings.Batch.DeferMeta) over metadata a kernel dirtied
// on the lap before gets, in the kernel, every packet's Meta zero but for
// its Seq and InPort.
func TestPoolSettlesDeferredMeta(t *testing.T) {
	bad := make(chan string, 1)
	k := kernelFunc(func(b *rings.Batch) {
		for i := range b.Meta {
			if m := b.Meta[i]; m != (rings.Meta{Seq: b.Descs[i].Addr, InPort: 2}) {
				select {
				case bad <- "unsettled meta":
				default:
				}
			}
			// Dirty it for the slot's next lap.
			b.Meta[i] = rings.Meta{Seq: 1 << 40, Verdict: rings.VerdictDrop, Hash: 5}
		}
	})
	p := newTestPool(t, testOptions(t, 2), kernelsOf(2, func(int) Kernel { return k }))
	var ms MetaSettler = p
	if !ms.SettlesMeta() {
		t.Fatal("Pool does not settle deferred metadata")
	}
	seq := uint64(0)
	const wait = 30 * time.Second
	deadline := time.Now().Add(wait)
	for sent, done := 0, 0; done < 500; {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for 500 batches to complete: %d sent, %d completed", wait, sent, done)
		}
		if sent < 500 {
			if b, ok := p.Acquire(); ok {
				b.DeferMeta(true)
				descs := make([]rings.Desc, 0, testBatchCap)
				for range testBatchCap {
					descs = append(descs, rings.Desc{Addr: seq + uint64(len(descs))})
				}
				b.AppendRun(descs[:5], seq, 2)
				seq += 5
				b.Append(rings.Desc{Addr: seq}, seq, 2)
				seq++
				p.Submit()
				sent++
			}
		}
		if _, ok := p.Completed(); ok {
			p.Release()
			done++
		}
	}
	select {
	case msg := <-bad:
		t.Fatal(msg)
	default:
	}
}
