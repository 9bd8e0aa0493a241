package dataplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/warpflow/warpflow/rings"
)

const realDir = "../testdata/captures/realworld/"

// replayReal replays capture through the default pipeline into a fresh
// directory, with frame tracking, and returns the report, the error and
// the directory.
func replayReal(t *testing.T, capture string, edit func(*ReplayConfig)) (Report, string, error) {
	t.Helper()
	out := t.TempDir()
	cfg := ReplayConfig{Capture: capture, Graph: defaultGraph(t), OutDir: out, Engine: DefaultOptions(), Replay: DefaultReplayOptions()}
	cfg.Engine.TrackFrames = true
	if edit != nil {
		edit(&cfg)
	}
	rep, err := Replay(cfg)
	return rep, out, err
}

// readOutputs reads every capture in dir to its end (failing t on any
// error, so a capture cut mid-record fails) and returns the packets by file.
func readOutputs(t *testing.T, dir string) map[string][][]byte {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][][]byte{}
	for _, e := range ents {
		if filepath.Ext(e.Name()) != ".pcap" {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		r, err := pcapgo.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		var pkts [][]byte
		for {
			data, _, err := r.ReadPacketData()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: record %d: %v", e.Name(), len(pkts)+1, err)
			}
			pkts = append(pkts, data)
		}
		f.Close()
		out[e.Name()] = pkts
	}
	return out
}

// sentPackets counts the packets in the tx and pass captures (not samples).
func sentPackets(outs map[string][][]byte) (n int, longest int) {
	for name, pkts := range outs {
		if name == "sample.pcap" {
			continue
		}
		n += len(pkts)
		for _, p := range pkts {
			longest = max(longest, len(p))
		}
	}
	return n, longest
}

func dropCount(r Report, reason string) uint64 {
	for _, d := range r.Drops {
		if d.Reason == reason {
			return d.Packets
		}
	}
	return 0
}

func inputDrop(r Report, reason string) uint64 {
	for _, d := range r.InputDrops {
		if d.Reason == reason {
			return d.Packets
		}
	}
	return 0
}

