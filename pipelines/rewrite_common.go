package pipelines

// rwNextTarget returns the stage's "next" edge target, recording the
// "last stage has no next edge" error when the stage is last in the list and
// names no explicit next.
func rwNextTarget(c *BuildContext) (Target, bool) {
	t, ok := c.Next()
	if !ok {
		c.Errorf(nil, "last stage has no next edge")
	}
	return t, ok
}

// rwCounter is a plain packets/bytes counter pair, for stage instances
// (each belongs to one worker, so no atomics).
type rwCounter struct{ packets, bytes uint64 }

func (p *rwCounter) add(n uint32) {
	p.packets++
	p.bytes += uint64(n)
}

// rwEthLen is the size of an untagged Ethernet header.
const rwEthLen = 14
