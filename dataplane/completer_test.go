package dataplane

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"

	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/internal/testwait"
)

// holdPort is a fake Completer (AF_XDP TX in miniature): it keeps every
// frame it accepts for delay calls of Complete (loop turns), holds at most
// limit frames (the rest of a transmit is refused: tx_full), and when it
// gives a frame back checks that the frame's bytes are what it accepted. An
// engine that recycled a frame while the port held it would let the input
// reuse the frame, and the check would see it overwritten.
type holdPort struct {
	name  string
	a     *rings.Arena
	delay int
	stall bool // never complete: the frames are lost
	lie   bool // Outstanding reports 0 while holding frames

	q          []heldFrame // FIFO ring of capacity limit
	head, n    int
	turn       int
	accepted   uint64
	completed  uint64
	corrupted  int
	maxHeld    int
	completes  int // calls of Complete
	onComplete func()

	// Set by placesPort.TrackFrames: the port records its moves between
	// home and "NAME kernel"; skipMove forgets one (a port bug).
	tr           *rings.Tracker
	home, kernel rings.Owner
	skipMove     bool
	pub          atomic.Int64 // n, as it moves
	// published is n as of the engine's last publication (placesPort's
	// PublishPlaces), for FramePlaces on other goroutines.
	published atomic.Int64
}

type heldFrame struct {
	d    rings.Desc
	turn int
	sum  uint64
}

func newHoldPort(name string, a *rings.Arena, limit, delay int) *holdPort {
	return &holdPort{name: name, a: a, delay: delay, q: make([]heldFrame, limit)}
}

// frameSum is FNV-1a over the packet, written out so that it does not
// allocate (the completion path's allocation test uses this port).
func frameSum(a *rings.Arena, d rings.Desc) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range a.Bytes(d) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h ^ uint64(d.Len)
}

func (p *holdPort) Name() string                      { return p.name }
func (p *holdPort) Receive(*rings.Batch) (int, error) { return 0, ErrNotReceiver }
func (p *holdPort) Recycle([]rings.Desc)              {}
func (p *holdPort) Close() error                      { return nil }

func (p *holdPort) Transmit(a *rings.Arena, descs []rings.Desc) (int, error) {
	k := min(len(descs), len(p.q)-p.n)
	for _, d := range descs[:k] {
		p.q[(p.head+p.n)%len(p.q)] = heldFrame{d: d, turn: p.turn, sum: frameSum(a, d)}
		p.n++
		if p.tr != nil {
			p.tr.Move(d.Addr, p.home, p.kernel) // a failure shows when the engine moves it next
		}
	}
	p.pub.Store(int64(p.n))
	p.accepted += uint64(k)
	p.maxHeld = max(p.maxHeld, p.n)
	return k, nil
}

func (p *holdPort) Complete(dst []rings.Desc) []rings.Desc {
	p.completes++
	p.turn++
	if p.onComplete != nil {
		p.onComplete()
	}
	if p.stall {
		return dst
	}
	for p.n > 0 && len(dst) < cap(dst) {
		f := &p.q[p.head]
		if p.turn-f.turn < p.delay {
			break
		}
		if frameSum(p.a, f.d) != f.sum {
			p.corrupted++
		}
		dst = append(dst, f.d)
		if p.tr != nil {
			if p.skipMove {
				p.skipMove = false
			} else {
				p.tr.Move(f.d.Addr, p.kernel, p.home)
			}
		}
		p.head = (p.head + 1) % len(p.q)
		p.n--
		p.completed++
	}
	p.pub.Store(int64(p.n))
	return dst
}

func (p *holdPort) Outstanding() int {
	if p.lie {
		return 0
	}
	return p.n
}

var _ Completer = (*holdPort)(nil)

const holdPipeline = "name: h\nstages:\n  - {name: parse, type: parse}\n" +
	"  - {name: acl, type: filter, rules: [{proto: tcp, action: \"drop:tcp\"}, {proto: udp, dst_port: 53, action: kernel}], default: out}\n" +
	"  - {name: out, type: tx, port: p}\n  - {name: kernel, type: pass}\n"

const uniformPipeline = "name: u\nstages:\n  - {name: out, type: tx, port: p}\n"

