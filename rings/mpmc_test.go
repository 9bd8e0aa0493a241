package rings

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/internal/testwait"
)

func newTestMPMC(t testing.TB, capacity int) *MPMC {
	t.Helper()
	r, err := NewMPMC(capacity)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func seqDescs(from uint64, n int) []Desc {
	ds := make([]Desc, n)
	for i := range ds {
		ds[i] = Desc{Addr: from + uint64(i), Len: uint32(i), Options: 3}
	}
	return ds
}

func TestMPMCSingleGoroutine(t *testing.T) {
	tests := []struct {
		name string
		cap  int
		ops  []int // >0: enqueue that many; <0: dequeue that many
		want []int // how many each op moved
	}{
		{"fill and drain", 4, []int{4, 1, -8, -1}, []int{4, 0, 4, 0}},
		{"partial enqueue", 4, []int{3, 3, -2, 5}, []int{3, 1, 2, 2}},
		{"partial dequeue", 8, []int{5, -3, -3, -3}, []int{5, 3, 2, 0}},
		{"wrap many laps", 2, []int{2, -1, 1, -2, 2, -2, 1, -1}, []int{2, 1, 1, 2, 2, 2, 1, 1}},
		{"empty slices", 4, []int{0, -0}, []int{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestMPMC(t, tt.cap)
			var next, want uint64
			out := make([]Desc, 16)
			for i, op := range tt.ops {
				var got int
				if op > 0 {
					got = r.Enqueue(seqDescs(next, op))
					next += uint64(got)
				} else {
					got = r.Dequeue(out[:-op])
					for _, d := range out[:got] {
						if d.Addr != want || d.Options != 3 {
							t.Fatalf("op %d: dequeued %+v, want addr %d", i, d, want)
						}
						want++
					}
				}
				if got != tt.want[i] {
					t.Fatalf("op %d (%d): moved %d, want %d", i, op, got, tt.want[i])
				}
				if r.Len() != int(next-want) {
					t.Fatalf("op %d: Len %d, want %d", i, r.Len(), next-want)
				}
			}
		})
	}
}

// TestMPMCStress proves exactly-once delivery with several producers and
// consumers: every value sent is seen once, none is invented, and each
// consumer sees each producer's values in increasing order.
func TestMPMCStress(t *testing.T) {
	checkNoLeak(t)
	const producers, consumers = 4, 3
	perProducer := uint64(40_000)
	if testing.Short() {
		perProducer = 5_000
	}
	for _, capacity := range []int{4, 64, 1024} {
		r := newTestMPMC(t, capacity)
		stopAt := time.Now().Add(stressBudget)
		hardStop := stopAt.Add(10 * time.Second)
		var prodWG, consWG sync.WaitGroup
		sent := make([]uint64, producers) // each written by its producer before prodWG.Done
		for p := range producers {
			prodWG.Add(1)
			go func() {
				defer prodWG.Done()
				var bo backoff
				buf := make([]Desc, 64)
				next := uint64(0)
				for k := 0; keepSending(k, next, perProducer, stressMin/producers, stopAt); k++ {
					m := min(uint64(1+(k*7+p)%64), perProducer-next)
					for i := range m {
						buf[i] = Desc{Addr: uint64(p)<<32 | (next + i), Len: uint32(p)}
					}
					n := r.Enqueue(buf[:m])
					next += uint64(n)
					if n == 0 {
						bo.wait()
					} else {
						bo.reset()
					}
				}
				sent[p] = next
			}()
		}
		seen := make([][]uint64, consumers)
		stop := make(chan struct{})
		for c := range consumers {
			consWG.Add(1)
			go func() {
				defer consWG.Done()
				var bo backoff
				buf := make([]Desc, 64)
				for k := 0; ; k++ {
					n := r.Dequeue(buf[:1+(k*5+c)%64])
					for _, d := range buf[:n] {
						seen[c] = append(seen[c], d.Addr)
					}
					if n > 0 {
						bo.reset()
						continue
					}
					select {
					case <-stop: // producers are done and the ring was drained
						return
					default:
					}
					if time.Now().After(hardStop) {
						return
					}
					bo.wait()
				}
			}()
		}
		// The producers stop on their own once stopAt has passed and each
		// has sent its share of stressMin; a ring that stopped moving
		// would keep them spinning.
		testwait.Group(t, &prodWG, fmt.Sprintf("cap %d: the producers to stop", capacity), 30*time.Second)
		// Producers are done: wait for the consumers to claim what is left.
		for r.Len() > 0 && time.Now().Before(hardStop) {
			time.Sleep(time.Millisecond)
		}
		close(stop)
		testwait.Group(t, &consWG, fmt.Sprintf("cap %d: the consumers to stop after the producers", capacity), 30*time.Second)
		if r.Len() != 0 {
			t.Fatalf("cap %d: stuck with %d descriptors in the ring", capacity, r.Len())
		}

		counts := make([][]uint8, producers)
		for p := range counts {
			counts[p] = make([]uint8, sent[p])
		}
		for c, vals := range seen {
			last := make([]int64, producers)
			for p := range last {
				last[p] = -1
			}
			for _, v := range vals {
				p, i := v>>32, int64(v&0xffffffff)
				if p >= producers || i >= int64(sent[p]) {
					t.Fatalf("cap %d: consumer %d got a value no one sent: %#x", capacity, c, v)
				}
				if i <= last[p] {
					t.Fatalf("cap %d: consumer %d saw producer %d's %d after %d", capacity, c, p, i, last[p])
				}
				last[p] = i
				counts[p][i]++
			}
		}
		total := uint64(0)
		for p := range counts {
			for i, n := range counts[p] {
				if n != 1 {
					t.Fatalf("cap %d: producer %d value %d seen %d times", capacity, p, i, n)
				}
			}
			total += sent[p]
		}
		t.Logf("cap %d: %d descriptors from %d producers to %d consumers, each exactly once", capacity, total, producers, consumers)
	}
}

func TestMPMCZeroAllocs(t *testing.T) {
	r := newTestMPMC(t, 256)
	ds := make([]Desc, 64)
	n := allocs.Count(200, func() {
		r.Enqueue(ds)
		r.Dequeue(ds)
	})
	if n != 0 {
		t.Fatalf("MPMC Enqueue/Dequeue allocated %d times in 200 runs, want 0", n)
	}
}
