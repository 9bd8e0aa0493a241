package rings

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/internal/allocs"
)

func TestNewArenaOptions(t *testing.T) {
	tests := []struct {
		name    string
		o       ArenaOptions
		wantErr string // substring; empty means success
	}{
		{"default", DefaultArenaOptions(), ""},
		{"smallest frame", ArenaOptions{Frames: 1, FrameSize: 2048}, ""},
		{"largest frame", ArenaOptions{Frames: 1, FrameSize: 65536, Headroom: 32767}, ""},
		{"frame not power of two", ArenaOptions{Frames: 4, FrameSize: 3000}, "frame size 3000"},
		{"frame too small", ArenaOptions{Frames: 4, FrameSize: 1024}, "frame size 1024"},
		{"frame too large", ArenaOptions{Frames: 4, FrameSize: 131072}, "frame size 131072"},
		{"no frames", ArenaOptions{Frames: 0, FrameSize: 2048}, "frame count 0"},
		{"too many frames", ArenaOptions{Frames: 1<<22 + 1, FrameSize: 2048}, "frame count"},
		{"negative headroom", ArenaOptions{Frames: 4, FrameSize: 2048, Headroom: -1}, "headroom -1"},
		{"headroom half a frame", ArenaOptions{Frames: 4, FrameSize: 2048, Headroom: 1024}, "headroom 1024"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := NewArena(tt.o)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("NewArena: %v", err)
				}
				if a.Frames() != tt.o.Frames || a.FreeFrames() != tt.o.Frames || a.FrameSize() != tt.o.FrameSize ||
					a.Headroom() != tt.o.Headroom || len(a.Mem()) != tt.o.Frames*tt.o.FrameSize {
					t.Fatalf("arena %d/%d frames of %d, headroom %d, mem %d; want %+v",
						a.FreeFrames(), a.Frames(), a.FrameSize(), a.Headroom(), len(a.Mem()), tt.o)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("NewArena error = %v, want it to mention %q", err, tt.wantErr)
			}
		})
	}
}

