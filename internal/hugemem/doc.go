// Package hugemem allocates large pointer-free tables in memory the kernel
// backs with transparent huge pages where it can (a mapping aligned to 2
// MiB, madvise MADV_HUGEPAGE), outside the Go heap.
//
// Why: a flow table of a million entries (some 120 MB) is read at random,
// one or two cache misses per packet. With 4 KiB pages every such miss is
// also a TLB miss, and under virtualisation a TLB miss walks two sets of
// page tables; 2 MiB pages keep the whole table in the TLB. Measured on
// the 2-core dev VM (KVM, Xeon), independent random 8-byte loads over 256
// MiB: 31-35 ns each from the Go heap, 17-18 ns from huge pages.
//
// Hazards:
//   - The element type must hold no pointers (the garbage collector does
//     not scan this memory). Alloc panics on a type that has any.
//   - The memory lives as long as the returned *Table: a cleanup attached
//     to it unmaps the memory once the Table is unreachable. Keep the
//     Table, not only its slice S: a slice kept alone does not keep the
//     mapping, and using it after the cleanup faults.
//   - Where the kernel gives no huge pages (THP off, or a small system)
//     the memory is ordinary anonymous memory: correct, just slower.
//     Where mmap itself fails, Alloc falls back to the Go heap.
//
// This package and xdp, gpu and internal/cpuaffinity are where unsafe
// lives: it turns an mmap'd region into a typed slice.
package hugemem