// holdRun replays mixed.pcap (streamed, loops passes) through src with the
// tx port (and the pass port, when the pipeline passes) given by outs, in
// an arena of frames frames, and returns the engine and Run's error.
func holdRun(t *testing.T, src string, frames, loops, workers int, outs func(a *rings.Arena) Outputs, tune func(*Options)) (*Engine, *rings.Arena, error) {
	t.Helper()
	g, err := pipelines.Load("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	arena, err := rings.NewArena(rings.ArenaOptions{Frames: frames, FrameSize: 2048, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	ro := DefaultReplayOptions()
	ro.Loops = loops
	in, err := OpenReplay("../testdata/captures/mixed.pcap", arena, ro)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	o := DefaultOptions()
	o.Workers = workers
	o.BatchSize = 16
	o.TrackFrames = true
	if tune != nil {
		tune(&o)
	}
	e, err := NewEngine(g, arena, in, outs(arena), o)
	if err != nil {
		t.Fatal(err)
	}
	return e, arena, e.Run(nil)
}

// TestCompleterOwnsFrames: frames a Completer accepted are not recycled
// until it completes them (their bytes are intact when it does, in an
// arena small enough that an early recycle is reused at once), every frame
// comes back, and the counters equal those of a run to a plain port, on the
// uniform fast path and the general one, inline and with workers.
func TestCompleterOwnsFrames(t *testing.T) {
	for _, src := range []string{uniformPipeline, holdPipeline} {
		for _, workers := range []int{0, 2} {
			plain := func(*rings.Arena) Outputs {
				return Outputs{Ports: map[string]Port{"p": NewNullPort("p")}, Pass: NewNullPort("kernel")}
			}
			ref, _, err := holdRun(t, src, 48, 3, workers, plain, nil)
			if err != nil {
				t.Fatal(err)
			}
			var tx, pass *holdPort
			held := func(a *rings.Arena) Outputs {
				tx, pass = newHoldPort("p", a, 64, 3), newHoldPort("kernel", a, 64, 2)
				return Outputs{Ports: map[string]Port{"p": tx}, Pass: pass}
			}
			e, arena, err := holdRun(t, src, 48, 3, workers, held, nil)
			if err != nil {
				t.Fatalf("workers %d: %v", workers, err)
			}
			rep := e.Report()
			if !reflect.DeepEqual(rep.Deterministic(), ref.Report().Deterministic()) {
				t.Fatalf("workers %d: counters differ from a run to plain ports:\n got %+v\nwant %+v", workers, rep.Deterministic(), ref.Report().Deterministic())
			}
			if tx.corrupted+pass.corrupted != 0 {
				t.Fatalf("workers %d: %d frames overwritten while the port held them", workers, tx.corrupted+pass.corrupted)
			}
			if tx.accepted != rep.Transmitted || tx.completed != tx.accepted || pass.completed != pass.accepted || pass.accepted != rep.Passed {
				t.Fatalf("workers %d: tx %d/%d, pass %d/%d completed; report %s", workers, tx.completed, tx.accepted, pass.completed, pass.accepted, rep.AccountingLine())
			}
			if tx.maxHeld == 0 || arena.FreeFrames() != arena.Frames() || e.frames().Lost != 0 {
				t.Fatalf("workers %d: port held at most %d; %d/%d frames free, %d lost", workers, tx.maxHeld, arena.FreeFrames(), arena.Frames(), e.frames().Lost)
			}
		}
	}
}

// TestCompleterRefusals: a Completer that refuses part of a transmit gets
// the rest counted as tx_full and recycled at once; what it took comes back
// through Complete.
func TestCompleterRefusals(t *testing.T) {
	for _, workers := range []int{0, 2} {
		var tx *holdPort
		e, arena, err := holdRun(t, holdPipeline, 64, 2, workers, func(a *rings.Arena) Outputs {
			tx = newHoldPort("p", a, 5, 4)
			return Outputs{Ports: map[string]Port{"p": tx}}
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		rep := e.Report()
		var full uint64
		for _, d := range rep.Drops {
			if d.Reason == reasonTxFull {
				full = d.Packets
			}
		}
		if !rep.Balanced || full == 0 || rep.Transmitted != tx.accepted || tx.completed != tx.accepted || arena.FreeFrames() != arena.Frames() {
			t.Fatalf("workers %d: %s, tx_full %d, port took %d gave back %d, %d/%d free", workers, rep.AccountingLine(), full, tx.accepted, tx.completed, arena.FreeFrames(), arena.Frames())
		}
	}
}

// TestCompleterLostFrames: frames a Completer never gives back are waited
// for no longer than DrainTimeout, counted as lost and reported by Run; a
// port that says it holds nothing is not waited for at all.
func TestCompleterLostFrames(t *testing.T) {
	for _, lie := range []bool{false, true} {
		var tx *holdPort
		timeout := 50 * time.Millisecond
		if lie {
			timeout = time.Minute // must not be waited out
		}
		start := time.Now()
		e, _, err := holdRun(t, uniformPipeline, 32, 1, 0, func(a *rings.Arena) Outputs {
			tx = newHoldPort("p", a, 8, 1)
			tx.stall, tx.lie = true, lie
			return Outputs{Ports: map[string]Port{"p": tx}}
		}, func(o *Options) { o.DrainTimeout = timeout; o.TrackFrames = false })
		took := time.Since(start)
		if !errors.Is(err, ErrFramesLost) || !strings.Contains(err.Error(), "8 frames still held by p") {
			t.Fatalf("lie=%v: Run returned %v", lie, err)
		}
		if acct := e.frames(); acct.Lost != 8 || acct.Total() != 32 || acct.Free != 24 {
			t.Fatalf("lie=%v: %+v, want the 8 frames the port kept lost and 24 free", lie, acct)
		}
		if took > 20*time.Second {
			t.Fatalf("lie=%v: the drain took %v", lie, took)
		}
	}
}

// excessPort gives back, with each completion, also the first frame it
// gave back the time before: a frame completed twice.
type excessPort struct {
	*holdPort
	last  rings.Desc
	has   bool
	twice bool
}

func (p *excessPort) Complete(dst []rings.Desc) []rings.Desc {
	from := len(dst)
	if p.has && !p.twice && p.n > 1 {
		dst = append(dst, p.last)
		p.twice = true
	}
	dst = p.holdPort.Complete(dst)
	if len(dst) > from {
		p.last, p.has = dst[from], true
	}
	return dst
}

// TestCompleterErrors: a Completer may not be a sample sink, DrainTimeout
// may not be negative, and a Completer that gives back more than it holds
// fails the run (in TrackFrames mode, naming the frame and both places).
func TestCompleterErrors(t *testing.T) {
	src := "name: s\nstages:\n  - {name: smp, type: sample, every: 2, file: s.pcap}\n  - {name: out, type: tx, port: p}\n"
	g, err := pipelines.Load("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	arena, _ := rings.NewArena(rings.DefaultArenaOptions())
	h := newHoldPort("s", arena, 4, 1)
	_, err = NewEngine(g, arena, NewNullPort("in"), Outputs{Ports: map[string]Port{"p": NewNullPort("p")}, Samples: map[string]Port{"s.pcap": h}}, DefaultOptions())
	if err == nil || !strings.Contains(err.Error(), "Completer") {
		t.Fatalf("a Completer sample sink: got %v", err)
	}
	o := DefaultOptions()
	o.DrainTimeout = -time.Second
	if _, err = NewEngine(g, arena, NewNullPort("in"), Outputs{Ports: map[string]Port{"p": NewNullPort("p")}}, o); err == nil || !strings.Contains(err.Error(), "drain timeout") {
		t.Fatalf("negative drain timeout: got %v", err)
	}
	for _, track := range []bool{false, true} {
		_, _, err = holdRun(t, uniformPipeline, 64, 1, 0, func(a *rings.Arena) Outputs {
			return Outputs{Ports: map[string]Port{"p": &excessPort{holdPort: newHoldPort("p", a, 64, 3)}}}
		}, func(o *Options) { o.TrackFrames = track })
		want := "p completed 1 frames more than it held"
		if track {
			want = "p completed a frame it did not hold: move frame"
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("track=%v: a double completion: got %v", track, err)
		}
	}
}

// genPort is an endless input: each Receive fills the batch with frames
// from the arena (as many as are free), copying in its templates in turn;
// Recycle frees them.
type genPort struct {
	a     *rings.Arena
	seq   uint64
	tmpl  [][]byte
	limit uint64 // packets to give before io.EOF; 0: endless
}

// genTemplates are a UDP packet to port 53 (holdPipeline passes it), one
// to port 80 (transmitted) and the same as TCP (dropped).
func genTemplates() [][]byte {
	dns := udpFrame(64)
	web := append([]byte(nil), dns...)
	web[14+20+3] = 80
	tcp := append([]byte(nil), web...)
	tcp[14+9] = 6
	return [][]byte{dns, web, tcp}
}

func (p *genPort) Name() string { return "gen" }
func (p *genPort) Receive(b *rings.Batch) (int, error) {
	n := 0
	if p.limit > 0 && p.seq >= p.limit {
		return 0, io.EOF
	}
	for b.Len() < b.Cap() && (p.limit == 0 || p.seq < p.limit) {
		addr, ok := p.a.Alloc()
		if !ok {
			break
		}
		pkt := p.tmpl[p.seq%uint64(len(p.tmpl))]
		copy(p.a.Frame(addr)[addr&uint64(p.a.FrameSize()-1):], pkt)
		b.Append(rings.Desc{Addr: addr, Len: uint32(len(pkt))}, p.seq, 0)
		p.seq++
		n++
	}
	return n, nil
}
func (p *genPort) Transmit(*rings.Arena, []rings.Desc) (int, error) { return 0, ErrNotTransmitter }
func (p *genPort) Recycle(descs []rings.Desc) {
	for _, d := range descs {
		p.a.Free(d.Addr)
	}
}
func (p *genPort) Close() error { return nil }

// TestCompletionPathNoAllocs: a loop turn that receives, runs the pipeline,
// transmits to Completers (tx and pass) and takes completions back
// allocates nothing, on the uniform fast path and the general one.
func TestCompletionPathNoAllocs(t *testing.T) {
	for _, src := range []string{uniformPipeline, holdPipeline} {
		g, err := pipelines.Load("t.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		arena, _ := rings.NewArena(rings.ArenaOptions{Frames: 256, FrameSize: 2048, Headroom: 256})
		in := &genPort{a: arena, tmpl: genTemplates()}
		tx, pass := newHoldPort("p", arena, 128, 2), newHoldPort("kernel", arena, 128, 2)
		o := DefaultOptions()
		o.Workers, o.BatchSize, o.Timing = 0, 32, false
		e, err := NewEngine(g, arena, in, Outputs{Ports: map[string]Port{"p": tx}, Pass: pass}, o)
		if err != nil {
			t.Fatal(err)
		}
		b, r := e.inline, e.cur.runners[0]
		turn := func() {
			e.pollCompletions()
			b.Clear()
			if n, _ := in.Receive(b); n > 0 {
				r.Process(b)
				e.complete(e.cur, b)
			}
		}
		for range 10 {
			turn()
		}
		if n := allocs.Count(200, turn); n != 0 {
			t.Errorf("%s: %d allocations in 200 loop turns, want 0", g.Name(), n)
		}
		e.publish() // the test is the I/O loop: what it counted, for Report
		rep := e.Report()
		general := src == holdPipeline
		if tx.completed == 0 || (general && (pass.completed == 0 || rep.Dropped == 0)) || tx.corrupted+pass.corrupted != 0 {
			t.Fatalf("%s: completed tx %d pass %d, %s, %d frames overwritten", g.Name(), tx.completed, pass.completed, rep.AccountingLine(), tx.corrupted+pass.corrupted)
		}
	}
}

// placesPort is a holdPort that reports its places (every frame it holds
// is KernelTX) and tracks its own moves.
type placesPort struct{ *holdPort }

func (p placesPort) PublishPlaces() { p.published.Store(int64(p.n)) }

func (p placesPort) FramePlaces(a *FrameAccount) { a.KernelTX += int(p.published.Load()) }

func (p placesPort) TrackFrames(t *rings.Tracker) rings.Owner {
	p.tr, p.home, p.kernel = t, t.Owner(p.name+" home"), t.Owner(p.name+" kernel")
	return p.home
}

// reportingGen is a genPort that reports its places: it holds no frame
// between calls, so it adds nothing, and the engine then derives nothing.
type reportingGen struct{ *genPort }

func (reportingGen) PublishPlaces() {}

func (reportingGen) FramePlaces(*FrameAccount) {}

// TestFrameAccount checks the live frame accounting: read on the I/O loop
// between turns (from the Completer's Complete, before it gives anything
// back), the places sum exactly to the arena's frame count and frames are
// seen held by the engine and by the output; read concurrently from another
// goroutine while the engine runs, every read sums exactly too, the
// reporting output's places included (they are read within the engine's
// publication, as of it); after the run every frame is free. For outputs that report
// their places (KernelTX) and outputs that do not (Output), inline and with
// workers, with frame tracking on.
func TestFrameAccount(t *testing.T) {
	const frames = 96
	for _, reports := range []bool{false, true} {
		for _, workers := range []int{0, 2} {
			g, err := pipelines.Load("t.yaml", []byte(holdPipeline))
			if err != nil {
				t.Fatal(err)
			}
			arena, _ := rings.NewArena(rings.ArenaOptions{Frames: frames, FrameSize: 2048, Headroom: 256})
			in := reportingGen{&genPort{a: arena, tmpl: genTemplates(), limit: 20000}}
			tx := newHoldPort("p", arena, 64, 3)
			var out Port = tx
			if reports {
				out = placesPort{tx}
			}
			o := DefaultOptions()
			o.Workers, o.BatchSize, o.TrackFrames = workers, 16, true
			e, err := NewEngine(g, arena, in, Outputs{Ports: map[string]Port{"p": out}, Pass: NewNullPort("kernel")}, o)
			if err != nil {
				t.Fatal(err)
			}
			if a := e.frames(); a.Free != frames || a.Total() != frames {
				t.Fatalf("before the run: %+v", a)
			}
			var bad []string
			var sawEngine, sawOutput bool
			tx.onComplete = func() {
				a := e.frames()
				held := a.Output
				if reports {
					held = a.KernelTX
				}
				if a.Total() != frames || a.Unreported != 0 || held != tx.n || (reports && a.Output != 0) {
					bad = append(bad, fmt.Sprintf("turn %d: %+v (port holds %d)", tx.turn, a, tx.n))
				}
				sawEngine = sawEngine || a.Engine > 0
				sawOutput = sawOutput || held > 0
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var reads, torn atomic.Int64
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					a := e.frames()
					if a.Total() != frames || a.Unreported != 0 {
						torn.Add(1)
					}
					reads.Add(1)
					select {
					case <-stop:
						return
					default:
						runtime.Gosched()
					}
				}
			}()
			runErr := e.Run(nil)
			close(stop)
			testwait.Group(t, &wg, "the frame-account reader to stop after the run", testwait.Deadline)
			if runErr != nil {
				t.Fatalf("reports=%v workers %d: %v", reports, workers, runErr)
			}
			if len(bad) > 0 {
				t.Fatalf("reports=%v workers %d: %d of %d turns did not sum: %s", reports, workers, len(bad), tx.completes, bad[0])
			}
			if !sawOutput || (workers > 0 && !sawEngine) {
				t.Fatalf("reports=%v workers %d: never saw frames held by the output (%v) or the engine (%v)", reports, workers, sawOutput, sawEngine)
			}
			if torn.Load() != 0 {
				t.Fatalf("reports=%v workers %d: %d of %d concurrent reads did not sum", reports, workers, torn.Load(), reads.Load())
			}
			if a := e.frames(); a.Free != frames || a.Total() != frames {
				t.Fatalf("reports=%v workers %d: after the run: %+v", reports, workers, a)
			}
		}
	}
}

// TestTrackFramesPortPlaces: a port that records its own places catches a
// move it forgot, and the error names the frame and both places.
func TestTrackFramesPortPlaces(t *testing.T) {
	_, _, err := holdRun(t, uniformPipeline, 64, 1, 0, func(a *rings.Arena) Outputs {
		h := newHoldPort("p", a, 32, 2)
		h.skipMove = true
		return Outputs{Ports: map[string]Port{"p": placesPort{h}}}
	}, nil)
	if err == nil || !regexp.MustCompile(`move frame 0x[0-9a-f]+ from p home to in-flight: held by p kernel`).MatchString(err.Error()) {
		t.Fatalf("a forgotten move: got %v", err)
	}
	_, _, err = holdRun(t, uniformPipeline, 64, 1, 2, func(a *rings.Arena) Outputs {
		return Outputs{Ports: map[string]Port{"p": placesPort{newHoldPort("p", a, 32, 2)}}}
	}, nil)
	if err != nil {
		t.Fatalf("a port that tracks its places correctly: %v", err)
	}
}
