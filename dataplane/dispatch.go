package dataplane

import (
	"github.com/warpflow/warpflow/rings"
)

// complete acts on the verdicts of a processed batch, in packet order:
// transmit, drop or pass each packet, write samples, count everything, and
// give every frame back to the port it came from, except those a Completer
// accepted (they come back through pollCompletions). It runs on the I/O
// loop only. No allocation: the per-port lists are preallocated to the
// batch size.
func (e *Engine) complete(p *plan, b *rings.Batch) {
	c := &e.counts
	c.batches++
	e.inEngine -= len(b.Descs) // all handed on below
	if e.completeUniform(p, b) {
		return
	}
	reasonIdx := p.reasonIdx
	noVerdict := p.lay.engineBase + engineNoVerdict
	txList := p.txList
	for i := range txList {
		txList[i] = txList[i][:0]
	}
	e.passList = e.passList[:0]
	hold := e.holds
	e.recycle = e.recycle[:0]
	for i := range b.Descs {
		d := b.Descs[i]
		m := &b.Meta[i]
		c.received++
		c.receivedBytes += uint64(d.Len)
		if m.SampleMask != 0 {
			e.sample(p, d, m.SampleMask)
		}
		switch m.Verdict {
		case rings.VerdictTX:
			if int(m.Target) < len(txList) {
				txList[m.Target] = append(txList[m.Target], d)
				continue
			}
		case rings.VerdictDrop:
			if int(m.Target) < len(reasonIdx) {
				r := reasonIdx[m.Target]
				c.dropPackets[r]++
				c.dropBytes[r] += uint64(d.Len)
				if hold {
					e.recycle = append(e.recycle, d)
				}
				continue
			}
		case rings.VerdictPass:
			if e.pass != nil {
				e.passList = append(e.passList, d) // counted once the port took it
			} else {
				c.passPackets++
				c.passBytes += uint64(d.Len)
				if hold {
					e.recycle = append(e.recycle, d)
				}
			}
			continue
		}
		// No verdict, or one naming a port or reason that does not exist:
		// a pipeline bug, counted rather than lost.
		c.dropPackets[noVerdict]++
		c.dropBytes[noVerdict] += uint64(d.Len)
		if hold {
			e.recycle = append(e.recycle, d)
		}
	}
	// Samples first: sinks copy the bytes, and before the transmits every
	// frame is still the engine's (a Completer may own it after).
	for k := range p.samples {
		s := &p.samples[k]
		if len(s.list) > 0 {
			if s.sink != nil {
				if _, err := s.sink.Transmit(e.arena, s.list); err != nil {
					e.noteSampleError(s, err)
				}
			}
			s.list = s.list[:0]
		}
	}
	for port, list := range txList {
		if len(list) == 0 {
			continue
		}
		n := e.transmit(p, port, list, sumLen(list))
		if hold {
			e.keep(p.outComp[port], list, n)
		}
	}
	if len(e.passList) > 0 {
		n := e.sendPass(e.passList)
		if hold {
			e.keep(e.passComp, e.passList, n)
		}
	}
	if hold {
		e.recycleFrames(e.recycle)
	} else {
		e.recycleFrames(b.Descs)
	}
}

// keep sorts an output's list after its transmit accepted n of it: a
// Completer (k >= 0) keeps the accepted prefix, everything else goes on
// the recycle list.
func (e *Engine) keep(k int, list []rings.Desc, n int) {
	if k < 0 {
		e.recycle = append(e.recycle, list...)
		return
	}
	e.accepted(k, n)
	e.recycle = append(e.recycle, list[n:]...)
}

// recycleFrames gives frames the engine is done with back to the input port.
func (e *Engine) recycleFrames(descs []rings.Desc) {
	if e.tracker != nil {
		e.trackRecycled(descs)
	}
	e.in.Recycle(descs)
}

// sample decides, in receive order, which candidates each sampler keeps.
func (e *Engine) sample(p *plan, d rings.Desc, mask uint32) {
	for k := range p.samples {
		if mask&(1<<uint(k)) == 0 {
			continue
		}
		s := &p.samples[k]
		keep := s.candidate < s.info.N // first N
		if s.every {
			keep = s.candidate%s.info.N == 0
		}
		s.candidate++
		if keep {
			s.written++
			s.list = append(s.list, d)
		}
	}
}

