package dataplane

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/warpflow/warpflow/internal/convgen"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// TestResteerAfterCountKeepsFlows: two steered workers, SNAT, live
// traffic that all steers to worker 0 (worker 1 idle). A conntrack count
// served by both workers makes worker 1's table then, with no clock. The
// link goes quiet and the SNAT pool changes (a re-steering swap; every
// flow still steers to worker 0); the idle link's ticks do the copy. The
// clockless table's zero time used to move the new table's clock after
// the busy one's flows were copied, and with the engine's clock at or
// past 2^30 in its 32-bit cycle (some 37 of every 49.7 days, the real
// clock moved there) every flow expired: 100 before the swap, 0 after.
func TestResteerAfterCountKeepsFlows(t *testing.T) {
	base := uint64(time.Now().UnixMilli())
	base = base - base%(1<<32) + 0x60000000
	t0 := time.Now()
	was := clockMS
	clockMS = func() uint64 { return base + uint64(time.Since(t0).Milliseconds()) }
	t.Cleanup(func() { clockMS = was })

	const y = `name: %s
settings: {batch_size: 64, workers: 2}
stages:
  - {name: parse, type: parse}
  - {name: ct, type: conntrack, size: 4096}
  - name: nat
    type: nat
    conntrack: ct
    snat: [{match: {src: 10.0.0.0/8}, to: [%s]}]
  - {name: out, type: tx, port: out}
`
	ga, err := pipelines.Load("a.yaml", fmt.Appendf(nil, y, "a", "192.0.2.1, 192.0.2.2"))
	if err != nil {
		t.Fatal(err)
	}
	gb, err := pipelines.Load("b.yaml", fmt.Appendf(nil, y, "b", "192.0.2.1"))
	if err != nil {
		t.Fatal(err)
	}
	arena, err := rings.NewArena(rings.ArenaOptions{Frames: 4096, FrameSize: 2048, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	in := &floodPort{a: arena}
	server := netip.MustParseAddr("198.51.100.9")
	for i := 0; len(in.pkts) < 100; i++ {
		client := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		pkt := convgen.Frame(client, server, 0, layers.IPProtocolUDP,
			&layers.UDP{SrcPort: layers.UDPPort(1024 + i), DstPort: 53}, make([]byte, 8))
		if ga.Steering().Worker(pkt, 2) == 0 && gb.Steering().Worker(pkt, 2) == 0 {
			in.pkts = append(in.pkts, pkt)
		}
	}
	o := DefaultOptions()
	o.Workers = -1
	e, err := NewEngine(ga, arena, in, Outputs{Ports: map[string]Port{"out": NewNullPort("out")}}, o)
	if err != nil {
		t.Fatal(err)
	}
	stop := runLive(t, e)
	waitReceived(t, e, 5000)
	in.stop.Store(true)
	before, _ := flowCount(t, e, "before the swap") // worker 1 makes its (clockless) table here
	if before != len(in.pkts) {
		t.Fatalf("%d flows before the swap, want %d", before, len(in.pkts))
	}
	res, err := e.Swap(gb, Outputs{Ports: map[string]Port{"out": NewNullPort("out")}}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.WaitTakenUp(ctx, res); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // a few idle ticks (the copy happens at the first)
	after, _ := flowCount(t, e, "after the swap")
	if after != before {
		t.Errorf("%d flows before the re-steering swap, %d after (pool change %v, kept %v)", before, after, res.PoolChange, res.StateKept)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
