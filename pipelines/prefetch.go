//go:build amd64 || arm64

package pipelines

// The conntrack stage's prefetches (prefetch_*.s): a hint to the CPU to
// bring a cache line in, which retires at once. A plain load of the same
// line would do the fetching too, but it holds up the reorder buffer
// until its data arrives, so loads can only overlap misses with each
// other (the warm pass), never with the tracking of other packets. A
// prefetch lets a chunk's misses run together while the passes go on,
// and under the tracking of the packets before them.

// prefetchSlot prefetches the cache line of index slot *p.
//
//go:noescape
func prefetchSlot(p *uint64)

// prefetchEntry prefetches both cache lines of entry *p: a 96-byte entry
// starts at byte 0 or 32 of a line in the huge-page-aligned table, so it
// spans exactly two. (A 100-byte entry spanned three half the time; its
// third line, which holds the reply window and the UDP stream time every
// TCP and UDP packet reads, was a demand miss in the tracking loop.)
//
//go:noescape
func prefetchEntry(p *ctEntry)

// prefetchEntries prefetches both lines of entry ent[v>>1-1] for each
// candidate v of cand[:n] that is not 0 (ctStage.cand's form), n >= 0: a
// second prefetch of entries already fetched, a few packets before they
// are tracked, in one call for a run of them (see ctRetouch).
//
//go:noescape
func prefetchEntries(ent *ctEntry, cand *uint32, n int)

// The assembly steps from entry to entry by 96 bytes and prefetches two
// lines of each: a ctEntry of another size fails the build here instead
// of prefetching the wrong lines in silence.
const _ = uint(ctEntryBytes-96) + uint(96-ctEntryBytes)

// havePrefetch says the prefetches are real.
const havePrefetch = true
