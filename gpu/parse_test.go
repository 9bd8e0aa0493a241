package gpu

import (
	"math/rand/v2"
	"testing"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// TestParseCommonAgrees: wherever the kernel's parser (parseCommon, its
// line-for-line Go twin) accepts a packet, its key is the parse stage's
// key; it accepts the ordinary packets it is meant for. Packets are the
// captures' frames and random mutations of them (cut short, bytes
// flipped, window cut by the frame end).
func TestParseCommonAgrees(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 8))
	var frames [][]byte
	for _, f := range captures(t) {
		a, err := rings.NewArena(rings.ArenaOptions{Frames: 256, FrameSize: 4096, Headroom: 256})
		if err != nil {
			t.Fatal(err)
		}
		p, err := dataplane.OpenReplay(f, a, dataplane.DefaultReplayOptions())
		if err != nil {
			t.Fatal(err)
		}
		b := rings.NewBatch(128, a)
		for {
			b.Clear()
			n, err := p.Receive(b)
			for i := range n {
				frames = append(frames, append([]byte(nil), b.Packet(i)...))
			}
			p.Recycle(b.Descs)
			if err != nil || n == 0 {
				break
			}
		}
		p.Close()
	}
	accepted, total := 0, 0
	check := func(pkt []byte, have int) {
		total++
		var gk, ck pipelines.FilterKey
		if !parseCommon(pkt, len(pkt), have, &gk) {
			return
		}
		accepted++
		pipelines.FilterKeyOfPacket(pkt, true, &ck)
		if gk != ck {
			t.Fatalf("packet % x (have %d): kernel parser key %v, parse stage %v", pkt, have, gk, ck)
		}
	}
	for _, f := range frames {
		check(f, window)
		for range 20 {
			m := append([]byte(nil), f...)
			switch rnd.IntN(3) {
			case 0:
				m = m[:rnd.IntN(len(m)+1)]
			case 1:
				for range 1 + rnd.IntN(3) {
					if len(m) > 0 {
						m[rnd.IntN(min(len(m), 80))] ^= byte(1 + rnd.IntN(255))
					}
				}
			case 2:
				check(m, rnd.IntN(window+1))
				continue
			}
			check(m, window)
		}
	}
	t.Logf("%d packets, %d accepted by the kernel's parser", total, accepted)
	if accepted < total/4 {
		t.Fatalf("kernel parser accepted only %d of %d packets", accepted, total)
	}
}

// TestParseCommonAllocs: the twin parser allocates nothing.
func TestParseCommonAllocs(t *testing.T) {
	pkt := make([]byte, 64)
	copy(pkt[12:], []byte{0x08, 0x00, 0x45, 0, 0, 50, 0, 0, 0, 0, 64, 6})
	pkt[14+20+12] = 5 << 4
	var k pipelines.FilterKey
	if a := testing.AllocsPerRun(100, func() { parseCommon(pkt, len(pkt), window, &k) }); a != 0 {
		t.Fatalf("%v allocations", a)
	}
	if !parseCommon(pkt, len(pkt), window, &k) {
		t.Fatal("plain IPv4/TCP packet not accepted")
	}
}
