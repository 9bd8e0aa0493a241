package hugemem

import (
	"reflect"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Table is a slice allocated by Alloc and the means to free it.
type Table[T any] struct {
	S []T
	// mapped is the mapping's huge-page-rounded length (0: the slice is
	// on the Go heap); the mapping starts at &S[0].
	mapped uintptr
}

// Alloc returns a zeroed table of n elements of T, which must hold no
// pointers. Small tables (under 4 MiB) come from the Go heap; larger ones
// from an anonymous mapping that starts at a 2 MiB boundary, advised for
// transparent huge pages, unmapped by a cleanup once the table is
// unreachable.
func Alloc[T any](n int) *Table[T] {
	var zero T
	if hasPointers(reflect.TypeOf(zero)) {
		panic("hugemem: element type holds pointers")
	}
	size := uintptr(n) * unsafe.Sizeof(zero)
	t := &Table[T]{}
	if n == 0 || size < 4<<20 || runtime.GOOS != "linux" {
		t.S = make([]T, n)
		return t
	}
	p, span, err := mapAligned(size)
	if err != nil {
		t.S = make([]T, n)
		return t
	}
	_ = unix.Madvise(unsafe.Slice((*byte)(p), span), unix.MADV_HUGEPAGE) // no huge pages: ordinary pages
	t.mapped = span
	t.S = unsafe.Slice((*T)(p), n)
	runtime.AddCleanup(t, func(m mapping) { _ = unix.MunmapPtr(m.p, m.n) }, mapping{p, span})
	return t
}

// mapping is what a cleanup unmaps (a pointer outside the Go heap, which
// keeps nothing alive).
type mapping struct {
	p unsafe.Pointer
	n uintptr
}

// hugePage is the size and alignment of a transparent huge page on the
// architectures we build for (x86-64, arm64 with 4 KiB base pages).
const hugePage = 2 << 20

// mapAligned maps size bytes (rounded up to huge pages: span) of anonymous
// memory starting at a huge-page boundary. mmap aligns only to the base
// page: a mapping that starts mid-2 MiB has its first and last stretches
// in base pages (up to 2 MiB less 4 KiB each), and an element's place in
// a cache line depends on where the mapping starts (the flow table lays
// its 96-byte entries out so that each spans exactly two lines, which
// holds only from a line-aligned start). So it maps a huge page more and
// gives back the slack before and after the aligned span. The raw
// mmap/munmap of x/sys/unix are used: syscall.Munmap refuses any slice but
// the one its Mmap returned, so it cannot trim a mapping.
func mapAligned(size uintptr) (unsafe.Pointer, uintptr, error) {
	span := (size + hugePage - 1) &^ (hugePage - 1)
	raw, err := unix.MmapPtr(-1, 0, nil, span+hugePage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, 0, err
	}
	head := (hugePage - uintptr(raw)%hugePage) % hugePage
	if head > 0 {
		_ = unix.MunmapPtr(raw, head) // a failure leaves the slack mapped: memory, not a fault
	}
	p := unsafe.Add(raw, head)
	if tail := hugePage - head; tail > 0 {
		_ = unix.MunmapPtr(unsafe.Add(p, span), tail)
	}
	return p, span, nil
}

// Mapped reports whether the table is outside the Go heap.
func (t *Table[T]) Mapped() bool { return t.mapped != 0 }

func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.String, reflect.Interface, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return true
	case reflect.Array:
		return t.Len() > 0 && hasPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}
