package dataplane

import (
	"fmt"
	"reflect"
	"time"

	"github.com/warpflow/warpflow/rings"
)

// completer is one Completer output and what the engine knows of it. The
// counters are the I/O loop's own.
type completer struct {
	port Completer
	// held is how many frames the port accepted and has not given back:
	// the engine's count, which bounds what Complete may return.
	held int
	// excess counts descriptors the port gave back beyond what it held: a
	// port bug, reported at the end of the run.
	excess int
	// lost is what it had not given back when the drain ended.
	lost int
	// reports: the port is a FrameReporter, counting its held frames in
	// its own places; tracks: a FrameTracker, recording its own moves.
	reports, tracks bool
	// owner is the port's home in TrackFrames mode: the place the engine
	// moves frames to when the port takes them (for a port that does not
	// track itself, "output NAME", where they stay until completed).
	owner rings.Owner
}

// addCompleter registers p if it is a Completer (once, however many roles
// it has) and returns its index in e.comps, or -1.
func (e *Engine) addCompleter(p Port) int {
	c, ok := p.(Completer)
	if !ok {
		return -1
	}
	for i := range e.comps {
		if samePort(e.comps[i].port, c) {
			return i
		}
	}
	cc := completer{port: c}
	if e.tracker != nil {
		switch ft, ok := p.(FrameTracker); {
		case ok && e.inTracks && samePort(p, e.in):
			cc.owner, cc.tracks = e.inHome, true
		case ok:
			cc.owner, cc.tracks = ft.TrackFrames(e.tracker), true
		default:
			cc.owner = e.tracker.Owner("output " + p.Name())
		}
	}
	e.comps = append(e.comps, cc)
	return len(e.comps) - 1
}

// samePort reports whether a and b are the same port, without panicking on
// a port type that is not comparable.
func samePort(a, b Port) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

// accepted records that Completer k took n frames (the prefix of a
// transmit it accepted): those frames are the port's now.
func (e *Engine) accepted(k int, n int) {
	e.comps[k].held += n
}

// trackOffer records, in TrackFrames mode, that list is about to be offered
// to output k: to a Completer that tracks itself the frames go to its home
// first, so that its Transmit can record taking them on.
func (e *Engine) trackOffer(k int, list []rings.Desc) {
	if k < 0 || e.trackErr != nil || !e.comps[k].tracks {
		return
	}
	c := &e.comps[k]
	if err := e.tracker.MoveDescs(list, e.inFlight, c.owner); err != nil {
		e.trackErr = fmt.Errorf("frame offered to %s: %w", c.port.Name(), err)
	}
}

// trackTaken records, in TrackFrames mode, that output k accepted the first
// n frames of list and refused the rest.
func (e *Engine) trackTaken(k int, list []rings.Desc, n int) {
	if k < 0 || e.trackErr != nil {
		return
	}
	c := &e.comps[k]
	var err error
	if c.tracks {
		err = e.tracker.MoveDescs(list[n:], c.owner, e.inFlight) // refused: still at home
	} else {
		err = e.tracker.MoveDescs(list[:n], e.inFlight, c.owner)
	}
	if err != nil {
		e.trackErr = fmt.Errorf("frame transmitted on %s: %w", c.port.Name(), err)
	}
}

// pollCompletions takes back every frame the Completers report done and
// recycles it to the input port. It reports whether any came back. I/O
// loop only; no allocation (compBuf is preallocated).
func (e *Engine) pollCompletions() bool {
	got := false
	for k := range e.comps {
		c := &e.comps[k]
		for c.held > 0 {
			done := c.port.Complete(e.compBuf[:0])
			if len(done) == 0 {
				break
			}
			got = true
			full := len(done) >= cap(e.compBuf)
			if len(done) > c.held {
				// More than the port holds: a port bug. Recycling the
				// excess could free a frame twice; count it instead.
				c.excess += len(done) - c.held
				done = done[:c.held]
			}
			c.held -= len(done)
			e.trackCompleted(c, done)
			e.recycleFrames(done)
			if !full {
				break
			}
			e.publish() // so the account stays exact between calls
		}
	}
	return got
}

// drainOutputs waits, at the end of a run, for the Completers to give back
// what they hold: at most Options.DrainTimeout, and not for a port that
// says it holds nothing more. What stays out is counted as lost.
func (e *Engine) drainOutputs() error {
	if !e.holds {
		return nil
	}
	deadline := time.Now().Add(e.opts.DrainTimeout)
	for idle := 0; ; {
		if e.pollCompletions() {
			e.publish()
			idle = 0
		}
		waiting := false
		for k := range e.comps {
			c := &e.comps[k]
			if c.held > 0 && c.port.Outstanding() > 0 {
				waiting = true
			}
		}
		if !waiting || time.Now().After(deadline) {
			break
		}
		idle++
		ioBackoff(idle)
	}
	var err error
	for k := range e.comps {
		c := &e.comps[k]
		if c.held == 0 {
			// It gave back all it took; frames it still claims to hold
			// are ones it returned twice.
			c.excess += c.port.Outstanding()
		}
		if c.excess > 0 && err == nil {
			err = fmt.Errorf("%s completed %d frames more than it held", c.port.Name(), c.excess)
		}
		if c.held == 0 {
			continue
		}
		c.lost += c.held
		if err == nil {
			err = fmt.Errorf("%d frames still held by %s after %v: %w", c.held, c.port.Name(), e.opts.DrainTimeout, ErrFramesLost)
		}
		c.held = 0
	}
	return err
}

// trackCompleted records, in TrackFrames mode, that frames a Completer gave
// back are the engine's again. A frame the engine already holds, or one on
// the free stack, has two owners: the error names the frame and both.
func (e *Engine) trackCompleted(c *completer, done []rings.Desc) {
	if e.tracker == nil || e.trackErr != nil {
		return
	}
	for _, d := range done {
		if err := e.tracker.Move(d.Addr, c.owner, e.inFlight); err != nil {
			e.trackErr = fmt.Errorf("%s completed a frame it did not hold: %w", c.port.Name(), err)
			return
		}
	}
}
