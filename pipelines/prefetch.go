//go:build amd64 || arm64

package pipelines

// The conntrack stage's prefetches (prefetch_*.s): a hint to the CPU to
// bring a cache line in, which retires at once. A plain load of the same
// line would do the fetching too, but it holds up the reorder buffer
// until its data arrives: spread over the tracking loop, a few hundred
// instructions after it the core stalls for the rest of the miss, so
// loads can only overlap misses with each other (the warm pass), never
// with the tracking of other packets. A prefetch lets a packet's misses
// run under the tracking of the packets before it.

// prefetchSlot prefetches the cache line of index slot *p.
//
//go:noescape
func prefetchSlot(p *uint64)

// prefetchEntry prefetches every cache line of entry *p: its first byte,
// byte 64 and byte 96, the last word's line (a 100-byte entry spans two
// lines, or three when it starts in a line's last 28 bytes, that is half
// the entries; the third holds the reply direction's window and the UDP
// stream time, which every TCP and UDP packet reads: left to a plain load
// it stalled the tracking loop, some 8 ns per packet at a million flows).
//
//go:noescape
func prefetchEntry(p *ctEntry)

// havePrefetch says the prefetches are real.
const havePrefetch = true
