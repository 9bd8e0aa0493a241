package daemon

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// sampleDaemon is a daemon with only what the sample sinks use: a
// capture_dir of its own and sample_max_bytes.
func sampleDaemon(t *testing.T, max int64) *Daemon {
	t.Helper()
	base, err := os.MkdirTemp("", "wfsamples-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	return &Daemon{cfg: Config{CaptureDir: filepath.Join(base, "captures"), SampleMaxBytes: max}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// samplePackets puts n 100-byte packets, numbered from first in their
// first 8 bytes, into sk's queue-0 ring as the engine does (Transmit),
// draining it as the writer does after every 32.
func samplePackets(t *testing.T, sk *sampleSink, first, n int) {
	t.Helper()
	a, err := rings.NewArena(rings.ArenaOptions{Frames: 64, FrameSize: 2048, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	port := sk.forQueue(0, 2048)
	for i := 0; i < n; i += 32 {
		var descs []rings.Desc
		for k := i; k < min(i+32, n); k++ {
			addr, ok := a.Alloc()
			if !ok {
				t.Fatal("arena empty")
			}
			d := rings.Desc{Addr: addr, Len: 100}
			binary.BigEndian.PutUint64(a.Bytes(d), uint64(first+k))
			descs = append(descs, d)
		}
		if took, err := port.Transmit(a, descs); err != nil || took != len(descs) {
			t.Fatalf("Transmit took %d of %d: %v", took, len(descs), err)
		}
		for _, d := range descs {
			a.Free(d.Addr)
		}
		sk.drain(sk.testLog())
	}
}

func (s *sampleSink) testLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// openSample opens a sink as sampleOutputs does, its writer running.
func openSample(t *testing.T, d *Daemon, file string) (*sampleSink, error) {
	t.Helper()
	sk, err := d.openSample(pipelines.SamplerInfo{Stage: "smp", File: file})
	if err == nil {
		go sk.run(d.log)
	}
	return sk, err
}

// readSample returns the sequence numbers of a sample file's packets.
func readSample(t *testing.T, path string) []uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []uint64
	for {
		data, _, err := r.ReadPacketData()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(data) != 100 {
			t.Fatalf("%s: a packet of %d bytes", path, len(data))
		}
		out = append(out, binary.BigEndian.Uint64(data))
	}
}

// TestSampleFileRotates: a sample stage's file is made in
// capture_dir/samples, never grows past sample_max_bytes, and at the
// bound moves to NAME.1 (replacing the one before) with NAME begun
// again, so at most two files are kept and the newest packets are in
// them in order; the counts say what was written and rotated.
func TestSampleFileRotates(t *testing.T) {
	const max = 64 << 10 // the least sample_max_bytes takes
	d := sampleDaemon(t, max)
	sk, err := openSample(t, d, "s.pcap")
	if err != nil {
		t.Fatal(err)
	}
	defer sk.close()
	want := filepath.Join(d.cfg.CaptureDir, "samples", "s.pcap")
	if sk.path != want {
		t.Fatalf("sample file at %s, want %s", sk.path, want)
	}
	// 116 bytes a record: 564 fit in 64 KiB after the header, so 1500
	// packets make two rotations.
	samplePackets(t, sk, 0, 1500)
	info := sk.info()
	if info.Written != 1500 || info.Rotations != 2 || info.Missed != 0 || info.Error != "" || info.Bytes > max {
		t.Fatalf("after 1500 packets: %+v", info)
	}
	sk.f.Sync()
	cur, prev := readSample(t, want), readSample(t, want+".1")
	for _, p := range []string{want, want + ".1"} {
		if fi, err := os.Stat(p); err != nil || fi.Size() > max || fi.Mode().Perm() != captureFileMode {
			t.Fatalf("%s: %v %v", p, fi, err)
		}
	}
	if len(prev) != 564 || len(cur) != 1500-2*564 || prev[0] != 564 || cur[0] != 2*564 || cur[len(cur)-1] != 1499 {
		t.Fatalf("files hold %d (from %v) and %d (from %v): want the second 564 in s.pcap.1 and the rest in s.pcap", len(prev), prev[:1], len(cur), cur[:1])
	}
	m, _ := filepath.Glob(filepath.Join(d.cfg.CaptureDir, "samples", "*"))
	if len(m) != 2 {
		t.Fatalf("the samples directory holds %v: want two files", m)
	}
}

// TestSampleFileNotFollowed: a file an earlier run left is moved aside to
// NAME.1, never appended to or written through; a link planted at the
// name is moved aside, not followed, and its target is left alone; a
// file name that is a path never reaches the disk.
func TestSampleFileNotFollowed(t *testing.T) {
	d := sampleDaemon(t, DefaultSampleMaxBytes)
	target := filepath.Join(filepath.Dir(d.cfg.CaptureDir), "target")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	sk, err := openSample(t, d, "s.pcap")
	if err != nil {
		t.Fatal(err)
	}
	samplePackets(t, sk, 0, 10)
	sk.close()
	dir := filepath.Join(d.cfg.CaptureDir, "samples")
	// The next run: s.pcap is moved aside. Then a link at the name.
	if err := os.Symlink(target, filepath.Join(dir, "l.pcap")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"s.pcap", "l.pcap"} {
		sk, err := openSample(t, d, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		samplePackets(t, sk, 100, 5)
		sk.close()
		if got := readSample(t, filepath.Join(dir, name)); len(got) != 5 || got[0] != 100 {
			t.Fatalf("%s: %v, want the new run's 5 packets", name, got)
		}
		if fi, err := os.Lstat(filepath.Join(dir, name)); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("%s: %v %v", name, fi, err)
		}
	}
	if got := readSample(t, filepath.Join(dir, "s.pcap.1")); len(got) != 10 {
		t.Fatalf("the earlier run's file moved aside has %d packets, want 10", len(got))
	}
	if b, err := os.ReadFile(target); err != nil || !bytes.Equal(b, []byte("keep")) {
		t.Fatalf("the link's target: %q %v", b, err)
	}
	for _, bad := range []string{"../x.pcap", "a/b.pcap", ".hidden", "/etc/x"} {
		if _, err := openSample(t, d, bad); err == nil || !strings.Contains(err.Error(), "bad name") {
			t.Errorf("sample file %q: %v, want a bad-name error", bad, err)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(d.cfg.CaptureDir), "*")); len(m) != 2 {
		t.Errorf("outside the samples directory: %v", m)
	}
}

// TestSampleRingFull: a queue's ring holds sampleSlots packets; what the
// writer has not drained by then is counted missed, never waited for,
// and the rest is written.
func TestSampleRingFull(t *testing.T) {
	d := sampleDaemon(t, DefaultSampleMaxBytes)
	sk, err := openSample(t, d, "s.pcap")
	if err != nil {
		t.Fatal(err)
	}
	defer sk.close()
	a, err := rings.NewArena(rings.ArenaOptions{Frames: 64, FrameSize: 2048, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	port := sk.forQueue(0, 2048)
	addr, _ := a.Alloc()
	descs := []rings.Desc{{Addr: addr, Len: 100}}
	sk.mu.Lock() // the writer waits: nothing is drained meanwhile
	for range sampleSlots + 7 {
		if took, err := port.Transmit(a, descs); took != 1 || err != nil {
			t.Fatalf("Transmit: %d %v", took, err)
		}
	}
	sk.mu.Unlock()
	sk.drain(sk.testLog())
	if info := sk.info(); info.Written != sampleSlots || info.Missed != 7 {
		t.Fatalf("%+v: want %d written, 7 missed", info, sampleSlots)
	}
}

// TestSampleFilesBounded: the daemon writes at most MaxSampleFiles sample
// files; a pipeline that needs more is refused with nothing opened, one
// that reuses open files' names still loads, and none is made outside
// the samples directory.
func TestSampleFilesBounded(t *testing.T) {
	d := sampleDaemon(t, DefaultSampleMaxBytes)
	d.cfg.UMEM.FrameSize = 2048
	graph := func(name string, files ...string) *pipelines.Graph {
		y := "name: " + name + "\nstages:\n  - {name: parse, type: parse}\n"
		for i, f := range files {
			y += fmt.Sprintf("  - {name: s%d, type: sample, every: 2, file: %s}\n", i, f)
		}
		y += "  - {name: out, type: tx, port: out}\n"
		g, err := pipelines.Load(name+".yaml", []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	t.Cleanup(func() { d.samples.close() })
	for i := range MaxSampleFiles {
		if _, err := d.sampleOutputs(graph(fmt.Sprintf("p%d", i), fmt.Sprintf("f%d.pcap", i)), 0); err != nil {
			t.Fatalf("sample file %d: %v", i, err)
		}
	}
	_, err := d.sampleOutputs(graph("over", "f0.pcap", "new.pcap"), 0)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("at most %d", MaxSampleFiles)) {
		t.Fatalf("a sample file past the bound: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(d.cfg.CaptureDir, "samples", "new.pcap")); !os.IsNotExist(err) {
		t.Fatalf("the refused pipeline's file was made: %v", err)
	}
	if _, err := d.sampleOutputs(graph("again", "f0.pcap", "f31.pcap"), 1); err != nil {
		t.Fatalf("open files' names again: %v", err)
	}
	if n := len(d.samples.files()); n != MaxSampleFiles {
		t.Fatalf("%d sample files, want %d", n, MaxSampleFiles)
	}
}
