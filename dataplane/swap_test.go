package dataplane

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"

	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/internal/testwait"
)

// The two pipelines the swap tests alternate between. Each drops one UDP
// destination port and transmits the rest on a port of its own, so a
// packet's verdict says which pipeline processed it.
const (
	swapA = "name: a\nsettings: {workers: %d, batch_size: %d}\nstages:\n  - {name: parse, type: parse}\n" +
		"  - {name: acl, type: filter, rules: [{proto: udp, dst_port: 9, action: \"drop:a_nine\"}], default: out}\n" +
		"  - {name: out, type: tx, port: a}\n"
	swapB = "name: b\nsettings: {workers: %d, batch_size: %d}\nstages:\n  - {name: parse, type: parse}\n" +
		"  - {name: acl, type: filter, rules: [{proto: udp, dst_port: 7, action: \"drop:b_seven\"}], default: out}\n" +
		"  - {name: out, type: tx, port: b}\n"
)

// swapDstPorts are the capture's UDP destination ports, packet i having
// swapDstPorts[i%4]: A drops 9, B drops 7, both transmit 53 and 80.
var swapDstPorts = []uint16{7, 9, 53, 80}

// seqOffset is where seqPort writes a packet's receive sequence number:
// the UDP payload.
const seqOffset = 42

// seqPort is a looping replay port that writes each packet's receive
// sequence number (Meta.Seq) into its payload, so that the sinks can tell
// every packet apart across passes.
type seqPort struct{ *ReplayPort }

func (p seqPort) Receive(b *rings.Batch) (int, error) {
	had := b.Len()
	n, err := p.ReplayPort.Receive(b)
	b.SettleMeta() // deferred in worker mode: Meta.Seq is read here
	for i := had; i < b.Len(); i++ {
		binary.BigEndian.PutUint64(b.Packet(i)[seqOffset:], b.Meta[i].Seq)
	}
	return n, err
}

// seqSink records the sequence numbers it was given and, for each
// Transmit call, the batch it came from.
type seqSink struct {
	name string
	mu   sync.Mutex // the test reads while the engine runs
	seqs []uint64
	// calls records the first sequence number of each Transmit.
	calls []uint64
	bad   int // a packet whose port says the other pipeline should have had it
	drop  uint16
}

func (s *seqSink) Name() string                      { return s.name }
func (s *seqSink) Receive(*rings.Batch) (int, error) { return 0, ErrNotReceiver }
func (s *seqSink) Recycle([]rings.Desc)              {}
func (s *seqSink) Close() error                      { return nil }
func (s *seqSink) Transmit(a *rings.Arena, descs []rings.Desc) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, d := range descs {
		pkt := a.Bytes(d)
		seq := binary.BigEndian.Uint64(pkt[seqOffset:])
		if binary.BigEndian.Uint16(pkt[36:]) == s.drop {
			s.bad++
		}
		if i == 0 {
			s.calls = append(s.calls, seq)
		}
		s.seqs = append(s.seqs, seq)
	}
	return len(descs), nil
}

