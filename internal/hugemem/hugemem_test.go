package hugemem

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"
)

type entry struct {
	a, b uint64
	c    [4]uint32
}

func TestAllocZeroedAndWritable(t *testing.T) {
	for _, n := range []int{0, 10, 1 << 20} {
		tb := Alloc[entry](n)
		if len(tb.S) != n {
			t.Fatalf("len %d, want %d", len(tb.S), n)
		}
		for i := range tb.S {
			if tb.S[i] != (entry{}) {
				t.Fatalf("element %d not zero", i)
			}
			tb.S[i].a = uint64(i)
		}
		for i := range tb.S {
			if tb.S[i].a != uint64(i) {
				t.Fatal("write lost")
			}
		}
		if n == 1<<20 && runtime.GOOS == "linux" && !tb.Mapped() {
			t.Fatal("a 32 MiB table was not mapped")
		}
	}
	runtime.GC() // the cleanups of the dropped tables run without a fault
}

func TestAllocRefusesPointers(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("a type with a pointer was accepted")
		}
	}()
	Alloc[struct{ p *int }](1 << 20)
}

// TestMappedTableAligned: a mapped table starts at a 2 MiB boundary (mmap
// alone aligns to 4 KiB, so a table's first stretch was in base pages and
// its entries' places in cache lines depended on the mapping), is mapped
// over its whole huge-page span, and the cleanup
// unmaps it once the table is unreachable.
func TestMappedTableAligned(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("mapped tables are Linux only")
	}
	var starts []uintptr
	for _, n := range []int{1<<20 + 3, 3 << 20} {
		tb := Alloc[entry](n)
		if !tb.Mapped() {
			t.Fatalf("%d entries: not mapped", n)
		}
		p := uintptr(unsafe.Pointer(&tb.S[0]))
		if p%hugePage != 0 {
			t.Fatalf("%d entries: table at %#x, not 2 MiB aligned", n, p)
		}
		size := uintptr(n) * unsafe.Sizeof(entry{})
		span := (size + hugePage - 1) &^ (hugePage - 1)
		lo, hi, ok := mappingAt(t, p)
		// (The kernel may merge the mapping with a neighbour of the same
		// flags in /proc/self/maps, so lo may lie below p.)
		if !ok || hi-p < span {
			t.Fatalf("%d entries: /proc/self/maps has %#x-%#x (found %v) for a table at %#x of span %#x", n, lo, hi, ok, p, span)
		}
		tb.S[n-1].a = 1 // the last element is writable
		starts = append(starts, p)
	}
	// Both tables are unreachable now: their cleanups unmap them.
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		left := 0
		for _, p := range starts {
			if _, _, ok := mappingAt(t, p); ok {
				left++
			}
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d dropped tables still mapped after 10 s", left, len(starts))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mappingAt returns the /proc/self/maps range that holds address p.
func mappingAt(t *testing.T, p uintptr) (lo, hi uintptr, ok bool) {
	t.Helper()
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		rng, _, _ := strings.Cut(line, " ")
		a, b, found := strings.Cut(rng, "-")
		if !found {
			continue
		}
		l, err1 := strconv.ParseUint(a, 16, 64)
		h, err2 := strconv.ParseUint(b, 16, 64)
		if err1 == nil && err2 == nil && uintptr(l) <= p && p < uintptr(h) {
			return uintptr(l), uintptr(h), true
		}
	}
	return 0, 0, false
}
