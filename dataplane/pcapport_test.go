package dataplane

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/warpflow/warpflow/rings"
)

func newArena(t testing.TB, frames, size, headroom int) *rings.Arena {
	t.Helper()
	a, err := rings.NewArena(rings.ArenaOptions{Frames: frames, FrameSize: size, Headroom: headroom})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// pcapFile builds a pcap capture of the given link type in memory.
func pcapFile(t testing.TB, lt layers.LinkType, recs ...[]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if err := w.WriteFileHeader(65536, lt); err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		ci := gopacket.CaptureInfo{Timestamp: epoch(i), CaptureLength: len(r), Length: len(r)}
		if err := w.WritePacket(ci, r); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

type ngRec struct {
	iface int
	data  []byte
}

// ngFile builds a pcapng capture with one interface per link type.
func ngFile(t testing.TB, lts []layers.LinkType, recs ...ngRec) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := pcapgo.NewNgWriterInterface(&buf, pcapgo.NgInterface{LinkType: lts[0], SnapLength: 65536}, pcapgo.DefaultNgWriterOptions)
	if err != nil {
		t.Fatal(err)
	}
	for _, lt := range lts[1:] {
		if _, err := w.AddInterface(pcapgo.NgInterface{LinkType: lt, SnapLength: 65536}); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range recs {
		ci := gopacket.CaptureInfo{Timestamp: epoch(i), CaptureLength: len(r.data), Length: len(r.data), InterfaceIndex: r.iface}
		if err := w.WritePacket(ci, r.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// replayed is what drain collected: packet copies, their addresses and Meta.
type replayed struct {
	pkts  [][]byte
	addrs []uint64
	metas []rings.Meta
	err   error // the error that ended the replay; nil for io.EOF
}

// drain runs p to its end like the engine's inline loop: receive a batch,
// check it, copy it out, recycle it. It fails the test on a descriptor
// outside the arena, a Meta field other than Seq/InPort set, a Seq out of
// order, or a replay that neither ends nor makes progress.
func drain(t testing.TB, p *ReplayPort, a *rings.Arena, batch int) replayed {
	t.Helper()
	var r replayed
	b := rings.NewBatch(batch, a)
	idle := 0
	for {
		b.Clear()
		n, err := p.Receive(b)
		if n != b.Len() {
			t.Fatalf("Receive returned %d, batch holds %d", n, b.Len())
		}
		if err := checkBatch(a, b, uint64(len(r.pkts))); err != "" {
			t.Fatal(err)
		}
		for i := range b.Descs {
			r.pkts = append(r.pkts, bytes.Clone(b.Packet(i)))
			r.addrs = append(r.addrs, b.Descs[i].Addr)
			r.metas = append(r.metas, b.Meta[i])
		}
		p.Recycle(b.Descs)
		if err == io.EOF {
			return r
		}
		if err != nil {
			if n != 0 {
				t.Fatalf("Receive returned %d packets with error %v", n, err)
			}
			r.err = err
			return r
		}
		if idle++; n > 0 {
			idle = 0
		}
		if idle > 3 {
			t.Fatalf("replay stalled after %d packets with every frame recycled", len(r.pkts))
		}
	}
}

// checkBatch returns a complaint about b, or "": every descriptor inside
// the arena and within one frame, non-empty, and Meta zero except a dense
// Seq and the port's FlagCut.
func checkBatch(a *rings.Arena, b *rings.Batch, seq uint64) string {
	mem := uint64(len(a.Mem()))
	fs := uint64(a.FrameSize())
	if len(b.Meta) != len(b.Descs) {
		return "meta and desc lengths differ"
	}
	for i, d := range b.Descs {
		if d.Len == 0 || d.Addr >= mem || d.Addr/fs != (d.Addr+uint64(d.Len)-1)/fs {
			return "descriptor outside the arena or across frames"
		}
		m := b.Meta[i]
		if m.Seq != seq+uint64(i) {
			return "sequence numbers not dense"
		}
		m.Seq, m.InPort, m.Time = 0, 0, 0 // Time: the record's (TestReplayStampsCaptureTime)
		m.Flags &^= rings.FlagCut
		if m != (rings.Meta{}) {
			return "meta not zeroed"
		}
	}
	return ""
}

func TestReplayCapture(t *testing.T) {
	recs := [][]byte{
		eth(srcMAC, 0x0800, ipv4Pkt),
		eth(nil, 0x86DD, ipv6Pkt),
		eth(srcMAC, 0x0806, make([]byte, 28)),
	}
	for _, format := range []string{"pcap", "pcapng", "pcap.gz", "pcapng.gz"} {
		t.Run(format, func(t *testing.T) {
			var capture []byte
			if strings.HasPrefix(format, "pcapng") {
				var rs []ngRec
				for _, r := range recs {
					rs = append(rs, ngRec{0, r})
				}
				capture = ngFile(t, []layers.LinkType{1}, rs...)
			} else {
				capture = pcapFile(t, 1, recs...)
			}
			if strings.HasSuffix(format, ".gz") {
				capture = gzipped(t, capture)
			}
			a := newArena(t, 64, 2048, 128)
			o := DefaultReplayOptions()
			o.PortIndex = 7
			p, err := NewReplay("c."+format, bytes.NewReader(capture), a, o)
			if err != nil {
				t.Fatal(err)
			}
			got := drain(t, p, a, 2)
			if got.err != nil {
				t.Fatal(got.err)
			}
			if len(got.pkts) != len(recs) {
				t.Fatalf("got %d packets, want %d", len(got.pkts), len(recs))
			}
			var bytesOut uint64
			for i := range recs {
				if !bytes.Equal(got.pkts[i], recs[i]) {
					t.Errorf("packet %d: %x, want %x", i, got.pkts[i], recs[i])
				}
				if got.metas[i].InPort != 7 {
					t.Errorf("packet %d: InPort %d, want 7", i, got.metas[i].InPort)
				}
				bytesOut += uint64(len(recs[i]))
			}
			want := ReplayStats{Records: 3, Packets: 3, Bytes: bytesOut}
			if st := p.Stats(); st != want {
				t.Errorf("stats %+v, want %+v", st, want)
			}
			if a.FreeFrames() != a.Frames() {
				t.Errorf("%d frames not back in the arena", a.Frames()-a.FreeFrames())
			}
			// EOF is sticky.
			if n, err := p.Receive(rings.NewBatch(4, a)); n != 0 || err != io.EOF {
				t.Errorf("Receive after the end = %d, %v; want 0, EOF", n, err)
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func gzipped(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestReplayPcapngMixedLinkTypes: each pcapng packet is normalised by its
// own interface's link type.
func TestReplayPcapngMixedLinkTypes(t *testing.T) {
	capture := ngFile(t, []layers.LinkType{1, 101, 113, 276},
		ngRec{0, eth(srcMAC, 0x0800, ipv4Pkt)},
		ngRec{1, ipv6Pkt},
		ngRec{2, cat(sll(6, srcMAC, 0x86DD), ipv6Pkt)},
		ngRec{3, cat(sll2(0, nil, 0x0800), ipv4Pkt)},
		ngRec{1, ipv4Pkt},
	)
	want := [][]byte{
		eth(srcMAC, 0x0800, ipv4Pkt),
		eth(nil, 0x86DD, ipv6Pkt),
		eth(srcMAC, 0x86DD, ipv6Pkt),
		eth(nil, 0x0800, ipv4Pkt),
		eth(nil, 0x0800, ipv4Pkt),
	}
	a := newArena(t, 8, 2048, 0)
	p, err := NewReplay("mixed.pcapng", bytes.NewReader(capture), a, DefaultReplayOptions())
	if err != nil {
		t.Fatal(err)
	}
	got := drain(t, p, a, 3)
	if got.err != nil || len(got.pkts) != len(want) {
		t.Fatalf("got %d packets, err %v", len(got.pkts), got.err)
	}
	for i := range want {
		if !bytes.Equal(got.pkts[i], want[i]) {
			t.Errorf("packet %d: %x, want %x", i, got.pkts[i], want[i])
		}
	}
}

// TestReplayPcapngUnsupportedInterface: a packet on an interface of an
// unsupported link type stops the replay with a LinkTypeError, at open when
// it is the first packet, after the packets before it otherwise.
func TestReplayPcapngUnsupportedInterface(t *testing.T) {
	a := newArena(t, 8, 2048, 0)
	first := ngFile(t, []layers.LinkType{127}, ngRec{0, ipv4Pkt})
	_, err := NewReplay("radiotap.pcapng", bytes.NewReader(first), a, DefaultReplayOptions())
	want := "capture radiotap.pcapng: interface 0 link type 127 (IEEE802_11_RADIOTAP) is not supported (supported: ethernet, raw ipv4/ipv6, linux sll/sll2, bsd null/loop, ppp/ppp_hdlc/ppp_pppd, cisco hdlc)"
	if !errors.Is(err, ErrUnsupportedLinkType) || err.Error() != want {
		t.Fatalf("open: %v\nwant %s", err, want)
	}

	later := ngFile(t, []layers.LinkType{1, 105}, ngRec{0, eth(nil, 0x0800, ipv4Pkt)}, ngRec{0, eth(nil, 0x0800, ipv4Pkt)}, ngRec{1, ipv4Pkt})
	p, err := NewReplay("wlan.pcapng", bytes.NewReader(later), a, DefaultReplayOptions())
	if err != nil {
		t.Fatal(err)
	}
	got := drain(t, p, a, 8)
	var lte *LinkTypeError
	if len(got.pkts) != 2 || !errors.As(got.err, &lte) || lte.LinkType != 105 || lte.Interface != 1 {
		t.Fatalf("got %d packets, err %v; want 2 then interface 1 IEEE802_11", len(got.pkts), got.err)
	}
	if n, err2 := p.Receive(rings.NewBatch(4, a)); n != 0 || err2 != got.err {
		t.Errorf("error not sticky: %d, %v", n, err2)
	}
}

// pcapRecord builds a raw little-endian pcap record header plus data.
func pcapRecord(capLen, origLen uint32, data []byte) []byte {
	h := make([]byte, 16, 16+len(data))
	binary.LittleEndian.PutUint32(h[8:], capLen)
	binary.LittleEndian.PutUint32(h[12:], origLen)
	return append(h, data...)
}

// pcapHeader is a little-endian pcap file header.
func pcapHeader(snaplen, lt uint32) []byte {
	h := make([]byte, 24)
	binary.LittleEndian.PutUint32(h[0:], magicPcapMicro)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], snaplen)
	binary.LittleEndian.PutUint32(h[20:], lt)
	return h
}

// ngEPB builds a pcapng enhanced packet block whose caplen field may lie.
func ngEPB(capLen uint32, data []byte) []byte {
	padded := (len(data) + 3) &^ 3
	total := 32 + padded
	b := make([]byte, total)
	binary.LittleEndian.PutUint32(b[0:], 6)
	binary.LittleEndian.PutUint32(b[4:], uint32(total))
	binary.LittleEndian.PutUint32(b[20:], capLen)
	binary.LittleEndian.PutUint32(b[24:], capLen)
	copy(b[28:], data)
	binary.LittleEndian.PutUint32(b[total-4:], uint32(total))
	return b
}

// ngHead is a pcapng section header plus one Ethernet interface.
func ngHead(t testing.TB) []byte {
	return ngFile(t, []layers.LinkType{1})
}

// ngSHB is a minimal little-endian pcapng section header block.
func ngSHB() []byte {
	b := make([]byte, 28)
	binary.LittleEndian.PutUint32(b[0:], magicPcapNG)
	binary.LittleEndian.PutUint32(b[4:], 28)
	binary.LittleEndian.PutUint32(b[8:], 0x1A2B3C4D)
	binary.LittleEndian.PutUint16(b[12:], 1)
	binary.LittleEndian.PutUint64(b[16:], ^uint64(0))
	binary.LittleEndian.PutUint32(b[24:], 28)
	return b
}

// hostileCases are damaged captures and the record their error must name
// (0: the file header).
func hostileCases(t testing.TB) []struct {
	name   string
	data   []byte
	record int
	want   string
} {
	good := eth(nil, 0x0800, ipv4Pkt)
	ok := pcapRecord(uint32(len(good)), uint32(len(good)), good)
	hdr := pcapHeader(65535, 1)
	return []struct {
		name   string
		data   []byte
		record int
		want   string
	}{
		{"empty", nil, 0, "empty file"},
		{"short magic", []byte{0xd4, 0xc3}, 0, "truncated file header"},
		{"bad magic", []byte("GIF89a and more bytes to fill a header"), 0, "unknown magic 0x38464947"},
		{"truncated file header", hdr[:20], 0, "truncated file header"},
		{"gzip garbage", []byte{0x1f, 0x8b, 1, 2, 3, 4, 5}, 0, "gzip"},
		{"4 GiB record", cat(hdr, pcapRecord(0xFFFFFFFF, 0xFFFFFFFF, good)), 1, "record claims 4294967295 bytes, more than the 262144-byte maximum"},
		{"4 GiB record, 4 GiB snaplen", cat(pcapHeader(0xFFFFFFFF, 1), ok, pcapRecord(0xFFFFFFF0, 0xFFFFFFF0, good)), 2, "record claims 4294967280 bytes"},
		{"record over 256 KiB", cat(hdr, ok, ok, pcapRecord(262145, 262145, good)), 3, "record claims 262145 bytes"},
		{"record over snaplen within 256 KiB, truncated", cat(hdr, pcapRecord(70000, 70000, good)), 1, "truncated record"},
		{"truncated record data", cat(hdr, ok, pcapRecord(100, 100, good[:30])), 2, "truncated record"},
		{"record data missing", cat(hdr, ok, pcapRecord(100, 100, nil)), 2, "truncated record"},
		{"truncated record header", cat(hdr, ok, ok, make([]byte, 9)), 3, "truncated record"},
		{"pcapng truncated block", cat(ngHead(t), ngEPB(uint32(len(good)), good)[:40]), 1, "truncated record"},
		{"pcapng 4 GiB caplen", cat(ngHead(t), ngEPB(0xFFFFFFF0, good)), 1, "record claims 4294967280 bytes"},
		{"pcapng tiny block length", cat(ngHead(t), []byte{6, 0, 0, 0, 4, 0, 0, 0}), 1, ""},
		{"pcapng no interface", cat(ngSHB(), ngEPB(uint32(len(good)), good)), 1, "Interface id 0 not present"},
		{"pcapng bad byte order", func() []byte { b := ngSHB(); b[8] = 0; return b }(), 0, "byte order"},
	}
}

// replayErr opens and drains a capture, returning the error from either.
func replayErr(t *testing.T, name string, data []byte) (replayed, error) {
	a := newArena(t, 16, 2048, 0)
	p, err := NewReplay(name, bytes.NewReader(data), a, DefaultReplayOptions())
	if err != nil {
		return replayed{}, err
	}
	r := drain(t, p, a, 4)
	if a.FreeFrames() != a.Frames() {
		t.Errorf("%d frames leaked", a.Frames()-a.FreeFrames())
	}
	return r, r.err
}

func TestReplayHostile(t *testing.T) {
	for _, c := range hostileCases(t) {
		t.Run(c.name, func(t *testing.T) {
			got, err := replayErr(t, "bad.pcap", c.data)
			if !errors.Is(err, ErrCorruptCapture) {
				t.Fatalf("err %v, want ErrCorruptCapture", err)
			}
			msg := err.Error()
			prefix := "capture bad.pcap: corrupt capture: "
			if c.record > 0 {
				prefix = "capture bad.pcap: record " + strconv.Itoa(c.record) + ": corrupt capture: "
			}
			if !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
				t.Errorf("error %q\nwant one line starting %q containing %q", msg, prefix, c.want)
			}
			if c.record > 0 && len(got.pkts) > c.record-1 {
				t.Errorf("%d packets handed out before record %d failed", len(got.pkts), c.record)
			}
		})
	}
}

// epoch is record i's timestamp in test captures.
func epoch(i int) time.Time { return time.Unix(1700000000, int64(i)*1000) }

// TestReplayHostileBoundedMemory: a record claiming 4 GiB, followed by many
// megabytes, makes the reader allocate a few MiB at most: the claim is never
// trusted: the reader refuses it from its header, or skips a block it does
// not hold.
func TestReplayHostileBoundedMemory(t *testing.T) {
	good := eth(nil, 0x0800, ipv4Pkt)
	tail := make([]byte, 64<<20)
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"pcap", cat(pcapHeader(0xFFFFFFFF, 1), pcapRecord(0xFFFFFFFF, 0xFFFFFFFF, good), tail)},
		{"pcap 2 GiB claim, huge snaplen", cat(pcapHeader(0xFFFFFFFF, 1), pcapRecord(0x7FFFFFFF, 0x7FFFFFFF, good), tail)},
		{"pcapng", cat(ngHead(t), ngEPB(0xFFFFFFF0, good), tail)},
		{"pcapng huge block", cat(ngHead(t), []byte{0xAD, 0xDE, 0, 0, 0xF0, 0xFF, 0xFF, 0xFF}, tail)},
	} {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := replayErr(t, "huge.pcap", c.data)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrCorruptCapture) || !strings.Contains(err.Error(), "record 1: ") {
				t.Fatalf("err %v, want ErrCorruptCapture at record 1", err)
			}
			t.Logf("allocated %d KiB", (after.TotalAlloc-before.TotalAlloc)>>10)
			// The reader never holds more than a record (256 KiB) or a header
			// block (1 MiB); the bound is loose for the race detector (16 under
			// -race), far below the 64 MiB after the bogus header.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 24<<20 {
				t.Errorf("allocated %d MiB reading a hostile capture", alloc>>20)
			}
		})
	}
}

func TestReplayOversize(t *testing.T) {
	// 2048-byte frames with 256 bytes of headroom hold 1792-byte packets.
	fits, over := make([]byte, 1792), make([]byte, 1793)
	rawFits, rawOver := make([]byte, 1792-14), make([]byte, 1793-14)
	rawFits[0], rawOver[0] = 0x45, 0x45
	for _, c := range []struct {
		name  string
		lt    layers.LinkType
		recs  [][]byte
		lens  []int
		stats ReplayStats
	}{
		{"ethernet", 1, [][]byte{fits, over, fits}, []int{1792, 1792}, ReplayStats{Records: 3, Packets: 2, Bytes: 2 * 1792, Oversize: 1}},
		{"raw ip with header", 101, [][]byte{rawOver, rawFits}, []int{1792}, ReplayStats{Records: 2, Packets: 1, Bytes: 1792, Oversize: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newArena(t, 8, 2048, 256)
			p, err := NewReplay("big.pcap", bytes.NewReader(pcapFile(t, c.lt, c.recs...)), a, DefaultReplayOptions())
			if err != nil {
				t.Fatal(err)
			}
			got := drain(t, p, a, 8)
			if got.err != nil || len(got.pkts) != len(c.lens) {
				t.Fatalf("got %d packets, err %v", len(got.pkts), got.err)
			}
			for i, l := range c.lens {
				if len(got.pkts[i]) != l {
					t.Errorf("packet %d: %d bytes, want %d (never truncated)", i, len(got.pkts[i]), l)
				}
			}
			if st := p.Stats(); st != c.stats {
				t.Errorf("stats %+v, want %+v", st, c.stats)
			}
		})
	}
}

// TestReplayArenaBackpressure: with fewer frames than packets Receive gives
// what the arena has, then 0, nil until frames are recycled, losing nothing.
func TestReplayArenaBackpressure(t *testing.T) {
	const packets = 20
	recs := make([][]byte, packets)
	for i := range recs {
		recs[i] = eth(nil, 0x0800, []byte{byte(i)})
	}
	a := newArena(t, 8, 2048, 0)
	p, err := NewReplay("bp.pcap", bytes.NewReader(pcapFile(t, 1, recs...)), a, DefaultReplayOptions())
	if err != nil {
		t.Fatal(err)
	}
	b := rings.NewBatch(16, a)
	var seq uint64
	for round := 0; ; round++ {
		b.Clear()
		n, err := p.Receive(b)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if want := min(8, packets-int(seq)); n != want {
			t.Fatalf("round %d: got %d packets, want %d", round, n, want)
		}
		for i := range n {
			if b.Meta[i].Seq != seq || b.Packet(i)[14] != byte(seq) {
				t.Fatalf("packet %d out of order", seq)
			}
			seq++
		}
		// Arena empty, nothing recycled: nothing more, and no error.
		if n2, err := p.Receive(b); n == 8 && (n2 != 0 || err != nil) {
			t.Fatalf("empty arena: Receive = %d, %v; want 0, nil", n2, err)
		}
		p.Recycle(b.Descs)
	}
	if seq != packets {
		t.Errorf("got %d packets, want %d", seq, packets)
	}
}

// TestReplayStreamingLoops: without preload, loops re-read a seekable source,
// and Seq keeps counting.
func TestReplayStreamingLoops(t *testing.T) {
	recs := [][]byte{eth(nil, 0x0800, []byte{1}), eth(nil, 0x0800, []byte{2}), eth(nil, 0x0800, []byte{3})}
	capture := pcapFile(t, 1, recs...)
	a := newArena(t, 8, 2048, 0)
	o := DefaultReplayOptions()
	o.Loops = 3
	p, err := NewReplay("loop.pcap", bytes.NewReader(capture), a, o)
	if err != nil {
		t.Fatal(err)
	}
	got := drain(t, p, a, 2)
	if got.err != nil || len(got.pkts) != 9 {
		t.Fatalf("got %d packets, err %v; want 9", len(got.pkts), got.err)
	}
	for i, pkt := range got.pkts {
		if !bytes.Equal(pkt, recs[i%3]) {
			t.Errorf("packet %d: %x, want %x", i, pkt, recs[i%3])
		}
	}
	if st := p.Stats(); st.Records != 9 || st.Packets != 9 {
		t.Errorf("stats %+v", st)
	}

	// A source that cannot seek cannot loop without preload.
	_, err = NewReplay("pipe", io.MultiReader(bytes.NewReader(capture)), a, o)
	if err == nil || !strings.Contains(err.Error(), "seekable") {
		t.Errorf("non-seekable loop: err %v", err)
	}
	// Forever over a capture of only skipped records ends instead of spinning.
	o.Loops = -1
	p, err = NewReplay("skip.pcap", bytes.NewReader(pcapFile(t, 1, make([]byte, 4000))), a, o)
	if err != nil {
		t.Fatal(err)
	}
	if got := drain(t, p, a, 2); len(got.pkts) != 0 || got.err != nil || p.Stats().Oversize != 1 {
		t.Errorf("all-oversize forever: %d packets, err %v, stats %+v", len(got.pkts), got.err, p.Stats())
	}
}

func TestReplayOptionErrors(t *testing.T) {
	capture := pcapFile(t, 1, eth(nil, 0x0800, ipv4Pkt))
	a := newArena(t, 8, 2048, 0)
	for _, c := range []struct {
		o    ReplayOptions
		want string
	}{
		{ReplayOptions{Loops: -2}, "loops -2"},
		{ReplayOptions{Preload: true, MinFrames: 9}, "min frames 9"},
		{ReplayOptions{MinFrames: 4}, "needs preload"},
	} {
		if _, err := NewReplay("o.pcap", bytes.NewReader(capture), a, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", c.o, err, c.want)
		}
	}
	if _, err := NewReplay("o.pcap", bytes.NewReader(capture), nil, ReplayOptions{}); err == nil {
		t.Error("nil arena accepted")
	}
	if _, err := OpenReplay(filepath.Join(t.TempDir(), "missing.pcap"), a, ReplayOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestReplayClose(t *testing.T) {
	for _, preload := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "c.pcap")
		if err := os.WriteFile(path, pcapFile(t, 1, eth(nil, 0x0800, ipv4Pkt), eth(nil, 0x0800, ipv4Pkt)), 0o644); err != nil {
			t.Fatal(err)
		}
		a := newArena(t, 8, 2048, 0)
		p, err := OpenReplay(path, a, ReplayOptions{Preload: preload})
		if err != nil {
			t.Fatal(err)
		}
		if p.Name() != "replay" {
			t.Errorf("name %q", p.Name())
		}
		b := rings.NewBatch(1, a)
		if n, err := p.Receive(b); n != 1 || err != nil {
			t.Fatalf("Receive = %d, %v", n, err)
		}
		if _, err := p.Transmit(a, b.Descs); !errors.Is(err, ErrNotTransmitter) {
			t.Errorf("Transmit: %v", err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if err := p.Close(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("second Close: %v", err)
		}
		if _, err := p.Receive(b); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Receive after Close: %v", err)
		}
		if _, err := p.Transmit(a, nil); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Transmit after Close: %v", err)
		}
		// The frame in flight at Close goes back to the arena when recycled.
		p.Recycle(b.Descs)
		if a.FreeFrames() != a.Frames() {
			t.Errorf("preload=%v: %d frames not returned after Close", preload, a.Frames()-a.FreeFrames())
		}
	}
}

// TestReplayCorpus replays every capture of testdata/corpus, streamed and
// preloaded: each must open (every link type in it is supported) and
// replay all its records with balanced counters and no leaked frame.
// Nothing may panic. A corpus capture with its link type rewritten to one
// Warpflow does not support must still be refused with the one-line error.
func TestReplayCorpus(t *testing.T) {
	files, _ := filepath.Glob(corpusDir + "/*.pcap")
	if len(files) < 50 {
		t.Fatalf("%d captures in %s, want the 51 committed ones", len(files), corpusDir)
	}
	replayedN := 0
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			records, lt := countPcapRecords(t, raw)
			if linkKindOf(lt) == kindUnsupported {
				t.Fatalf("link type %d (%s) is not supported", lt, LinkTypeName(lt))
			}
			for _, preload := range []bool{false, true} {
				a := newArena(t, 4096, 4096, 256)
				p, err := OpenReplay(path, a, ReplayOptions{Preload: preload, PortIndex: 1})
				if err != nil {
					t.Fatal(err)
				}
				got := drain(t, p, a, 64)
				if got.err != nil {
					t.Fatal(got.err)
				}
				st := p.Stats()
				if st.Records != uint64(records) || st.Packets+st.Oversize+st.Malformed+st.ZeroLength != st.Records || st.Packets != uint64(len(got.pkts)) {
					t.Errorf("preload=%v: stats %+v, file has %d records", preload, st, records)
				}
				if err := p.Close(); err != nil {
					t.Fatal(err)
				}
				if a.FreeFrames() != a.Frames() {
					t.Errorf("%d frames leaked", a.Frames()-a.FreeFrames())
				}
				if !preload {
					replayedN++
				}
			}
		})
	}
	t.Logf("%d of %d captures replayed", replayedN, len(files))
	if replayedN != len(files) {
		t.Errorf("only %d of %d corpus captures replayed", replayedN, len(files))
	}

	// The unsupported path on a real capture: the first corpus file with
	// its header's link type set to 127 (IEEE802_11_RADIOTAP).
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if m := binary.LittleEndian.Uint32(raw); m == magicPcapMicroBE || m == magicPcapNanoBE {
		bo = binary.BigEndian
	}
	bo.PutUint32(raw[20:], 127)
	_, err = NewReplay(files[0], bytes.NewReader(raw), newArena(t, 16, 4096, 256), DefaultReplayOptions())
	want := "capture " + files[0] + ": link type 127 (IEEE802_11_RADIOTAP) is not supported (supported: " + supportedLinkTypes + ")"
	var lte *LinkTypeError
	if !errors.As(err, &lte) || err.Error() != want {
		t.Errorf("rewritten to link type 127: err %v\nwant %s", err, want)
	}
}

// countPcapRecords walks a pcap file's record headers without pcapgo.
func countPcapRecords(t *testing.T, b []byte) (int, uint32) {
	t.Helper()
	if len(b) < 24 {
		t.Fatal("short file")
	}
	var bo binary.ByteOrder = binary.LittleEndian
	switch binary.LittleEndian.Uint32(b) {
	case magicPcapMicroBE, magicPcapNanoBE:
		bo = binary.BigEndian
	case magicPcapMicro, magicPcapNano:
	default:
		t.Fatalf("not a pcap file: %x", b[:4])
	}
	lt := bo.Uint32(b[20:]) & 0xFFFF
	n := 0
	for off := 24; off < len(b); n++ {
		if off+16 > len(b) {
			t.Fatalf("record %d: truncated header", n+1)
		}
		off += 16 + int(bo.Uint32(b[off+8:]))
	}
	return n, lt
}
