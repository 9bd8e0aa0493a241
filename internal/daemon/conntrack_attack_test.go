package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/convgen"
	"github.com/warpflow/warpflow/internal/testwait"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// The conntrack control surface, attacked from the daemon's side: a
// Daemon whose queues are in-process engines (a replay that then idles
// like a live port), no kernel needed.

const ctAttackYAML = `name: %s
settings: {batch_size: 64, workers: %d}
stages:
  - {name: parse, type: parse}
%s  - {name: out, type: tx, port: out}
`

// idleReplay is a replay that, at its end, idles like a live port; while
// stall is set it blocks in Receive (a worker that never reaches a batch
// boundary) until stall is cleared, and says on stalled when it begins
// to. The stall is the test's to clear (its cleanup does); a worker left
// stalled ends the test at its deadline.
type idleReplay struct {
	*dataplane.ReplayPort
	stall   atomic.Bool
	stalled chan struct{} // buffered 1
}

func (p *idleReplay) Receive(b *rings.Batch) (int, error) {
	if p.stall.Load() {
		select {
		case p.stalled <- struct{}{}:
		default:
		}
	}
	for p.stall.Load() {
		time.Sleep(time.Millisecond)
	}
	n, err := p.ReplayPort.Receive(b)
	if err != nil && n == 0 {
		return 0, nil
	}
	return n, err
}

// ctAttackDaemon runs a daemon of queues engines, each with workers
// workers, on a pipeline with the conntrack stages in stages; each queue
// sees flows UDP flows. It returns once every queue received them.
func ctAttackDaemon(t *testing.T, stages string, queues, workers, flows int) *Daemon {
	d, _ := ctAttackDaemonStalls(t, stages, queues, workers, flows)
	return d
}

// ctAttackDaemonStalls is ctAttackDaemon with each queue's input.
func ctAttackDaemonStalls(t *testing.T, stages string, queues, workers, flows int) (*Daemon, []*idleReplay) {
	t.Helper()
	src := fmt.Appendf(nil, ctAttackYAML, "cta", workers, stages)
	g, err := pipelines.Load("cta.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	var convs []*convgen.Conv
	for i := range flows {
		c := netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)})
		s := netip.MustParseAddr("198.51.100.9")
		cv := convgen.NewConv(convgen.Endpoint{Addr: c, Port: 4000}, convgen.Endpoint{Addr: s, Port: uint16(53 + i%2)}, convgen.Endpoint{}, 0, time.Microsecond, 1, 1)
		convs = append(convs, cv.UDP(0, 1))
	}
	capture := convgen.Pcap(convgen.Merge(convs...), time.Unix(1700000000, 0))
	d := &Daemon{log: slog.New(slog.NewTextHandler(io.Discard, nil)), graph: g, running: "cta"}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var stalls []*idleReplay
	t.Cleanup(func() {
		for _, s := range stalls {
			s.stall.Store(false)
		}
		cancel()
		testwait.Group(t, &wg, "the queues' engines to return after cancel (cleanup)", testwait.Deadline)
	})
	for qi := range queues {
		arena, err := rings.NewArena(rings.ArenaOptions{Frames: 1024, FrameSize: 2048, Headroom: 256})
		if err != nil {
			t.Fatal(err)
		}
		rp, err := dataplane.NewReplay("c.pcap", bytes.NewReader(capture), arena, dataplane.DefaultReplayOptions())
		if err != nil {
			t.Fatal(err)
		}
		o := dataplane.DefaultOptions()
		o.Workers = workers
		in := &idleReplay{ReplayPort: rp, stalled: make(chan struct{}, 1)}
		stalls = append(stalls, in)
		e, err := dataplane.NewEngine(g, arena, in, dataplane.Outputs{Ports: map[string]dataplane.Port{"out": dataplane.NewNullPort("out")}}, o)
		if err != nil {
			t.Fatal(err)
		}
		d.queues = append(d.queues, &queue{idx: qi, eng: e, cpu: -1})
		wg.Add(1)
		go func() { defer wg.Done(); e.RunContext(ctx, nil) }()
	}
	for deadline := time.Now().Add(10 * time.Second); firstCT(g) != ""; {
		rep, err := d.conntrack(context.Background(), control.ConntrackQuery{Stage: firstCT(g)})
		if err == nil && rep.Entries == queues*flows {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queues did not track %d flows each: %+v %v", flows, rep, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return d, stalls
}

func firstCT(g *pipelines.Graph) string {
	for _, s := range g.Stages() {
		if s.Kind == "conntrack" {
			return s.Name
		}
	}
	return ""
}

// TestConntrackConcurrentRequests: two clients at once (an operator's
// list beside a monitoring script's count, or a flush) must both be
// served. A worker takes one request at a time, and the second was
// answered 500 "a request is already in progress on this worker"; a
// flush that met it midway had flushed some queues and said only that.
func TestConntrackConcurrentRequests(t *testing.T) {
	const queues, workers, flows = 2, 2, 200
	d := ctAttackDaemon(t, "  - {name: ct, type: conntrack, size: 4096}\n", queues, workers, flows)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				rep, err := d.conntrack(ctx, control.ConntrackQuery{Limit: i % 3 * 100})
				if err != nil {
					errs <- fmt.Errorf("client %d: %w", i, err)
					return
				}
				if rep.Entries != queues*flows && rep.Entries != queues*flows/2 {
					errs <- fmt.Errorf("client %d: %d entries", i, rep.Entries)
					return
				}
			}
		}()
	}
	// And one flush of half the flows, among them.
	var flushed control.ConntrackReply
	var ferr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(time.Millisecond)
		flushed, ferr = d.conntrack(ctx, control.ConntrackQuery{DstPort: 54, Flush: true})
	}()
	testwait.Group(t, &wg, "16 clients' requests and the flush to return", testwait.Deadline)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if ferr != nil || flushed.Matched != queues*flows/2 {
		t.Fatalf("flush dport 54 among other requests: matched %d, %v; want %d", flushed.Matched, ferr, queues*flows/2)
	}
}

