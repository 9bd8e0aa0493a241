//go:build amd64 || arm64

package pipelines

// The conntrack stage's prefetches (prefetch_*.s): a hint to the CPU to
// bring a cache line in, which retires at once. A plain load of the same
// line would do the fetching too, but it holds up the reorder buffer
// until its data arrives, so loads can only overlap misses with each
// other (the warm pass), never with the tracking of other packets. A
// prefetch lets a chunk's misses run together while the passes go on,
// and under the tracking of the packets before them.
//
// Each routine takes a run of packets, not one: an assembly call is
// never inlined, and Go's register ABI keeps no register across a call,
// so a call a packet cost the passes some twenty instructions a packet
// of the call itself and of the registers saved and reloaded around it.

// prefetchSlots prefetches, for each nonzero hint h of hints (a tuple
// hash in its low half), the cache line of idx[probeHome(uint32(h),
// slots)], the index slot its probe starts at. idx must hold slots
// slots.
//
//go:noescape
func prefetchSlots(idx *uint64, slots uint64, hints []uint64)

// prefetchEntries prefetches, for each nonzero candidate c of cands
// ((entry+1)<<1 | dir), both cache lines of entry ent[c>>1-1]: a 96-byte
// entry starts at byte 0 or 32 of a line in the huge-page-aligned table,
// so it spans exactly two. (A 100-byte entry spanned three half the
// time; its third line, which holds the reply window and the UDP stream
// time every TCP and UDP packet reads, was a demand miss in the tracking
// loop.) Every candidate must name an entry of ent's table.
//
//go:noescape
func prefetchEntries(ent *ctEntry, cands []uint32)

// havePrefetch says the prefetches are real.
const havePrefetch = true
