package rings

// DeferredFrom returns the index of the first packet whose metadata is
// still deferred (DeferMeta): packets before it have their Meta written,
// those from it on would get zeros but for Seq and InPort from
// SettleMeta. It returns Len() when nothing is deferred. A processor that
// reads Meta only for a few packets (a GPU backend looking for the
// receiving port's flags) uses it to leave the rest unwritten.
func (b *Batch) DeferredFrom() int {
	if b.nruns == 0 {
		return len(b.Descs)
	}
	return int(b.lazyFrom)
}

// MetaOf writes into m the metadata packet i has, or, when it is deferred,
// the metadata SettleMeta would write for it, without settling anything.
func (b *Batch) MetaOf(i int, m *Meta) {
	if b.nruns == 0 || i < int(b.lazyFrom) {
		*m = b.Meta[i]
		return
	}
	at := int(b.lazyFrom)
	for _, r := range b.runs[:b.nruns] {
		if i < at+int(r.n) {
			*m = Meta{Seq: r.seq + uint64(i-at), InPort: r.inPort}
			return
		}
		at += int(r.n)
	}
	*m = b.Meta[i] // not reached: the runs cover every packet from lazyFrom on
}
