//go:build !amd64 && !arm64

package pipelines

func prefetchSlots(*uint64, uint64, []uint64) {}
func prefetchEntries(*ctEntry, []uint32)      {}

// havePrefetch says the prefetches are no-ops: the conntrack stage then
// overlaps its misses with plain loads (ctStage.warm).
const havePrefetch = false
