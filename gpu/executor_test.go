package gpu

import (
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/workers"
)

// lateParse is a pipeline the device cannot run: its parse stage is not
// the first, so a packet could be handed back after a stage rewrote it.
const lateParse = `name: late
stages:
  - {name: mac, type: rewrite, swap_macs: true}
  - {name: parse, type: parse}
  - {name: out, type: tx, port: out0}
`

// TestUnsupportedRefused: by default a pipeline the device cannot run is
// refused when the engine starts, naming the stage and why.
func TestUnsupportedRefused(t *testing.T) {
	o := emulated(t)
	g, err := pipelines.Load("late.yaml", []byte(lateParse))
	if err != nil {
		t.Fatal(err)
	}
	_, err = replayOnce(g, "../testdata/captures/mixed.pcap", "", NewExecutor(ExecutorOptions{Kernel: o}))
	if !errors.Is(err, pipelines.ErrNotOnDevice) || !strings.Contains(err.Error(), `stage "parse"`) {
		t.Fatalf("got %v, want ErrNotOnDevice naming stage \"parse\"", err)
	}
}

// TestUnsupportedOnCPU: with Unsupported "cpu" the same pipeline runs on
// CPU workers, with one notice, and gives the CPU path's report.
func TestUnsupportedOnCPU(t *testing.T) {
	o := emulated(t)
	g, err := pipelines.Load("late.yaml", []byte(lateParse))
	if err != nil {
		t.Fatal(err)
	}
	var notices []string
	mk := NewExecutor(ExecutorOptions{Kernel: o, Unsupported: UnsupportedCPU, Notice: func(s string) { notices = append(notices, s) }})
	got, err := replayOnce(g, "../testdata/captures/mixed.pcap", "", mk)
	if err != nil {
		t.Fatal(err)
	}
	want, err := replayOnce(g, "../testdata/captures/mixed.pcap", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("report on the CPU fallback differs:\n got %+v\nwant %+v", got, want)
	}
	if len(notices) != 1 || !strings.Contains(notices[0], "runs on the CPU") || strings.Contains(notices[0], "\n") {
		t.Fatalf("notices %q: want one line saying the pipeline runs on the CPU", notices)
	}
	if _, err := replayOnce(g, "../testdata/captures/mixed.pcap", "", NewExecutor(ExecutorOptions{Kernel: o, Unsupported: "maybe"})); err == nil {
		t.Fatal("an unknown Unsupported value was accepted")
	}
}

// TestTapSeesEveryPacket: while a tap is set on the pipeline, the executor
// hands every packet to the CPU runners, so the tap sees them all (it
// would see none of those the kernel ran).
func TestTapSeesEveryPacket(t *testing.T) {
	o := emulated(t)
	g, err := pipelines.LoadFile("../testdata/pipelines/valid/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	arena, in := openMixed(t)
	outs := dataplane.Outputs{Ports: map[string]dataplane.Port{"out0": dataplane.NewNullPort("out0")}}
	eo := dataplane.DefaultOptions()
	var ex *Executor
	eo.NewExecutor = func(c dataplane.ExecutorConfig) (workers.Executor, error) {
		w, err := NewExecutor(ExecutorOptions{Kernel: o})(c)
		if err == nil {
			ex = w.(*Executor)
		}
		return w, err
	}
	eng, err := dataplane.NewEngine(g, arena, in, outs, eo)
	if err != nil {
		t.Fatal(err)
	}
	tap, err := g.NewTap("parse", "", 1<<20, 256, 1<<22)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.SetTap(g, tap); err != nil {
		t.Fatal(err)
	}
	if err := eng.Run(nil); err != nil {
		t.Fatal(err)
	}
	rep := eng.Report()
	st := ex.Stats()
	if rep.Received == 0 || tap.Taken() != rep.Received || st.Fallbacks != st.Packets {
		t.Fatalf("tap took %d of %d packets; the executor handed %d of %d to the CPU", tap.Taken(), rep.Received, st.Fallbacks, st.Packets)
	}
}

// openMixed opens mixed.pcap for one pass over a fresh arena.
func openMixed(t *testing.T) (*rings.Arena, *dataplane.ReplayPort) {
	t.Helper()
	arena, err := rings.NewArena(rings.ArenaOptions{Frames: 4096, FrameSize: 2048, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	in, err := dataplane.OpenReplay("../testdata/captures/mixed.pcap", arena, dataplane.DefaultReplayOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return arena, in
}

// TestUnavailableMessage: without a GPU, asking for the backend gives one
// line, "cuda backend unavailable: <reason>".
func TestUnavailableMessage(t *testing.T) {
	err := Available()
	if err == nil {
		t.Skip("a CUDA device is present")
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("%v does not wrap ErrUnavailable", err)
	}
	_, oerr := Open(DefaultOptions())
	for _, e := range []error{err, oerr} {
		msg := e.Error()
		if !strings.HasPrefix(msg, "cuda backend unavailable: ") || len(msg) < 30 || strings.Contains(msg, "\n") {
			t.Fatalf("message %q", msg)
		}
	}
}

// TestAllocsDoNotGrowWithPackets: through the CUDA executor (emulated)
// the engine's allocations are the same for 4 and 16 passes over the
// capture: nothing on the data path allocates per packet or per batch.
func TestAllocsDoNotGrowWithPackets(t *testing.T) {
	o := emulated(t)
	g, err := pipelines.LoadFile("../testdata/pipelines/valid/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	mallocs := func(loops int) (uint64, uint64) {
		eo := dataplane.DefaultOptions()
		eo.Timing = false
		eo.NewExecutor = NewExecutor(ExecutorOptions{Kernel: o})
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		before := ms.Mallocs
		rep, err := dataplane.Replay(dataplane.ReplayConfig{Capture: "../testdata/captures/bench-64.pcap", Graph: g, Engine: eo,
			Replay: dataplane.ReplayOptions{Name: "bench", Preload: true, Loops: loops}})
		if err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&ms)
		return ms.Mallocs - before, rep.Received
	}
	mallocs(1) // the host build's first start, the runtime's first growth
	a4, p4 := mallocs(4)
	a16, p16 := mallocs(16)
	t.Logf("4 passes: %d packets, %d allocations; 16 passes: %d packets, %d allocations", p4, a4, p16, a16)
	if p16 != 4*p4 || a16 > a4+a4/4+64 {
		t.Fatalf("allocations grow with packets: %d for %d packets, %d for %d", a4, p4, a16, p16)
	}
}
