package dataplane

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/rings"
)

// legacyFile writes a classic pcap file in byte order o with the given
// magic and version, and records whose header puts the two lengths in the
// pre-2.3 order when swapped, with 8 extra bytes when modified.
func legacyFile(o binary.ByteOrder, magic uint32, major, minor uint16, swapped, modified bool, recs ...[]byte) []byte {
	var b bytes.Buffer
	h := make([]byte, 24)
	o.PutUint32(h[0:], magic)
	o.PutUint16(h[4:], major)
	o.PutUint16(h[6:], minor)
	o.PutUint32(h[16:], 65535)
	o.PutUint32(h[20:], 1)
	b.Write(h)
	for i, r := range recs {
		rh := make([]byte, 16)
		o.PutUint32(rh[0:], uint32(1700000000+i))
		incl, orig := uint32(len(r)), uint32(len(r)+4)
		if swapped {
			incl, orig = orig, incl
		}
		o.PutUint32(rh[8:], incl)
		o.PutUint32(rh[12:], orig)
		b.Write(rh)
		if modified {
			b.Write([]byte{2, 0, 0, 0, 0x08, 0x00, 0, 0})
		}
		b.Write(r)
	}
	return b.Bytes()
}

// TestReplayLegacyPcap: every variant libpcap reads replays the same
// packets, with the lengths in the right order, as a 2.4 file.
func TestReplayLegacyPcap(t *testing.T) {
	recs := [][]byte{eth(srcMAC, 0x0800, ipv4Pkt), eth(nil, 0x86DD, ipv6Pkt), eth(srcMAC, 0x0800, ipv4Pkt)[:30]}
	le, be := binary.ByteOrder(binary.LittleEndian), binary.ByteOrder(binary.BigEndian)
	for _, c := range []struct {
		name              string
		o                 binary.ByteOrder
		magic             uint32
		major, minor      uint16
		swapped, modified bool
	}{
		{"2.4 little-endian", le, 0xA1B2C3D4, 2, 4, false, false},
		{"2.4 big-endian nanosecond", be, 0xA1B23C4D, 2, 4, false, false},
		{"2.1 big-endian", be, 0xA1B2C3D4, 2, 1, true, false},
		{"2.0 little-endian", le, 0xA1B2C3D4, 2, 0, true, false},
		{"2.2 big-endian nanosecond", be, 0xA1B23C4D, 2, 2, true, false},
		{"2.3 swapped", be, 0xA1B2C3D4, 2, 3, true, false},
		{"2.3 not swapped", le, 0xA1B2C3D4, 2, 3, false, false},
		{"543.0 DG/UX", be, 0xA1B2C3D4, 543, 0, true, false},
		{"modified little-endian", le, 0xA1B2CD34, 2, 4, false, true},
		{"modified big-endian", be, 0xA1B2CD34, 2, 4, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := legacyFile(c.o, c.magic, c.major, c.minor, c.swapped, c.modified, recs...)
			for _, preload := range []bool{false, true} {
				a := newArena(t, 16, 2048, 0)
				o := DefaultReplayOptions()
				o.Preload = preload
				o.Loops = 2
				p, err := NewReplay("old.pcap", bytes.NewReader(data), a, o)
				if err != nil {
					t.Fatalf("preload=%v: %v", preload, err)
				}
				r := drain(t, p, a, 2)
				if r.err != nil {
					t.Fatalf("preload=%v: %v", preload, r.err)
				}
				if len(r.pkts) != 2*len(recs) {
					t.Fatalf("preload=%v: %d packets, want %d", preload, len(r.pkts), 2*len(recs))
				}
				for i, got := range r.pkts {
					if !bytes.Equal(got, recs[i%len(recs)]) {
						t.Fatalf("preload=%v: packet %d differs:\n got %x\nwant %x", preload, i, got, recs[i%len(recs)])
					}
					// Every record says the packet had 4 bytes more.
					if r.metas[i].Flags&rings.FlagCut == 0 {
						t.Errorf("preload=%v: packet %d not flagged as cut by the capture", preload, i)
					}
				}
				if st := p.Stats(); st.Cut != uint64(len(r.pkts)) {
					t.Errorf("preload=%v: Cut %d, want %d", preload, st.Cut, len(r.pkts))
				}
				p.Close()
				if a.FreeFrames() != a.Frames() {
					t.Errorf("preload=%v: %d frames leaked", preload, a.Frames()-a.FreeFrames())
				}
			}
		})
	}
}

