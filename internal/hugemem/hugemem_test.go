package hugemem

import (
	"runtime"
	"testing"
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
