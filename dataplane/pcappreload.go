package dataplane

import (
	"fmt"
	"io"

	"github.com/warpflow/warpflow/rings"
)

// Preload mode of ReplayPort: the capture lives in arena frames for the
// port's whole life, and the hot path only moves descriptors. The frames
// form a fixed cycle in capture order (replicas appended as whole passes);
// a cursor walks it, and a per-frame state (home, out, released) guarantees
// that a frame is handed out only when it is home, so it is never in flight
// twice. Recycle maps an address back to its cycle slot through a table
// indexed by arena frame number: O(1), no map.

// preload copies every record into its own frame, then replicates the
// packets until MinFrames frames are filled. On failure every frame taken
// is returned to the arena.
func (p *ReplayPort) preload() error {
	name := p.rd.name
	for {
		rec, err := p.rd.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			p.releaseAll()
			return err
		}
		p.records.Add(1)
		p.rec, p.pending = rec, true
		d, placed, ok := p.place()
		if !ok {
			p.releaseAll()
			return fmt.Errorf("capture %s: preload record %d: all %d frames in use: %w",
				name, p.rd.records, p.a.Frames(), rings.ErrArenaEmpty)
		}
		if placed {
			p.addPreloaded(d, rec.cut, metaTime(rec.ts))
		}
	}
	p.pending = false
	packets := len(p.pre)
	if packets > 0 && p.opt.MinFrames > packets {
		reps := (p.opt.MinFrames + packets - 1) / packets
		for r := 1; r < reps; r++ {
			for i := range packets {
				src := p.pre[i]
				addr, ok := p.a.Alloc()
				if !ok {
					p.releaseAll()
					return fmt.Errorf("capture %s: preload %d copies of %d packets for min frames %d: %w",
						name, reps, packets, p.opt.MinFrames, rings.ErrArenaEmpty)
				}
				copy(p.mem[addr:addr+uint64(src.Len)], p.mem[src.Addr:src.Addr+uint64(src.Len)])
				p.stamps.s[addr>>p.shift] = p.stamps.s[src.Addr>>p.shift]
				p.addPreloaded(rings.Desc{Addr: addr, Len: src.Len}, p.preCut != nil && p.preCut[i], p.timeOf(i))
			}
		}
	}
	p.byFrame = make([]int32, p.a.Frames())
	for i, d := range p.pre {
		p.byFrame[d.Addr>>p.shift] = int32(i + 1)
	}
	switch {
	case packets == 0:
		p.left = 0
	case p.opt.Loops == -1:
		p.left = -1
	default:
		p.left = int64(max(p.opt.Loops, 1)) * int64(packets)
	}
	if p.left == 0 {
		p.finish()
	}
	return nil
}

func (p *ReplayPort) addPreloaded(d rings.Desc, cut bool, ms uint32) {
	if cut && p.preCut == nil {
		p.preCut = make([]bool, len(p.pre), cap(p.pre)+1)
	}
	if p.preCut != nil {
		p.preCut = append(p.preCut, cut)
	}
	// Times are kept per frame only once they differ: a capture of one
	// instant (most benchmark captures) costs nothing per packet.
	switch {
	case len(p.pre) == 0:
		p.preTime0 = ms
	case p.preTime == nil && ms != p.preTime0:
		p.preTime = make([]uint32, len(p.pre), cap(p.pre)+1)
		for i := range p.preTime {
			p.preTime[i] = p.preTime0
		}
	}
	if p.preTime != nil {
		p.preTime = append(p.preTime, ms)
	}
	p.pre = append(p.pre, d)
	p.state = append(p.state, frameHome)
}

// receivePreloaded hands out preloaded frames in cycle order, stopping at
// the first one still in flight. It works in runs of consecutive home
// frames, so the batch's metadata is cleared in bulk.
func (p *ReplayPort) receivePreloaded(b *rings.Batch) (int, error) {
	n, bytes := 0, uint64(0)
	cycle := len(p.pre)
	for room := cap(b.Descs) - len(b.Descs); room > 0 && p.left != 0; {
		i := p.cursor
		k := min(room, cycle-i)
		if p.left > 0 && int64(k) > p.left {
			k = int(p.left)
		}
		pre, state := p.pre[i:i+k], p.state[i:i+k]
		run := 0
		for run < len(state) && state[run] == frameHome {
			state[run] = frameOut
			bytes += uint64(pre[run].Len)
			run++
		}
		if run == 0 {
			break // in flight: wait for Recycle, keeping capture order
		}
		// The original Addr and Len: undoes any head adjustment.
		at := b.Len()
		if p.preTime == nil {
			b.SetTime(p.preTime0)
			b.AppendRun(pre[:run], p.seq, p.opt.PortIndex)
		} else {
			p.appendTimed(b, pre[:run], i)
		}
		if p.preCut != nil {
			p.markCut(b, at, i, run)
		}
		p.seq += uint64(run)
		if p.cursor += run; p.cursor == cycle {
			p.cursor = 0
		}
		if p.left > 0 {
			p.left -= int64(run)
		}
		n += run
		room -= run
		if run < k {
			break
		}
	}
	if p.left == 0 && !p.finished {
		p.finish()
	}
	return p.done(n, bytes)
}