// TestReplayUnreadableVersions: a version libpcap does not read either is
// named, not called corrupt.
func TestReplayUnreadableVersions(t *testing.T) {
	le := binary.LittleEndian
	for _, c := range []struct {
		major, minor uint16
		want         string
	}{
		{1, 0, "capture bad.pcap: unsupported capture format: archaic pcap version 1.0 (libpcap and tcpdump read 2.0 to 2.4)"},
		{2, 5, "capture bad.pcap: unsupported capture format: pcap version 2.5 (libpcap and tcpdump read 2.0 to 2.4)"},
		{9, 4, "capture bad.pcap: unsupported capture format: pcap version 9.4 (libpcap and tcpdump read 2.0 to 2.4)"},
	} {
		_, err := replayErr(t, "bad.pcap", legacyFile(le, 0xA1B2C3D4, c.major, c.minor, false, false, eth(nil, 0x0800, ipv4Pkt)))
		if !errors.Is(err, ErrUnsupportedFormat) || errors.Is(err, ErrCorruptCapture) || err.Error() != c.want {
			t.Errorf("version %d.%d: err %v\nwant %s", c.major, c.minor, err, c.want)
		}
	}
}

// TestReplayModifiedCorruptNamesFormat: a modified-magic file whose records
// do not fit the 24-byte header (the SuSE 6.3 variant, say) fails naming
// the format it was read as.
func TestReplayModifiedCorruptNamesFormat(t *testing.T) {
	data := legacyFile(binary.LittleEndian, 0xA1B2CD34, 2, 4, false, true, eth(nil, 0x0800, ipv4Pkt))
	data = append(data, 1, 2, 3, 4, 5, 6, 7) // a cut record header
	_, err := replayErr(t, "m.pcap", data)
	if !errors.Is(err, ErrCorruptCapture) || !strings.Contains(err.Error(), "read as modified pcap (magic 0xa1b2cd34") {
		t.Fatalf("err %v", err)
	}
}

// TestReplayZeroLengthRecords: zero-length records are skipped and counted,
// in pcap and pcapng, streamed and preloaded, and the packets around them
// are replayed.
func TestReplayZeroLengthRecords(t *testing.T) {
	good := eth(nil, 0x0800, ipv4Pkt)
	ok := pcapRecord(uint32(len(good)), uint32(len(good)), good)
	zero := pcapRecord(0, 0, nil)
	files := map[string][]byte{
		"pcap":   cat(pcapHeader(65535, 1), zero, ok, zero, zero, ok),
		"pcapng": cat(ngHead(t), ngEPB(0, nil), ngEPB(uint32(len(good)), good), ngEPB(0, nil), ngEPB(0, nil), ngEPB(uint32(len(good)), good)),
	}
	for name, data := range files {
		for _, preload := range []bool{false, true} {
			a := newArena(t, 16, 2048, 0)
			o := DefaultReplayOptions()
			o.Preload = preload
			p, err := NewReplay("z."+name, bytes.NewReader(data), a, o)
			if err != nil {
				t.Fatalf("%s preload=%v: %v", name, preload, err)
			}
			r := drain(t, p, a, 4)
			st := p.Stats()
			if r.err != nil || len(r.pkts) != 2 || st.ZeroLength != 3 || st.Records != 5 || st.Packets != 2 {
				t.Errorf("%s preload=%v: err %v, %d packets, stats %+v", name, preload, r.err, len(r.pkts), st)
			}
			p.Close()
		}
	}
}
