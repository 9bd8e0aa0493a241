package dataplane

import (
	"context"
	"testing"
	"time"

	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// balanced reports whether a snapshot's verdicts add up.

// TestRunContextStops runs an endless input (a live port never returns
// io.EOF) until the context is cancelled: RunContext returns nil, having
// finished what was in flight and taken back every frame a Completer held.
// Snapshots read from this goroutine while it runs balance and grow, and
// the last one equals the final report.
func TestRunContextStops(t *testing.T) {
	for _, completer := range []bool{false, true} {
		for _, workers := range []int{0, 2} {
			g, err := pipelines.Load("t.yaml", []byte(holdPipeline))
			if err != nil {
				t.Fatal(err)
			}
			arena, _ := rings.NewArena(rings.ArenaOptions{Frames: 256, FrameSize: 2048, Headroom: 256})
			in := &genPort{a: arena, tmpl: genTemplates()}
			var tx Port = NewNullPort("p")
			var hold *holdPort
			if completer {
				hold = newHoldPort("p", arena, 64, 3)
				tx = hold
			}
			o := DefaultOptions()
			o.Workers, o.BatchSize, o.TrackFrames = workers, 32, true
			e, err := NewEngine(g, arena, in, Outputs{Ports: map[string]Port{"p": tx}, Pass: NewNullPort("kernel")}, o)
			if err != nil {
				t.Fatal(err)
			}
			// Before the run: the pipeline's reason at zero (internal_* and the
			// engine's only once they happen).
			if s := e.Stats(); s.Received != 0 || len(s.Drops) != 1 || s.Drops[0].Reason != "tcp" || len(s.Ports) != 1 {
				t.Fatalf("snapshot before the run: %+v", s)
			}
			ctx, cancel := context.WithCancel(context.Background())
			res := make(chan error, 1)
			go func() { res <- e.RunContext(ctx, nil) }()
			var last Stats
			deadline := time.Now().Add(10 * time.Second)
			for last.Received < 20000 && time.Now().Before(deadline) {
				s := e.Stats()
				if !s.Balanced() || s.Received < last.Received || s.Batches < last.Batches {
					t.Fatalf("completer=%v workers %d: snapshot %+v after %+v", completer, workers, s, last)
				}
				last = s
				time.Sleep(100 * time.Microsecond)
			}
			cancel()
			select {
			case err := <-res:
				if err != nil {
					t.Fatalf("completer=%v workers %d: a stop returned %v", completer, workers, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("completer=%v workers %d: RunContext did not return after cancel", completer, workers)
			}
			if last.Received < 20000 {
				t.Fatalf("completer=%v workers %d: only %d packets seen running", completer, workers, last.Received)
			}
			rep, s := e.Report(), e.Stats()
			if !rep.Balanced || s.Received != rep.Received || s.Transmitted != rep.Transmitted || s.Dropped != rep.Dropped || s.Passed != rep.Passed ||
				s.Batches != rep.Timing.Batches || s.Ports[0].Packets != rep.Ports[0].Packets || rep.Received < last.Received || rep.Dropped == 0 || rep.Passed == 0 {
				t.Fatalf("completer=%v workers %d: final snapshot %+v, report %s", completer, workers, s, rep.AccountingLine())
			}
			if a := e.frames(); a.Free != arena.Frames() || arena.FreeFrames() != arena.Frames() {
				t.Fatalf("completer=%v workers %d: frames after the stop: %+v", completer, workers, a)
			}
			if hold != nil && (hold.completed != hold.accepted || hold.accepted != rep.Transmitted || hold.corrupted != 0) {
				t.Fatalf("workers %d: port took %d, gave back %d, corrupted %d; transmitted %d", workers, hold.accepted, hold.completed, hold.corrupted, rep.Transmitted)
			}
		}
	}
}

// TestRunContextAlreadyDone: a context done before the run stops it at
// once, cleanly.
func TestRunContextAlreadyDone(t *testing.T) {
	g, _ := pipelines.Load("t.yaml", []byte(uniformPipeline))
	for _, workers := range []int{0, 1} {
		arena, _ := rings.NewArena(rings.ArenaOptions{Frames: 64, FrameSize: 2048})
		o := DefaultOptions()
		o.Workers = workers
		e, err := NewEngine(g, arena, &genPort{a: arena, tmpl: genTemplates()}, Outputs{Ports: map[string]Port{"p": NewNullPort("p")}}, o)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := e.RunContext(ctx, nil); err != nil {
			t.Fatalf("workers %d: %v", workers, err)
		}
		if s := e.Stats(); !s.Balanced() || arena.FreeFrames() != arena.Frames() {
			t.Fatalf("workers %d: %+v, %d/%d frames free", workers, s, arena.FreeFrames(), arena.Frames())
		}
	}
}

// TestSnapshotMatchesReport: after a replay, the snapshot has the report's
// counters, with every reason listed (zeros included) in a fixed order.
func TestSnapshotMatchesReport(t *testing.T) {
	g := defaultGraph(t)
	arena, _ := rings.NewArena(rings.DefaultArenaOptions())
	in, err := OpenReplay("../testdata/captures/mixed.pcap", arena, DefaultReplayOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	outs := Outputs{Ports: map[string]Port{}, Pass: NewNullPort("pass")}
	for _, name := range g.Ports() {
		outs.Ports[name] = NewNullPort(name)
	}
	e, err := NewEngine(g, arena, in, outs, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Run(nil); err != nil {
		t.Fatal(err)
	}
	rep, s := e.Report(), e.Stats()
	if s.Received != rep.Received || s.ReceivedBytes != rep.ReceivedBytes || s.Transmitted != rep.Transmitted || s.Dropped != rep.Dropped ||
		s.Passed != rep.Passed || s.PassedBytes != rep.PassedBytes || !s.Balanced() || s.Received == 0 {
		t.Fatalf("snapshot %+v, report %s", s, rep.AccountingLine())
	}
	byReason := map[string]DropCount{}
	for _, d := range s.Drops {
		byReason[d.Reason] = d
	}
	for _, d := range rep.Drops {
		if byReason[d.Reason] != d {
			t.Errorf("drop %s: snapshot %+v, report %+v", d.Reason, byReason[d.Reason], d)
		}
	}
	for i, p := range rep.Ports {
		if s.Ports[i] != p {
			t.Errorf("port %d: snapshot %+v, report %+v", i, s.Ports[i], p)
		}
	}
}