// completeUniform is complete's fast path for the common batch whose packets
// all go to the same output port and none of which is a sample candidate:
// the batch's descriptor vector is transmitted as it is. It reports false,
// having changed nothing, when the batch is not like that.
func (e *Engine) completeUniform(p *plan, b *rings.Batch) bool {
	if len(b.Meta) == 0 {
		return false
	}
	if o := &b.Outcome; o.Valid {
		// The runner's summary: no pass over the metadata.
		if o.Verdict != rings.VerdictTX || int(o.Target) >= len(p.out) {
			return false
		}
		c := &e.counts
		c.received += uint64(len(b.Descs))
		c.receivedBytes += o.Bytes
		e.transmitAll(p, int(o.Target), b.Descs, o.Bytes)
		return true
	}
	m0 := &b.Meta[0]
	if m0.Verdict != rings.VerdictTX || int(m0.Target) >= len(p.out) {
		return false
	}
	v, t := m0.Verdict, m0.Target
	var bytes uint64
	for i := range b.Meta {
		m := &b.Meta[i]
		if m.Verdict != v || m.Target != t || m.SampleMask != 0 {
			return false
		}
		bytes += uint64(b.Descs[i].Len)
	}
	c := &e.counts
	c.received += uint64(len(b.Descs))
	c.receivedBytes += bytes
	e.transmitAll(p, int(t), b.Descs, bytes)
	return true
}

// transmitAll sends a whole batch's descriptors on port p and recycles what
// the port does not keep.
func (e *Engine) transmitAll(p *plan, port int, descs []rings.Desc, bytes uint64) {
	n := e.transmit(p, port, descs, bytes)
	if k := p.outComp[port]; k >= 0 {
		e.accepted(k, n)
		descs = descs[n:]
	}
	e.recycleFrames(descs)
}

// transmit sends list, of bytes bytes in all, on output port p and counts
// each packet as transmitted or, when the port refused it, dropped as
// tx_full (tx_error when the port also returned an error, which the run
// reports at its end). It returns how many the port accepted.
func (e *Engine) transmit(p *plan, port int, list []rings.Desc, bytes uint64) int {
	c := &e.counts
	if e.tracker != nil {
		e.trackOffer(p.outComp[port], list)
	}
	n, err := p.out[port].Transmit(e.arena, list)
	if n < 0 || n > len(list) {
		n = 0
	}
	if e.tracker != nil {
		e.trackTaken(p.outComp[port], list, n)
	}
	if n < len(list) {
		bytes = sumLen(list[:n])
	}
	ci := p.portIdx[port]
	c.txPackets[ci] += uint64(n)
	c.txBytes[ci] += bytes
	reason := p.lay.engineBase + engineTxFull
	if err != nil {
		reason = p.lay.engineBase + engineTxError
		e.noteTxError(p, port, err)
	}
	e.countRefused(list[n:], reason)
	return n
}

// sendPass hands list to the pass port and counts each packet as passed or,
// when the port refused it, dropped as pass_full (pass_error when the port
// also returned an error), so a pass port that takes only part of a batch
// loses nothing silently. It returns how many the port accepted.
func (e *Engine) sendPass(list []rings.Desc) int {
	c := &e.counts
	if e.tracker != nil {
		e.trackOffer(e.passComp, list)
	}
	n, err := e.pass.Transmit(e.arena, list)
	if n < 0 || n > len(list) {
		n = 0
	}
	if e.tracker != nil {
		e.trackTaken(e.passComp, list, n)
	}
	c.passPackets += uint64(n)
	c.passBytes += sumLen(list[:n])
	reason := e.lay.engineBase + enginePassFull
	if err != nil {
		reason = e.lay.engineBase + enginePassError
		e.notePassError(err)
	}
	e.countRefused(list[n:], reason)
	return n
}

// countRefused counts the packets an output refused as drops with reason.
func (e *Engine) countRefused(list []rings.Desc, reason int) {
	c := &e.counts
	for _, d := range list {
		c.dropPackets[reason]++
		c.dropBytes[reason] += uint64(d.Len)
	}
}

// sumLen returns the total length of the packets list names.
func sumLen(list []rings.Desc) uint64 {
	var bytes uint64
	for i := range list {
		bytes += uint64(list[i].Len)
	}
	return bytes
}
