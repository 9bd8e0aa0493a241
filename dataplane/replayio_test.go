package dataplane

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"
	"github.com/warpflow/warpflow/pipelines"
)

// readOutput reads an output capture with the package's own reader and
// returns its records (data copied) and whether it has nanosecond stamps.
func readOutput(t *testing.T, path string) ([]tsRec, bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, err := newRecordReader(path, f)
	if err != nil {
		t.Fatal(err)
	}
	if rd.linkType != linkEthernet {
		t.Errorf("%s: link type %d, want Ethernet", path, rd.linkType)
	}
	var out []tsRec
	for {
		rec, err := rd.next()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("%s: %v", path, err)
			}
			return out, rd.nanoRes
		}
		out = append(out, tsRec{data: bytes.Clone(rec.data), orig: rec.orig, ts: rec.ts})
	}
}

// stampCases are inputs whose outputs must keep their stamps: nanosecond
// and microsecond pcap with cut packets, and pcapng at 10^-9 resolution.
func stampCases(t *testing.T) map[string]struct {
	data []byte
	recs []tsRec
	nano bool
} {
	var recs []tsRec
	for i := range 6 {
		pkt := eth(srcMAC, 0x0800, ipv4Pkt)
		r := tsRec{data: pkt, ts: 1700000000e9 + int64(i)*1_234_567_891 + 7}
		if i%2 == 1 {
			r.orig = uint32(len(pkt) + 1000) // cut by a small snaplen
		}
		recs = append(recs, r)
	}
	micro := make([]tsRec, len(recs))
	for i, r := range recs {
		r.ts -= r.ts % 1000
		micro[i] = r
	}
	ng := ngFile(t, []layers.LinkType{1})
	for _, r := range recs {
		ng = append(ng, ngEPBAt(r, 0)...)
	}
	return map[string]struct {
		data []byte
		recs []tsRec
		nano bool
	}{
		"pcap-ns": {rawPcap(true, 96, 1, recs...), recs, true},
		"pcap-us": {rawPcap(false, 96, 1, micro...), micro, false},
		"pcapng":  {ng, recs, true},
	}
}

// ngEPBAt is an enhanced packet block for interface iface at the record's
// time (the interface's resolution being 10^-9, see ngFile).
func ngEPBAt(r tsRec, iface uint32) []byte {
	orig := r.orig
	if orig == 0 {
		orig = uint32(len(r.data))
	}
	b := ngEPB(uint32(len(r.data)), r.data)
	binary.LittleEndian.PutUint32(b[8:], iface)
	binary.LittleEndian.PutUint32(b[12:], uint32(uint64(r.ts)>>32))
	binary.LittleEndian.PutUint32(b[16:], uint32(r.ts))
	binary.LittleEndian.PutUint32(b[24:], orig)
	return b
}

// TestReplayOutputsKeepStamps: output captures keep every packet's
// timestamp, at the input's resolution, and its original length.
func TestReplayOutputsKeepStamps(t *testing.T) {
	for name, c := range stampCases(t) {
		t.Run(name, func(t *testing.T) {
			out := t.TempDir()
			cfg := streamConfig(t, name)
			cfg.CaptureData, cfg.OutDir = c.data, out
			if _, err := Replay(cfg); err != nil {
				t.Fatal(err)
			}
			got, nano := readOutput(t, filepath.Join(out, "eth0.pcap"))
			if nano != c.nano {
				t.Errorf("nanosecond output %v, want %v", nano, c.nano)
			}
			if len(got) != len(c.recs) {
				t.Fatalf("%d packets out, want %d", len(got), len(c.recs))
			}
			for i, r := range c.recs {
				want := r.orig
				if want == 0 {
					want = uint32(len(r.data))
				}
				if got[i].ts != r.ts || got[i].orig != want || !bytes.Equal(got[i].data, r.data) {
					t.Errorf("packet %d: ts %d orig %d (%d bytes), want ts %d orig %d (%d bytes)", i, got[i].ts, got[i].orig, len(got[i].data), r.ts, want, len(r.data))
				}
			}
		})
	}
}

