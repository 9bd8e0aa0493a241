package afxdp

import (
	"errors"
	"testing"
	"time"
)

// fakeTX is a TX ring and its completions as lastFlush sees them: each
// kick sends up to perKick frames (a copy-mode sendto's budget), except
// the kicks listed in stall, which send nothing (a full completion ring),
// and every kick after dead (the device refusing).
type fakeTX struct {
	pending, perKick int
	kicks, reaps     int
	stall            map[int]bool
	dead             int // kicks from this one on send nothing; 0: never
	err              error
}

func (f *fakeTX) kick() error {
	f.kicks++
	if f.err != nil {
		return f.err
	}
	if f.stall[f.kicks] || (f.dead > 0 && f.kicks >= f.dead) {
		return nil
	}
	f.pending -= min(f.pending, f.perKick)
	return nil
}

func (f *fakeTX) flush(pause time.Duration, deadline time.Time) error {
	return lastFlush(func() int { return f.pending }, f.kick, func() { f.reaps++ }, pause, deadline)
}

// TestLastFlushBounded: the last flush at Settle sends what a willing ring
// takes, and gives up after a fixed number of kicks on a ring that takes
// nothing or too little: it never loops unboundedly, and with a pause it
// never sleeps past its deadline.
func TestLastFlushBounded(t *testing.T) {
	far := time.Now().Add(time.Hour)
	tests := []struct {
		name        string
		tx          fakeTX
		wantPending int
		wantKicks   int
		wantErr     bool
	}{
		// 200 frames at 32 a sendto: 7 kicks, the last one partial.
		{"drains", fakeTX{pending: 200, perKick: copyModeTXBudget}, 0, 7, false},
		{"nothing pending", fakeTX{pending: 0, perKick: 32}, 0, 0, false},
		// The link is down: every kick is refused; two stalls end it.
		{"link down", fakeTX{pending: 200, perKick: 0}, 200, settleStalls, false},
		// One kick with no room on the completion ring, then room again
		// (the reap after it): the flush goes on.
		{"one stall", fakeTX{pending: 100, perKick: 32, stall: map[int]bool{2: true}}, 0, 5, false},
		// The device takes 3 frames and stops: two stalls after that.
		{"device stops", fakeTX{pending: 100, perKick: 3, dead: 2}, 97, 1 + settleStalls, false},
		// Too slow to finish: the bound is the kicks 200 frames need at
		// the budget, and the spare ones.
		{"slow", fakeTX{pending: 200, perKick: 1}, 200 - (200/copyModeTXBudget + settleSpareKicks), 200/copyModeTXBudget + settleSpareKicks, false},
		{"kick fails", fakeTX{pending: 50, perKick: 32, err: errors.New("kick: boom")}, 50, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.tx
			err := f.flush(0, far)
			if (err != nil) != tt.wantErr || f.pending != tt.wantPending || f.kicks != tt.wantKicks {
				t.Errorf("lastFlush: pending %d after %d kicks, err %v; want %d after %d, error %v",
					f.pending, f.kicks, err, tt.wantPending, tt.wantKicks, tt.wantErr)
			}
			if f.kicks > 0 && f.reaps < f.kicks {
				t.Errorf("%d kicks with %d reaps: completions must be taken back between kicks", f.kicks, f.reaps)
			}
		})
	}
}

// TestLastFlushDeadline: on a zero-copy socket (a pause between kicks, for
// the driver's NAPI) a ring that never drains ends the flush by the
// deadline, not by a sleep past it.
func TestLastFlushDeadline(t *testing.T) {
	f := fakeTX{pending: 5000, perKick: 0}
	start := time.Now()
	if err := f.flush(10*time.Millisecond, start.Add(15*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("lastFlush took %v with a 15ms deadline", took)
	}
	if f.kicks > settleStalls {
		t.Errorf("%d kicks on a ring that takes nothing, want at most %d", f.kicks, settleStalls)
	}
	// A ring that moves a frame per kick keeps resetting the stalls: the
	// kick bound ends it (pause only after a stall).
	g := fakeTX{pending: 5000, perKick: 1}
	if err := g.flush(time.Hour, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if want := 5000/copyModeTXBudget + settleSpareKicks; g.kicks != want {
		t.Errorf("%d kicks on a slow ring, want the bound %d", g.kicks, want)
	}
}
