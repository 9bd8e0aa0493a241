package dataplane

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/rings"
)

// ngCapture builds a pcapng capture with one interface of link type lt.
func ngCapture(t testing.TB, lt layers.LinkType, recs ...[]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := pcapgo.NewNgWriter(&buf, lt)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		ci := gopacket.CaptureInfo{Timestamp: epoch(i), CaptureLength: len(r), Length: len(r)}
		if err := w.WritePacket(ci, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// streamFormats are the same packets as pcap, pcapng and gzip-compressed
// pcap, the three ways a streamed capture is read and rewound.
func streamFormats(t testing.TB, recs [][]byte) []struct {
	name    string
	capture []byte
	// allocs is the most a pass may allocate (on average over the passes
	// counted: the test bounds their total). Reading and rewinding
	// allocate nothing (pcapng header blocks are parsed in place), except
	// that compress/flate allocates Huffman tables for each
	// dynamic deflate block (about 40 for this capture's 70 KB), which
	// is per block of compressed data, not per packet or per rewind.
	allocs uint64
} {
	plain := pcapFile(t, 1, recs...)
	return []struct {
		name    string
		capture []byte
		allocs  uint64
	}{
		{"pcap", plain, 0},
		{"pcap.gz", gzipped(t, plain), 50},
		{"pcapng", ngCapture(t, layers.LinkTypeEthernet, recs...), 0},
	}
}

// TestStreamRewindReuse loops a streamed replay many times in every format
// and checks each pass hands out the capture again, byte for byte, with the
// reader reused: no allocation per packet, at most the format's few per
// pass.
func TestStreamRewindReuse(t *testing.T) {
	recs := make([][]byte, 100)
	for i := range recs {
		recs[i] = eth(srcMAC, 0x0800, bytes.Repeat([]byte{byte(i)}, 46+i*13))
	}
	for _, f := range streamFormats(t, recs) {
		t.Run(f.name, func(t *testing.T) {
			a := newArena(t, 64, 2048, 128)
			p, err := NewReplay(f.name, bytes.NewReader(f.capture), a, ReplayOptions{Loops: -1})
			if err != nil {
				t.Fatal(err)
			}
			b := rings.NewBatch(16, a)
			got := 0
			// pass receives exactly one pass worth of packets (the batch
			// size divides nothing in particular: passes straddle batches).
			pass := func() {
				for left := len(recs); left > 0; {
					b.Clear()
					b.Descs = b.Descs[:0:min(cap(b.Descs), left)]
					n, err := p.Receive(b)
					if err != nil || n == 0 {
						t.Fatalf("packet %d: n %d, err %v", got, n, err)
					}
					for i := range n {
						if want := recs[got%len(recs)]; !bytes.Equal(b.Packet(i), want) {
							t.Fatalf("packet %d (pass %d): %d bytes, want record %d", got, got/len(recs), len(b.Packet(i)), got%len(recs))
						}
						got++
					}
					p.Recycle(b.Descs)
					left -= n
				}
			}
			pass() // warm: the reader's buffers, the batch
			const passes = 20
			if n := allocs.Count(passes, pass); n > f.allocs*passes {
				t.Errorf("%d allocations in %d passes of %d packets, want at most %d (%d a pass)", n, passes, len(recs), f.allocs*passes, f.allocs)
			}
			if st := p.Stats(); st.Records != uint64(got) || st.Packets != uint64(got) {
				t.Errorf("stats %+v after %d packets", st, got)
			}
			if a.FreeFrames() != a.Frames() {
				t.Errorf("%d frames leaked", a.Frames()-a.FreeFrames())
			}
		})
	}
}

// swapSeeker is a capture file replaced by another between passes: the
// rewind's seek finds the new contents.
type swapSeeker struct {
	*bytes.Reader
	next []byte
}

func (s *swapSeeker) Seek(off int64, whence int) (int64, error) {
	if s.next != nil {
		s.Reset(s.next)
		s.next = nil
	}
	return s.Reader.Seek(off, whence)
}

// TestStreamRewindChangedFile: a rewind that finds a different capture (the
// file was replaced between passes) reads its header instead of keeping the
// old reader's byte order and link type, whatever the formats.
func TestStreamRewindChangedFile(t *testing.T) {
	ethRec := eth(nil, 0x0800, []byte{1})
	rawRec := []byte{0x45, 2}
	rawAsEth := cat(make([]byte, 12), []byte{0x08, 0x00}, rawRec)
	ethPcap, rawPcap := pcapFile(t, 1, ethRec), pcapFile(t, 101, rawRec)
	for _, c := range []struct {
		name          string
		first, second []byte
	}{
		{"pcap link type", ethPcap, rawPcap},
		{"pcap to gzip", ethPcap, gzipped(t, rawPcap)},
		{"gzip to pcap", gzipped(t, ethPcap), rawPcap},
		{"pcapng to pcap", ngCapture(t, 1, ethRec), rawPcap},
		{"pcap to pcapng", ethPcap, ngCapture(t, 101, rawRec)},
		{"pcapng link type", ngCapture(t, 1, ethRec), ngCapture(t, 101, rawRec)},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newArena(t, 8, 2048, 0)
			src := &swapSeeker{Reader: bytes.NewReader(c.first), next: c.second}
			p, err := NewReplay("c", src, a, ReplayOptions{Loops: 2})
			if err != nil {
				t.Fatal(err)
			}
			got := drain(t, p, a, 4)
			if got.err != nil || len(got.pkts) != 2 {
				t.Fatalf("%d packets, err %v; want 2", len(got.pkts), got.err)
			}
			if !bytes.Equal(got.pkts[0], ethRec) || !bytes.Equal(got.pkts[1], rawAsEth) {
				t.Errorf("packets %x, want %x then %x", got.pkts, ethRec, rawAsEth)
			}
		})
	}
}

// panicReader panics once after bytes have been read from it: a stand-in
// for a bug inside the capture reader on hostile input.
type panicReader struct {
	r     io.Reader
	after int
}

func (p *panicReader) Read(b []byte) (int, error) {
	if p.after <= 0 {
		panic("boom")
	}
	n, err := p.r.Read(b[:min(len(b), p.after)])
	p.after -= n
	return n, err
}

// TestStreamReaderPanic: a panic under the capture reader stops the replay with an
// error naming the record being read, after the packets read before it;
// it does not crash the process.
func TestStreamReaderPanic(t *testing.T) {
	recs := [][]byte{eth(nil, 0x0800, []byte{1}), eth(nil, 0x0800, []byte{2}), eth(nil, 0x0800, []byte{3})}
	capture := pcapFile(t, 1, recs...)
	rec := 16 + len(recs[0])
	for _, c := range []struct {
		name   string
		after  int
		want   string
		before int // packets handed out before the error
	}{
		{"at open", 10, "capture p.pcap: corrupt capture: capture reader failed: boom", 0},
		{"record 3", 24 + 2*rec, "capture p.pcap: record 3: corrupt capture: capture reader failed: boom", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newArena(t, 8, 2048, 0)
			p, err := NewReplay("p.pcap", &panicReader{r: bytes.NewReader(capture), after: c.after}, a, DefaultReplayOptions())
			if err == nil {
				got := drain(t, p, a, 4)
				err = got.err
				if len(got.pkts) != c.before {
					t.Errorf("%d packets before the error, want %d", len(got.pkts), c.before)
				}
			}
			if !errors.Is(err, ErrCorruptCapture) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err %v, want %q", err, c.want)
			}
			if a.FreeFrames() != a.Frames() {
				t.Errorf("%d frames leaked", a.Frames()-a.FreeFrames())
			}
		})
	}
}
