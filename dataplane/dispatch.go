package dataplane

import (
	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/workers"
)

// complete acts on the verdicts of a processed batch, in packet order:
// transmit, drop or pass each packet, write samples, count everything, and
// give every frame back to the port it came from, except those a Completer
// accepted (they come back through pollCompletions). It runs on the I/O
// loop only. No allocation: the per-port lists are preallocated to the
// batch size.
func (e *Engine) complete(p *plan, b *rings.Batch) {
	c := &e.counts
	if len(b.Descs) > 0 {
		// An empty batch (a tick, a control request on an idle worker)
		// is no batch of traffic: counted, it would lower the batch fill
		// of a quiet link some ten times a second.
		c.batches++
	}
	e.inEngine -= len(b.Descs) // all handed on below
	if e.completeUniform(p, b) {
		return
	}
	e.startLists(p)
	for i := range b.Descs {
		d := b.Descs[i]
		m := &b.Meta[i]
		c.received++
		c.receivedBytes += uint64(d.Len)
		if m.SampleMask != 0 {
			e.sample(p, d, m.SampleMask)
		}
		e.sortVerdict(p, d, m.Verdict, m.Target)
	}
	e.finishLists(p, b)
}

// completeVerdicts is complete for a batch of a VerdictExecutor: the
// verdicts are v's words and the sample candidates v's lists, so nothing
// reads the packets' Meta (the executor never wrote it).
func (e *Engine) completeVerdicts(p *plan, b *rings.Batch, v workers.Verdicts) {
	c := &e.counts
	c.batches++
	e.inEngine -= len(b.Descs)
	if b.Outcome.Valid && e.completeUniform(p, b) {
		return
	}
	e.startLists(p)
	for k, list := range v.Samples {
		if k < len(p.samples) && len(list) > 0 {
			pickList(&p.samples[k], b.Descs, list)
		}
	}
	words := v.Words[:len(b.Descs)]
	for i := range b.Descs {
		d := b.Descs[i]
		c.received++
		c.receivedBytes += uint64(d.Len)
		w := words[i]
		e.sortVerdict(p, d, rings.Verdict(w>>workers.VerdictShift), uint16(w))
	}
	e.finishLists(p, b)
}

// startLists empties the per-output lists for a batch.
func (e *Engine) startLists(p *plan) {
	for i := range p.txList {
		p.txList[i] = p.txList[i][:0]
	}
	e.passList = e.passList[:0]
	e.recycle = e.recycle[:0]
}

// sortVerdict puts packet d on the list its verdict (v, t) names, and
// counts what needs no output: a drop by its reason, a pass when there is
// no pass port.
func (e *Engine) sortVerdict(p *plan, d rings.Desc, v rings.Verdict, t uint16) {
	c := &e.counts
	switch v {
	case rings.VerdictTX:
		if int(t) < len(p.txList) {
			p.txList[t] = append(p.txList[t], d)
			return
		}
	case rings.VerdictDrop:
		if int(t) < len(p.reasonIdx) {
			r := p.reasonIdx[t]
			c.dropPackets[r]++
			c.dropBytes[r] += uint64(d.Len)
			if e.holds {
				e.recycle = append(e.recycle, d)
			}
			return
		}
	case rings.VerdictPass:
		if e.pass != nil {
			e.passList = append(e.passList, d) // counted once the port took it
		} else {
			c.passPackets++
			c.passBytes += uint64(d.Len)
			if e.holds {
				e.recycle = append(e.recycle, d)
			}
		}
		return
	}
	// No verdict, or one naming a port or reason that does not exist:
	// a pipeline bug, counted rather than lost.
	noVerdict := p.lay.engineBase + engineNoVerdict
	c.dropPackets[noVerdict]++
	c.dropBytes[noVerdict] += uint64(d.Len)
	if e.holds {
		e.recycle = append(e.recycle, d)
	}
}

// finishLists writes the samples, transmits the per-port lists, hands the
// pass list over and recycles every frame no Completer kept.
func (e *Engine) finishLists(p *plan, b *rings.Batch) {
	hold := e.holds
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
	for port, list := range p.txList {
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

// receive asks the input port for packets, appended to b: the one place
// frames pass from the input port to the engine. It stamps the batch with
// the clock when the plan wants one (one clock read per call), counts the
// frames now in the engine and, in the accounting mode, moves them to the
// engine's place, returning a tracking error as the call's when the port
// had none (the I/O loops stop on it).
func (e *Engine) receive(b *rings.Batch, clock bool) (int, error) {
	had := b.Len()
	var t0 uint32
	var e0 uint64
	if clock {
		t0, e0 = b.Time(), b.Epoch()
		b.SetTime64(clockMS())
	}
	n, err := e.in.Receive(b)
	e.inEngine += b.Len() - had
	if clock {
		if b.Len() > had {
			// Packets came: whether they kept the engine's time (a live
			// port) or took the port's own (SetTime, a replay) decides
			// whether idle workers are told the time (tickDue).
			e.liveClock = b.Epoch() != 0
		} else {
			// Nothing came: the batch keeps the time it had. A slot a
			// replay part-filled and this receive added nothing to must
			// not go to the workers with the wall clock as its Epoch.
			b.SetTime(t0)
			b.SetEpoch(e0)
		}
	}
	if e.tracker != nil {
		e.trackReceived(b, had)
		if e.trackErr != nil && err == nil {
			err = e.trackErr
		}
	}
	return n, err
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
			s.kept++
			s.list = append(s.list, d)
		}
	}
}

// pickList is sample for one sampler's candidates of a batch, given as
// the list of their packet indices in receive order: it works out from
// the sampler's count which of them it keeps, so only those cost
// anything.
func pickList(s *sampler, descs []rings.Desc, list []uint16) {
	n := uint64(len(list))
	N := s.info.N
	switch {
	case s.every:
		for r := (N - s.candidate%N) % N; r < n; r += N {
			s.list = append(s.list, descs[list[r]])
			s.kept++
		}
	case s.candidate < N:
		for _, i := range list[:min(n, N-s.candidate)] {
			s.list = append(s.list, descs[i])
			s.kept++
		}
	}
	s.candidate += n
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

// sumLen returns the total length of the packets list names. It adds
// four lengths a turn: a turn a packet cost more in the loop's own
// instructions than in the adding.
func sumLen(list []rings.Desc) uint64 {
	var bytes uint64
	for len(list) >= 4 {
		q := (*[4]rings.Desc)(list)
		bytes += uint64(q[0].Len) + uint64(q[1].Len) + uint64(q[2].Len) + uint64(q[3].Len)
		list = list[4:]
	}
	for i := range list {
		bytes += uint64(list[i].Len)
	}
	return bytes
}