// TestConntrackStageAmbiguous: a pipeline with two conntrack stages and
// a query that names none is the client's mistake (400, naming them),
// not an internal error (500).
func TestConntrackStageAmbiguous(t *testing.T) {
	d := ctAttackDaemon(t, "  - {name: ct1, type: conntrack, size: 1024}\n  - {name: ct2, type: conntrack, size: 1024}\n", 1, 0, 10)
	_, err := d.conntrack(context.Background(), control.ConntrackQuery{})
	if !errors.Is(err, control.ErrBadRequest) {
		t.Fatalf("no stage named, two conntrack stages: %v; want bad_request", err)
	}
	for _, want := range []string{"ct1", "ct2"} {
		if !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Fatalf("%v: want it to name %s", err, want)
		}
	}
	if _, err := d.conntrack(context.Background(), control.ConntrackQuery{Stage: "nope"}); !errors.Is(err, control.ErrNotFound) {
		t.Fatalf("unknown stage: %v; want not_found", err)
	}
	rep, err := d.conntrack(context.Background(), control.ConntrackQuery{Stage: "ct2"})
	if err != nil || rep.Stage != "ct2" || rep.Entries != 10 {
		t.Fatalf("stage ct2: %+v %v", rep, err)
	}
}

// TestConntrackRunningNameRace: the reply's pipeline name is read while
// a swap may write it (under ctlMu); go test -race catches a read
// without the lock.
func TestConntrackRunningNameRace(t *testing.T) {
	d := ctAttackDaemon(t, "  - {name: ct, type: conntrack, size: 1024}\n", 1, 0, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			d.ctlMu.Lock()
			d.running = fmt.Sprint("cta", i%2)
			d.ctlMu.Unlock()
		}
	}()
	for range 50 {
		if _, err := d.conntrack(context.Background(), control.ConntrackQuery{}); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Recv(t, done, "the swapping goroutine to finish", testwait.Deadline)
}

// TestConntrackNoStage: a pipeline without conntrack answers not found,
// naming the pipeline, for a list and a flush alike.
func TestConntrackNoStage(t *testing.T) {
	d := ctAttackDaemon(t, "", 2, 0, 10)
	for _, q := range []control.ConntrackQuery{{Limit: 10}, {Flush: true}, {Stage: "ct"}} {
		_, err := d.conntrack(context.Background(), q)
		if !errors.Is(err, control.ErrNotFound) || !bytes.Contains([]byte(err.Error()), []byte(`"cta"`)) {
			t.Fatalf("%+v on a pipeline without conntrack: %v; want not_found naming it", q, err)
		}
	}
}

// TestConntrackFlushWaitsForSwap: a flush that comes during a swap (ctlMu
// held) waits for it, and one whose client gave up meanwhile flushes
// nothing.
func TestConntrackFlushWaitsForSwap(t *testing.T) {
	d := ctAttackDaemon(t, "  - {name: ct, type: conntrack, size: 1024}\n", 1, 0, 10)
	d.ctlMu.Lock()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	res := make(chan error, 1)
	go func() {
		_, err := d.conntrack(ctx, control.ConntrackQuery{Flush: true})
		res <- err
	}()
	time.Sleep(150 * time.Millisecond)
	d.ctlMu.Unlock()
	if err := testwait.Recv(t, res, "the flush to return", testwait.Deadline); err == nil || !bytes.Contains([]byte(err.Error()), []byte("load or swap")) {
		t.Fatalf("flush whose client gave up during a swap: %v", err)
	}
	rep, err := d.conntrack(context.Background(), control.ConntrackQuery{})
	if err != nil || rep.Entries != 10 {
		t.Fatalf("after it: %+v %v; want the 10 flows kept", rep, err)
	}
}

// TestConntrackPartialFlushSaid: a flush that flushed some queues and then
// timed out on a stalled one says how many it flushed (the error was only
// the timeout: the operator could not tell a flush that did nothing from
// one that did most of it).
func TestConntrackPartialFlushSaid(t *testing.T) {
	d, stalls := ctAttackDaemonStalls(t, "  - {name: ct, type: conntrack, size: 1024}\n", 2, 0, 10)
	stalls[1].stall.Store(true)
	testwait.Recv(t, stalls[1].stalled, "queue 1's worker to stall in Receive", testwait.Deadline)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := d.conntrack(ctx, control.ConntrackQuery{Flush: true})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("flushed 10 flows")) {
		t.Fatalf("flush with queue 1 stalled: %v; want it to say queue 0's 10 flows were flushed", err)
	}
	stalls[1].stall.Store(false)
	rep, err := d.conntrack(context.Background(), control.ConntrackQuery{})
	if err != nil || rep.Entries != 10 {
		t.Fatalf("after: %+v %v; want queue 1's 10 flows left", rep, err)
	}
}
