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

// TestResteerChainTickCost: four steered workers on a live link whose
// packets never reach the conntrack stage (a filter before it drops
// them), and 12 swaps that alternate the SNAT pool (each re-steers: a
// pool change). No ct instance ever has a clock; each new instance's
// carry pointed at all four of the plan before, and a tick walked the
// 4^d paths (61 ms after 12 swaps) and kept every old plan alive. A tick
// now lets go of a carry with no clock in it, and walks a plan at a time.
// The bound guards the growth, not a speed.
func TestResteerChainTickCost(t *testing.T) {
	const y = `name: %s
settings: {batch_size: 64, workers: 4}
stages:
  - {name: parse, type: parse}
  - {name: acl, type: filter, default: "drop:policy"}
  - {name: ct, type: conntrack, size: 1024}
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
	for i := range 64 {
		client := netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})
		in.pkts = append(in.pkts, convgen.Frame(client, server, 0, layers.IPProtocolUDP,
			&layers.UDP{SrcPort: layers.UDPPort(1024 + i), DstPort: 53}, make([]byte, 8)))
	}
	o := DefaultOptions()
	o.Workers = -1
	e, err := NewEngine(ga, arena, in, Outputs{Ports: map[string]Port{"out": NewNullPort("out")}}, o)
	if err != nil {
		t.Fatal(err)
	}
	stop := runLive(t, e)
	waitReceived(t, e, 1000)
	const swaps = 12
	for i := range swaps {
		g := gb
		if i%2 == 1 {
			g = ga
		}
		if res := attackSwap(t, e, g, true); !res.PoolChange {
			t.Fatalf("swap %d: no pool change", i)
		}
	}
	in.stop.Store(true)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	r := e.cur.runners[0]
	start := time.Now()
	r.Tick(clockMS())
	el := time.Since(start)
	t.Logf("one idle tick after %d re-steering swaps, 4 workers: %v", swaps, el)
	if el > 50*time.Millisecond {
		t.Fatalf("an idle tick took %v after %d swaps (4^%d carries walked)", el, swaps, swaps)
	}
}
