package dataplane

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/warpflow/warpflow/internal/convgen"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"

	"github.com/warpflow/warpflow/internal/testwait"
)

// The stateful engine tests: flows steered to workers give the same
// outputs as one worker, tables survive swaps under load, and the control
// plane lists and flushes flows while the engine runs.

const statefulYAML = `name: %s
settings: {batch_size: %d, workers: %d}
stages:
  - {name: parse, type: parse}
  - {name: ct, type: conntrack, size: 4096}
  - name: acl
    type: filter
    rules:
      - {ct: invalid, action: "drop:invalid"}
      - {ct: new, proto: tcp, dst_port: %d, action: "drop:blocked"}
  - name: nat
    type: nat
    conntrack: ct
    snat: [{match: {src: 10.0.0.0/8}, to: 192.0.2.1}]
  - {name: out, type: tx, port: out}
`

func statefulGraph(t testing.TB, name string, batch int, blocked int) *pipelines.Graph {
	return statefulGraphW(t, name, batch, blocked, 1)
}

func statefulGraphW(t testing.TB, name string, batch, blocked, workers int) *pipelines.Graph {
	t.Helper()
	g, err := pipelines.Load(name+".yaml", fmt.Appendf(nil, statefulYAML, name, batch, workers, blocked))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

var natAddr = netip.MustParseAddr("192.0.2.1")

// steeredPort picks a client port from base up that the NAT keeps for a
// flow from client to server with 1, 2 and 3 workers alike (its port is
// steered back to its flow's worker for each count), so that a capture's
// replies can address it whatever the worker count.
func steeredPort(g *pipelines.Graph, client, server netip.Addr, base uint16) uint16 {
	st := g.Steering()
	a, b := client.As16(), server.As16()
	var a4, b4 [16]byte
	copy(a4[:4], a[12:])
	copy(b4[:4], b[12:])
	for p := base; ; p++ {
		ok := true
		for _, n := range []int{2, 3} {
			if w := st.TupleWorker(&a4, &b4, p, 80, true, 6, false, n); int(p)%n != w {
				ok = false
			}
		}
		if ok {
			return p
		}
	}
}

// conversations is a capture of n clients behind the NAT talking to
// servers: TCP (handshake, data both ways, close; some reset mid-stream,
// some with an out-of-window segment, some to the blocked port), UDP
// exchanges, pings, unreachables, and a mid-stream ACK of no flow.
func conversations(t testing.TB, g *pipelines.Graph, n int, blocked uint16) []convgen.Packet {
	t.Helper()
	var convs []*convgen.Conv
	for i := range n {
		c := netip.AddrFrom4([4]byte{10, 0, byte(i / 200), byte(1 + i%200)})
		s := netip.AddrFrom4([4]byte{198, 51, 100, byte(1 + i%7)})
		port := steeredPort(g, c, s, uint16(20000+i*7))
		start := time.Duration(i) * time.Millisecond
		cv := convgen.NewConv(convgen.Endpoint{Addr: c, Port: port}, convgen.Endpoint{Addr: s, Port: 80},
			convgen.Endpoint{Addr: natAddr, Port: port}, start, 50*time.Microsecond, uint32(i)*1000, uint32(i)*7000)
		switch i % 6 {
		case 0, 1:
			cv.Handshake().Data(0, 100).Data(1, 1200).Data(0, 10).Close()
		case 2:
			cv.Handshake().Data(0, 50).Reset(1).Segment(0, "PA", 0, 0, 10)
		case 3:
			cv.Handshake().OutOfWindow().Data(1, 40)
		case 4:
			cv.UDP(0, 30).UDP(1, 60).UDP(0, 20).Ping(0, 1).Ping(1, 1).Unreachable(3, s)
		case 5:
			cv.Server.Port = blocked
			cv.Handshake().Segment(0, "A", 5, 5, 0)
		}
		convs = append(convs, cv)
	}
	return convgen.Merge(convs...)
}

// TestSteeredMatchesOneWorker replays stateful conversations through
// conntrack, a ct filter and NAT with 0, 1, 2 and 3 workers: outputs and
// counters are byte-identical (flows steered, per-worker tables, outputs
// back in receive order), and the run exercised every class.
func TestSteeredMatchesOneWorker(t *testing.T) {
	g := statefulGraph(t, "st", 64, 23)
	capture := convgen.Pcap(conversations(t, g, 300, 23), time.Unix(1700000000, 0))
	run := func(workers int) (string, Report) {
		out := t.TempDir()
		cfg := ReplayConfig{Capture: "conv.pcap", CaptureData: capture, Graph: g, OutDir: out, Engine: DefaultOptions(), Replay: DefaultReplayOptions()}
		cfg.Engine.Workers = workers
		cfg.Engine.TrackFrames = true
		rep, err := Replay(cfg)
		if err != nil {
			t.Fatalf("workers %d: %v", workers, err)
		}
		if !rep.Balanced {
			t.Fatalf("workers %d: %s", workers, rep.AccountingLine())
		}
		return out, rep
	}
	ref, refRep := run(0)
	counts := map[string]uint64{}
	for _, s := range refRep.Stages {
		for _, g := range s.Counters {
			for _, kv := range g.Values {
				counts[s.Name+" "+g.Text(kv)] = kv.Value
			}
		}
	}
	for _, k := range []string{"ct ct=new", "ct ct=established", "ct ct=related", "ct ct=invalid", "ct invalid=tcp_window", "ct invalid=tcp_new", "nat snat", "nat translated", "nat icmp_errors"} {
		if counts[k] == 0 {
			t.Errorf("the capture never exercised %q (counters %v)", k, counts)
		}
	}
	for _, w := range []int{1, 2, 3} {
		out, rep := run(w)
		if !reflect.DeepEqual(rep.Deterministic(), refRep.Deterministic()) {
			t.Fatalf("workers %d: counters differ from inline:\n got %+v\nwant %+v", w, rep.Deterministic().Stages, refRep.Deterministic().Stages)
		}
		if diff, err := CompareDirs(out, ref); err != nil || diff != nil {
			t.Fatalf("workers %d: outputs differ from inline: %v %v", w, diff, err)
		}
	}
}

// natCheckSink checks every packet it is given: a client's packet leaves
// from the NAT address, a server's reaches a client (10/8), never the NAT
// address: a reply that lost its translation shows.
type natCheckSink struct {
	mu          sync.Mutex
	out, in     int
	bad         int
	firstBad    string
	natSrc      [4]byte
	client, srv [4]byte // 10/8 and 198.51.100/24 prefixes' first bytes
}

func (s *natCheckSink) Name() string                      { return "check" }
func (s *natCheckSink) Receive(*rings.Batch) (int, error) { return 0, ErrNotReceiver }
func (s *natCheckSink) Recycle([]rings.Desc)              {}
func (s *natCheckSink) Close() error                      { return nil }
func (s *natCheckSink) Transmit(a *rings.Arena, descs []rings.Desc) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range descs {
		p := a.Bytes(d)
		if len(p) < 34 || binary.BigEndian.Uint16(p[12:]) != 0x0800 {
			continue
		}
		src, dst := [4]byte(p[26:30]), [4]byte(p[30:34])
		switch {
		case src == s.natSrc && dst[0] == 198:
			s.out++
		case src[0] == 198 && dst[0] == 10:
			s.in++
		default:
			s.bad++
			if s.firstBad == "" {
				s.firstBad = fmt.Sprintf("%v > %v", netip.AddrFrom4(src), netip.AddrFrom4(dst))
			}
		}
	}
	return len(descs), nil
}

