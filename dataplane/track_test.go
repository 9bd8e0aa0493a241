package dataplane

import (
	"errors"
	"strings"
	"testing"

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
		if !errors.Is(err, rings.ErrDuplicateFrame) || !strings.Contains(err.Error(), "still in flight") {
			t.Fatalf("workers %d: a frame handed out twice: got %v", workers, err)
		}
		err = runTracked(t, func(p *ReplayPort) Port { return &leakyPort{ReplayPort: p, leak: true} }, workers)
		if err == nil || !strings.Contains(err.Error(), "frame accounting after the run") {
			t.Fatalf("workers %d: a leaked frame: got %v", workers, err)
		}
	}
}
