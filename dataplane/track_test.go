package dataplane

import (
	"errors"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// leakyPort wraps a replay port and misbehaves on purpose.
type leakyPort struct {
	*ReplayPort
	duplicate bool // hand out the first frame of every batch twice
	leak      bool // keep (never free) the first frame recycled
	leaked    bool
}

func (p *leakyPort) Receive(b *rings.Batch) (int, error) {
	n, err := p.ReplayPort.Receive(b)
	if p.duplicate && n > 0 && b.Len() < b.Cap() {
		b.SettleMeta() // deferred in worker mode: Meta.Seq is read here
		b.Append(b.Descs[0], b.Meta[0].Seq, 0)
		n++
	}
	return n, err
}

func (p *leakyPort) Recycle(descs []rings.Desc) {
	if p.leak && !p.leaked && len(descs) > 0 {
		p.leaked = true
		descs = descs[1:]
	}
	p.ReplayPort.Recycle(descs)
}

func runTracked(t *testing.T, wrap func(*ReplayPort) Port, workers int) error {
	t.Helper()
	arena, err := rings.NewArena(rings.DefaultArenaOptions())
	if err != nil {
		t.Fatal(err)
	}
	in, err := OpenReplay("../testdata/captures/mixed.pcap", arena, DefaultReplayOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	g := defaultGraph(t)
	outs := Outputs{Ports: map[string]Port{}}
	for _, name := range g.Ports() {
		outs.Ports[name] = NewNullPort(name)
	}
	o := DefaultOptions()
	o.Workers = workers
	o.TrackFrames = true
	e, err := NewEngine(g, arena, wrap(in), outs, o)
	if err != nil {
		t.Fatal(err)
	}
	return e.Run(nil)
}

func TestTrackFrames(t *testing.T) {
	for _, workers := range []int{0, 2} {
		if err := runTracked(t, func(p *ReplayPort) Port { return p }, workers); err != nil {
			t.Fatalf("workers %d: a correct port fails frame tracking: %v", workers, err)
		}
		err := runTracked(t, func(p *ReplayPort) Port { return &leakyPort{ReplayPort: p, duplicate: true} }, workers)
		if !errors.Is(err, rings.ErrDuplicateFrame) || !strings.Contains(err.Error(), "enters in-flight while held by in-flight") {
			t.Fatalf("workers %d: a frame handed out twice: got %v", workers, err)
		}
		err = runTracked(t, func(p *ReplayPort) Port { return &leakyPort{ReplayPort: p, leak: true} }, workers)
		if err == nil || !strings.Contains(err.Error(), "frame accounting after the run") {
			t.Fatalf("workers %d: a leaked frame: got %v", workers, err)
		}
	}
}

// halfPort accepts half of each transmit and, when failing, says why.
type halfPort struct {
	*NullPort
	fail bool
}

func (p *halfPort) Transmit(a *rings.Arena, descs []rings.Desc) (int, error) {
	n, _ := p.NullPort.Transmit(a, descs[:len(descs)/2])
	if p.fail {
		return n, errors.New("disk full")
	}
	return n, nil
}

// TestRefusedTransmitIsCounted checks that packets an output refuses are
// dropped under tx_full (tx_error with an error, which Run returns), on
// both the uniform-batch fast path and the general path, and still balance.
func TestRefusedTransmitIsCounted(t *testing.T) {
	uniform := "name: u\nstages:\n  - {name: out, type: tx, port: p}\n"
	mixed := "name: m\nstages:\n  - {name: parse, type: parse}\n" +
		"  - {name: acl, type: filter, rules: [{proto: tcp, action: \"drop:tcp\"}]}\n  - {name: out, type: tx, port: p}\n"
	for _, src := range []string{uniform, mixed} {
		for _, fail := range []bool{false, true} {
			out := &halfPort{NullPort: NewNullPort("p"), fail: fail}
			rep, refused := runRefusing(t, src, Outputs{Ports: map[string]Port{"p": out}}, fail, "tx_full", "tx_error")
			if !rep.Balanced || refused == 0 || rep.Transmitted == 0 || rep.Transmitted != out.Stats().Packets {
				t.Errorf("%s fail=%v: %s, refused %d, port saw %d", rep.Pipeline, fail, rep.AccountingLine(), refused, out.Stats().Packets)
			}
		}
	}
}

// TestRefusedPassIsCounted: a pass port that takes only part of a batch gets
// the rest counted as pass_full (pass_error with an error), not as passed.
func TestRefusedPassIsCounted(t *testing.T) {
	src := "name: p\nstages:\n  - {name: parse, type: parse}\n" +
		"  - {name: acl, type: filter, rules: [{proto: udp, action: kernel}], default: out}\n" +
		"  - {name: out, type: tx, port: p}\n  - {name: kernel, type: pass}\n"
	for _, fail := range []bool{false, true} {
		pass := &halfPort{NullPort: NewNullPort("kernel"), fail: fail}
		rep, refused := runRefusing(t, src, Outputs{Ports: map[string]Port{"p": NewNullPort("p")}, Pass: pass}, fail, "pass_full", "pass_error")
		if !rep.Balanced || refused == 0 || rep.Passed == 0 || rep.Passed != pass.Stats().Packets {
			t.Errorf("fail=%v: %s, refused %d, pass port saw %d", fail, rep.AccountingLine(), refused, pass.Stats().Packets)
		}
	}
}

// runRefusing replays mixed.pcap inline through the pipeline src into
// outs, one of which refuses part of each batch (with an error when fail),
// and returns the report and the packets dropped for the refusal: under
// full, or under failed when fail, whose run must return the port's error.
func runRefusing(t *testing.T, src string, outs Outputs, fail bool, full, failed string) (Report, uint64) {
	t.Helper()
	g, err := pipelines.Load("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	arena, _ := rings.NewArena(rings.DefaultArenaOptions())
	in, err := OpenReplay("../testdata/captures/mixed.pcap", arena, DefaultReplayOptions())
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.Workers = 0
	e, err := NewEngine(g, arena, in, outs, o)
	if err != nil {
		t.Fatal(err)
	}
	runErr := e.Run(nil)
	in.Close()
	rep := e.Report()
	want := full
	if fail {
		want = failed
		if runErr == nil || !strings.Contains(runErr.Error(), "disk full") {
			t.Errorf("%s: run error %v, want the refusing port's error", g.Name(), runErr)
		}
	} else if runErr != nil {
		t.Fatal(runErr)
	}
	var refused uint64
	for _, d := range rep.Drops {
		if d.Reason == want {
			refused = d.Packets
		}
	}
	return rep, refused
}
