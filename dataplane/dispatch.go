package dataplane

import (
	"github.com/warpflow/warpflow/rings"
)

// complete acts on the verdicts of a processed batch, in packet order:
// transmit, drop or pass each packet, write samples, count everything, and
// give every frame back to the port it came from. It runs on the I/O loop
// only. No allocation: the per-port lists are preallocated to the batch size.
func (e *Engine) complete(b *rings.Batch) {
	c := &e.counts
	c.batches++
	nReasons := e.nReasons
	for i := range e.txList {
		e.txList[i] = e.txList[i][:0]
	}
	e.passList = e.passList[:0]
	for i := range b.Descs {
		d := b.Descs[i]
		m := &b.Meta[i]
		c.received++
		c.receivedBytes += uint64(d.Len)
		if m.SampleMask != 0 {
			e.sample(d, m.SampleMask)
		}
		switch m.Verdict {
		case rings.VerdictTX:
			if int(m.Target) < len(e.txList) {
				e.txList[m.Target] = append(e.txList[m.Target], d)
				continue
			}
		case rings.VerdictDrop:
			if int(m.Target) < nReasons {
				c.dropPackets[m.Target]++
				c.dropBytes[m.Target] += uint64(d.Len)
				continue
			}
		case rings.VerdictPass:
			c.passPackets++
			c.passBytes += uint64(d.Len)
			if e.pass != nil {
				e.passList = append(e.passList, d)
			}
			continue
		}
		// No verdict, or one naming a port or reason that does not exist:
		// a pipeline bug, counted rather than lost.
		c.dropPackets[nReasons+2]++
		c.dropBytes[nReasons+2] += uint64(d.Len)
	}
	for p, list := range e.txList {
		if len(list) == 0 {
			continue
		}
		n, err := e.out[p].Transmit(e.arena, list)
		if n < 0 || n > len(list) {
			n = 0
		}
		for _, d := range list[:n] {
			c.txPackets[p]++
			c.txBytes[p] += uint64(d.Len)
		}
		reason := nReasons // tx_full
		if err != nil {
			reason = nReasons + 1 // tx_error
			e.noteTxError(p, err)
		}
		for _, d := range list[n:] {
			c.dropPackets[reason]++
			c.dropBytes[reason] += uint64(d.Len)
		}
	}
	if len(e.passList) > 0 {
		if _, err := e.pass.Transmit(e.arena, e.passList); err != nil {
			e.notePassError(err)
		}
	}
	for k := range e.samples {
		s := &e.samples[k]
		if len(s.list) > 0 {
			if s.sink != nil {
				if _, err := s.sink.Transmit(e.arena, s.list); err != nil {
					e.noteSampleError(k, err)
				}
			}
			s.list = s.list[:0]
		}
	}
	e.in.Recycle(b.Descs)
}

// sample decides, in receive order, which candidates each sampler keeps.
func (e *Engine) sample(d rings.Desc, mask uint32) {
	for k := range e.samples {
		if mask&(1<<uint(k)) == 0 {
			continue
		}
		s := &e.samples[k]
		keep := false
		switch s.info.Mode {
		case "every":
			keep = s.candidate%s.info.N == 0
		case "first":
			keep = s.candidate < s.info.N
		}
		s.candidate++
		if keep {
			s.written++
			s.list = append(s.list, d)
		}
	}
}