func newTestArena(t testing.TB, frames, size, headroom int) *Arena {
	t.Helper()
	a, err := NewArena(ArenaOptions{Frames: frames, FrameSize: size, Headroom: headroom})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestArenaAllocOrderAndExhaustion(t *testing.T) {
	for _, tc := range []struct{ frames, size, headroom int }{
		{1, 2048, 0},
		{4, 2048, 256},
		{8, 4096, 256},
		{3, 65536, 1000},
	} {
		a := newTestArena(t, tc.frames, tc.size, tc.headroom)
		for i := range tc.frames {
			addr, ok := a.Alloc()
			want := uint64(i*tc.size + tc.headroom)
			if !ok || addr != want {
				t.Fatalf("%+v: alloc %d = %#x, %v; want %#x (address order)", tc, i, addr, ok, want)
			}
			if got := a.FreeFrames(); got != tc.frames-i-1 {
				t.Fatalf("%+v: %d free after %d allocs", tc, got, i+1)
			}
		}
		if addr, ok := a.Alloc(); ok {
			t.Fatalf("%+v: alloc from an empty arena = %#x, want !ok", tc, addr)
		}
	}
}

func TestArenaFreeIsLIFOAndAcceptsAnyAddressInFrame(t *testing.T) {
	a := newTestArena(t, 4, 2048, 128)
	var addrs [4]uint64
	for i := range addrs {
		addrs[i], _ = a.Alloc()
	}
	// Free by an address in the middle of frame 2 and the last byte of frame 0.
	a.Free(addrs[2] + 700)
	a.Free(2047)
	if a.FreeFrames() != 2 {
		t.Fatalf("%d free, want 2", a.FreeFrames())
	}
	for _, want := range []uint64{0 + 128, 2*2048 + 128} {
		if got, ok := a.Alloc(); !ok || got != want {
			t.Fatalf("alloc = %#x, %v; want %#x (last freed first)", got, ok, want)
		}
	}
	if _, ok := a.Alloc(); ok {
		t.Fatal("alloc succeeded with every frame out")
	}
}

func TestArenaAllocNFreeN(t *testing.T) {
	a := newTestArena(t, 5, 2048, 64)
	dst := make([]uint64, 3)
	if n := a.AllocN(dst); n != 3 || dst[0] != 64 || dst[1] != 2048+64 || dst[2] != 4096+64 {
		t.Fatalf("AllocN = %d %#x, want 3 frames in address order", n, dst)
	}
	rest := make([]uint64, 4)
	if n := a.AllocN(rest); n != 2 || rest[0] != 3*2048+64 || rest[1] != 4*2048+64 {
		t.Fatalf("AllocN past the end = %d %#x, want the 2 remaining frames", n, rest[:n])
	}
	if n := a.AllocN(rest); n != 0 {
		t.Fatalf("AllocN on empty arena = %d", n)
	}
	a.FreeN(dst)
	again := make([]uint64, 3)
	if n := a.AllocN(again); n != 3 || [3]uint64(again) != [3]uint64(dst) {
		t.Fatalf("AllocN after FreeN = %#x, want the same order %#x", again, dst)
	}
	// A double free past the stack's capacity grows it like Free would,
	// rather than panicking (the Tracker is what reports it).
	a.FreeN(again)
	a.FreeN(rest[:2])
	a.FreeN([]uint64{64, 2048 + 64})
	if a.FreeFrames() != 7 {
		t.Fatalf("%d free frames after a double FreeN, want 7 (5 + 2 duplicates)", a.FreeFrames())
	}
}

// TestArenaAllocDescsFreeDescs holds AllocDescs and FreeDescs to Alloc
// and Free: over random runs of allocations and frees (descriptors that
// point anywhere into their frames), an arena driven by the bulk calls
// hands out the frames its twin, driven one frame at a time, hands out
// (AllocDescs in the reverse order of Alloc's), and leaves each
// descriptor's Len and Options as they were.
func TestArenaAllocDescsFreeDescs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		frames := 1 + rng.IntN(40)
		bulk, one := newTestArena(t, frames, 2048, 64), newTestArena(t, frames, 2048, 64)
		var held []Desc // the frames out, as both arenas gave them
		for step := range 50 {
			if len(held) > 0 && rng.IntN(2) == 0 {
				k := 1 + rng.IntN(len(held))
				freed := held[len(held)-k:]
				for i := range freed {
					freed[i].Addr += uint64(rng.IntN(2048 - 64)) // any address inside the frame names it
				}
				bulk.FreeDescs(freed)
				for _, d := range freed {
					one.Free(d.Addr)
				}
				held = held[:len(held)-k]
				continue
			}
			dst := make([]Desc, rng.IntN(frames+2))
			for i := range dst {
				dst[i] = Desc{Addr: 1, Len: uint32(i), Options: 7}
			}
			n := bulk.AllocDescs(dst)
			var want []uint64
			for range dst {
				if addr, ok := one.Alloc(); ok {
					want = append(want, addr)
				}
			}
			if n != len(want) {
				t.Fatalf("round %d step %d: AllocDescs gave %d of %d, Alloc %d", round, step, n, len(dst), len(want))
			}
			for i, d := range dst {
				if i >= n {
					if d.Addr != 1 {
						t.Fatalf("round %d step %d: AllocDescs wrote descriptor %d of %d past the %d it allocated", round, step, i, len(dst), n)
					}
					continue
				}
				if d.Addr != want[n-1-i] || d.Len != uint32(i) || d.Options != 7 {
					t.Fatalf("round %d step %d: descriptor %d is %+v, want address %#x, Len %d, Options 7", round, step, i, d, want[n-1-i], i)
				}
			}
			held = append(held, dst[:n]...)
			if bulk.FreeFrames() != one.FreeFrames() {
				t.Fatalf("round %d step %d: %d frames free, want %d", round, step, bulk.FreeFrames(), one.FreeFrames())
			}
		}
	}
	// A double free past the stack's capacity grows it as Free would,
	// rather than panicking (the Tracker is what reports it).
	a := newTestArena(t, 2, 2048, 64)
	a.FreeDescs([]Desc{{Addr: 64}, {Addr: 2048 + 64}, {Addr: 64}})
	if a.FreeFrames() != 5 {
		t.Fatalf("%d free frames after a double FreeDescs, want 5 (2 + 3 duplicates)", a.FreeFrames())
	}
}

func TestArenaViews(t *testing.T) {
	a := newTestArena(t, 4, 2048, 256)
	a.Alloc()
	addr, _ := a.Alloc() // frame 1
	f := a.Frame(addr + 100)
	if len(f) != 2048 || cap(f) != 2048 {
		t.Fatalf("Frame len/cap = %d/%d, want 2048/2048", len(f), cap(f))
	}
	f[0], f[2047] = 0xAA, 0xBB
	if m := a.Mem(); m[2048] != 0xAA || m[4095] != 0xBB || m[4096] != 0 {
		t.Fatal("Frame view does not alias frame 1 of the arena memory exactly")
	}
	p := a.Bytes(Desc{Addr: addr, Len: 60})
	if len(p) != 60 || &p[0] != &a.Mem()[2048+256] {
		t.Fatal("Bytes does not view the descriptor's packet in place")
	}
}

func TestArenaZeroAllocs(t *testing.T) {
	a := newTestArena(t, 64, 2048, 256)
	addrs, descs := make([]uint64, 32), make([]Desc, 32)
	mallocs := allocs.Count(100, func() {
		addr, _ := a.Alloc()
		a.Free(addr)
		n := a.AllocN(addrs)
		a.FreeN(addrs[:n])
		n = a.AllocDescs(descs)
		a.FreeDescs(descs[:n])
	})
	if mallocs != 0 {
		t.Fatalf("Alloc/Free/AllocN/FreeN/AllocDescs/FreeDescs allocated %d times in 100 runs, want 0", mallocs)
	}
}