// TestStatefulSwapUnderLoad swaps 100 times between two pipelines with the
// same conntrack and nat stages and different filter rules while a
// looping replay of established conversations runs flat out: no flow
// loses its state (loose pickup is off, so a lost entry makes the next
// packet of its flow invalid, which the filter drops) or its translation
// (the sink checks every packet's addresses), and every swap reports the
// table kept.
func TestStatefulSwapUnderLoad(t *testing.T) {
	for _, c := range []struct{ workers, wa, wb int }{{0, 1, 1}, {1, 1, 1}, {2, 1, 1}, {-1, 1, 2}, {-1, 0, 2}} {
		workers := c.workers
		t.Run(fmt.Sprintf("workers=%d,a=%d,b=%d", c.workers, c.wa, c.wb), func(t *testing.T) {
			// workers -1: each pipeline's own (a pool change at every swap,
			// and with it the tables re-steered over the new workers).
			ga := statefulGraphW(t, "a", 64, 2323, c.wa)
			gb := statefulGraphW(t, "b", 64, 2424, c.wb)
			// Established flows only: a handshake, then data; every pass
			// replays them (the ones after the first are retransmissions
			// to conntrack: accepted, established).
			var convs []*convgen.Conv
			for i := range 200 {
				c := netip.AddrFrom4([4]byte{10, 1, byte(i / 200), byte(1 + i%200)})
				s := netip.AddrFrom4([4]byte{198, 51, 100, byte(1 + i%5)})
				port := steeredPort(ga, c, s, uint16(30000+i*5))
				cv := convgen.NewConv(convgen.Endpoint{Addr: c, Port: port}, convgen.Endpoint{Addr: s, Port: 80},
					convgen.Endpoint{Addr: natAddr, Port: port}, 0, time.Microsecond, uint32(i)*100, uint32(i)*900)
				convs = append(convs, cv.Handshake().Data(0, 20).Data(1, 300).Data(0, 20))
			}
			capture := convgen.Pcap(convgen.Merge(convs...), time.Unix(1700000000, 0))
			arena, err := rings.NewArena(rings.ArenaOptions{Frames: 4096, FrameSize: 2048, Headroom: 256})
			if err != nil {
				t.Fatal(err)
			}
			ro := DefaultReplayOptions()
			ro.Loops = -1
			rp, err := NewReplay("conv.pcap", bytes.NewReader(capture), arena, ro)
			if err != nil {
				t.Fatal(err)
			}
			sink := &natCheckSink{natSrc: natAddr.As4()}
			o := DefaultOptions()
			o.Workers = workers
			o.Timing = false
			e, err := NewEngine(ga, arena, rp, Outputs{Ports: map[string]Port{"out": sink}}, o)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			runErr := make(chan error, 1)
			go func() { runErr <- e.RunContext(ctx, nil) }()
			waitReceived(t, e, uint64(len(convs)*10*3)) // three passes before the first swap
			for i := range 100 {
				g := gb
				if i%2 == 1 {
					g = ga
				}
				res, err := e.Swap(g, Outputs{Ports: map[string]Port{"out": sink}}, 5*time.Second)
				if err != nil {
					t.Fatalf("swap %d: %v", i, err)
				}
				if !reflect.DeepEqual(res.StateKept, []string{"ct"}) || len(res.StateReset) != 0 || res.PoolChange != (c.wa != c.wb) {
					t.Fatalf("swap %d: state kept %v, reset %v, pool change %v", i, res.StateKept, res.StateReset, res.PoolChange)
				}
				wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
				if !e.WaitActive(wctx, res) {
					wcancel()
					t.Fatalf("swap %d never took effect", i)
				}
				wcancel()
			}
			before := e.Stats().Received
			waitReceived(t, e, before+uint64(len(convs)*10))
			cancel()
			if err := testwait.Recv(t, runErr, "RunContext to return after cancel", testwait.Deadline); err != nil {
				t.Fatal(err)
			}
			rep := e.Report()
			if !rep.Balanced {
				t.Fatal(rep.AccountingLine())
			}
			var invalid, blocked uint64
			for _, d := range rep.Drops {
				switch d.Reason {
				case "invalid":
					invalid = d.Packets
				case "blocked":
					blocked = d.Packets
				}
			}
			sink.mu.Lock()
			defer sink.mu.Unlock()
			if invalid != 0 || blocked != 0 || sink.bad != 0 {
				t.Fatalf("after 100 swaps: %d packets invalid (a flow lost its state), %d blocked, %d with the wrong addresses (first %s)", invalid, blocked, sink.bad, sink.firstBad)
			}
			if sink.out == 0 || sink.in == 0 || uint64(sink.out+sink.in) != rep.Transmitted {
				t.Fatalf("sink saw %d out, %d in, engine transmitted %d", sink.out, sink.in, rep.Transmitted)
			}
			t.Logf("%d packets over 100 swaps, %d out and %d back through NAT", rep.Received, sink.out, sink.in)
		})
	}
}

