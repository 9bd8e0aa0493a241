package dataplane

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/rings"
)

// seqCapture is a capture of n Ethernet packets whose byte 14 is their index
// and whose lengths differ.
func seqCapture(t testing.TB, n int) ([]byte, [][]byte) {
	recs := make([][]byte, n)
	for i := range recs {
		recs[i] = eth(srcMAC, 0x0800, bytes.Repeat([]byte{byte(i)}, 46+i*7))
	}
	return pcapFile(t, 1, recs...), recs
}

func preloaded(t testing.TB, capture []byte, a *rings.Arena, loops, minFrames int) *ReplayPort {
	t.Helper()
	p, err := NewReplay("pre.pcap", bytes.NewReader(capture), a,
		ReplayOptions{Preload: true, Loops: loops, MinFrames: minFrames})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPreloadOwnership drives a preloaded, looping, replicated replay like a
// pipelined engine that keeps batches in flight and recycles them out of
// order, moving packet heads and rewriting bytes. It checks that no frame is
// ever in flight twice, Seq is dense, packets come in capture order with
// their original Addr/Len, bytes are the pipeline's (no copy on the loop),
// and every frame ends back in the arena.
func TestPreloadOwnership(t *testing.T) {
	const packets, loops, minFrames = 5, 7, 12 // 3 replicas: 15 frames
	capture, recs := seqCapture(t, packets)
	a := newArena(t, 64, 2048, 256)
	p := preloaded(t, capture, a, loops, minFrames)
	if used := a.Frames() - a.FreeFrames(); used != 15 {
		t.Fatalf("preload holds %d frames, want 15 (whole passes to at least 12)", used)
	}
	orig := map[uint64]uint32{} // frame addr -> original len
	inFlight := map[uint64]bool{}
	var held []*rings.Batch
	var seq uint64
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; ; round++ {
		if round > 10000 {
			t.Fatal("replay did not end")
		}
		b := rings.NewBatch(1+rng.IntN(6), a)
		n, err := p.Receive(b)
		for i := range n {
			d := b.Descs[i]
			if inFlight[d.Addr] {
				t.Fatalf("seq %d: frame %#x handed out while in flight", seq, d.Addr)
			}
			inFlight[d.Addr] = true
			if l, ok := orig[d.Addr]; ok && l != d.Len {
				t.Fatalf("seq %d: len %d, want original %d", seq, d.Len, l)
			}
			orig[d.Addr] = d.Len
			if b.Meta[i].Seq != seq {
				t.Fatalf("seq %d, want %d", b.Meta[i].Seq, seq)
			}
			k := int(seq % packets)
			pkt := b.Packet(i)
			if len(pkt) != len(recs[k]) || pkt[14] != byte(k) {
				t.Fatalf("seq %d: got packet %d, want %d (capture order)", seq, pkt[14], k)
			}
			// First pass over a frame: bytes as captured. Later passes:
			// as the pipeline left them (dst MAC byte 0 counts visits).
			visits := seq / (packets * 3)
			if pkt[0] != byte(visits) || !bytes.Equal(pkt[1:], recs[k][1:]) {
				t.Fatalf("seq %d: bytes %x not as the pipeline left them (visit %d)", seq, pkt[:16], visits)
			}
			pkt[0]++
			b.AdjustHead(i, 14) // a pipeline popping the Ethernet header
			seq++
		}
		if n > 0 {
			held = append(held, b)
		}
		// Recycle a random held batch (out of order), sometimes several.
		for len(held) > 0 && (rng.IntN(4) == 0 || n == 0) {
			j := rng.IntN(len(held))
			for _, d := range held[j].Descs {
				delete(inFlight, d.Addr-14)
			}
			p.Recycle(held[j].Descs)
			held = append(held[:j], held[j+1:]...)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range held {
		p.Recycle(b.Descs)
	}
	if seq != packets*loops {
		t.Errorf("handed out %d packets, want %d", seq, packets*loops)
	}
	if st := p.Stats(); st.Records != packets || st.Packets != packets*loops || st.BadRecycles != 0 {
		t.Errorf("stats %+v", st)
	}
	if a.FreeFrames() != a.Frames() {
		t.Errorf("%d frames not back in the arena after the replay", a.Frames()-a.FreeFrames())
	}
}

// TestPreloadStallsInOrder: the next frame in capture order being in flight
// stops Receive, even if later frames are home.
func TestPreloadStallsInOrder(t *testing.T) {
	capture, _ := seqCapture(t, 4)
	a := newArena(t, 8, 2048, 0)
	p := preloaded(t, capture, a, -1, 0)
	first := rings.NewBatch(1, a)
	rest := rings.NewBatch(3, a)
	if n, _ := p.Receive(first); n != 1 {
		t.Fatal("no first packet")
	}
	if n, _ := p.Receive(rest); n != 3 {
		t.Fatal("no rest")
	}
	p.Recycle(rest.Descs)
	b := rings.NewBatch(4, a)
	if n, err := p.Receive(b); n != 0 || err != nil {
		t.Fatalf("frame 0 in flight: Receive = %d, %v; want 0, nil", n, err)
	}
	p.Recycle(first.Descs)
	if n, err := p.Receive(b); n != 4 || err != nil || b.Meta[0].Seq != 4 || b.Packet(0)[14] != 0 {
		t.Fatalf("after recycle: Receive = %d, %v", n, err)
	}
	// Recycling twice, or a foreign frame, is counted and changes nothing.
	p.Recycle(b.Descs)
	p.Recycle(b.Descs)
	p.Recycle([]rings.Desc{{Addr: 7 * 2048}, {Addr: 1 << 40}})
	if got := p.Stats().BadRecycles; got != 6 {
		t.Errorf("bad recycles %d, want 6", got)
	}
	if n, _ := p.Receive(rings.NewBatch(8, a)); n != 4 {
		t.Errorf("after double recycle: %d packets, want each frame once (4)", n)
	}
	p.Close()
}

// TestPreloadRecycleRunMixed: a list that looks like a whole run (it starts
// at the run's first frame and has its length) but repeats one frame and
// lacks another must not be taken as the run: the repeat is counted, the
// missing frame stays in flight, and the rest go home.
func TestPreloadRecycleRunMixed(t *testing.T) {
	capture, _ := seqCapture(t, 4)
	a := newArena(t, 8, 2048, 0)
	p := preloaded(t, capture, a, -1, 0)
	b := rings.NewBatch(4, a)
	if n, _ := p.Receive(b); n != 4 {
		t.Fatal("no batch")
	}
	d := b.Descs
	p.Recycle([]rings.Desc{d[0], d[1], d[1], d[3]})
	if got := p.Stats().BadRecycles; got != 1 {
		t.Errorf("bad recycles %d, want 1 (the repeated frame)", got)
	}
	// Frame 2 is still out: the cycle stops there.
	if n, _ := p.Receive(rings.NewBatch(8, a)); n != 2 {
		t.Errorf("after the mixed recycle: %d packets, want 2 (frames 0 and 1, then frame 2 in flight)", n)
	}
	p.Close()
}

func TestPreloadDoesNotFit(t *testing.T) {
	capture, _ := seqCapture(t, 10)
	for _, c := range []struct {
		frames, minFrames int
	}{
		{8, 0},   // the capture itself
		{16, 11}, // two copies needed for 11 frames: 20
	} {
		a := newArena(t, c.frames, 2048, 0)
		_, err := NewReplay("big.pcap", bytes.NewReader(capture), a, ReplayOptions{Preload: true, MinFrames: c.minFrames})
		if !errors.Is(err, rings.ErrArenaEmpty) {
			t.Errorf("%+v: err %v, want ErrArenaEmpty", c, err)
		}
		if a.FreeFrames() != a.Frames() {
			t.Errorf("%+v: %d frames leaked by the failed preload", c, a.Frames()-a.FreeFrames())
		}
	}
}

func TestPreloadEmptyCapture(t *testing.T) {
	a := newArena(t, 8, 2048, 0)
	p := preloaded(t, pcapFile(t, 1), a, -1, 4)
	if n, err := p.Receive(rings.NewBatch(4, a)); n != 0 || err != io.EOF {
		t.Errorf("empty capture: %d, %v; want 0, EOF", n, err)
	}
}

// TestPreloadForeverClose: an endless replay stops at Close; frames in flight
// at Close return to the arena when recycled.
func TestPreloadForeverClose(t *testing.T) {
	capture, _ := seqCapture(t, 3)
	a := newArena(t, 64, 2048, 0)
	p := preloaded(t, capture, a, -1, 32)
	b := rings.NewBatch(16, a)
	for range 1000 {
		b.Clear()
		if n, err := p.Receive(b); n != 16 || err != nil {
			t.Fatalf("Receive = %d, %v", n, err)
		}
		p.Recycle(b.Descs)
	}
	b.Clear()
	p.Receive(b)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p.Recycle(b.Descs)
	if a.FreeFrames() != a.Frames() {
		t.Errorf("%d frames leaked", a.Frames()-a.FreeFrames())
	}
	if got := p.Stats().Packets; got != 1001*16 {
		t.Errorf("packets %d", got)
	}
}

// TestReceiveAllocs: Receive and Recycle allocate nothing, preloaded or
// streamed from a capture already read once (pcapgo's buffer reused).
func TestReceiveAllocs(t *testing.T) {
	capture, _ := seqCapture(t, 50)
	big := bytes.Repeat(capture[24:], 400)
	for _, preload := range []bool{false, true} {
		a := newArena(t, 256, 2048, 0)
		o := ReplayOptions{Preload: preload, Loops: -1, MinFrames: 100}
		src := capture
		if !preload {
			o.MinFrames = 0
			src = append(bytes.Clone(capture[:24]), big...)
		}
		p, err := NewReplay("a.pcap", bytes.NewReader(src), a, o)
		if err != nil {
			t.Fatal(err)
		}
		b := rings.NewBatch(32, a)
		round := func() {
			b.Clear()
			if n, err := p.Receive(b); n != 32 || err != nil {
				t.Fatalf("Receive = %d, %v", n, err)
			}
			p.Recycle(b.Descs)
		}
		round()
		if n := allocs.Count(200, round); n != 0 {
			t.Errorf("preload=%v: %d allocations in 200 Receive+Recycle rounds, want 0", preload, n)
		}
	}
}

// BenchmarkReceivePreload measures the preloaded replay's hot path: Receive
// a batch of 64 descriptors, Recycle it.
func BenchmarkReceivePreload(b *testing.B) {
	capture, _ := seqCapture(b, 64)
	a := newArena(b, 2048, 2048, 256)
	p := preloaded(b, capture, a, -1, 1024)
	batch := rings.NewBatch(64, a)
	b.ReportAllocs()
	b.ResetTimer()
	pkts := 0
	for b.Loop() {
		batch.Clear()
		n, _ := p.Receive(batch)
		p.Recycle(batch.Descs)
		pkts += n
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(pkts), "ns/pkt")
}

// BenchmarkReceiveStream measures streaming replay from memory: pcapgo read,
// normalisation and the copy into a frame, per packet. The capture is long
// (12800 packets) so that the rewind between passes, which allocates a new
// reader, is amortised as it is for real captures.
func BenchmarkReceiveStream(b *testing.B) {
	one, _ := seqCapture(b, 64)
	capture := append(bytes.Clone(one[:24]), bytes.Repeat(one[24:], 200)...)
	a := newArena(b, 2048, 2048, 256)
	p, err := NewReplay("s.pcap", bytes.NewReader(capture), a, ReplayOptions{Loops: -1})
	if err != nil {
		b.Fatal(err)
	}
	batch := rings.NewBatch(64, a)
	b.ReportAllocs()
	b.ResetTimer()
	pkts := 0
	for b.Loop() {
		batch.Clear()
		n, _ := p.Receive(batch)
		p.Recycle(batch.Descs)
		pkts += n
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(pkts), "ns/pkt")
}
