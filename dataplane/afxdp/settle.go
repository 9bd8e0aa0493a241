package afxdp

import (
	"time"

	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/xdp"
)

// The last flush at Settle. It kicks as often as the frames still
// outstanding need at a copy-mode socket's budget per sendto
// (copyModeTXBudget), and settleSpareKicks more; it stops early once the
// ring is empty or settleStalls kicks in a row brought nothing back (one
// stall can be a completion ring that was full until the reap after it).
// A zero-copy driver sends from its own NAPI after a kick, so there it
// pauses settlePause between kicks, never past settleDeadline in all.
const (
	settleSpareKicks = 4
	settleStalls     = 2
	settlePause      = time.Millisecond
	settleDeadline   = 50 * time.Millisecond
)

// Settle ends the port's transmitting, once: it makes a last bounded
// attempt to send what is still on its TX ring (kicks, with the completion
// ring taken back between them, to the port's arena), then counts the
// frames that still have not completed as tx_abandoned. Those were counted
// as put on the ring (tx) and by the engine as transmitted, and never
// left: without this count they stayed "transmitted" when the socket
// closed. Afterwards Transmit refuses with net.ErrClosed.
//
// Call it when the engine is done with the port (its run returned): the
// frames taken back go to the arena, not to the engine. The daemon calls
// it (Queue.Settle) right after a queue's engine stops, so its final stats
// show the count; Close calls it too. Not for the hot path: it may
// allocate, and waits up to settleDeadline on a zero-copy socket.
func (p *Port) Settle() {
	if p.settled.Swap(true) || p.closed.Load() {
		return
	}
	if p.outstanding == 0 {
		return
	}
	buf := make([]rings.Desc, 0, p.sock.Completion().Size())
	reap := func() {
		for p.outstanding > 0 {
			buf = p.Complete(buf[:0])
			if len(buf) == 0 {
				return
			}
			for _, d := range buf {
				p.arena.Free(d.Addr)
			}
		}
	}
	pause := time.Duration(0)
	if p.sock.Bound() != xdp.BindCopy {
		pause = settlePause
	}
	// A kick error is recorded in p.err and the counters already; what it
	// left on the ring is what the count below is for.
	_ = lastFlush(func() int { return p.outstanding }, p.kick, reap, pause, time.Now().Add(settleDeadline))
	reap()
	if p.outstanding > 0 {
		p.stats.txAbandoned.Add(uint64(p.outstanding))
	}
}

// lastFlush kicks and reaps until pending reads 0, a kick fails, the kicks
// the first pending count needs at the copy-mode budget (and
// settleSpareKicks more) were made, or settleStalls kicks in a row left
// pending where it was. With pause > 0 it sleeps that long after each kick
// that made no progress, and stops at deadline. It returns the first kick
// error. A function of its own so that its bounds are tested without a
// socket.
func lastFlush(pending func() int, kick func() error, reap func(), pause time.Duration, deadline time.Time) error {
	reap()
	n := pending()
	maxKicks := n/copyModeTXBudget + settleSpareKicks
	for kicks, stalls := 0, 0; n > 0 && kicks < maxKicks && stalls < settleStalls; kicks++ {
		if err := kick(); err != nil {
			return err
		}
		reap()
		now := pending()
		if now < n {
			n, stalls = now, 0
			continue
		}
		stalls++
		if pause > 0 {
			if time.Now().Add(pause).After(deadline) {
				return nil
			}
			time.Sleep(pause)
		}
	}
	return nil
}

// Abandoned is how many frames the port's Settle found still on its TX
// ring, never sent (tx_abandoned); safe from any goroutine.
func (p *Port) Abandoned() uint64 { return p.stats.txAbandoned.Load() }