// TestNewArenaOn builds arenas over caller memory: every frame free, the
// arena's memory is the caller's (a write through one shows in the other),
// and memory too short or misaligned is refused with ErrArenaMemory.
func TestNewArenaOn(t *testing.T) {
	o := ArenaOptions{Frames: 8, FrameSize: 2048, Headroom: 256}
	// Large enough that Go's allocator hands out whole pages: page-aligned.
	backing := make([]byte, 1<<20)
	a, err := NewArenaOn(backing, o)
	if err != nil {
		t.Fatal(err)
	}
	if a.Frames() != 8 || a.FreeFrames() != 8 || len(a.Mem()) != 8*2048 || cap(a.Mem()) != 8*2048 {
		t.Fatalf("arena %d/%d frames, mem %d/%d", a.FreeFrames(), a.Frames(), len(a.Mem()), cap(a.Mem()))
	}
	addr, ok := a.Alloc()
	if !ok || addr != 256 {
		t.Fatalf("first alloc %#x %v, want 0x100", addr, ok)
	}
	a.Frame(addr)[300] = 0xab
	if backing[300] != 0xab {
		t.Fatal("arena does not sit on the caller's memory")
	}
	a.Free(addr)
	for _, tc := range []struct {
		name string
		mem  []byte
		o    ArenaOptions
		want string
	}{
		{"too short", backing[:8*2048-1], o, "memory of 16383 bytes"},
		{"misaligned", backing[64:], o, "not aligned"},
		{"bad options", backing, ArenaOptions{Frames: 0, FrameSize: 2048}, "frame count 0"},
	} {
		_, err := NewArenaOn(tc.mem, tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want it to mention %q", tc.name, err, tc.want)
		}
		if tc.name != "bad options" && !errors.Is(err, ErrArenaMemory) {
			t.Errorf("%s: %v does not wrap ErrArenaMemory", tc.name, err)
		}
	}
}

func TestArenaSplit(t *testing.T) {
	a, err := NewArena(ArenaOptions{Frames: 10, FrameSize: 2048, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	parts, err := a.Split(3)
	if err != nil {
		t.Fatal(err)
	}
	wantFirst, wantCount := []int{0, 4, 7}, []int{4, 3, 3}
	seen := map[uint64]int{}
	for i, p := range parts {
		if p.FirstFrame() != wantFirst[i] || p.Frames() != wantCount[i] || p.FreeFrames() != wantCount[i] {
			t.Fatalf("part %d: first %d frames %d free %d, want %d, %d, %d", i, p.FirstFrame(), p.Frames(), p.FreeFrames(), wantFirst[i], wantCount[i], wantCount[i])
		}
		if len(p.Mem()) != len(a.Mem()) {
			t.Fatalf("part %d sees %d bytes of memory, want the whole %d", i, len(p.Mem()), len(a.Mem()))
		}
		// Every frame of a part lies in its own range, in address order.
		for j := range p.Frames() {
			addr, ok := p.Alloc()
			if !ok {
				t.Fatalf("part %d: frame %d: arena empty", i, j)
			}
			base := addr &^ 2047
			if want := uint64((wantFirst[i] + j) * 2048); base != want || addr != base+256 {
				t.Fatalf("part %d frame %d at %#x, want base %#x + headroom", i, j, addr, want)
			}
			seen[base] = i
		}
		if _, ok := p.Alloc(); ok {
			t.Fatalf("part %d handed out more than its frames", i)
		}
	}
	if len(seen) != 10 {
		t.Fatalf("parts cover %d distinct frames, want 10", len(seen))
	}
	// A tracker over a part knows its frames and refuses the others'.
	p := parts[1]
	for f := 4; f < 7; f++ {
		p.Free(uint64(f * 2048))
	}
	tr := NewTracker(p)
	if _, err := tr.OwnerOf(4 * 2048); err != nil {
		t.Errorf("tracker of part 1 refuses its own frame 4: %v", err)
	}
	if _, err := tr.OwnerOf(3 * 2048); err == nil {
		t.Error("tracker of part 1 accepts frame 3, which is part 0's")
	}
	if _, err := tr.Check(nil); err != nil {
		t.Errorf("tracker check of a part: %v", err)
	}
	if _, err := a.Split(11); err == nil {
		t.Error("split 10 frames 11 ways: no error")
	}
	used, _ := NewArena(ArenaOptions{Frames: 4, FrameSize: 2048})
	used.Alloc()
	if _, err := used.Split(2); err == nil {
		t.Error("split of an arena with a frame in use: no error")
	}
}
