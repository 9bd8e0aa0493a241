package rings

import (
	"math/rand/v2"
	"testing"

	"github.com/warpflow/warpflow/internal/allocs"
)

func TestBatchAdjustHead(t *testing.T) {
	a := newTestArena(t, 2, 2048, 256)
	base := uint64(2048) // frame 1
	tests := []struct {
		name     string
		addr     uint64 // packet start
		len      uint32
		delta    int
		ok       bool
		wantAddr uint64
		wantLen  uint32
	}{
		{"push into headroom", base + 256, 100, -14, true, base + 242, 114},
		{"push whole headroom", base + 256, 100, -256, true, base, 356},
		{"push past frame start", base + 256, 100, -257, false, base + 256, 100},
		{"push at frame start", base, 100, -1, false, base, 100},
		{"pull a header", base + 256, 100, 14, true, base + 270, 86},
		{"pull all but one byte", base + 256, 100, 99, true, base + 355, 1},
		{"pull everything", base + 256, 100, 100, false, base + 256, 100},
		{"pull past the end", base + 256, 100, 500, false, base + 256, 100},
		{"zero delta", base + 256, 100, 0, true, base + 256, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBatch(4, a)
			b.SetLen(1)
			b.Descs[0] = Desc{Addr: tt.addr, Len: tt.len}
			if ok := b.AdjustHead(0, tt.delta); ok != tt.ok {
				t.Fatalf("AdjustHead(%d) = %v, want %v", tt.delta, ok, tt.ok)
			}
			if d := b.Descs[0]; d.Addr != tt.wantAddr || d.Len != tt.wantLen {
				t.Fatalf("desc = {%#x %d}, want {%#x %d}", d.Addr, d.Len, tt.wantAddr, tt.wantLen)
			}
			if got := b.Headroom(0); got != int(tt.wantAddr-base) {
				t.Fatalf("Headroom = %d, want %d", got, tt.wantAddr-base)
			}
		})
	}
}

func TestBatchPacketViewEndsAtFrameEnd(t *testing.T) {
	a := newTestArena(t, 3, 4096, 256)
	b := NewBatch(8, a)
	tests := []struct {
		addr    uint64
		len     uint32
		wantCap int
	}{
		{256, 60, 4096 - 256},
		{4096 + 256, 1500, 4096 - 256},
		{2*4096 + 4000, 96, 96},
		{2 * 4096, 4096, 4096},
	}
	b.SetLen(len(tests))
	for i, tt := range tests {
		b.Descs[i] = Desc{Addr: tt.addr, Len: tt.len}
	}
	for i, tt := range tests {
		p := b.Packet(i)
		if len(p) != int(tt.len) || cap(p) != tt.wantCap {
			t.Errorf("packet %d: len/cap %d/%d, want %d/%d", i, len(p), cap(p), tt.len, tt.wantCap)
		}
		if &p[0] != &a.Mem()[tt.addr] {
			t.Errorf("packet %d does not view the arena in place", i)
		}
		// Growing the tail to the capacity must stay inside the frame.
		grown := p[:cap(p)]
		if end := tt.addr + uint64(len(grown)); (end-1)/4096 != tt.addr/4096 {
			t.Errorf("packet %d grows into the next frame", i)
		}
	}
}

// TestBatchPacketMatchesFrame holds Packet to the plain form of its view,
// mem[Addr : Addr+Len : (Addr|frameMask)+1], over random descriptors in
// every frame size: the same bytes, length and capacity where that form
// is valid, and a panic where it panics (a length past the frame's end,
// an address past the arena).
func TestBatchPacketMatchesFrame(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for size := 2048; size <= 65536; size *= 2 {
		const frames = 3
		a := newTestArena(t, frames, size, 0)
		mem := a.Mem()
		b := NewBatch(1, a)
		b.SetLen(1)
		mask := uint64(size - 1)
		for range 20000 {
			addr := rng.Uint64N(uint64(frames*size + 2*size))
			n := uint32(rng.Uint64N(uint64(size + 2)))
			if rng.IntN(2) == 0 {
				n = uint32(min(uint64(n), uint64(size)-addr&mask)) // mostly within the frame
			}
			b.Descs[0] = Desc{Addr: addr, Len: n}
			got, gotPanic := catchPanic(func() []byte { return b.Packet(0) })
			want, wantPanic := catchPanic(func() []byte { return mem[addr : addr+uint64(n) : (addr|mask)+1] })
			if gotPanic != wantPanic {
				t.Fatalf("size %d, desc %+v: panics %v, want %v", size, b.Descs[0], gotPanic, wantPanic)
			}
			if wantPanic {
				continue
			}
			if len(got) != len(want) || cap(got) != cap(want) || &got[:cap(got)][0] != &want[:cap(want)][0] {
				t.Fatalf("size %d, desc %+v: len/cap %d/%d, want %d/%d, or not the same bytes", size, b.Descs[0], len(got), cap(got), len(want), cap(want))
			}
		}
	}
}

