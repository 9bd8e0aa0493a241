package daemon_test

import (
	"testing"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/daemon"
)

// TestFramesLostCarried: the engine's frames lost (dataplane.Stats.FramesLost:
// frames a Completer output never gave back within the drain) reach a
// queue's Counts, the totals sum them over the queues, they leave the
// balance as it was (a share of transmitted, not a verdict), and the stats
// line shows the totals' sum right after tx_abandoned. frames_lost is the
// model's own counter: one metric family, declared by no stage, executor
// or socket.
func TestFramesLostCarried(t *testing.T) {
	q0 := daemon.FromEngine("dp0/0", dataplane.Stats{Received: 10, Transmitted: 10, FramesLost: 7})
	q1 := daemon.FromEngine("dp0/1", dataplane.Stats{Received: 5, Transmitted: 4, Dropped: 1, FramesLost: 2})
	if q0.FramesLost != 7 || q1.FramesLost != 2 {
		t.Fatalf("queues' frames_lost %d and %d, want the engines' 7 and 2", q0.FramesLost, q1.FramesLost)
	}
	if !q0.Balanced || !q1.Balanced {
		t.Errorf("queues balanced %v, %v with frames lost: they are a share of transmitted, want balanced", q0.Balanced, q1.Balanced)
	}
	var tot control.Counts
	daemon.AddCounts(&tot, &q0.Counts)
	daemon.AddCounts(&tot, &q1.Counts)
	if tot.FramesLost != 9 || tot.Transmitted != 14 {
		t.Errorf("totals: frames_lost %d, transmitted %d; want 9 and 14", tot.FramesLost, tot.Transmitted)
	}

	for _, d := range daemon.DeclaredCounters() {
		for _, m := range d.Metrics() {
			if d.Name == "frames_lost" || m.Name == "warpflow_frames_lost_total" {
				t.Errorf("%s declares %s (%s): frames_lost is the model's own family", d.Owner, d.Name, m.Name)
			}
		}
	}
	n := 0
	for _, f := range control.Families() {
		if f.Name == "warpflow_frames_lost_total" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("warpflow_frames_lost_total defined %d times, want once", n)
	}

	attrs := daemon.StatsLine(control.Stats{Totals: tot})
	for i := 0; i+3 < len(attrs); i += 2 {
		if attrs[i] == "tx_abandoned" {
			if attrs[i+2] != "frames_lost" || attrs[i+3] != uint64(9) {
				t.Errorf("stats line after tx_abandoned: %v=%v, want frames_lost=9", attrs[i+2], attrs[i+3])
			}
			return
		}
	}
	t.Errorf("stats line has no tx_abandoned: %v", attrs)
}