// TestRealworldOldVersions: a big-endian version 2.1 capture and a Red Hat
// "modified" one replay exactly like the same packets in a current file.
func TestRealworldOldVersions(t *testing.T) {
	var dirs []string
	for _, name := range []string{"v21-be.pcap", "modified-redhat.pcap"} {
		rep, out, err := replayReal(t, realDir+name, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if rep.Records != 18 || rep.Received != 18 || !rep.Balanced || len(rep.InputDrops) != 0 || dropCount(rep, "malformed") != 0 {
			t.Fatalf("%s: %+v", name, rep)
		}
		if n, _ := sentPackets(readOutputs(t, out)); n != 18-int(rep.Dropped) {
			t.Fatalf("%s: %d packets written, want %d", name, n, 18-rep.Dropped)
		}
		dirs = append(dirs, out)
	}
	if diff, err := CompareDirs(dirs[0], dirs[1]); err != nil || diff != nil {
		t.Fatalf("the two variants differ: %v %v", diff, err)
	}
}

// TestRealworldLargeFrames: jumbo and GRO-sized frames are all processed,
// streamed and preloaded; with frames forced back to 4 KiB they are named
// oversize input drops instead.
func TestRealworldLargeFrames(t *testing.T) {
	for _, c := range []struct {
		name    string
		longest int
	}{{"jumbo-9000.pcap", 9022}, {"gro-64k.pcap", 65222}} {
		for _, preload := range []bool{false, true} {
			rep, out, err := replayReal(t, realDir+c.name, func(cfg *ReplayConfig) { cfg.Replay.Preload = preload })
			if err != nil {
				t.Fatalf("%s preload=%v: %v", c.name, preload, err)
			}
			if rep.Received != 18 || len(rep.InputDrops) != 0 || rep.Dropped != 0 || !rep.Balanced {
				t.Fatalf("%s preload=%v: %+v", c.name, preload, rep)
			}
			n, longest := sentPackets(readOutputs(t, out))
			if n != 18 || longest != c.longest {
				t.Fatalf("%s preload=%v: wrote %d packets, longest %d; want 18, %d", c.name, preload, n, longest, c.longest)
			}
		}
		rep, _, err := replayReal(t, realDir+c.name, func(cfg *ReplayConfig) { cfg.FrameSize = 4096 })
		if err != nil {
			t.Fatal(err)
		}
		// Four TCP data segments and UDP6 datagrams of the full size, and
		// for GRO also the DNS datagrams (a quarter of the size).
		want := uint64(6)
		if c.name == "gro-64k.pcap" {
			want = 10
		}
		if inputDrop(rep, "oversize") != want || rep.Received != 18-want || !rep.Balanced {
			t.Fatalf("%s with 4 KiB frames: input drops %+v, received %d", c.name, rep.InputDrops, rep.Received)
		}
	}
}

// TestRealworldSnaplen96: a headers-only capture is parsed and forwarded
// like a full one; nothing is called malformed, every packet is flagged as
// cut by the capture, and the headers-only bytes are what is written.
func TestRealworldSnaplen96(t *testing.T) {
	// Inline and with workers, streamed and preloaded: in worker mode the
	// metadata is deferred to the worker (rings.Batch.DeferMeta), and the
	// ports' cut flag must survive it, or parse calls the packets
	// malformed.
	for _, tc := range []struct {
		workers int
		preload bool
	}{{0, false}, {2, false}, {0, true}, {2, true}} {
		t.Run(fmt.Sprintf("workers=%d/preload=%v", tc.workers, tc.preload), func(t *testing.T) {
			testSnaplen96(t, func(cfg *ReplayConfig) { cfg.Engine.Workers, cfg.Replay.Preload = tc.workers, tc.preload })
		})
	}
}

func testSnaplen96(t *testing.T, edit func(*ReplayConfig)) {
	rep, out, err := replayReal(t, realDir+"snaplen-96.pcap", edit)
	if err != nil {
		t.Fatal(err)
	}
	// The capture cuts the 12 packets longer than 96 bytes (all but the SYN,
	// SYN/ACK and the ACKs, 54 to 78 bytes).
	if rep.Received != 18 || rep.Cut != 12 || dropCount(rep, "malformed") != 0 || rep.Dropped != 0 || !rep.Balanced {
		t.Fatalf("report %+v", rep)
	}
	for _, s := range rep.Stages {
		for _, g := range s.Counters {
			for _, kv := range g.Values {
				if g.Name == "class" && kv.Key != "ok" {
					t.Errorf("stage %s counted %s %d", s.Name, g.Text(kv), kv.Value)
				}
			}
		}
	}
	n, longest := sentPackets(readOutputs(t, out))
	if n != 18 || longest != 96 {
		t.Fatalf("wrote %d packets, longest %d", n, longest)
	}
}

// TestRealworldZeroLength: zero-length records are skipped and counted; the
// rest replays.
func TestRealworldZeroLength(t *testing.T) {
	rep, out, err := replayReal(t, realDir+"zero-length.pcap", nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Records != 22 || rep.Received != 18 || inputDrop(rep, "zero_length") != 4 || !rep.Balanced {
		t.Fatalf("report %+v", rep)
	}
	if !strings.Contains(rep.AccountingLine(), "4 records not received (input drops)") {
		t.Fatalf("accounting line %q", rep.AccountingLine())
	}
	if n, _ := sentPackets(readOutputs(t, out)); n != 18 {
		t.Fatalf("wrote %d packets", n)
	}
}

// TestRealworldCorruptTail: a capture ending in a bad record still gives
// the report of the 18 good ones, their outputs (well-formed) and
// counters.json, and the error names the record.
func TestRealworldCorruptTail(t *testing.T) {
	for _, workers := range []int{0, 2} {
		rep, out, err := replayReal(t, realDir+"corrupt-tail.pcap", func(cfg *ReplayConfig) { cfg.Engine.Workers = workers })
		if !errors.Is(err, ErrCorruptCapture) || !strings.Contains(err.Error(), "record 19") {
			t.Fatalf("workers %d: err %v", workers, err)
		}
		if rep.Received != 18 || rep.Records != 18 || !rep.Balanced {
			t.Fatalf("workers %d: report %+v", workers, rep)
		}
		if n, _ := sentPackets(readOutputs(t, out)); n != 18 {
			t.Fatalf("workers %d: wrote %d packets", workers, n)
		}
		data, err := os.ReadFile(filepath.Join(out, CountersFile))
		if err != nil || !bytes.Contains(data, []byte(`"received": 18`)) {
			t.Fatalf("workers %d: counters.json: %v\n%s", workers, err, data)
		}
	}
}

// TestRealworldInterrupt: a replay looping forever is stopped through its
// context; it drains, reports what it did (balanced), and leaves
// well-formed outputs and counters.json.
//
// The stop comes from the first progress report (the engine's I/O loop
// calls it after about 200 ms of running), not from a timer started
// before the replay's setup: on a slow machine that timer could fire
// before any report, and the report's fraction was then never seen.
func TestRealworldInterrupt(t *testing.T) {
	for _, c := range []struct {
		workers int
		preload bool
	}{{0, false}, {2, false}, {1, true}} {
		ctx, cancel := context.WithCancel(context.Background())
		var last ReplayProgress
		reports := 0
		// Only a bound: a replay that never reports progress fails below
		// instead of looping until the test binary's timeout.
		watchdog := time.AfterFunc(2*time.Minute, cancel)
		rep, out, err := replayReal(t, "../testdata/captures/mixed.pcap", func(cfg *ReplayConfig) {
			cfg.Context = ctx
			cfg.Replay.Loops = -1
			cfg.Replay.Preload = c.preload
			cfg.Engine.Workers = c.workers
			cfg.Engine.TrackFrames = false
			// Called on the engine's I/O loop; Replay returns after it.
			cfg.Progress = func(p ReplayProgress) {
				last = p
				reports++
				cancel()
			}
		})
		watchdog.Stop()
		cancel()
		if reports == 0 {
			t.Fatalf("%+v: no progress report before the watchdog stopped the replay", c)
		}
		if !errors.Is(err, ErrInterrupted) {
			t.Fatalf("%+v: err %v", c, err)
		}
		if rep.Received == 0 || !rep.Balanced || rep.Received != rep.Transmitted+rep.Dropped+rep.Passed {
			t.Fatalf("%+v: report %s", c, rep.AccountingLine())
		}
		if last.Fraction != -1 {
			t.Errorf("%+v: looping forever reported fraction %v", c, last.Fraction)
		}
		outs := readOutputs(t, out)
		n, _ := sentPackets(outs)
		if uint64(n) != rep.Transmitted+rep.Passed {
			t.Fatalf("%+v: wrote %d packets, report says %d", c, n, rep.Transmitted+rep.Passed)
		}
		if _, err := os.Stat(filepath.Join(out, CountersFile)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReplayProgressFraction: a streamed and a preloaded replay of known
// size report a fraction that grows with every batch, is about a half after
// the first of two passes, and ends at 1.
func TestReplayProgressFraction(t *testing.T) {
	data, err := os.ReadFile("../testdata/captures/bench-64.pcap")
	if err != nil {
		t.Fatal(err)
	}
	for _, preload := range []bool{false, true} {
		a := newArena(t, 8192, 2048, 0)
		o := DefaultReplayOptions()
		o.Loops, o.Preload = 2, preload
		p, err := NewReplay("bench", bytes.NewReader(data), a, o)
		if err != nil {
			t.Fatal(err)
		}
		b := rings.NewBatch(256, a)
		prev, received, half := 0.0, 0, -1.0
		for {
			b.Clear()
			n, err := p.Receive(b)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			received += n
			f := p.fraction()
			if f < prev || f > 1 {
				t.Fatalf("preload=%v: fraction %v after %v", preload, f, prev)
			}
			if received == 4096 {
				half = f
			}
			prev = f
			p.Recycle(b.Descs)
		}
		if p.fraction() != 1 || half < 0.45 || half > 0.55 {
			t.Fatalf("preload=%v: fraction %v at the end, %v after one pass", preload, p.fraction(), half)
		}
		p.Close()
	}
}

// TestRealworldEncapsulations: PPPoE, MPLS, GRE/PPP and IP in IP replay
// through the default pipeline with nothing malformed and their inner
// protocols counted.
func TestRealworldEncapsulations(t *testing.T) {
	rep, _, err := replayReal(t, "../testdata/captures/encap.pcap", nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Received != 28 || rep.Dropped != 0 || !rep.Balanced {
		t.Fatalf("report %+v", rep)
	}
	got := map[string]uint64{}
	for _, s := range rep.Stages {
		if s.Kind == "count" {
			for _, g := range s.Counters {
				for _, kv := range g.Values {
					got[g.Text(kv)] = kv.Value
				}
			}
		}
	}
	// 16 PPPoE and MPLS packets carry TCP or UDP directly; the 12 tunnelled
	// ones are counted by their outer protocol: GRE (6) and IP in IP (6).
	if got["proto=tcp"]+got["proto=udp"] != 16 || got["proto=gre"] != 6 {
		t.Fatalf("counters %v", got)
	}
}
