package gpu

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/internal/benchshape"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/workers"

	"github.com/warpflow/warpflow/internal/testwait"
)

// The end-to-end benchmark (BENCHMARKS.md, "GPU backend"). It is a test,
// not a testing.B benchmark, because it prints one table of CPU and CUDA
// rows measured in one run; it runs only with WARPFLOW_GPU_BENCH=1 and
// writes every repeat as JSON to $WARPFLOW_BENCH_OUT when set:
//
//	CGO_ENABLED=0 go test -c -o gpu.test ./gpu
//	cd gpu && WARPFLOW_GPU_BENCH=1 WARPFLOW_BENCH_OUT=dir ../gpu.test -test.run TestGPUBench -test.v
//
// WARPFLOW_GPU_BENCH_EMULATE=1 runs it against the emulation, small (a
// smoke test of the benchmark itself; its figures mean nothing).

// shapeYAML is the bench's default shape (internal/benchshape: parse, a
// rules-long filter the traffic misses, SNAT and MAC swap, count by
// protocol) with a balance over two tx ports instead of the one tx.
// (The figures in BENCHMARKS.md at 100,000 rules were taken when
// benchshape's IPv6 sources past 65,535 rules were rewritten here into
// /64s under 2001:db8:N:; benchshape now writes valid /48s itself.)
func shapeYAML(rules, batch int) string {
	s := benchshape.Default("shape", rules)
	s = strings.Replace(s, "stages:\n", fmt.Sprintf("settings: {batch_size: %d}\nstages:\n", batch), 1)
	return strings.Replace(s, "  - {name: out, type: tx, port: sink}\n",
		"  - {name: spread, type: balance, to: [out, out1]}\n  - {name: out, type: tx, port: sink}\n  - {name: out1, type: tx, port: sink1}\n", 1)
}

// procCPU returns the process's user+system CPU time from /proc/self/stat
// (fields 14 and 15, in clock ticks of 1/100 s).
func procCPU(t *testing.T) time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from 3 on
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// benchRow is one configuration of the benchmark.
type benchRow struct {
	Name    string `json:"name"`
	Backend string `json:"backend"`
	Rules   int    `json:"rules"`
	Batch   int    `json:"batch"`
	Engines int    `json:"engines"` // I/O loops
	Workers int    `json:"workers"` // CPU workers per engine (fallback workers for cuda)
}

// benchRun is one measurement of a row.
type benchRun struct {
	Mpps      float64 `json:"mpps"`
	HostCores float64 `json:"host_cores"`
	Packets   uint64  `json:"packets"`
	Fallbacks uint64  `json:"fallbacks,omitempty"`
	InFlight  float64 `json:"slots_in_flight,omitempty"` // average at submit, per engine
	Seconds   float64 `json:"seconds"`
}

// benchCapturePackets is bench-64.pcap's packet count: Loops counts passes
// of the capture's own packets, replicated or not.
const benchCapturePackets = 4096

// benchFrames is an engine's arena: the preloaded frames, the frames of a
// ring's slots and some more.
func benchFrames(batch int) int { return 1<<16 + 2*64*batch + 4096 }

