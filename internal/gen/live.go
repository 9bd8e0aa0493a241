package gen

import (
	"fmt"
	"time"

	"github.com/warpflow/warpflow/xdp"
)

// live is the XDP live-frame engine. A synthetic run loops one frame with
// large Repeat counts, the program writing the flow's source port each run;
// a capture run sends its frames in turn with Repeat 1 each, a syscall per
// frame, which is far slower (use the afxdp engine for captures at speed).
type live struct {
	g       *xdp.LiveGen
	ifindex int
	queue   int
	frames  [][]byte
	next    int    // capture: next frame
	count   uint64 // the run's bound (the program's limit)
	done    uint64 // runs confirmed by the program's counter
	sumLen  uint64 // capture: bytes of frames sent so far in order
}

func newLive(o Options, ifindex int, frames [][]byte) (*live, error) {
	flows := o.Flows
	if o.Capture != "" {
		flows = 1
	}
	lo := xdp.LiveGenOptions{Flows: flows, BasePort: o.SrcPort, BatchSize: o.Batch}
	if programPaced(o) {
		lo.Rate, lo.Burst = o.Rate, o.Burst
	}
	g, err := xdp.NewLiveGen(lo)
	if err != nil {
		return nil, err
	}
	if err := g.SetLimit(o.Count); err != nil {
		g.Close()
		return nil, err
	}
	return &live{g: g, ifindex: ifindex, queue: o.Queue, frames: frames, count: o.Count}, nil
}

func (l *live) burst(n int) error {
	if rem := l.count - l.done; uint64(n) > rem {
		n = int(rem)
	}
	if len(l.frames) == 1 {
		if err := l.g.Run(l.ifindex, l.queue, l.frames[0], uint32(n)); err != nil {
			return err
		}
	} else {
		for range n {
			if err := l.g.Run(l.ifindex, l.queue, l.frames[l.next], 1); err != nil {
				return err
			}
			l.sumLen += uint64(len(l.frames[l.next]))
			l.next = (l.next + 1) % len(l.frames)
		}
	}
	c, err := l.g.Counts()
	if err != nil {
		return err
	}
	l.done = c.Sent
	return nil
}

func (l *live) submitted() uint64 { return l.done }

func (l *live) sent() (uint64, error) {
	c, err := l.g.Counts()
	if err != nil {
		return 0, fmt.Errorf("gen live: %w", err)
	}
	return c.Sent, nil
}

func (l *live) drain(time.Time) error { return nil }

func (l *live) bytes(sent uint64) uint64 {
	if len(l.frames) == 1 {
		return sent * uint64(len(l.frames[0]))
	}
	return l.sumLen
}

func (l *live) close() error { return l.g.Close() }
