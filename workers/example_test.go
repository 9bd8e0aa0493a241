package workers_test

import (
	"fmt"
	"runtime"

	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/workers"
)

// dropOdd is a Kernel: it drops packets with an odd length, passes the rest.
type dropOdd struct{}

func (dropOdd) Process(b *rings.Batch) {
	for i, d := range b.Descs {
		if d.Len%2 == 1 {
			b.Meta[i].Verdict = rings.VerdictDrop
		} else {
			b.Meta[i].Verdict = rings.VerdictPass
		}
	}
}

func Example() {
	arena, err := rings.NewArena(rings.ArenaOptions{Frames: 64, FrameSize: 2048})
	if err != nil {
		panic(err)
	}
	o := workers.DefaultOptions()
	o.Workers = 2
	o.NewBatch = func() *rings.Batch { return rings.NewBatch(4, arena) }
	pool, err := workers.NewPool(o, []workers.Kernel{dropOdd{}, dropOdd{}})
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	// One goroutine produces and consumes: fill batches, submit them, and
	// collect results in submission order whichever worker ran them.
	lens := []uint32{60, 61, 1500, 9, 64, 128, 77}
	next, printed := 0, 0
	for printed < len(lens) {
		if next < len(lens) {
			if b, ok := pool.Acquire(); ok {
				for b.Len() < b.Cap() && next < len(lens) {
					addr, _ := arena.Alloc()
					b.SetLen(b.Len() + 1)
					b.Descs[b.Len()-1] = rings.Desc{Addr: addr, Len: lens[next]}
					b.Meta[b.Len()-1] = rings.Meta{Seq: uint64(next)}
					next++
				}
				pool.Submit()
			}
		}
		if b, ok := pool.Completed(); ok {
			for i, d := range b.Descs {
				fmt.Printf("seq %d len %d drop=%v\n", b.Meta[i].Seq, d.Len, b.Meta[i].Verdict == rings.VerdictDrop)
				arena.Free(d.Addr)
				printed++
			}
			pool.Release()
			continue
		}
		runtime.Gosched()
	}
	// Output:
	// seq 0 len 60 drop=false
	// seq 1 len 61 drop=true
	// seq 2 len 1500 drop=false
	// seq 3 len 9 drop=true
	// seq 4 len 64 drop=false
	// seq 5 len 128 drop=false
	// seq 6 len 77 drop=true
}