// swapCapture is n UDP packets cycling through swapDstPorts.
func swapCapture(t testing.TB, n int) []byte {
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if err := w.WriteFileHeader(2048, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		pkt := udpFrame(64)
		binary.BigEndian.PutUint16(pkt[36:], swapDstPorts[i%len(swapDstPorts)])
		ci := gopacket.CaptureInfo{Timestamp: epoch(0), CaptureLength: len(pkt), Length: len(pkt)}
		if err := w.WritePacket(ci, pkt); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// loopingReplay is a 4096-frame arena and a preloaded replay of
// swapCapture's 1024 packets into it that loops until stopped.
func loopingReplay(t testing.TB) (*rings.Arena, *ReplayPort) {
	t.Helper()
	arena, err := rings.NewArena(rings.ArenaOptions{Frames: 4096, FrameSize: 2048, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	ro := DefaultReplayOptions()
	ro.Preload, ro.Loops = true, -1
	rp, err := NewReplay("swap.pcap", bytes.NewReader(swapCapture(t, 1024)), arena, ro)
	if err != nil {
		t.Fatal(err)
	}
	return arena, rp
}

type swapRig struct {
	e      *Engine
	ga, gb *pipelines.Graph
	sa, sb *seqSink
}

func newSwapRig(t testing.TB, workersA, workersB, batchA, batchB int, tune ...func(*Options)) *swapRig {
	t.Helper()
	ga, err := pipelines.Load("a.yaml", fmt.Appendf(nil, swapA, workersA, batchA))
	if err != nil {
		t.Fatal(err)
	}
	gb, err := pipelines.Load("b.yaml", fmt.Appendf(nil, swapB, workersB, batchB))
	if err != nil {
		t.Fatal(err)
	}
	arena, rp := loopingReplay(t)
	r := &swapRig{ga: ga, gb: gb,
		sa: &seqSink{name: "a", drop: 9, seqs: make([]uint64, 0, 1<<16), calls: make([]uint64, 0, 1<<12)},
		sb: &seqSink{name: "b", drop: 7, seqs: make([]uint64, 0, 1<<16), calls: make([]uint64, 0, 1<<12)}}
	o := DefaultOptions()
	o.Timing = false
	for _, f := range tune {
		f(&o)
	}
	r.e, err = NewEngine(ga, arena, seqPort{rp}, Outputs{Ports: map[string]Port{"a": r.sa}}, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSwapUnderLoad swaps between two pipelines 100 times while a looping
// replay runs flat out, then proves: received = transmitted + dropped by
// reason (+ passed, none here), every sequence number from 0 to received-1
// was transmitted exactly once or dropped by the one pipeline that drops
// its kind, no packet reached the sink of a pipeline that drops it, each
// batch went wholly to one pipeline, and the sinks saw the swaps.
func TestSwapUnderLoad(t *testing.T) {
	for _, tc := range []struct {
		name               string
		workersA, workersB int
		batchA, batchB     int
		swaps              int
		custom             bool // through Options.NewExecutor: every swap a pool change
	}{
		{"inline", 0, 0, 32, 32, 100, false},
		{"2workers", 2, 2, 32, 32, 100, false},
		// Every swap a pool change: worker count, then batch size.
		{"pool-change", 1, 2, 32, 32, 30, false},
		{"batch-change", 0, 0, 32, 64, 30, false},
		{"inline-to-workers", 0, 1, 32, 32, 30, false},
		{"custom-executor", 1, 1, 32, 32, 30, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tune []func(*Options)
			if tc.custom {
				tune = append(tune, func(o *Options) { o.NewExecutor = NewCPUExecutor })
			}
			r := newSwapRig(t, tc.workersA, tc.workersB, tc.batchA, tc.batchB, tune...)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			runErr := make(chan error, 1)
			go func() { runErr <- r.e.RunContext(ctx, nil) }()
			// A stats reader all along (under -race: the live reads race
			// nothing), whose snapshots always balance.
			readerDone := make(chan error, 1)
			go func() {
				for ctx.Err() == nil {
					s := r.e.Stats()
					if s.Received != s.Transmitted+s.Dropped+s.Passed {
						readerDone <- fmt.Errorf("snapshot unbalanced: %+v", s)
						return
					}
					r.e.Stats()
					r.e.frames()
					r.e.Stats()
					time.Sleep(time.Millisecond)
				}
				readerDone <- nil
			}()
			var lastRecv uint64
			var latencies []time.Duration
			for i := range tc.swaps {
				// Let packets flow on the current plan first.
				for deadline := time.Now().Add(5 * time.Second); r.e.Stats().Received < lastRecv+2048; {
					if time.Now().After(deadline) {
						t.Fatalf("swap %d: no traffic", i)
					}
					time.Sleep(100 * time.Microsecond)
				}
				g, outs := r.gb, Outputs{Ports: map[string]Port{"b": r.sb}}
				if i%2 == 1 {
					g, outs = r.ga, Outputs{Ports: map[string]Port{"a": r.sa}}
				}
				res, err := r.e.Swap(g, outs, 5*time.Second)
				if err != nil {
					t.Fatalf("swap %d: %v", i, err)
				}
				returned := time.Now()
				wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
				if !r.e.WaitActive(wctx, res) {
					wcancel()
					t.Fatalf("swap %d to %s: never active", i, g.Name())
				}
				wcancel()
				latencies = append(latencies, res.ActiveAt().Sub(returned))
				if wantPool := tc.custom || tc.workersA != tc.workersB || tc.batchA != tc.batchB; res.PoolChange != wantPool {
					t.Fatalf("swap %d: pool change %v, want %v", i, res.PoolChange, wantPool)
				}
				wantAdded, wantRemoved := "drop:b_seven", "drop:a_nine"
				if i%2 == 1 {
					wantAdded, wantRemoved = wantRemoved, wantAdded
				}
				if strings.Join(res.Kept, ",") != "parse,acl,out,drop:internal_bad_edge" || len(res.Reset) != 0 ||
					strings.Join(res.Added, ",") != wantAdded || strings.Join(res.Removed, ",") != wantRemoved {
					t.Fatalf("swap %d: kept %v reset %v added %v removed %v", i, res.Kept, res.Reset, res.Added, res.Removed)
				}
				lastRecv = r.e.Stats().Received
			}
			cancel()
			if err := testwait.Recv(t, runErr, "RunContext to return after cancel", testwait.Deadline); err != nil {
				t.Fatal(err)
			}
			if err := testwait.Recv(t, readerDone, "the stats reader to stop after cancel", testwait.Deadline); err != nil {
				t.Fatal(err)
			}
			rep := r.e.Report()
			checkSwapRun(t, r, rep, tc.swaps)
			t.Logf("%s: %d packets, %d swaps; swap to first batch: median %v, max %v", tc.name, rep.Received, tc.swaps, median(latencies), maxDur(latencies))
		})
	}
}

func checkSwapRun(t *testing.T, r *swapRig, rep Report, swaps int) {
	t.Helper()
	if !rep.Balanced {
		t.Fatal(rep.AccountingLine())
	}
	drops := map[string]uint64{}
	for _, d := range rep.Drops {
		drops[d.Reason] = d.Packets
	}
	var tx uint64
	ports := map[string]uint64{}
	for _, p := range rep.Ports {
		ports[p.Port] = p.Packets
		tx += p.Packets
	}
	if rep.Received != tx+drops["a_nine"]+drops["b_seven"]+rep.Passed {
		t.Fatalf("received %d != a %d + b %d + a_nine %d + b_seven %d + passed %d (drops %v)", rep.Received, ports["a"], ports["b"], drops["a_nine"], drops["b_seven"], rep.Passed, drops)
	}
	if ports["a"] != uint64(len(r.sa.seqs)) || ports["b"] != uint64(len(r.sb.seqs)) {
		t.Fatalf("counted a %d b %d, sinks got a %d b %d", ports["a"], ports["b"], len(r.sa.seqs), len(r.sb.seqs))
	}
	if r.sa.bad+r.sb.bad != 0 {
		t.Fatalf("%d packets at a's sink with a's drop port, %d at b's with b's", r.sa.bad, r.sb.bad)
	}
	// Every sequence number once: at a sink, or missing because the one
	// pipeline that drops its kind did (a missing port-53 packet is lost).
	seen := make([]int8, rep.Received) // 1: a, 2: b
	for _, s := range []*seqSink{r.sa, r.sb} {
		for _, q := range s.seqs {
			if q >= rep.Received {
				t.Fatalf("sink %s: sequence %d beyond the %d received", s.name, q, rep.Received)
			}
			if seen[q] != 0 {
				t.Fatalf("sequence %d transmitted twice", q)
			}
			seen[q] = 1
			if s == r.sb {
				seen[q] = 2
			}
		}
	}
	var missing7, missing9 uint64
	for q, s := range seen {
		if s != 0 {
			continue
		}
		switch swapDstPorts[q%len(swapDstPorts)] {
		case 7:
			missing7++
		case 9:
			missing9++
		default:
			t.Fatalf("sequence %d (port %d) neither transmitted nor droppable: lost", q, swapDstPorts[q%len(swapDstPorts)])
		}
	}
	if missing7 != drops["b_seven"] || missing9 != drops["a_nine"] {
		t.Fatalf("missing port 7: %d, port 9: %d; dropped b_seven %d, a_nine %d", missing7, missing9, drops["b_seven"], drops["a_nine"])
	}
	// Each batch wholly one pipeline: walking the sequence numbers in
	// order, the owner changes only between two packets of different
	// batches (batches are full and aligned to 32 packets: the capture
	// holds 1024), and it changes once per swap.
	changes, last, lastSeq := 0, int8(0), 0
	for q, s := range seen {
		if s == 0 {
			continue
		}
		if last != 0 && s != last {
			changes++
			if q/32 == lastSeq/32 {
				t.Fatalf("sequences %d and %d, one batch, went to different pipelines", lastSeq, q)
			}
		}
		last, lastSeq = s, q
	}
	if changes != swaps {
		t.Fatalf("the owner of consecutive packets changed %d times, want %d (one per swap)", changes, swaps)
	}
	for _, s := range []*seqSink{r.sa, r.sb} {
		for i := 1; i < len(s.seqs); i++ {
			if s.seqs[i] <= s.seqs[i-1] {
				t.Fatalf("sink %s: sequence %d after %d: out of order", s.name, s.seqs[i], s.seqs[i-1])
			}
		}
	}
	// Stage counters carried across every swap: the parse stage saw every
	// packet.
	for _, st := range rep.Stages {
		if st.Name == "parse" && st.Packets != rep.Received {
			t.Fatalf("parse stage counted %d of %d packets across the swaps", st.Packets, rep.Received)
		}
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

func maxDur(d []time.Duration) time.Duration {
	var m time.Duration
	for _, x := range d {
		m = max(m, x)
	}
	return m
}

// TestSwapRefused: a swap the engine cannot make leaves the running plan
// and its counters untouched.
func TestSwapRefused(t *testing.T) {
	r := newSwapRig(t, 0, 0, 32, 32)
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- r.e.RunContext(ctx, nil) }()
	for deadline := time.Now().Add(5 * time.Second); r.e.Stats().Received < 4096; {
		if time.Now().After(deadline) {
			t.Fatalf("received %d of 4096 packets in 5s", r.e.Stats().Received)
		}
		time.Sleep(100 * time.Microsecond)
	}
	for _, tc := range []struct {
		outs Outputs
		want string
	}{
		{Outputs{}, `transmits on port "b", which has no output`},
		{Outputs{Ports: map[string]Port{"b": r.sb}, Pass: r.sb}, "pass port cannot change"},
		{Outputs{Ports: map[string]Port{"b": newHoldPort("hold", r.e.arena, 8, 1)}}, "was not among the engine's outputs"},
	} {
		_, err := r.e.Swap(r.gb, tc.outs, time.Second)
		if !errors.Is(err, ErrSwap) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("swap: got %v, want ErrSwap with %q", err, tc.want)
		}
	}
	if gen, name := r.e.Generation(); gen != 1 || name != "a" {
		t.Fatalf("after refused swaps: generation %d %q", gen, name)
	}
	cancel()
	if err := testwait.Recv(t, runErr, "RunContext to return after cancel", testwait.Deadline); err != nil {
		t.Fatal(err)
	}
	rep := r.e.Report()
	if len(r.sb.seqs) != 0 || rep.Pipeline != "a" || !rep.Balanced {
		t.Fatalf("b's sink got %d packets; pipeline %s; %s", len(r.sb.seqs), rep.Pipeline, rep.AccountingLine())
	}
	if _, err := r.e.Swap(r.gb, Outputs{Ports: map[string]Port{"b": r.sb}}, time.Second); !errors.Is(err, ErrSwap) {
		t.Fatalf("swap after the run: %v", err)
	}
}

// TestSwapBeforeRun: a swap before Run takes effect from the first batch.
func TestSwapBeforeRun(t *testing.T) {
	r := newSwapRig(t, 1, 0, 32, 32)
	if _, err := r.e.Swap(r.gb, Outputs{Ports: map[string]Port{"b": r.sb}}, time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- r.e.RunContext(ctx, nil) }()
	for deadline := time.Now().Add(5 * time.Second); r.e.Stats().Received < 4096; {
		if time.Now().After(deadline) {
			t.Fatalf("received %d of 4096 packets in 5s", r.e.Stats().Received)
		}
		time.Sleep(100 * time.Microsecond)
	}
	cancel()
	if err := testwait.Recv(t, runErr, "RunContext to return after cancel", testwait.Deadline); err != nil {
		t.Fatal(err)
	}
	if len(r.sa.seqs) != 0 || len(r.sb.seqs) == 0 {
		t.Fatalf("a got %d, b %d", len(r.sa.seqs), len(r.sb.seqs))
	}
}

// TestSwapNoAllocs: the loop turn allocates nothing with a second plan
// published and taken up (inline), nor after.
func TestSwapNoAllocs(t *testing.T) {
	r := newSwapRig(t, 0, 0, 32, 32)
	// Drive the inline loop by hand: one turn receives and completes.
	b := r.e.inline
	turn := func() {
		p := r.e.cur
		if np := r.e.planPtr.Load(); np != p {
			r.e.adopt(np)
			p = np
		}
		b.Clear()
		if n, _ := r.e.in.Receive(b); n > 0 {
			p.runners[0].Process(b)
			r.e.complete(p, b)
		}
		r.e.turnDone()
	}
	for range 10 {
		turn()
	}
	if n := allocs.Count(100, turn); n != 0 {
		t.Fatalf("%d allocations in 100 turns before the swap, want 0", n)
	}
	r.e.ctl.started = true // as if running: the swap is published, not applied
	r.e.ctl.running = true
	if _, err := r.e.Swap(r.gb, Outputs{Ports: map[string]Port{"b": r.sb}}, time.Second); err != nil {
		t.Fatal(err)
	}
	if n := allocs.Count(100, turn); n != 0 {
		t.Fatalf("%d allocations in 100 turns across and after the swap, want 0", n)
	}
	if r.e.cur.graph.Name() != "b" || len(r.sb.seqs) == 0 {
		t.Fatal("swap not taken up")
	}
}
