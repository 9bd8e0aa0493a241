package dataplane

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warpflow/warpflow/internal/convgen"
	"github.com/warpflow/warpflow/rings"
)

// TestReplayPoolKeepsCaptureClock: a replay on a pool of one worker
// (runExec) is on its capture's clock only, whatever the wall clock does.
// When a receive filled part of a slot and the next got nothing, the slot
// went to the worker with the Epoch that empty receive stamped (the wall
// clock): a wall-clock step of more than 12.4 days between two such
// batches (NTP correcting a bad RTC) jumped the table (every flow
// expired), and the same capture gave other verdicts (here: 5 expiries
// against none). A receive that appends nothing now leaves the batch's
// time as it was.
func TestReplayPoolKeepsCaptureClock(t *testing.T) {
	run := func(step uint64) map[string]uint64 {
		var now atomic.Uint64
		now.Store(1_700_000_000_000)
		was := clockMS
		clockMS = func() uint64 { return now.Add(step) }
		defer func() { clockMS = was }()

		g := statefulGraphW(t, "rw", 64, 23, 1)
		capture := convgen.Pcap(conversations(t, g, 6, 23), time.Unix(1700000000, 0))
		arena, err := rings.NewArena(rings.ArenaOptions{Frames: 1024, FrameSize: 2048, Headroom: 256})
		if err != nil {
			t.Fatal(err)
		}
		ro := DefaultReplayOptions()
		ro.Preload, ro.Loops = true, 4
		rp, err := NewReplay("c.pcap", bytes.NewReader(capture), arena, ro)
		if err != nil {
			t.Fatal(err)
		}
		o := DefaultOptions()
		o.Workers = 1
		e, err := NewEngine(g, arena, rp, Outputs{Ports: map[string]Port{"out": NewNullPort("out")}}, o)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Run(nil); err != nil {
			t.Fatal(err)
		}
		out := map[string]uint64{}
		for _, k := range []string{"ct=new", "ct=established", "ct=invalid", "expiries", "entries"} {
			out[k] = e.stageCounter("ct", k)
		}
		return out
	}
	steady := run(0)
	stepped := run(13 * 24 * 3600 * 1000) // the wall clock steps 13 days between receives
	for k, v := range steady {
		if stepped[k] != v {
			t.Errorf("replay counter %s: %d with a steady wall clock, %d with a stepping one (the replay saw the wall clock)", k, v, stepped[k])
		}
	}
	if steady["ct=new"] == 0 || steady["ct=established"] == 0 {
		t.Fatalf("the replay tracked nothing: %v", steady)
	}
}
