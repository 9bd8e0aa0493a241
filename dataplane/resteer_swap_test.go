package dataplane

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/gopacket/gopacket/layers"

	"github.com/warpflow/warpflow/internal/convgen"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// floodPort is a live input (it stamps no time) that gives first once,
// then fills every receive with pkts, round robin, until stopped.
type floodPort struct {
	a     *rings.Arena
	first [][]byte
	pkts  [][]byte
	i     int
	seq   uint64
	stop  atomic.Bool
}

func (p *floodPort) Name() string { return "flood" }
func (p *floodPort) Receive(b *rings.Batch) (int, error) {
	n := 0
	for !p.stop.Load() && b.Len() < b.Cap() {
		addr, ok := p.a.Alloc()
		if !ok {
			break
		}
		var pkt []byte
		if p.i < len(p.first) {
			pkt = p.first[p.i]
		} else {
			pkt = p.pkts[(p.i-len(p.first))%len(p.pkts)]
		}
		p.i++
		copy(p.a.Frame(addr)[addr&uint64(p.a.FrameSize()-1):], pkt)
		b.Append(rings.Desc{Addr: addr, Len: uint32(len(pkt))}, p.seq, 0)
		p.seq++
		n++
	}
	return n, nil
}
func (p *floodPort) Transmit(*rings.Arena, []rings.Desc) (int, error) { return 0, ErrNotTransmitter }
func (p *floodPort) Recycle(descs []rings.Desc) {
	for _, d := range descs {
		p.a.Free(d.Addr)
	}
}
func (p *floodPort) Close() error { return nil }

// poolGraphs returns two pipelines of workers steered workers that SNAT
// 10/8 to a pool, ga to 192.0.2.1 and .2, gb to .1 alone: a swap between
// them keeps the conntrack table and the worker count and changes the
// steering (a re-steer). before is stages put ahead of the conntrack
// stage (YAML list items, indented two spaces), or "".
func poolGraphs(t *testing.T, workers int, before string) (ga, gb *pipelines.Graph) {
	t.Helper()
	const y = `name: %s
settings: {batch_size: 64, workers: %d}
stages:
  - {name: parse, type: parse}
%s  - {name: ct, type: conntrack, size: 4096}
  - name: nat
    type: nat
    conntrack: ct
    snat: [{match: {src: 10.0.0.0/8}, to: [%s]}]
  - {name: out, type: tx, port: out}
`
	load := func(name, pool string) *pipelines.Graph {
		g, err := pipelines.Load(name+".yaml", fmt.Appendf(nil, y, name, workers, before, pool))
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	return load("a", "192.0.2.1, 192.0.2.2"), load("b", "192.0.2.1")
}

// worker0Flows returns n UDP packets of n flows (one client address
// each) that ga and gb, of workers workers, both steer to worker 0.
func worker0Flows(ga, gb *pipelines.Graph, workers, n int) [][]byte {
	server := netip.MustParseAddr("198.51.100.9")
	var pkts [][]byte
	for i := 0; len(pkts) < n; i++ {
		client := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		pkt := convgen.Frame(client, server, 0, layers.IPProtocolUDP,
			&layers.UDP{SrcPort: layers.UDPPort(1024 + i%50000), DstPort: 53}, make([]byte, 8))
		if ga.Steering().Worker(pkt, workers) == 0 && gb.Steering().Worker(pkt, workers) == 0 {
			pkts = append(pkts, pkt)
		}
	}
	return pkts
}

// floodEngine runs g (its own worker count) live on a floodPort of pkts;
// stop stops the engine (the port keeps sending until in.stop is set).
func floodEngine(t *testing.T, g *pipelines.Graph, pkts [][]byte) (e *Engine, in *floodPort, stop func() error) {
	t.Helper()
	arena, err := rings.NewArena(rings.ArenaOptions{Frames: 4096, FrameSize: 2048, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	in = &floodPort{a: arena, pkts: pkts}
	o := DefaultOptions()
	o.Workers = -1
	e, err = NewEngine(g, arena, in, Outputs{Ports: map[string]Port{"out": NewNullPort("out")}}, o)
	if err != nil {
		t.Fatal(err)
	}
	return e, in, runLive(t, e)
}

// TestResteerSwapUnderLoad: two steered workers, SNAT to two pool
// addresses, live traffic that all steers to worker 0, so worker 1 gets
// only empty sub-batches (ticks). A swap to another pool keeps the worker
// count but changes the steering: each new worker takes its flows from
// every old worker's table. It used to be taken up at a round boundary
// with older rounds still in flight, and worker 1's first tick copied
// worker 0's table while worker 0 was still tracking into it (a data
// race, reported by -race in 6 of 6 runs, and flows made after the copy
// lost). Such a swap now gets an executor of its own, started once the
// old one is closed (PoolChange), and the flows the tables hold after it
// agree with the entries counter.
func TestResteerSwapUnderLoad(t *testing.T) {
	ga, gb := poolGraphs(t, 2, "")
	e, in, stop := floodEngine(t, ga, worker0Flows(ga, gb, 2, 30000))
	waitReceived(t, e, 20000)
	res := attackSwap(t, e, gb, true)
	if !res.PoolChange {
		t.Error("a swap that re-steers the flows of a kept table ran on the old executor")
	}
	if fmt.Sprint(res.StateKept) != "[ct]" {
		t.Errorf("state kept %v, want [ct]", res.StateKept)
	}
	at := e.Stats().Received
	waitReceived(t, e, at+20000) // traffic goes on under the new plan
	in.stop.Store(true)
	flowCount(t, e, "after the re-steering swap") // the entries counter agrees with the tables
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