// waitReceived waits (10 s at most) until the engine received n packets.
func waitReceived(t *testing.T, e *Engine, n uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.Stats().Received < n {
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d packets in 10 s", e.Stats().Received, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestStatefulSwapResets: a swap that removes the conntrack stage, or
// gives its name to another kind, says the table was reset.
func TestStatefulSwapResets(t *testing.T) {
	ga := statefulGraph(t, "a", 64, 23)
	plain, err := pipelines.Load("p.yaml", []byte("name: p\nstages:\n  - {name: parse, type: parse}\n  - {name: ct, type: count}\n  - {name: out, type: tx, port: out}\n"))
	if err != nil {
		t.Fatal(err)
	}
	arena, rp := loopingReplay(t)
	e, err := NewEngine(ga, arena, rp, Outputs{Ports: map[string]Port{"out": NewNullPort("out")}}, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Swap(plain, Outputs{Ports: map[string]Port{"out": NewNullPort("out")}}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.StateKept) != 0 || !reflect.DeepEqual(res.StateReset, []string{"ct"}) {
		t.Fatalf("to a pipeline whose ct is a count: kept %v reset %v", res.StateKept, res.StateReset)
	}
	res, err = e.Swap(ga, Outputs{Ports: map[string]Port{"out": NewNullPort("out")}}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.StateKept) != 0 || !reflect.DeepEqual(res.StateReset, []string{"ct"}) {
		t.Fatalf("back to conntrack: kept %v reset %v", res.StateKept, res.StateReset)
	}
}

// TestFlowsWhileRunning lists, counts and flushes flows of a running
// engine whose live-like input has gone idle: the empty batches take the
// requests to the workers.
func TestFlowsWhileRunning(t *testing.T) {
	for _, workers := range []int{0, 1, 2} {
		t.Run(fmt.Sprint("workers=", workers), func(t *testing.T) {
			g := statefulGraph(t, "f", 64, 23)
			var convs []*convgen.Conv
			for i := range 50 {
				c := netip.AddrFrom4([4]byte{10, 2, 0, byte(1 + i)})
				s := netip.MustParseAddr("198.51.100.9")
				cv := convgen.NewConv(convgen.Endpoint{Addr: c, Port: 4000}, convgen.Endpoint{Addr: s, Port: uint16(53 + i%2)}, convgen.Endpoint{}, 0, time.Microsecond, 1, 1)
				convs = append(convs, cv.UDP(0, 10))
			}
			arena, in := idleConvs(t, convs)
			o := DefaultOptions()
			o.Workers = workers
			e, err := NewEngine(g, arena, in, Outputs{Ports: map[string]Port{"out": NewNullPort("out")}}, o)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			runErr := make(chan error, 1)
			go func() { runErr <- e.RunContext(ctx, nil) }()
			waitReceived(t, e, 50)
			qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
			defer qcancel()
			all, err := e.Flows(qctx, FlowQuery{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if all.Matched != 50 || len(all.Flows) != 50 || all.Entries != 50 || all.Capacity != 4096*max(workers, 1) {
				t.Fatalf("list: matched %d, listed %d, entries %d, capacity %d", all.Matched, len(all.Flows), all.Entries, all.Capacity)
			}
			if f := all.Flows[0]; f.Proto != 17 || !f.SNAT || f.ReplyDst != natAddr {
				t.Fatalf("flow %+v: want UDP, SNAT to %v", f, natAddr)
			}
			q := FlowQuery{Filter: pipelines.FlowFilter{DstPort: 54}}
			cnt, err := e.Flows(qctx, q)
			if err != nil || cnt.Matched != 25 || len(cnt.Flows) != 0 {
				t.Fatalf("count dport 54: %+v %v", cnt, err)
			}
			q.Flush = true
			fl, err := e.Flows(qctx, q)
			if err != nil || fl.Matched != 25 {
				t.Fatalf("flush dport 54: %+v %v", fl, err)
			}
			left, err := e.Flows(qctx, FlowQuery{})
			if err != nil || left.Matched != 25 || left.Entries != 25 {
				t.Fatalf("after the flush: %+v %v", left, err)
			}
			if _, err := e.Flows(qctx, FlowQuery{Stage: "nope"}); err == nil {
				t.Fatal("a query for a stage that does not exist succeeded")
			}
			cancel()
			if err := testwait.Recv(t, runErr, "RunContext to return after cancel", testwait.Deadline); err != nil {
				t.Fatal(err)
			}
			// After the run: served on the caller's goroutine.
			after, err := e.Flows(context.Background(), FlowQuery{})
			if err != nil || after.Entries != 25 {
				t.Fatalf("after the run: %+v %v", after, err)
			}
		})
	}
}

// idleConvs is an arena and an input that replays convs once and then
// idles like a live port (idleAfter).
func idleConvs(t *testing.T, convs []*convgen.Conv) (*rings.Arena, *idleAfter) {
	t.Helper()
	capture := convgen.Pcap(convgen.Merge(convs...), time.Unix(1700000000, 0))
	arena, err := rings.NewArena(rings.ArenaOptions{Frames: 1024, FrameSize: 2048, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	rp, err := NewReplay("c.pcap", bytes.NewReader(capture), arena, DefaultReplayOptions())
	if err != nil {
		t.Fatal(err)
	}
	return arena, &idleAfter{ReplayPort: rp}
}

// idleAfter is a replay that, at its end, idles like a live port (no
// io.EOF) until the run is stopped.
type idleAfter struct{ *ReplayPort }

func (p *idleAfter) Receive(b *rings.Batch) (int, error) {
	n, err := p.ReplayPort.Receive(b)
	if err != nil && n == 0 {
		return 0, nil
	}
	return n, err
}

// TestReplayStampsCaptureTime: a replay gives every packet its record's
// timestamp (Unix ms, truncated) in Meta.Time, streamed or preloaded, and
// so in every run alike; with workers the deferred metadata carries it.
func TestReplayStampsCaptureTime(t *testing.T) {
	var pkts []convgen.Packet
	for i := range 300 {
		cv := convgen.NewConv(convgen.EP("10.0.0.1:1000"), convgen.EP("10.0.0.2:53"), convgen.Endpoint{}, time.Duration(i)*time.Millisecond/3, 0, 0, 0)
		pkts = append(pkts, cv.UDP(0, 10).Pkts...)
	}
	start := time.Unix(1700000000, 123_000_000)
	capture := convgen.Pcap(pkts, start)
	for _, preload := range []bool{false, true} {
		arena, err := rings.NewArena(rings.ArenaOptions{Frames: 1024, FrameSize: 2048, Headroom: 256})
		if err != nil {
			t.Fatal(err)
		}
		ro := DefaultReplayOptions()
		ro.Preload = preload
		rp, err := NewReplay("t.pcap", bytes.NewReader(capture), arena, ro)
		if err != nil {
			t.Fatal(err)
		}
		b := rings.NewBatch(64, arena)
		b.DeferMeta(true)
		got := 0
		for {
			b.Clear()
			n, err := rp.Receive(b)
			b.SettleMeta()
			for i := range n {
				want := uint32(start.Add(pkts[got].At).UnixMilli())
				if b.Meta[i].Time != want {
					t.Fatalf("preload %v: packet %d time %d, want %d", preload, got, b.Meta[i].Time, want)
				}
				got++
			}
			rp.Recycle(b.Descs)
			if err != nil {
				break
			}
		}
		if got != len(pkts) {
			t.Fatalf("preload %v: %d packets of %d", preload, got, len(pkts))
		}
	}
}
