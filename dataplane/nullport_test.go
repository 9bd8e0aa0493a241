package dataplane

import (
	"errors"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/rings"
)

func TestNullPort(t *testing.T) {
	a := newArena(t, 8, 2048, 0)
	p := NewNullPort("null0")
	if p.Name() != "null0" {
		t.Errorf("name %q", p.Name())
	}
	ds := []rings.Desc{{Addr: 0, Len: 60}, {Addr: 2048, Len: 1500}, {Addr: 4096, Len: 64}}
	for _, c := range []struct {
		descs         []rings.Desc
		packets, byts uint64
	}{
		{nil, 0, 0},
		{ds[:1], 1, 60},
		{ds, 4, 60 + 1624},
	} {
		if n, err := p.Transmit(a, c.descs); n != len(c.descs) || err != nil {
			t.Errorf("Transmit = %d, %v; want all accepted", n, err)
		}
		if st := p.Stats(); st.Packets != c.packets || st.Bytes != c.byts {
			t.Errorf("stats %+v, want %d packets %d bytes", st, c.packets, c.byts)
		}
	}
	if _, err := p.Receive(rings.NewBatch(1, a)); !errors.Is(err, ErrNotReceiver) {
		t.Errorf("Receive: %v", err)
	}
	p.Recycle(ds) // no-op
	if n := allocs.Count(100, func() { p.Transmit(a, ds) }); n != 0 {
		t.Errorf("%d allocations in 100 Transmits, want 0", n)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	if _, err := p.Transmit(a, ds); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Transmit after Close: %v", err)
	}
	if _, err := p.Receive(rings.NewBatch(1, a)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Receive after Close: %v", err)
	}
}

// TestSumLen holds sumLen, which adds four lengths at a time, to a plain
// sum over lists of every length to 70 and random lengths.
func TestSumLen(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := range 71 {
		for range 20 {
			list := make([]rings.Desc, n)
			var want uint64
			for i := range list {
				list[i].Len = rng.Uint32()
				want += uint64(list[i].Len)
			}
			if got := sumLen(list); got != want {
				t.Fatalf("sumLen of %d lengths = %d, want %d", n, got, want)
			}
		}
	}
}

func BenchmarkNullPort(b *testing.B) {
	a := newArena(b, 8, 2048, 0)
	ds := make([]rings.Desc, 64)
	p := NewNullPort("null")
	b.ReportAllocs()
	for b.Loop() {
		p.Transmit(a, ds)
	}
}
