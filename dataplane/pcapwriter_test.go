package dataplane

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/rings"
)

// framesOf puts packets into arena frames and returns their descriptors.
func framesOf(t testing.TB, a *rings.Arena, pkts [][]byte) []rings.Desc {
	var ds []rings.Desc
	for _, p := range pkts {
		addr, ok := a.Alloc()
		if !ok {
			t.Fatal("arena empty")
		}
		copy(a.Mem()[addr:], p)
		ds = append(ds, rings.Desc{Addr: addr, Len: uint32(len(p))})
	}
	return ds
}

func writeCapture(t *testing.T, path string, a *rings.Arena, ds []rings.Desc) {
	w, err := CreatePcapWriter(path, "out", layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	if w.Name() != "out" || w.Path() != path {
		t.Errorf("name %q path %q", w.Name(), w.Path())
	}
	// Two Transmit calls: timestamps continue across them.
	if n, err := w.Transmit(a, ds[:2]); n != 2 || err != nil {
		t.Fatalf("Transmit = %d, %v", n, err)
	}
	if n, err := w.Transmit(a, ds[2:]); n != len(ds)-2 || err != nil {
		t.Fatalf("Transmit = %d, %v", n, err)
	}
	if st := w.Stats(); st.Packets != uint64(len(ds)) {
		t.Errorf("stats %+v", st)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestPcapWriterRoundTrip writes packets, reads them back with pcapgo and with
// the replay port, and checks that two runs give identical files.
func TestPcapWriterRoundTrip(t *testing.T) {
	_, recs := seqCapture(t, 5)
	recs = append(recs, make([]byte, 3000)) // a jumbo frame
	a := newArena(t, 16, 4096, 0)
	ds := framesOf(t, a, recs)
	dir := t.TempDir()
	p1, p2 := filepath.Join(dir, "1.pcap"), filepath.Join(dir, "2.pcap")
	writeCapture(t, p1, a, ds)
	writeCapture(t, p2, a, ds)
	b1, _ := os.ReadFile(p1)
	b2, _ := os.ReadFile(p2)
	if !bytes.Equal(b1, b2) {
		t.Fatal("two runs wrote different files")
	}

	r, err := pcapgo.NewReader(bytes.NewReader(b1))
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != layers.LinkTypeEthernet || r.Snaplen() != 262144 {
		t.Errorf("link type %v snaplen %d", r.LinkType(), r.Snaplen())
	}
	for i := 0; ; i++ {
		data, ci, err := r.ReadPacketData()
		if err == io.EOF {
			if i != len(recs) {
				t.Errorf("read %d packets, want %d", i, len(recs))
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, recs[i]) || ci.Length != len(recs[i]) {
			t.Errorf("packet %d differs", i)
		}
		if want := time.Unix(0, int64(i)*1000).UTC(); !ci.Timestamp.Equal(want) {
			t.Errorf("packet %d: timestamp %v, want %v", i, ci.Timestamp, want)
		}
	}

	// The replay port reads it back unchanged.
	a2 := newArena(t, 16, 4096, 0)
	p, err := OpenReplay(p1, a2, DefaultReplayOptions())
	if err != nil {
		t.Fatal(err)
	}
	got := drain(t, p, a2, 4)
	if got.err != nil || len(got.pkts) != len(recs) {
		t.Fatalf("replayed %d, err %v", len(got.pkts), got.err)
	}
	for i := range recs {
		if !bytes.Equal(got.pkts[i], recs[i]) {
			t.Errorf("replayed packet %d differs", i)
		}
	}
}

func TestPcapWriterClose(t *testing.T) {
	a := newArena(t, 4, 2048, 0)
	ds := framesOf(t, a, [][]byte{eth(nil, 0x0800, ipv4Pkt)})
	var buf bytes.Buffer
	w, err := NewPcapWriter(&buf, "mem.pcap", "out", layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Receive(rings.NewBatch(1, a)); !errors.Is(err, ErrNotReceiver) {
		t.Errorf("Receive: %v", err)
	}
	w.Transmit(a, ds)
	if buf.Len() != 0 {
		t.Error("unbuffered write")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if want := 24 + 16 + len(ipv4Pkt) + 14; buf.Len() != want {
		t.Errorf("file is %d bytes, want %d", buf.Len(), want)
	}
	if err := w.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	if _, err := w.Transmit(a, ds); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Transmit after Close: %v", err)
	}
	if _, err := w.Receive(rings.NewBatch(1, a)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Receive after Close: %v", err)
	}
	if err := w.Flush(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Flush after Close: %v", err)
	}
}

// TestPcapWriterErrors: errors name the path and keep the errno.
func TestPcapWriterErrors(t *testing.T) {
	if _, err := CreatePcapWriter(filepath.Join(t.TempDir(), "no", "such", "dir.pcap"), "out", 1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("create in missing dir: %v", err)
	}
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full to provoke ENOSPC")
	}
	a := newArena(t, 4, 2048, 0)
	ds := framesOf(t, a, [][]byte{make([]byte, 1500)})
	w, err := CreatePcapWriter("/dev/full", "out", 1)
	if err != nil {
		t.Fatal(err)
	}
	var terr error
	for i := 0; i < 2000 && terr == nil; i++ { // fill the 1 MiB buffer
		_, terr = w.Transmit(a, ds)
	}
	if !errors.Is(terr, syscall.ENOSPC) || !strings.Contains(terr.Error(), "pcap writer /dev/full: ") {
		t.Errorf("Transmit error %v, want ENOSPC naming the path", terr)
	}
	if n, err := w.Transmit(a, ds); n != 0 || err != terr {
		t.Errorf("error not sticky: %d, %v", n, err)
	}
	if err := w.Close(); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("Close: %v", err)
	}
}

func TestPcapWriterAllocs(t *testing.T) {
	a := newArena(t, 64, 2048, 0)
	_, recs := seqCapture(t, 32)
	ds := framesOf(t, a, recs)
	w, err := NewPcapWriter(io.Discard, "discard", "out", 1)
	if err != nil {
		t.Fatal(err)
	}
	if n := allocs.Count(100, func() { w.Transmit(a, ds) }); n != 0 {
		t.Errorf("%d allocations in 100 Transmits, want 0", n)
	}
}

func BenchmarkPcapWriter(b *testing.B) {
	a := newArena(b, 64, 2048, 0)
	_, recs := seqCapture(b, 64)
	ds := framesOf(b, a, recs)
	w, _ := NewPcapWriter(io.Discard, "discard", "out", 1)
	b.ReportAllocs()
	for b.Loop() {
		w.Transmit(a, ds)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ds)), "ns/pkt")
}