// appendTimed appends run (pre entries from i) in stretches of one
// capture time each, so that every packet's Meta.Time is its record's.
func (p *ReplayPort) appendTimed(b *rings.Batch, run []rings.Desc, i int) {
	times := p.preTime[i : i+len(run)]
	for off := 0; off < len(run); {
		t, end := times[off], off+1
		for end < len(run) && times[end] == t {
			end++
		}
		b.SetTime(t)
		b.AppendRun(run[off:end], p.seq+uint64(off), p.opt.PortIndex)
		off = end
	}
}

// timeOf returns pre entry i's capture time.
func (p *ReplayPort) timeOf(i int) uint32 {
	if p.preTime == nil {
		return p.preTime0
	}
	return p.preTime[i]
}

// markCut flags the packets of a run just appended at b[at:] (pre entries
// i to i+run) whose records the capture cut.
func (p *ReplayPort) markCut(b *rings.Batch, at, i, run int) {
	n := uint64(0)
	for k, cut := range p.preCut[i : i+run] {
		if cut {
			if n == 0 {
				b.SettleMeta() // a worker slot defers it: write it before the flag
			}
			b.Meta[at+k].Flags = rings.FlagCut
			n++
		}
	}
	if n > 0 {
		p.cut.Add(n)
	}
}

// finish ends a preloaded replay: frames at home go back to the arena now,
// frames in flight when they are recycled.
func (p *ReplayPort) finish() {
	p.finished = true
	p.eof = true
	p.releaseAll()
}

// recyclePreloaded marks returned frames home (or frees them once the replay
// is over). A descriptor this port does not have in flight is counted and
// ignored, so a double recycle cannot put a frame in flight twice.
func (p *ReplayPort) recyclePreloaded(descs []rings.Desc) {
	home := uint8(frameHome)
	if p.finished || p.closed {
		home = frameReleased
	} else if p.recycleRun(descs) {
		return
	}
	bad := 0
	byFrame, state := p.byFrame, p.state
	for _, d := range descs {
		fn := d.Addr >> p.shift
		if fn >= uint64(len(byFrame)) {
			bad++
			continue
		}
		i := int(byFrame[fn]) - 1
		if i < 0 || i >= len(state) || state[i] != frameOut {
			bad++
			continue
		}
		state[i] = home
		if home == frameReleased {
			p.a.Free(p.pre[i].Addr)
		}
	}
	if bad > 0 {
		p.badRecycles.Add(uint64(bad))
	}
}

// recycleRun is recyclePreloaded's fast path for the common list: a run of
// consecutive cycle slots, all out, in cycle order (a batch handed out by
// one receivePreloaded run and recycled whole). It marks them home and
// reports true, or reports false having changed nothing. It compares
// frame numbers, not addresses, since a stage may have moved a packet's
// head within its frame.
func (p *ReplayPort) recycleRun(descs []rings.Desc) bool {
	if len(descs) == 0 {
		return true
	}
	fn := descs[0].Addr >> p.shift
	if fn >= uint64(len(p.byFrame)) {
		return false
	}
	i := int(p.byFrame[fn]) - 1
	if i < 0 || len(descs) > len(p.state)-i {
		return false
	}
	pre, state := p.pre[i:i+len(descs)], p.state[i:i+len(descs)]
	sh := p.shift
	for k, d := range descs {
		if d.Addr>>sh != pre[k].Addr>>sh || state[k] != frameOut {
			return false
		}
	}
	for k := range state {
		state[k] = frameHome
	}
	return true
}

// releaseAll returns every preloaded frame at home to the arena.
func (p *ReplayPort) releaseAll() {
	for i, s := range p.state {
		if s == frameHome {
			p.a.Free(p.pre[i].Addr)
			p.state[i] = frameReleased
		}
	}
}