// TestReplayOutputsFollowRewrite: a packet the pipeline lengthens (a VLAN
// pushed) keeps its original length plus the same 4 bytes: a whole packet
// stays whole, a cut one stays cut by as much.
func TestReplayOutputsFollowRewrite(t *testing.T) {
	g, err := pipelines.Load("vlan.yaml", []byte(`name: vlan
stages:
  - {name: parse, type: parse}
  - {name: tag, type: rewrite, push_vlan: 7}
  - {name: out, type: tx, port: eth0}
`))
	if err != nil {
		t.Fatal(err)
	}
	c := stampCases(t)["pcap-ns"]
	out := t.TempDir()
	cfg := streamConfig(t, "v.pcap")
	cfg.Graph, cfg.CaptureData, cfg.OutDir = g, c.data, out
	if _, err := Replay(cfg); err != nil {
		t.Fatal(err)
	}
	got, _ := readOutput(t, filepath.Join(out, "eth0.pcap"))
	for i, r := range c.recs {
		orig := r.orig
		if orig == 0 {
			orig = uint32(len(r.data))
		}
		if len(got[i].data) != len(r.data)+4 || got[i].orig != orig+4 || got[i].ts != r.ts {
			t.Errorf("packet %d: %d bytes, orig %d, ts %d; want %d, %d, %d", i, len(got[i].data), got[i].orig, got[i].ts, len(r.data)+4, orig+4, r.ts)
		}
	}
}

// TestReplayOutputFixedPoint: replaying an output capture through the same
// pipeline (one that rewrites nothing) gives the same verdicts: each
// output goes back out the same way, byte for byte.
func TestReplayOutputFixedPoint(t *testing.T) {
	g, err := pipelines.LoadFile("../testdata/pipelines/valid/split.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out1 := t.TempDir()
	rep1 := replayTo(t, g, "../testdata/captures/mixed.pcap", out1, 2, 32)
	if rep1.Passed == 0 || len(rep1.Ports) == 0 || rep1.Ports[0].Packets == 0 {
		t.Fatalf("mixed.pcap should reach the port and pass: %s", rep1.AccountingLine())
	}
	out2 := t.TempDir()
	rep2 := replayTo(t, g, filepath.Join(out1, PassFile), out2, 2, 32)
	a, _ := os.ReadFile(filepath.Join(out1, PassFile))
	b, _ := os.ReadFile(filepath.Join(out2, PassFile))
	if rep2.Received != rep1.Passed || rep2.Passed != rep1.Passed || !bytes.Equal(a, b) {
		t.Errorf("pass.pcap replayed: %s; output equal %v", rep2.AccountingLine(), bytes.Equal(a, b))
	}
	for _, p := range rep1.Ports {
		if p.Packets == 0 {
			continue
		}
		first := filepath.Join(out1, p.Port+".pcap")
		out2 := t.TempDir()
		rep2 := replayTo(t, g, first, out2, 2, 32)
		if rep2.Received != p.Packets || len(rep2.Ports) == 0 {
			t.Fatalf("%s: replayed %d packets, want %d", p.Port, rep2.Received, p.Packets)
		}
		for _, q := range rep2.Ports {
			want := uint64(0)
			if q.Port == p.Port {
				want = p.Packets
			}
			if q.Packets != want {
				t.Errorf("%s replayed: %d packets out of %s, want %d", p.Port, q.Packets, q.Port, want)
			}
		}
		a, _ := os.ReadFile(first)
		b, _ := os.ReadFile(filepath.Join(out2, p.Port+".pcap"))
		if !bytes.Equal(a, b) {
			t.Errorf("%s: the output of the output differs from the output (%d and %d bytes)", p.Port, len(a), len(b))
		}
	}
}

// TestReplayOutputsReadByTools: tcpdump shows an output's timestamps and
// original lengths as it shows the input's, and tshark reads every output.
func TestReplayOutputsReadByTools(t *testing.T) {
	for _, tool := range []string{"tcpdump", "tshark"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s not installed (CI must install it): %v", tool, err)
			}
			t.Skipf("%s not installed: %v", tool, err)
		}
	}
	for name, c := range stampCases(t) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			in := filepath.Join(dir, "in")
			if err := os.WriteFile(in, c.data, 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "out")
			cfg := streamConfig(t, in)
			cfg.OutDir = out
			if _, err := Replay(cfg); err != nil {
				t.Fatal(err)
			}
			prec := "micro"
			if c.nano {
				prec = "nano"
			}
			dump := func(path string) string {
				b, err := exec.Command("tcpdump", "-nn", "-tt", "-e", "--time-stamp-precision="+prec, "-r", path).CombinedOutput()
				if err != nil {
					t.Fatalf("tcpdump -r %s: %v\n%s", path, err, b)
				}
				var lines []string
				for _, l := range strings.Split(string(b), "\n") {
					if !strings.HasPrefix(l, "reading from") && l != "" {
						lines = append(lines, l)
					}
				}
				return strings.Join(lines, "\n")
			}
			files, _ := filepath.Glob(filepath.Join(out, "*.pcap"))
			var outs []string
			for _, f := range files {
				if d := dump(f); d != "" {
					outs = append(outs, d)
				}
				if b, err := exec.Command("tshark", "-r", f, "-T", "fields", "-e", "frame.time_epoch", "-e", "frame.len").CombinedOutput(); err != nil {
					t.Errorf("tshark -r %s: %v\n%s", f, err, b)
				}
			}
			if len(outs) != 1 || outs[0] != dump(in) {
				t.Errorf("tcpdump of the outputs:\n%s\nwant, as of the input:\n%s", strings.Join(outs, "\n--\n"), dump(in))
			}
		})
	}
}

