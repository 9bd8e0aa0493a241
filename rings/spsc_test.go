package rings

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warpflow/warpflow/internal/allocs"
)

func newTestSPSC(t testing.TB, capacity int) *SPSC {
	t.Helper()
	r, err := NewSPSC(capacity)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRingCapacityValidation(t *testing.T) {
	for _, c := range []struct {
		cap int
		ok  bool
	}{{2, true}, {64, true}, {MaxRingCap, false /* too big to allocate in a test; checked below */}, {0, false}, {1, false}, {3, false}, {100, false}, {-8, false}, {MaxRingCap * 2, false}} {
		if c.cap == MaxRingCap {
			if err := checkRingCap(c.cap); err != nil {
				t.Errorf("checkRingCap(MaxRingCap) = %v", err)
			}
			continue
		}
		_, err1 := NewSPSC(c.cap)
		_, err2 := NewMPMC(c.cap)
		for _, err := range []error{err1, err2} {
			if (err == nil) != c.ok {
				t.Errorf("capacity %d: err = %v, want ok=%v", c.cap, err, c.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "ring capacity") {
				t.Errorf("capacity %d: error %q does not name the field", c.cap, err)
			}
		}
	}
}

// TestSPSCSteps drives one ring through a script of producer and consumer
// steps, checking counts, indices and contents against a model queue.
func TestSPSCSteps(t *testing.T) {
	type step struct {
		op   string // reserve, submit, cancelr, peek, release, cancelp
		n    int
		want int // got for reserve/peek; ring Len after submit/release
	}
	tests := []struct {
		name  string
		cap   int
		steps []step
	}{
		{"fill and drain", 4, []step{
			{"reserve", 4, 4}, {"submit", 4, 4}, {"reserve", 1, 0},
			{"peek", 8, 4}, {"release", 4, 0}, {"peek", 1, 0},
		}},
		{"partial reserve when nearly full", 4, []step{
			{"reserve", 3, 3}, {"submit", 3, 3}, {"reserve", 5, 1}, {"submit", 1, 4},
			{"peek", 2, 2}, {"release", 2, 2}, {"reserve", 4, 2}, {"submit", 2, 4},
		}},
		{"peek is invisible until submit", 8, []step{
			{"reserve", 5, 5}, {"peek", 5, 0}, {"submit", 2, 2}, {"peek", 5, 2},
			{"submit", 3, 5}, {"peek", 5, 3}, {"release", 5, 0},
		}},
		{"reserved space is invisible until release", 4, []step{
			{"reserve", 4, 4}, {"submit", 4, 4}, {"peek", 4, 4}, {"reserve", 1, 0},
			{"release", 1, 3}, {"reserve", 4, 1},
		}},
		{"submit and release clamp", 4, []step{
			{"reserve", 2, 2}, {"submit", 9, 2}, {"peek", 4, 2}, {"release", 9, 0}, {"release", 1, 0},
			{"reserve", 4, 4},
		}},
		{"cancel reserve and peek", 8, []step{
			{"reserve", 6, 6}, {"cancelr", 2, 0}, {"submit", 9, 4}, {"peek", 3, 3},
			{"cancelp", 1, 0}, {"release", 9, 2}, {"peek", 8, 2}, {"release", 2, 0},
		}},
		{"zero and negative counts", 4, []step{
			{"reserve", 0, 0}, {"reserve", -3, 0}, {"peek", -1, 0}, {"submit", -1, 0},
			{"reserve", 1, 1}, {"submit", 1, 1}, {"release", -1, 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestSPSC(t, tt.cap)
			var (
				model        []uint64 // submitted, not yet peeked
				reserved     []uint32 // indices reserved, not submitted
				peeked       int      // peeked, not released
				nextVal      uint64
				prodI, consI uint32
			)
			for i, s := range tt.steps {
				switch s.op {
				case "reserve":
					idx, got := r.Reserve(s.n)
					if got != s.want || idx != prodI {
						t.Fatalf("step %d: Reserve(%d) = %d,%d; want %d,%d", i, s.n, idx, got, prodI, s.want)
					}
					for j := range got {
						r.At(idx + uint32(j)).Addr = nextVal
						reserved = append(reserved, idx+uint32(j))
						nextVal++
					}
					prodI += uint32(got)
				case "cancelr":
					k := min(s.n, len(reserved))
					reserved = reserved[:len(reserved)-k]
					prodI -= uint32(k)
					nextVal -= uint64(k)
					r.CancelReserve(s.n)
				case "submit":
					k := min(max(s.n, 0), len(reserved))
					for _, idx := range reserved[:k] {
						model = append(model, r.At(idx).Addr)
					}
					reserved = reserved[k:]
					r.Submit(s.n)
					if r.Len() != s.want {
						t.Fatalf("step %d: Len after Submit = %d, want %d", i, r.Len(), s.want)
					}
				case "peek":
					idx, got := r.Peek(s.n)
					if got != s.want || idx != consI {
						t.Fatalf("step %d: Peek(%d) = %d,%d; want %d,%d", i, s.n, idx, got, consI, s.want)
					}
					for j := range got {
						if v := r.At(idx + uint32(j)).Addr; v != model[j] {
							t.Fatalf("step %d: slot %d holds %d, want %d", i, j, v, model[j])
						}
					}
					model = model[got:]
					peeked += got
					consI += uint32(got)
				case "cancelp":
					k := min(s.n, peeked)
					peeked -= k
					consI -= uint32(k)
					// Un-peeked values come back first: rebuild from the ring.
					back := make([]uint64, k)
					for j := range k {
						back[j] = r.At(consI + uint32(j)).Addr
					}
					model = append(back, model...)
					r.CancelPeek(s.n)
				case "release":
					peeked -= min(max(s.n, 0), peeked)
					r.Release(s.n)
					if r.Len() != s.want {
						t.Fatalf("step %d: Len after Release = %d, want %d", i, r.Len(), s.want)
					}
				}
			}
		})
	}
}

func TestSPSCEnqueueDequeueWraps(t *testing.T) {
	r := newTestSPSC(t, 8)
	in := make([]Desc, 5)
	out := make([]Desc, 8)
	var next, want uint64
	for round := range 40 { // many laps, every wrap offset
		for i := range in {
			in[i] = Desc{Addr: next + uint64(i), Len: uint32(round), Options: 7}
		}
		n := r.Enqueue(in)
		next += uint64(n)
		got := r.Dequeue(out[:3+round%6])
		for _, d := range out[:got] {
			if d.Addr != want || d.Options != 7 {
				t.Fatalf("round %d: dequeued %+v, want addr %d", round, d, want)
			}
			want++
		}
	}
	for {
		got := r.Dequeue(out)
		if got == 0 {
			break
		}
		for _, d := range out[:got] {
			if d.Addr != want {
				t.Fatalf("drain: dequeued %d, want %d", d.Addr, want)
			}
			want++
		}
	}
	if want != next {
		t.Fatalf("dequeued %d descriptors, enqueued %d", want, next)
	}
	if r.Enqueue(nil) != 0 || r.Dequeue(nil) != 0 {
		t.Fatal("empty slices moved descriptors")
	}
}

func TestSPSCSlotsWrap(t *testing.T) {
	r := newTestSPSC(t, 8)
	r.Reserve(6)
	r.Submit(6)
	r.Peek(6)
	r.Release(6)
	idx, n := r.Reserve(5) // slots 6,7,0,1,2
	a, b := r.Slots(idx, n)
	if len(a) != 2 || len(b) != 3 || &a[0] != r.At(6) || &b[0] != r.At(8) {
		t.Fatalf("Slots(6,5) = %d+%d slots, want 2+3 starting at 6 and 0", len(a), len(b))
	}
	if cap(a) != 2 {
		t.Fatalf("first view cap %d lets the caller write past the ring end", cap(a))
	}
	a, b = r.Slots(0, 8)
	if len(a) != 8 || len(b) != 0 {
		t.Fatalf("Slots(0,8) = %d+%d", len(a), len(b))
	}
}

// Stress runs are bounded in time as well as count: producers stop once
// stressBudget has passed and they have sent at least stressMin
// descriptors, and the test then checks that exactly what was sent arrived.
// A loaded two-core machine under -race moves fewer descriptors, but still
// enough to mean something.
const (
	stressBudget = 700 * time.Millisecond
	stressMin    = 2000
)

// keepSending reports whether a stress producer that has sent next of total
// descriptors goes on. It reads the clock only every 64th call.
func keepSending(k int, next, total, min uint64, stopAt time.Time) bool {
	return next < total && (next < min || k%64 != 0 || time.Now().Before(stopAt))
}

// TestSPSCStress proves exactly-once, in-order delivery between a producer
// and a consumer goroutine: sequence numbers ride in Desc.Addr, batch sizes
// vary on both sides, and the ring is small so it is often full and empty.
func TestSPSCStress(t *testing.T) {
	checkNoLeak(t)
	total := uint64(200_000)
	if testing.Short() {
		total = 20_000
	}
	for _, capacity := range []int{2, 16, 256} {
		r := newTestSPSC(t, capacity)
		stopAt := time.Now().Add(stressBudget)
		var (
			wg   sync.WaitGroup
			sent atomic.Uint64 // stored once, by the producer, when it stops
			done atomic.Bool   // set after sent
		)
		wg.Add(1)
		go func() { // producer: mixes Reserve/At/Submit and Enqueue
			defer wg.Done()
			var bo backoff
			buf := make([]Desc, 64)
			next := uint64(0)
			for k := 0; keepSending(k, next, total, stressMin, stopAt); k++ {
				want := int(min(uint64(1+k%37), total-next))
				var n int
				if k%2 == 0 {
					var idx uint32
					idx, n = r.Reserve(want)
					for i := range n {
						*r.At(idx + uint32(i)) = Desc{Addr: next + uint64(i), Len: uint32(next+uint64(i)) ^ 0x5a5a}
					}
					r.Submit(n)
				} else {
					for i := range want {
						buf[i] = Desc{Addr: next + uint64(i), Len: uint32(next+uint64(i)) ^ 0x5a5a}
					}
					n = r.Enqueue(buf[:want])
				}
				next += uint64(n)
				if n == 0 {
					bo.wait()
				} else {
					bo.reset()
				}
			}
			sent.Store(next)
			done.Store(true)
		}()
		var bo backoff
		buf := make([]Desc, 64)
		var want uint64
		hardStop := stopAt.Add(10 * time.Second)
		for k := 0; ; k++ {
			if done.Load() && want == sent.Load() {
				break
			}
			if time.Now().After(hardStop) {
				t.Fatalf("cap %d: stuck after %d descriptors (producer done: %v)", capacity, want, done.Load())
			}
			var got int
			if k%2 == 0 {
				var idx uint32
				idx, got = r.Peek(1 + k%41)
				for i := range got {
					d := r.At(idx + uint32(i))
					if d.Addr != want || d.Len != uint32(want)^0x5a5a {
						t.Fatalf("cap %d: got %+v, want seq %d", capacity, *d, want)
					}
					want++
				}
				r.Release(got)
			} else {
				got = r.Dequeue(buf[:1+k%64])
				for _, d := range buf[:got] {
					if d.Addr != want || d.Len != uint32(want)^0x5a5a {
						t.Fatalf("cap %d: got %+v, want seq %d", capacity, d, want)
					}
					want++
				}
			}
			if got == 0 {
				bo.wait()
			} else {
				bo.reset()
			}
		}
		wg.Wait() // not a wait: done was set, so the producer is returning
		if n := r.Dequeue(buf); n != 0 || r.Len() != 0 {
			t.Fatalf("cap %d: %d extra descriptors after the last one", capacity, n)
		}
		t.Logf("cap %d: %d descriptors delivered exactly once, in order", capacity, want)
	}
}

func TestSPSCZeroAllocs(t *testing.T) {
	r := newTestSPSC(t, 256)
	ds := make([]Desc, 64)
	mallocs := allocs.Count(200, func() {
		idx, n := r.Reserve(64)
		for i := range n {
			r.At(idx + uint32(i)).Addr = uint64(i)
		}
		r.Submit(n)
		idx, n = r.Peek(64)
		a, b := r.Slots(idx, n)
		_, _ = a, b
		r.Release(n)
		r.Enqueue(ds)
		r.Dequeue(ds)
	})
	if mallocs != 0 {
		t.Fatalf("SPSC Reserve/Submit/Peek/Release/Enqueue/Dequeue allocated %d times in 200 runs, want 0", mallocs)
	}
}

// TestSPSCIndexWraparound starts the free-running uint32 indices just below
// 2^32 so that reservations, peeks and Len straddle the wrap.
func TestSPSCIndexWraparound(t *testing.T) {
	r := newTestSPSC(t, 16)
	const start = ^uint32(0) - 20
	r.prod.Store(start)
	r.cons.Store(start)
	r.p = side{next: start, pub: start, limit: start + 16}
	r.c = side{next: start, pub: start, limit: start}
	in, out := make([]Desc, 7), make([]Desc, 16)
	var sent, got uint64
	for range 20 { // 140 descriptors: crosses 2^32 once, the ring many times
		for i := range in {
			in[i].Addr = sent + uint64(i)
		}
		sent += uint64(r.Enqueue(in))
		if l := r.Len(); l != int(sent-got) {
			t.Fatalf("Len %d, want %d", l, sent-got)
		}
		n := r.Dequeue(out[:5])
		for _, d := range out[:n] {
			if d.Addr != got {
				t.Fatalf("got %d, want %d", d.Addr, got)
			}
			got++
		}
	}
	if r.c.next >= start || sent < 100 {
		t.Fatalf("indices did not wrap: consumer at %d after %d descriptors", r.c.next, sent)
	}
}