// benchEngines runs r.Engines engines side by side, each replaying the
// 64-byte bench capture preloaded (replicated to 65 536 frames) for
// packets packets through g, on CPU workers or through the CUDA executor
// (mk); it returns the rate over one wall clock from the common start to
// the last engine's end, and the host cores the process used meanwhile.
func benchEngines(t *testing.T, g *pipelines.Graph, r benchRow, packets int, arenas *arenaPool, mk func(dataplane.ExecutorConfig) (workers.Executor, error)) benchRun {
	const frames = 1 << 16
	type unit struct {
		eng *dataplane.Engine
		in  *dataplane.ReplayPort
	}
	var units []unit
	var execs []*Executor
	var mu sync.Mutex
	for e := range r.Engines {
		arena := arenas.get(t, e, benchFrames(r.Batch))
		in, err := dataplane.OpenReplay("../testdata/captures/bench-64.pcap", arena, dataplane.ReplayOptions{Name: "bench", Preload: true, MinFrames: frames, Loops: (packets + benchCapturePackets - 1) / benchCapturePackets})
		if err != nil {
			t.Fatal(err)
		}
		outs := dataplane.Outputs{Ports: map[string]dataplane.Port{}}
		for _, p := range g.Ports() {
			outs.Ports[p] = dataplane.NewNullPort(p)
		}
		eo := dataplane.DefaultOptions()
		eo.Timing = false
		eo.Workers = r.Workers
		eo.BatchSize = r.Batch
		if mk != nil {
			eo.NewExecutor = func(c dataplane.ExecutorConfig) (workers.Executor, error) {
				ex, err := mk(c)
				if e, ok := ex.(*Executor); ok {
					mu.Lock()
					execs = append(execs, e)
					mu.Unlock()
				}
				return ex, err
			}
		}
		eng, err := dataplane.NewEngine(g, arena, in, outs, eo)
		if err != nil {
			t.Fatal(err)
		}
		units = append(units, unit{eng, in})
	}
	runtime.GC()
	var wg sync.WaitGroup
	errs := make([]error, len(units))
	c0, t0 := procCPU(t), time.Now()
	for i, u := range units {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = u.eng.Run(nil)
		}()
	}
	// Bounded by the packet count at a floor rate of 100 kpps, far below
	// any engine's; the waiting goroutine and its timer cost nothing
	// against a run of seconds.
	testwait.Group(t, &wg, fmt.Sprintf("%d engines to replay %d packets", len(units), packets), testwait.Deadline+time.Duration(packets)*10*time.Microsecond)
	wall := time.Since(t0)
	cores := float64(procCPU(t)-c0) / float64(wall)
	var run benchRun
	for i, u := range units {
		if errs[i] != nil {
			t.Fatalf("%s engine %d: %v", r.Name, i, errs[i])
		}
		rep := u.eng.Report()
		if !rep.Balanced || rep.Received == 0 {
			t.Fatalf("%s engine %d: %s", r.Name, i, rep.AccountingLine())
		}
		if rep.Received < uint64(packets) {
			t.Fatalf("%s engine %d: %d packets received, %d asked for", r.Name, i, rep.Received, packets)
		}
		run.Packets += rep.Received
		u.in.Close()
	}
	var subs, sum uint64
	for _, e := range execs {
		st := e.Stats()
		run.Fallbacks += st.Fallbacks
		subs += st.Submits
		sum += st.InFlightSum
	}
	if subs > 0 {
		run.InFlight = float64(sum) / float64(subs)
	}
	run.Seconds = wall.Seconds()
	run.Mpps = float64(run.Packets) / wall.Seconds() / 1e6
	run.HostCores = cores
	return run
}

// arenaPool keeps the engines' frame arenas across measurements: the
// kernel keeps frame memory registered until it closes, so the same
// arenas are used again rather than new ones registered each time.
type arenaPool struct {
	m      map[[2]int]*rings.Arena
	frames []rings.Desc // benchKernel's, written once
}