// catchPanic returns f's result, or reports that it panicked.
func catchPanic(f func() []byte) (p []byte, panicked bool) {
	defer func() {
		if recover() != nil {
			panicked = true
		}
	}()
	return f(), false
}

func TestBatchLenAndClear(t *testing.T) {
	a := newTestArena(t, 1, 2048, 0)
	b := NewBatch(16, a)
	if b.Cap() != 16 || b.Len() != 0 {
		t.Fatalf("new batch len/cap = %d/%d", b.Len(), b.Cap())
	}
	b.SetLen(10)
	if b.Len() != 10 || len(b.Meta) != 10 {
		t.Fatalf("SetLen(10): len %d meta %d", b.Len(), len(b.Meta))
	}
	b.Clear()
	if b.Len() != 0 || len(b.Meta) != 0 || b.Cap() != 16 {
		t.Fatalf("Clear: len %d meta %d cap %d", b.Len(), len(b.Meta), b.Cap())
	}
}

// TestBatchAppendRun: a run appends what fits, numbers it from seq, and
// clears whatever metadata the slots held before, without allocating.
func TestBatchAppendRun(t *testing.T) {
	a := newTestArena(t, 1, 2048, 0)
	b := NewBatch(8, a)
	b.SetLen(8)
	for i := range b.Meta {
		b.Meta[i] = Meta{Seq: 999, Verdict: VerdictDrop, Target: 7, Hash: 1, TTL: 3}
	}
	b.Clear()
	b.Append(Desc{Addr: 100, Len: 1}, 41, 2)
	run := []Desc{{Addr: 200, Len: 2}, {Addr: 300, Len: 3}, {Addr: 400, Len: 4}}
	if n := b.AppendRun(run, 42, 2); n != 3 || b.Len() != 4 || len(b.Meta) != 4 {
		t.Fatalf("AppendRun: n %d len %d meta %d, want 3, 4, 4", n, b.Len(), len(b.Meta))
	}
	for i, m := range b.Meta {
		want := Meta{Seq: 41 + uint64(i), InPort: 2}
		if m != want {
			t.Fatalf("meta %d = %+v, want %+v", i, m, want)
		}
		if i > 0 && b.Descs[i] != run[i-1] {
			t.Fatalf("desc %d = %+v, want %+v", i, b.Descs[i], run[i-1])
		}
	}
	// Only what fits goes in.
	long := make([]Desc, 10)
	if n := b.AppendRun(long, 45, 2); n != 4 || b.Len() != 8 {
		t.Fatalf("AppendRun past capacity: n %d len %d, want 4, 8", n, b.Len())
	}
	if n := b.AppendRun(long, 49, 2); n != 0 || b.Len() != 8 {
		t.Fatalf("AppendRun on a full batch: n %d len %d, want 0, 8", n, b.Len())
	}
	if n := allocs.Count(100, func() { b.Clear(); b.AppendRun(long, 0, 0) }); n != 0 {
		t.Fatalf("AppendRun allocated %d times in 100 runs, want 0", n)
	}
}

// TestBatchEpoch: SetTime64 gives the packets its low 32 bits and Epoch
// the whole time; a SetTime after it (a port that stamps its own times,
// a replay) makes Epoch 0, unknown, so no stage takes a replay's times
// for the engine's clock; SetEpoch sets it alone (steering's batches).
func TestBatchEpoch(t *testing.T) {
	b := NewBatch(4, newTestArena(t, 8, 2048, 0))
	var whole uint64 = 1_700_000_000_000 + 1<<32
	b.SetTime64(whole)
	b.Append(Desc{}, 1, 0)
	if b.Epoch() != whole || b.Meta[0].Time != uint32(whole) {
		t.Fatalf("epoch %d, time %d", b.Epoch(), b.Meta[0].Time)
	}
	b.SetTime(7)
	if b.Epoch() != 0 || b.Time() != 7 {
		t.Fatalf("after SetTime: epoch %d, time %d", b.Epoch(), b.Time())
	}
	b.SetEpoch(whole)
	if b.Epoch() != whole || b.Time() != 7 {
		t.Fatalf("after SetEpoch: epoch %d, time %d", b.Epoch(), b.Time())
	}
}
