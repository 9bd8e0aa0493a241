package dataplane

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/warpflow/warpflow/internal/convgen"
	"github.com/warpflow/warpflow/rings"
)

// TestIdleLinkExpiresFlows: on a live port (one that leaves the packets'
// time to the engine) a link that goes quiet still expires its flows:
// the engine ticks its idle workers with its clock (pipelines.Ticker),
// the tables sweep on it, and the entries gauge, the expiries counter
// and the listing agree, inline, with a pool of one worker and with two
// (steered): the ticks go out as empty batches and empty rounds. Before, an idle worker's clock stood
// where its last packet left it and every flow stayed listed, and
// counted, until traffic came back. A port that stamps its own times (a
// replay: the capture's clock) gets no ticks: its flows stay, whatever
// the engine's clock does, so a replay stays deterministic.
func TestIdleLinkExpiresFlows(t *testing.T) {
	for _, tc := range []struct {
		workers int
		stamps  bool // the port stamps its own times, as a replay does
	}{{0, false}, {1, false}, {2, false}, {0, true}, {1, true}, {2, true}} {
		t.Run(fmt.Sprintf("workers=%d,replaylike=%v", tc.workers, tc.stamps), func(t *testing.T) {
			now := fakeClock(t)

			g := statefulGraphW(t, "idle", 64, 23, max(tc.workers, 1))
			arena, err := rings.NewArena(rings.ArenaOptions{Frames: 1024, FrameSize: 2048, Headroom: 256})
			if err != nil {
				t.Fatal(err)
			}
			in := &pushPort{a: arena, stamps: tc.stamps}
			o := DefaultOptions()
			o.Workers = tc.workers
			e, err := NewEngine(g, arena, in, Outputs{Ports: map[string]Port{"out": NewNullPort("out")}}, o)
			if err != nil {
				t.Fatal(err)
			}
			stop := runLive(t, e)
			defer func() {
				if err := stop(); err != nil {
					t.Error(err)
				}
			}()

			const flows = 16 // over 2 workers: both get some (checked below)
			server := netip.MustParseAddr("198.51.100.9")
			workersHit := map[int]bool{}
			for f := range flows {
				client := netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + f)}) // steering hashes addresses
				pkt := convgen.Frame(client, server, 0, layers.IPProtocolUDP,
					&layers.UDP{SrcPort: layers.UDPPort(4000 + f), DstPort: 53}, make([]byte, 8))
				if tc.workers > 1 {
					workersHit[g.Steering().Worker(pkt, tc.workers)] = true
				}
				in.push(pkt, now.Load())
			}
			if tc.workers > 1 && len(workersHit) != tc.workers {
				t.Fatalf("the %d flows steer to workers %v only: the test needs each to hold some", flows, workersHit)
			}
			waitCounter(t, e, "ct", "ct=new", flows-1)
			if n := e.stageCounter("ct", "entries"); n != flows {
				t.Fatalf("entries %d, want %d", n, flows)
			}

			waitReceived(t, e, flows) // completed, and the batch counted
			workerBatches := func() (n uint64) {
				if x := e.Stats().Executor; x != nil {
					for _, w := range x.Workers {
						n += w.Batches
					}
				}
				return n
			}
			batches, wb := e.Stats().Batches, workerBatches()
			// The UDP timeout (30 s) passes with no packet; the test's
			// clock then moves 100 ms a poll, as a real one would.
			now.Add(31_000)
			flowCount := func() int {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				fl, err := e.Flows(ctx, FlowQuery{})
				if err != nil {
					t.Fatal(err)
				}
				return fl.Matched
			}
			if tc.stamps {
				// A replay-like port: 400 ms of the wall clock, 40 s of
				// the engine's, at least 4 ticks' worth; no tick may come.
				for range 400 {
					time.Sleep(time.Millisecond)
					now.Add(100)
				}
				if n := e.stageCounter("ct", "expiries"); n != 0 {
					t.Fatalf("%d flows expired on a port with its own clock: ticks reached a replay", n)
				}
				if n := flowCount(); n != flows {
					t.Fatalf("%d flows listed on a port with its own clock, want all %d", n, flows)
				}
				return
			}
			deadline := time.Now().Add(10 * time.Second)
			for e.stageCounter("ct", "expiries") < flows || e.stageCounter("ct", "entries") != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("10 s after the timeout passed on an idle link: %d of %d flows expired, entries %d",
						e.stageCounter("ct", "expiries"), flows, e.stageCounter("ct", "entries"))
				}
				time.Sleep(time.Millisecond)
				now.Add(100)
			}
			if n := flowCount(); n != 0 {
				t.Fatalf("%d flows listed after every one expired", n)
			}
			// The ticks' empty batches are no traffic: the batch count
			// (received / batches is the fill operators read) stays.
			if got := e.Stats().Batches; got != batches {
				t.Fatalf("batches %d after the idle ticks, %d before: empty batches counted", got, batches)
			}
			if got := workerBatches(); got != wb {
				t.Fatalf("the workers' batches %d after the idle ticks, %d before: empty batches counted", got, wb)
			}
		})
	}
}
