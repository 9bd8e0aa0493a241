package dataplane

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/warpflow/warpflow/internal/convgen"
	"github.com/warpflow/warpflow/rings"
)

// TestLiveClockGapExpiresFlows: a live port stamps no time; the engine
// stamps each receive with its clock, whose low 32 bits are Meta.Time.
// After a gap of 40 days with no packet (in 32 bits: a step back of 9.7
// days, which the table must ignore as it ignores any short step back),
// a reply to a flow made before the gap finds the flow expired, as it
// is: the batch's whole time (Batch.Epoch) tells the conntrack table of
// the gap. With one worker and with two (steered: the epoch must reach
// the workers' batches). Before, the table kept its clock where the gap
// began and the reply was established.
func TestLiveClockGapExpiresFlows(t *testing.T) {
	for _, workers := range []int{0, 2} {
		t.Run(fmt.Sprint("workers=", workers), func(t *testing.T) {
			now := fakeClock(t)

			g := statefulGraphW(t, "gap", 64, 23, max(workers, 1))
			arena, err := rings.NewArena(rings.ArenaOptions{Frames: 1024, FrameSize: 2048, Headroom: 256})
			if err != nil {
				t.Fatal(err)
			}
			in := &pushPort{a: arena}
			o := DefaultOptions()
			o.Workers = workers
			e, err := NewEngine(g, arena, in, Outputs{Ports: map[string]Port{"out": NewNullPort("out")}}, o)
			if err != nil {
				t.Fatal(err)
			}
			stop := runLive(t, e)
			defer func() { // before the clock is given back (a cleanup)
				if err := stop(); err != nil {
					t.Error(err)
				}
			}()

			client, server := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("198.51.100.9")
			udp := func(src, dst netip.Addr, sp, dp uint16) []byte {
				return convgen.Frame(src, dst, 0, layers.IPProtocolUDP, &layers.UDP{SrcPort: layers.UDPPort(sp), DstPort: layers.UDPPort(dp)}, make([]byte, 8))
			}
			in.push(udp(client, server, 4000, 53), now.Load())
			waitCounter(t, e, "ct", "ct=new", 0)
			qctx, qcancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer qcancel()
			fl, err := e.Flows(qctx, FlowQuery{Limit: 10})
			if err != nil || len(fl.Flows) != 1 {
				t.Fatalf("flows: %+v %v", fl, err)
			}
			f := fl.Flows[0]
			reply := udp(server, f.ReplyDst, 53, f.ReplyDstPort) // to the translated client

			in.push(reply, now.Add(1000))
			waitCounter(t, e, "ct", "ct=established", 0) // the reply matches the flow

			in.push(reply, now.Add(40*24*3600*1000))
			waitCounter(t, e, "ct", "ct=new", 1)
			if n := e.stageCounter("ct", "ct=established"); n != 1 {
				t.Fatalf("the reply after 40 days: established %d times, want once (before the gap only)", n)
			}
		})
	}
}

// pushPort is a live-like input: it stamps no time and gives what the
// test pushed, then nothing (idle) until more is pushed. A packet pushed
// for time at is given only by a receive the engine stamped at or after
// it (the engine stamps before it asks the port, and the test's clock
// may move between the two).
type pushPort struct {
	a   *rings.Arena
	mu  sync.Mutex
	q   []pushed
	seq uint64
	// stamps: give each packet its push time as its own (SetTime), as a
	// replay port gives the capture's, instead of the engine's stamp.
	stamps bool
}

type pushed struct {
	pkt []byte
	at  uint64
}

func (p *pushPort) push(pkt []byte, at uint64) {
	p.mu.Lock()
	p.q = append(p.q, pushed{pkt, at})
	p.mu.Unlock()
}

func (p *pushPort) Name() string { return "push" }
func (p *pushPort) Receive(b *rings.Batch) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for len(p.q) > 0 && b.Len() < b.Cap() && p.q[0].at <= b.Epoch() {
		addr, ok := p.a.Alloc()
		if !ok {
			break
		}
		pkt := p.q[0].pkt
		if p.stamps {
			b.SetTime(uint32(p.q[0].at))
		}
		p.q = p.q[1:]
		copy(p.a.Frame(addr)[addr&uint64(p.a.FrameSize()-1):], pkt)
		b.Append(rings.Desc{Addr: addr, Len: uint32(len(pkt))}, p.seq, 0)
		p.seq++
		n++
	}
	return n, nil
}
func (p *pushPort) Transmit(*rings.Arena, []rings.Desc) (int, error) { return 0, ErrNotTransmitter }
func (p *pushPort) Recycle(descs []rings.Desc) {
	for _, d := range descs {
		p.a.Free(d.Addr)
	}
}
func (p *pushPort) Close() error { return nil }

// fakeClock makes the engine's clock (clockMS) the returned counter,
// starting at 1_700_000_000_000 ms, for the rest of the test: the test
// moves time on by adding to it. The clock is put back by a cleanup,
// which runs after the engine's stop (cleanups run last first).
func fakeClock(t *testing.T) *atomic.Uint64 {
	now := new(atomic.Uint64)
	now.Store(1_700_000_000_000)
	was := clockMS
	clockMS = now.Load
	t.Cleanup(func() { clockMS = was })
	return now
}
