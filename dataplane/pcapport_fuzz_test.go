package dataplane

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"
	"github.com/warpflow/warpflow/rings"
)

var writeFuzzSeeds = flag.Bool("write-fuzz-seeds", false, "write FuzzReplay's seeds to testdata/fuzz/FuzzReplay")

// fuzzSeeds are valid captures of every link type and format plus every
// hostile capture of the table tests.
func fuzzSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, c := range linkCases {
		seeds = append(seeds, pcapFile(t, c.lt, c.rec, c.rec))
	}
	capture, _ := seqCapture(t, 6)
	seeds = append(seeds,
		capture,
		gzipped(t, capture),
		ngFile(t, []layers.LinkType{1, 101, 113, 276, 0},
			ngRec{0, eth(srcMAC, 0x0800, ipv4Pkt)}, ngRec{1, ipv6Pkt},
			ngRec{2, cat(sll(6, srcMAC, 0x86DD), ipv6Pkt)}, ngRec{3, cat(sll2(6, srcMAC, 0x0800), ipv4Pkt)},
			ngRec{4, cat([]byte{2, 0, 0, 0}, ipv4Pkt)}),
		ngFile(t, []layers.LinkType{9, 104, 50},
			ngRec{0, cat([]byte{0x21}, ipv4Pkt)}, ngRec{1, cat([]byte{0x0f, 0, 0x86, 0xdd}, ipv6Pkt)},
			ngRec{2, cat([]byte{0xff, 0x03, 0x00, 0x21}, ipv4Pkt)}),
		ngFile(t, []layers.LinkType{1, 127}, ngRec{0, eth(nil, 0x0800, ipv4Pkt)}, ngRec{1, ipv4Pkt}),
	)
	for _, c := range hostileCases(t) {
		seeds = append(seeds, c.data)
	}
	// The legacy variants rewritten for pcapgo (see pcaplegacy.go).
	rec := eth(srcMAC, 0x0800, ipv4Pkt)
	seeds = append(seeds,
		legacyFile(binary.BigEndian, 0xA1B2C3D4, 2, 1, true, false, rec, rec[:20]),
		legacyFile(binary.LittleEndian, 0xA1B2C3D4, 2, 3, true, false, rec),
		legacyFile(binary.LittleEndian, 0xA1B2CD34, 2, 4, false, true, rec, rec),
	)
	return seeds
}

// FuzzReplay replays arbitrary bytes as a capture, streamed and preloaded,
// looping twice. It must never panic, hand out a descriptor outside the arena
// or across frames, leave Seq gaps, leak a frame, or fail with anything but a
// one-line corrupt-capture, unsupported-link-type or arena-full error.
func FuzzReplay(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, preload := range []bool{false, true} {
			a := newArena(t, 32, 2048, 128)
			o := ReplayOptions{Preload: preload, Loops: 2}
			if preload {
				o.MinFrames = 8
			}
			p, err := NewReplay("fuzz.pcap", bytes.NewReader(data), a, o)
			if err == nil {
				r := drain(t, p, a, 8)
				err = r.err
				if cerr := p.Close(); cerr != nil {
					t.Fatalf("close: %v", cerr)
				}
				st := p.Stats()
				if st.Packets != uint64(len(r.pkts)) || st.BadRecycles != 0 {
					t.Fatalf("stats %+v for %d packets", st, len(r.pkts))
				}
			}
			if a.FreeFrames() != a.Frames() {
				t.Fatalf("preload=%v: %d frames leaked", preload, a.Frames()-a.FreeFrames())
			}
			if err == nil {
				continue
			}
			if !errors.Is(err, ErrCorruptCapture) && !errors.Is(err, ErrUnsupportedLinkType) && !errors.Is(err, ErrUnsupportedFormat) && !errors.Is(err, rings.ErrArenaEmpty) {
				t.Fatalf("preload=%v: unexpected error kind: %v", preload, err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error: %q", err)
			}
		}
	})
}

// TestWriteFuzzSeeds writes the seeds as committed corpus files when run
// with -write-fuzz-seeds.
func TestWriteFuzzSeeds(t *testing.T) {
	if !*writeFuzzSeeds {
		t.Skip("seeds are written only with -write-fuzz-seeds")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzReplay")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range fuzzSeeds(t) {
		name := fmt.Sprintf("seed-%x", sha256.Sum256(s))[:21]
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
