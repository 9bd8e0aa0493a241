//go:build !amd64 && !arm64

package pipelines

func prefetchSlot(*uint64)   {}
func prefetchEntry(*ctEntry) {}

func prefetchEntries(*ctEntry, *uint32, int) {}

// havePrefetch says the prefetches are no-ops: the conntrack stage then
// overlaps its misses with plain loads (ctStage.warm).
const havePrefetch = false
