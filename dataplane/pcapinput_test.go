package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// deadline is how long a test waits for something that must happen at
// once; passing it fails the test.
const deadline = 10 * time.Second

// tsRec is a record for rawPcap: its bytes, the original length its
// header gives (0: len(data)) and its timestamp in Unix nanoseconds.
type tsRec struct {
	data []byte
	orig uint32
	ts   int64
}

// rawPcap writes a little-endian pcap file by hand: any snap length, micro
// or nanosecond magic, and record headers that may say anything.
func rawPcap(nano bool, snaplen, lt uint32, recs ...tsRec) []byte {
	h := pcapHeader(snaplen, lt)
	if nano {
		h[0], h[1], h[2], h[3] = 0x4D, 0x3C, 0xB2, 0xA1
	}
	out := h
	for _, r := range recs {
		orig := r.orig
		if orig == 0 {
			orig = uint32(len(r.data))
		}
		rec := pcapRecord(uint32(len(r.data)), orig, r.data)
		frac := r.ts % 1e9
		if !nano {
			frac /= 1e3
		}
		putLE32(rec[0:], uint32(r.ts/1e9))
		putLE32(rec[4:], uint32(frac))
		out = append(out, rec...)
	}
	return out
}

func putLE32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// reflectGraph sends every packet out of one port, untouched.
func reflectGraph(t testing.TB) *pipelines.Graph {
	t.Helper()
	g, err := pipelines.Load("reflect.yaml", []byte("name: reflect\nstages:\n  - {name: out, type: tx, port: eth0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// streamRecs is a capture of n Ethernet packets, one of them a 9,000-byte
// jumbo (so that frames must be sized from the snap length), with a snap
// length of 262144 as tcpdump writes.
func streamRecs(n int) ([]byte, []tsRec) {
	var recs []tsRec
	for i := range n {
		size := 60 + i
		if i == n/2 {
			size = 9000
		}
		pkt := eth(srcMAC, 0x0800, make([]byte, size-14))
		recs = append(recs, tsRec{data: pkt, ts: 1700000000e9 + int64(i)*1e6})
	}
	return rawPcap(false, 262144, 1, recs...), recs
}

// replayWithin runs Replay on its own goroutine and fails the test if it
// has not returned within the deadline.
func replayWithin(t *testing.T, cfg ReplayConfig) (Report, error) {
	t.Helper()
	type result struct {
		rep Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := Replay(cfg)
		done <- result{rep, err}
	}()
	select {
	case r := <-done:
		return r.rep, r.err
	case <-time.After(deadline):
		t.Fatalf("replay of %s did not return within %v", cfg.Capture, deadline)
	}
	return Report{}, nil
}

func streamConfig(t testing.TB, capture string) ReplayConfig {
	return ReplayConfig{Capture: capture, Graph: reflectGraph(t), Engine: DefaultOptions(), Replay: DefaultReplayOptions()}
}

// TestReplayPipeOnePass: a capture written into a pipe by a goroutine is
// replayed whole, read once: frames are sized from the snap length (the
// jumbo packet fits), with no read ahead to eat the stream's start.
func TestReplayPipeOnePass(t *testing.T) {
	data, recs := streamRecs(50)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	go func() {
		w.Write(data)
		w.Close()
	}()
	rep, err := replayWithin(t, streamConfig(t, fmt.Sprintf("/proc/self/fd/%d", r.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Received != uint64(len(recs)) || rep.Records != uint64(len(recs)) || len(rep.InputDrops) != 0 || !rep.Balanced {
		t.Errorf("%s; input drops %v; want all %d packets", rep.AccountingLine(), rep.InputDrops, len(recs))
	}
}

// TestReplayStdin: "-" is standard input.
func TestReplayStdin(t *testing.T) {
	data, recs := streamRecs(20)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = old; r.Close() }()
	go func() {
		w.Write(data)
		w.Close()
	}()
	rep, err := replayWithin(t, streamConfig(t, StdinName))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Received != uint64(len(recs)) || !rep.Balanced {
		t.Errorf("%s; want %d packets", rep.AccountingLine(), len(recs))
	}
}

func mkfifo(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cap.fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	return path
}

// TestReplayFIFO: a FIFO whose writer comes later is replayed whole.
func TestReplayFIFO(t *testing.T) {
	path := mkfifo(t)
	data, recs := streamRecs(30)
	go func() {
		time.Sleep(50 * time.Millisecond)
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		f.Write(data)
		f.Close()
	}()
	rep, err := replayWithin(t, streamConfig(t, path))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Received != uint64(len(recs)) || !rep.Balanced {
		t.Errorf("%s; want %d packets", rep.AccountingLine(), len(recs))
	}
}

// TestReplayFIFONoWriter: waiting for a FIFO's writer gives way to the
// context (SIGINT, SIGTERM in warpctl), and leaves no goroutine blocked in
// the open.
func TestReplayFIFONoWriter(t *testing.T) {
	path := mkfifo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	cfg := streamConfig(t, path)
	cfg.Context = ctx
	start := time.Now()
	_, err := replayWithin(t, cfg)
	if !errors.Is(err, ErrInterrupted) || !strings.Contains(err.Error(), "waiting for a writer") {
		t.Fatalf("err %v, want an interrupted wait for the FIFO's writer", err)
	}
	t.Logf("returned %v after the open began", time.Since(start).Round(time.Millisecond))
	// The abandoned open is woken and closed: a writer now finds no reader.
	gone := time.Now().Add(deadline)
	for {
		w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if errors.Is(err, syscall.ENXIO) {
			break
		}
		if err == nil {
			w.Close()
		}
		if time.Now().After(gone) {
			t.Fatalf("the abandoned open still holds the FIFO after %v", deadline)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReplayLiveStream: packets of a stream whose writer stays open are
// handed out as they arrive, not held for a full batch; and a stop through
// the context while a read blocks returns at once, interrupted, with the
// report so far.
func TestReplayLiveStream(t *testing.T) {
	data, recs := streamRecs(3)
	t.Run("port", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		defer r.Close()
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
		a := newArena(t, 64, 16384, 256)
		got := make(chan int, 1)
		go func() {
			p, err := NewReplay("live", r, a, DefaultReplayOptions())
			if err != nil {
				got <- -1
				return
			}
			b := rings.NewBatch(64, a)
			n := 0
			for n < len(recs) {
				k, err := p.Receive(b)
				if err != nil {
					break
				}
				n += k
			}
			got <- n
		}()
		select {
		case n := <-got:
			if n != len(recs) {
				t.Fatalf("received %d packets, want %d", n, len(recs))
			}
		case <-time.After(deadline):
			t.Fatalf("the %d packets written were not handed out within %v while the writer stayed open", len(recs), deadline)
		}
	})
	t.Run("interrupt", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		defer r.Close()
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		cfg := streamConfig(t, fmt.Sprintf("/proc/self/fd/%d", r.Fd()))
		cfg.Context = ctx
		rep, err := replayWithin(t, cfg)
		if !errors.Is(err, ErrInterrupted) {
			t.Fatalf("err %v, want interrupted", err)
		}
		if rep.Pipeline == "" || !rep.Balanced || rep.Received > uint64(len(recs)) || rep.Records != rep.Received {
			t.Errorf("report so far: %s", rep.AccountingLine())
		}
	})
}

// TestReplayNotACapture: a directory, a device or a missing file is named
// as such, before anything is read.
func TestReplayNotACapture(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		path, want string
	}{
		{dir, "capture " + dir + " is a directory: not a capture file"},
		{"/dev/null", "capture /dev/null is a character device: not a capture file"},
		{filepath.Join(dir, "nope.pcap"), "capture " + filepath.Join(dir, "nope.pcap") + " does not exist"},
	} {
		_, err := Replay(streamConfig(t, c.path))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: err %v\nwant %s", c.path, err, c.want)
		}
	}
	// Root reads any file, so the wording for an unreadable one is checked
	// on the error the open returns.
	err := openErr("/x.pcap", &fs.PathError{Op: "open", Path: "/x.pcap", Err: syscall.EACCES})
	if !errors.Is(err, fs.ErrPermission) || !strings.HasPrefix(err.Error(), "capture /x.pcap is not readable (permission denied)") {
		t.Errorf("unreadable: %v", err)
	}
}

// TestReplayFileOpenedOnce: a regular file that must be read ahead (to
// size frames) is read ahead and replayed on one open file.
func TestReplayFileOpenedOnce(t *testing.T) {
	data, recs := streamRecs(10)
	path := filepath.Join(t.TempDir(), "s.pcap")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := openCapture(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := newRecordReader(path, in.f)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := replayArena(ReplayConfig{Replay: DefaultReplayOptions()}, rd, in)
	if err != nil {
		t.Fatal(err)
	}
	if plan.opts.FrameSize != 16384 {
		t.Errorf("frame size %d, want 16384 for a 9,000-byte packet", plan.opts.FrameSize)
	}
	a, err := rings.NewArena(plan.opts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := newReplayFrom(rd, in.f, a, DefaultReplayOptions())
	if err != nil {
		t.Fatal(err)
	}
	got := drain(t, p, a, 8)
	if got.err != nil || len(got.pkts) != len(recs) {
		t.Fatalf("%d packets, err %v", len(got.pkts), got.err)
	}
	p.Close()
	if _, err := in.f.Seek(0, io.SeekStart); err == nil {
		t.Error("the port did not close the file it was given")
	}
}
