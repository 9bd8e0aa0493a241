package dataplane

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/warpflow/warpflow/internal/convgen"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// TestBusyWorkerStarvedStageExpires: a live engine whose traffic turns
// into a flood that a filter drops before conntrack (here: after the
// flows' first packets, every packet goes to UDP port 9, blocked) keeps
// its workers busy (every receive full), so the engine's idle ticks never
// come to them, yet the conntrack stage behind the filter gets nothing. Its flows must expire all the same
// (the runner ticks a stage that got no packet for IdleTickMS), inline
// and with two steered workers. Before, entries stayed at the flow count
// for as long as the blocked traffic lasted.
func TestBusyWorkerStarvedStageExpires(t *testing.T) {
	const y = `name: starve
settings: {batch_size: 64, workers: %d}
stages:
  - {name: parse, type: parse}
  - name: acl
    type: filter
    default: accept
    rules:
      - {proto: udp, dst_port: 9, action: "drop:blocked"}
  - {name: ct, type: conntrack, size: 4096, timeouts: {udp: 1}}
  - {name: out, type: tx, port: out}
`
	for _, workers := range []int{0, 2} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			now := fakeClock(t)
			g, err := pipelines.Load("s.yaml", fmt.Appendf(nil, y, max(workers, 1)))
			if err != nil {
				t.Fatal(err)
			}
			arena, err := rings.NewArena(rings.ArenaOptions{Frames: 1024, FrameSize: 2048, Headroom: 256})
			if err != nil {
				t.Fatal(err)
			}
			const flows = 16
			server := netip.MustParseAddr("198.51.100.9")
			udp := func(f, dport int) []byte {
				client := netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + f)})
				return convgen.Frame(client, server, 0, layers.IPProtocolUDP,
					&layers.UDP{SrcPort: layers.UDPPort(4000 + f), DstPort: layers.UDPPort(dport)}, make([]byte, 8))
			}
			// The flows' first packets once, then a flood of blocked
			// packets from every client, so that every receive is full
			// and, with two workers, both keep getting packets (the
			// steering hashes addresses): neither is ever idle.
			in := &floodPort{a: arena}
			workersHit := map[int]bool{}
			for f := range flows {
				in.first = append(in.first, udp(f, 53))
				in.pkts = append(in.pkts, udp(f, 9))
				if workers > 1 {
					workersHit[g.Steering().Worker(udp(f, 9), workers)] = true
				}
			}
			if workers > 1 && len(workersHit) != workers {
				t.Fatalf("the blocked packets steer to workers %v only", workersHit)
			}
			o := DefaultOptions()
			o.Workers = workers
			e, err := NewEngine(g, arena, in, Outputs{Ports: map[string]Port{"out": NewNullPort("out")}}, o)
			if err != nil {
				t.Fatal(err)
			}
			stop := runLive(t, e)
			defer func() {
				in.stop.Store(true)
				if err := stop(); err != nil {
					t.Error(err)
				}
			}()
			waitCounter(t, e, "ct", "ct=new", flows-1)
			// The clock moves 20 ms a millisecond; the flows time out
			// after 1 s, and the sweep takes them within its period.
			deadline := time.Now().Add(10 * time.Second)
			for e.stageCounter("ct", "expiries") < flows || e.stageCounter("ct", "entries") != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("10 s of blocked flood (%d ms of the engine's clock): %d of %d flows expired, entries %d",
						now.Load()-1_700_000_000_000, e.stageCounter("ct", "expiries"), flows, e.stageCounter("ct", "entries"))
				}
				time.Sleep(time.Millisecond)
				now.Add(20)
			}
			// The blocked packets never reached conntrack (it tracked
			// the flows' first packets alone: ticks expired them), and
			// the flood went on throughout.
			if n := e.stageCounter("ct", "ct=new"); n != flows {
				t.Fatalf("conntrack tracked %d packets as new, want the %d flows' first only", n, flows)
			}
			if r := e.Stats().Received; r < 10*flows {
				t.Fatalf("received %d packets: the flood did not flow", r)
			}
		})
	}
}