func (p *arenaPool) get(t *testing.T, engine, frames int) *rings.Arena {
	if p.m == nil {
		p.m = map[[2]int]*rings.Arena{}
	}
	key := [2]int{engine, frames}
	if a := p.m[key]; a != nil {
		return a
	}
	a, err := rings.NewArena(rings.ArenaOptions{Frames: frames, FrameSize: 2048, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	p.m[key] = a
	return a
}

// benchKernel keeps one ring of k full from one locked goroutine, with the
// descriptors of 64-byte frames pre-written in an arena, for d: the
// kernel's rate without an engine (no port, no completion work), to tell
// what the kernel can do from what the I/O loop around it does.
func benchKernel(t *testing.T, k *Kernel, g *pipelines.Graph, batch int, arenas *arenaPool, d time.Duration) benchRun {
	dp, err := pipelines.CompileDevice(g)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := k.Load(dp)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Unload(prog)
	a := arenas.get(t, 99, 1<<16)
	if arenas.frames == nil {
		arenas.frames = writeFrames(a, a.Frames(), newRand())
	}
	descs := arenas.frames
	at, err := k.attach(a.Mem(), a.FrameSize())
	if err != nil {
		t.Fatal(err)
	}
	defer at.detach()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var pkts uint64
	off := 0
	c0, t0 := procCPU(t), time.Now()
	deadline := t0.Add(d)
	for i := 0; ; i++ {
		for {
			seq, ok := at.r.acquire()
			if !ok {
				break
			}
			if off+batch > len(descs) {
				off = 0
			}
			copy(at.r.descs(seq), descs[off:off+batch])
			off += batch
			at.submit(batch, prog, 0)
		}
		for {
			if _, ok := at.r.completed(); !ok {
				break
			}
			pkts += uint64(batch)
			at.r.release()
		}
		if i&255 == 0 && time.Now().After(deadline) {
			break
		}
	}
	wall := time.Since(t0)
	cores := float64(procCPU(t)-c0) / float64(wall)
	for dl := time.Now().Add(5 * time.Second); at.r.inFlight() > 0; {
		if _, ok := at.r.completed(); ok {
			at.r.release()
		} else if time.Now().After(dl) {
			t.Fatal("kernel ring did not drain in 5s")
		}
	}
	return benchRun{Mpps: float64(pkts) / wall.Seconds() / 1e6, HostCores: cores, Packets: pkts, Seconds: wall.Seconds()}
}

// benchLatency measures the batch-1 round trip through the kernel alone:
// the doorbell store to the host seeing done, one slot in flight.
func benchLatency(t *testing.T, o Options, g *pipelines.Graph, iters int) (p50, p99 float64) {
	o.Rings, o.Slots, o.SlotCap, o.PollNs = 1, 2, 1, 0
	k, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	dp, err := pipelines.CompileDevice(g)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := k.Load(dp)
	if err != nil {
		t.Fatal(err)
	}
	arena, err := rings.NewArena(rings.ArenaOptions{Frames: 4096, FrameSize: 2048, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	descs := writeFrames(arena, 4096, newRand())
	at, err := k.attach(arena.Mem(), 2048)
	if err != nil {
		t.Fatal(err)
	}
	defer at.detach()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	lat := make([]time.Duration, 0, iters)
	for it := range iters + iters/10 {
		seq, ok := at.r.acquire()
		if !ok {
			t.Fatal("no free slot")
		}
		at.r.descs(seq)[0] = descs[it%len(descs)]
		t0 := time.Now()
		at.submit(1, prog, 0)
		deadline := t0.Add(5 * time.Second)
		for !at.r.done(seq) {
			if time.Now().After(deadline) {
				t.Fatalf("batch-1 slot not done in 5s; kernel words %#x", k.debugWords())
			}
		}
		dt := time.Since(t0)
		at.r.completed()
		at.r.release()
		if it >= iters/10 {
			lat = append(lat, dt)
		}
	}
	slices.Sort(lat)
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	return us(lat[len(lat)/2]), us(lat[len(lat)*99/100])
}

func TestGPUBench(t *testing.T) {
	if os.Getenv("WARPFLOW_GPU_BENCH") != "1" {
		t.Skip("set WARPFLOW_GPU_BENCH=1 to run the GPU benchmark")
	}
	emulate := os.Getenv("WARPFLOW_GPU_BENCH_EMULATE") == "1"
	var o Options
	if emulate {
		o = emulated(t)
	} else {
		o = onDevice(t)
	}
	repeats, packets := 5, 40_000_000
	if v, err := strconv.Atoi(os.Getenv("WARPFLOW_GPU_BENCH_REPEATS")); err == nil {
		repeats = v
	}
	if v, err := strconv.Atoi(os.Getenv("WARPFLOW_GPU_BENCH_MPACKETS")); err == nil {
		packets = v * 1_000_000
	}
	cpus := runtime.NumCPU()
	rows := []benchRow{
		{Name: "kernel-10k", Backend: "kernel", Rules: 10000, Batch: 256, Engines: 0, Workers: 0},
		{Name: "cpu-16w-10k", Backend: "cpu", Rules: 10000, Batch: 256, Engines: 1, Workers: 16},
		{Name: "cuda-1io-10k", Backend: "cuda", Rules: 10000, Batch: 256, Engines: 1, Workers: 1},
		{Name: "cuda-2io-10k", Backend: "cuda", Rules: 10000, Batch: 256, Engines: 2, Workers: 1},
		{Name: "cuda-2io-10k-b1024", Backend: "cuda", Rules: 10000, Batch: 1024, Engines: 2, Workers: 1},
		{Name: "cpu-16w-100k", Backend: "cpu", Rules: 100000, Batch: 256, Engines: 1, Workers: 16},
		{Name: "cuda-2io-100k", Backend: "cuda", Rules: 100000, Batch: 256, Engines: 2, Workers: 1},
	}
	if emulate {
		repeats, packets = 1, 200_000
		rows = []benchRow{
			{Name: "cpu-2w-1k", Backend: "cpu", Rules: 1000, Batch: 256, Engines: 1, Workers: 2},
			{Name: "emu-2io-1k", Backend: "cuda", Rules: 1000, Batch: 256, Engines: 2, Workers: 1},
			{Name: "emu-kernel-1k", Backend: "kernel", Rules: 1000, Batch: 256},
		}
	}
	if v := os.Getenv("WARPFLOW_GPU_BENCH_ROWS"); v != "" {
		keep := strings.Split(v, ",")
		rows = slices.DeleteFunc(rows, func(r benchRow) bool { return !slices.Contains(keep, r.Name) })
	}
	// The kernel stays open for the whole run: each engine's executor is
	// one of its rings.
	k, err := acquireKernel(o)
	if err != nil {
		t.Fatal(err)
	}
	held := true
	defer func() {
		if held {
			releaseKernel(k)
		}
	}()
	desc := k.Describe()
	t.Logf("device: %s; host: %d CPUs, GOMAXPROCS %d", desc, cpus, runtime.GOMAXPROCS(0))
	graphs := map[[2]int]*pipelines.Graph{}
	for _, r := range rows {
		key := [2]int{r.Rules, r.Batch}
		if graphs[key] != nil {
			continue
		}
		t0 := time.Now()
		g, err := pipelines.Load("shape.yaml", []byte(shapeYAML(r.Rules, r.Batch)))
		if err != nil {
			t.Fatal(err)
		}
		graphs[key] = g
		t.Logf("%d rules, batch %d: compiled in %.2fs", r.Rules, r.Batch, time.Since(t0).Seconds())
	}
	mk := NewExecutor(ExecutorOptions{Kernel: o})
	var arenas arenaPool
	// Every arena the rows use, registered with the kernel before it is
	// launched (at the first submit): registering hundreds of MiB while a
	// persistent kernel runs is what this run does not try.
	for _, r := range rows {
		for e := range r.Engines {
			arenas.get(t, e, benchFrames(r.Batch))
		}
		if r.Backend == "kernel" {
			arenas.get(t, 99, 1<<16)
		}
	}
	for _, a := range arenas.m {
		at, err := k.attach(a.Mem(), a.FrameSize())
		if err != nil {
			t.Fatal(err)
		}
		at.detach()
	}
	runs := make([][]benchRun, len(rows))
	for rep := range repeats { // round-robin over the rows
		for i, r := range rows {
			if r.Backend == "kernel" {
				run := benchKernel(t, k, graphs[[2]int{r.Rules, r.Batch}], r.Batch, &arenas, time.Second/2)
				runs[i] = append(runs[i], run)
				t.Logf("repeat %d %-20s %7.1f Mpps on %5.2f host cores (%d packets)", rep, r.Name, run.Mpps, run.HostCores, run.Packets)
				continue
			}
			var m func(dataplane.ExecutorConfig) (workers.Executor, error)
			if r.Backend == "cuda" {
				m = mk
			}
			run := benchEngines(t, graphs[[2]int{r.Rules, r.Batch}], r, packets, &arenas, m)
			runs[i] = append(runs[i], run)
			t.Logf("repeat %d %-20s %7.1f Mpps on %5.2f host cores (%d packets, %d handed back, %.1f slots in flight, %.2fs)", rep, r.Name, run.Mpps, run.HostCores, run.Packets, run.Fallbacks, run.InFlight, run.Seconds)
		}
	}
	// The latency on a kernel of its own, once the shared one is gone (two
	// persistent kernels would compete for the multiprocessors).
	held = false
	if err := releaseKernel(k); err != nil {
		t.Fatal(err)
	}
	t.Logf("kernel: %+v", k.Stats())
	lat50, lat99 := 0.0, 0.0
	if !emulate {
		lat50, lat99 = benchLatency(t, o, graphs[[2]int{rows[0].Rules, rows[0].Batch}], 20000)
	}
	type summary struct {
		benchRow
		Median, Min, Max float64
		Cores            float64
		Runs             []benchRun `json:"runs"`
	}
	var sums []summary
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-20s %7s %6s %7s %7s %22s %10s\n", "row", "rules", "batch", "engines", "workers", "Mpps median (range)", "host cores")
	for i, r := range rows {
		m := slices.Clone(runs[i])
		slices.SortFunc(m, func(a, b benchRun) int { return int(1e6 * (a.Mpps - b.Mpps)) })
		med := m[len(m)/2]
		s := summary{benchRow: r, Median: med.Mpps, Min: m[0].Mpps, Max: m[len(m)-1].Mpps, Cores: med.HostCores, Runs: runs[i]}
		sums = append(sums, s)
		fmt.Fprintf(&sb, "%-20s %7d %6d %7d %7d %8.1f (%5.1f - %5.1f) %10.2f\n", r.Name, r.Rules, r.Batch, r.Engines, r.Workers, s.Median, s.Min, s.Max, s.Cores)
	}
	if !emulate {
		fmt.Fprintf(&sb, "batch-1 round trip through the kernel (%d rules): p50 %.2f us, p99 %.2f us\n", rows[0].Rules, lat50, lat99)
	}
	t.Log("\n" + sb.String())
	if dir := os.Getenv("WARPFLOW_BENCH_OUT"); dir != "" {
		js, _ := json.MarshalIndent(map[string]any{
			"device": desc, "cpus": cpus, "packets_per_engine": packets, "repeats": repeats,
			"rows": sums, "latency_p50_us": lat50, "latency_p99_us": lat99,
		}, "", "  ")
		if err := os.WriteFile(filepath.Join(dir, "gpubench.json"), js, 0o644); err != nil {
			t.Error(err)
		}
	}
}