// TestReplayLargeSkippedBlock: a valid 3 MiB pcapng block that is not a
// packet (a name resolution block, a custom block) is skipped without
// being held, and the packets around it are replayed.
func TestReplayLargeSkippedBlock(t *testing.T) {
	good := eth(nil, 0x0800, ipv4Pkt)
	for _, typ := range []uint32{ngBlockNRB, 0x00000BAD} {
		blk := make([]byte, 3<<20)
		binary.LittleEndian.PutUint32(blk[0:], typ)
		binary.LittleEndian.PutUint32(blk[4:], uint32(len(blk)))
		binary.LittleEndian.PutUint32(blk[len(blk)-4:], uint32(len(blk)))
		data := cat(ngHead(t), ngEPB(uint32(len(good)), good), blk, ngEPB(uint32(len(good)), good))
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		got, err := replayErr(t, "big-block.pcapng", data)
		runtime.ReadMemStats(&after)
		if err != nil || len(got.pkts) != 2 {
			t.Fatalf("block type 0x%x: %d packets, err %v", typ, len(got.pkts), err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
			t.Errorf("block type 0x%x: allocated %d KiB skipping a 3 MiB block", typ, alloc>>10)
		}
	}
}

// TestReplayCapLenOverOrigLen: a record whose captured length is above its
// original length is read as libpcap reads it (all its bytes, not cut),
// in pcap and pcapng, and an output keeps both lengths.
func TestReplayCapLenOverOrigLen(t *testing.T) {
	good := eth(nil, 0x0800, ipv4Pkt)
	ng := ngEPB(uint32(len(good)), good)
	binary.LittleEndian.PutUint32(ng[24:], 20)
	for name, data := range map[string][]byte{
		"pcap":   cat(pcapHeader(65535, 1), pcapRecord(uint32(len(good)), 20, good)),
		"pcapng": cat(ngHead(t), ng),
	} {
		t.Run(name, func(t *testing.T) {
			got, err := replayErr(t, "x", data)
			if err != nil || len(got.pkts) != 1 || !bytes.Equal(got.pkts[0], good) || got.metas[0].Flags != 0 {
				t.Fatalf("%d packets, err %v", len(got.pkts), err)
			}
			out := t.TempDir()
			cfg := streamConfig(t, name)
			cfg.CaptureData, cfg.OutDir = data, out
			if _, err := Replay(cfg); err != nil {
				t.Fatal(err)
			}
			recs, _ := readOutput(t, filepath.Join(out, "eth0.pcap"))
			if len(recs) != 1 || len(recs[0].data) != len(good) || recs[0].orig != 20 {
				t.Errorf("output %+v, want %d bytes with original length 20", recs, len(good))
			}
		})
	}
}

// TestReplayBlockErrors: a bad pcapng block length names the block, its
// offset and what is wrong; an odd length is not a zero-length packet.
func TestReplayBlockErrors(t *testing.T) {
	good := eth(nil, 0x0800, ipv4Pkt)
	odd := ngEPB(uint32(len(good)), good)
	binary.LittleEndian.PutUint32(odd[4:], uint32(len(odd)-1))
	trailer := ngEPB(uint32(len(good)), good)
	binary.LittleEndian.PutUint32(trailer[len(trailer)-4:], 8)
	head := ngHead(t)
	at := len(head) + len(ngEPB(uint32(len(good)), good))
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"odd length", cat(head, ngEPB(uint32(len(good)), good), odd), "record 2: corrupt capture: pcapng enhanced packet block (type 0x00000006) at offset " + itoa(at) + ": block length " + itoa(len(odd)-1) + " is not a multiple of 4"},
		{"trailer", cat(head, ngEPB(uint32(len(good)), good), trailer), "at offset " + itoa(at) + ": block length " + itoa(len(trailer)) + " in its header but 8 in its trailer"},
		{"caplen past block", cat(head, ngEPB(uint32(len(good)), good), ngEPB(200, good)), "captured length 200 runs past the end of the block"},
	} {
		got, err := replayErr(t, "b.pcapng", c.data)
		if !errors.Is(err, ErrCorruptCapture) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v\nwant %q", c.name, err, c.want)
		}
		if len(got.pkts) != 1 {
			t.Errorf("%s: %d packets before the error, want 1", c.name, len(got.pkts))
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestReplayMaxOutput: a small gzip that expands past the output limit
// stops the replay with ErrOutputLimit; what was written is well-formed
// and within the limit, and the report balances.
func TestReplayMaxOutput(t *testing.T) {
	pkt := eth(nil, 0x0800, ipv4Pkt)
	recs := make([]tsRec, 20000)
	for i := range recs {
		recs[i] = tsRec{data: pkt, ts: int64(i) * 1e3}
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(rawPcap(false, 65535, 1, recs...))
	zw.Close()
	const limit = 256 << 10
	out := t.TempDir()
	cfg := streamConfig(t, "bomb.pcap.gz")
	cfg.CaptureData, cfg.OutDir, cfg.MaxOutput = z.Bytes(), out, limit
	rep, err := Replay(cfg)
	if !errors.Is(err, ErrOutputLimit) || !strings.Contains(err.Error(), "the replay stopped after record") {
		t.Fatalf("err %v, want the output limit", err)
	}
	t.Logf("%d bytes of gzip; %v", z.Len(), err)
	if !rep.Balanced || rep.Received == 0 || rep.Received >= uint64(len(recs)) {
		t.Errorf("report: %s", rep.AccountingLine())
	}
	fi, err := os.Stat(filepath.Join(out, "eth0.pcap"))
	if err != nil || fi.Size() > limit {
		t.Fatalf("output %v, %v: want at most %d bytes", fi, err, limit)
	}
	got, _ := readOutput(t, filepath.Join(out, "eth0.pcap"))
	if uint64(len(got)) != rep.Ports[0].Packets {
		t.Errorf("output holds %d packets, the report says %d", len(got), rep.Ports[0].Packets)
	}
}

// TestReplayZeroLengthWarning: a capture that is mostly zero-length records
// gets one warning; one with a few does not.
func TestReplayZeroLengthWarning(t *testing.T) {
	good := eth(nil, 0x0800, ipv4Pkt)
	mostly := pcapHeader(65535, 1)
	for range 500 {
		mostly = append(mostly, pcapRecord(0, 0, nil)...)
	}
	mostly = append(mostly, pcapRecord(uint32(len(good)), uint32(len(good)), good)...)
	few := cat(pcapHeader(65535, 1), pcapRecord(0, 0, nil))
	for range 300 {
		few = append(few, pcapRecord(uint32(len(good)), uint32(len(good)), good)...)
	}
	for name, c := range map[string]struct {
		data  []byte
		warns int
	}{"mostly": {mostly, 1}, "few": {few, 0}} {
		var notes []string
		cfg := streamConfig(t, name)
		cfg.CaptureData = c.data
		cfg.Notice = func(s string) { notes = append(notes, s) }
		rep, err := Replay(cfg)
		if err != nil {
			t.Fatal(err)
		}
		warns := 0
		for _, n := range notes {
			if strings.Contains(n, "zero-length") {
				warns++
			}
		}
		if warns != c.warns {
			t.Errorf("%s: notices %q, want %d zero-length warning", name, notes, c.warns)
		}
		if rep.Records != uint64(len(c.data)) && rep.Records == 0 {
			t.Errorf("%s: records %d", name, rep.Records)
		}
	}
}

// bigCapture is n small packets.
func bigCapture(n int) []byte {
	pkt := eth(nil, 0x0800, ipv4Pkt)
	rec := pcapRecord(uint32(len(pkt)), uint32(len(pkt)), pkt)
	b := make([]byte, 0, 24+n*len(rec))
	b = append(b, pcapHeader(65535, 1)...)
	for range n {
		b = append(b, rec...)
	}
	return b
}

// TestReplayPreloadBeyondArena: a preload of more than 262,144 packets
// sizes its arena from the capture (2 KiB frames for small packets); one
// that would pass the preload limit streams instead, says so, and gives
// the same report.
func TestReplayPreloadBeyondArena(t *testing.T) {
	const n = 270000
	data := bigCapture(n)
	cfg := streamConfig(t, "big.pcap")
	cfg.CaptureData = data
	cfg.Replay.Preload = true
	var notes []string
	cfg.Notice = func(s string) { notes = append(notes, s) }
	rep, err := Replay(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Received != n || !rep.Balanced || len(notes) != 0 {
		t.Fatalf("%s; notices %q", rep.AccountingLine(), notes)
	}
	old := preloadLimit
	preloadLimit = 64 << 20
	defer func() { preloadLimit = old }()
	rep2, err := Replay(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "streaming instead") {
		t.Errorf("notices %q, want one saying the preload streams", notes)
	}
	if !reflect.DeepEqual(rep.Deterministic(), rep2.Deterministic()) {
		t.Errorf("streamed report differs from the preloaded one:\n%s\n%s", rep.AccountingLine(), rep2.AccountingLine())
	}
}
