package pipelines

// The stateful stages' indexes (conntrack's flow index, reassembly's
// datagram index) are the same kind of table: open addressing with
// linear probing over uint64 slots that hold hash<<32 | payload, 0 for
// empty. These are the two operations whose correctness both depend on.

// probeHome is the slot where hash h's probe starts in an index of slots
// slots (a multiply-shift range reduction: no division).
func probeHome(h uint32, slots uint64) uint64 { return (uint64(h) * slots) >> 32 }

// probeDelete empties slot i of idx (its first slots slots in use) and
// shifts the slots after it back (backward-shift deletion), so that no
// other key's probe sequence is broken by the hole and no tombstones are
// needed.
func probeDelete(idx []uint64, slots, i uint64) {
	j := i
	for {
		if j++; j == slots {
			j = 0
		}
		v := idx[j]
		if v == 0 {
			break
		}
		home := probeHome(uint32(v>>32), slots)
		// The slot at j may move back to i unless its home lies
		// cyclically in (i, j].
		var stays bool
		if i <= j {
			stays = i < home && home <= j
		} else {
			stays = i < home || home <= j
		}
		if stays {
			continue
		}
		idx[i] = v
		i = j
	}
	idx[i] = 0
}
