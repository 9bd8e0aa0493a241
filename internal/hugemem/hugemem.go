package hugemem

import (
	"reflect"
	"runtime"
	"syscall"
	"unsafe"
)

// madvHugepage is MADV_HUGEPAGE (not in package syscall's constants on
// every architecture).
const madvHugepage = 14

// Table is a slice allocated by Alloc and the means to free it.
type Table[T any] struct {
	S   []T
	mem []byte // the mapping; nil when the slice is on the Go heap
}

// Alloc returns a zeroed table of n elements of T, which must hold no
// pointers. Small tables (under 4 MiB) come from the Go heap.
func Alloc[T any](n int) *Table[T] {
	var zero T
	if hasPointers(reflect.TypeOf(zero)) {
		panic("hugemem: element type holds pointers")
	}
	size := n * int(unsafe.Sizeof(zero))
	t := &Table[T]{}
	if n == 0 || size < 4<<20 || runtime.GOOS != "linux" {
		t.S = make([]T, n)
		return t
	}
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.S = make([]T, n)
		return t
	}
	_ = syscall.Madvise(mem, madvHugepage) // no huge pages: ordinary pages
	t.mem = mem
	t.S = unsafe.Slice((*T)(unsafe.Pointer(&mem[0])), n)
	runtime.AddCleanup(t, func(m []byte) { _ = syscall.Munmap(m) }, mem)
	return t
}

// Mapped reports whether the table is outside the Go heap.
func (t *Table[T]) Mapped() bool { return t.mem != nil }

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
