package gpu

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// The H200 benchmark (BENCHMARKS.md, "GPU backend"). It is a test, not a
// testing.B benchmark, because it prints one table comparing backends in
// one run; it runs only when WARPFLOW_GPU_BENCH=1 and writes its figures
// as JSON to $WARPFLOW_BENCH_OUT when set:
//
//	CGO_ENABLED=0 go test -c -o gpu.test ./gpu
//	WARPFLOW_GPU_BENCH=1 ./gpu.test -test.run TestGPUBench -test.v
//
// WARPFLOW_GPU_BENCH_EMULATE=1 runs it against the emulation (a smoke test
// of the benchmark itself; its figures mean nothing).

// benchRules writes a pipeline of n ACL rules shaped like an edge ACL:
// host and /24 sources with service ports, destination /24s, all actions
// terminals. It returns the YAML and the rules' source addresses.
func benchRules(n int, rnd *rand.Rand) (string, []uint32) {
	svc := []int{22, 23, 25, 53, 80, 110, 143, 161, 389, 443, 445, 1433, 3306, 3389, 5432, 6379, 8080, 8443, 11211}
	var sb strings.Builder
	sb.WriteString("name: bench\nsettings: {batch_size: 256}\nstages:\n  - {name: parse, type: parse}\n  - name: acl\n    type: filter\n    default: accept\n    rules:\n")
	var srcs []uint32
	for i := 0; i < n; i++ {
		a := 10<<24 | uint32(rnd.IntN(1<<24))
		ip := func(x uint32) string { return fmt.Sprintf("%d.%d.%d.%d", x>>24, x>>16&255, x>>8&255, x&255) }
		switch k := rnd.IntN(10); {
		case k < 7:
			srcs = append(srcs, a)
			fmt.Fprintf(&sb, "      - {src: %s, proto: tcp, dst_port: %d, action: \"drop:acl\"}\n", ip(a), svc[rnd.IntN(len(svc))])
		case k < 9:
			srcs = append(srcs, a&^255|uint32(rnd.IntN(256)))
			lo := 1 + rnd.IntN(60000)
			fmt.Fprintf(&sb, "      - {src: %s/24, dst_port: %d-%d, action: web}\n", ip(a&^255), lo, lo+rnd.IntN(2000))
		default:
			fmt.Fprintf(&sb, "      - {dst: %s/24, proto: udp, action: \"drop:udp\"}\n", ip(a&^255))
		}
	}
	sb.WriteString("  - {name: web, type: tx, port: web0}\n")
	return sb.String(), srcs
}

// benchFrames writes count 64-byte IPv4 TCP/UDP frames, one per frame of
// a, half from rule sources, and returns their descriptors.
func benchFrames(a *rings.Arena, count int, srcs []uint32, rnd *rand.Rand) []rings.Desc {
	svc := []uint16{22, 23, 53, 80, 443, 3306, 8080}
	descs := make([]rings.Desc, 0, count)
	for range count {
		addr, ok := a.Alloc()
		if !ok {
			break
		}
		p := a.Frame(addr)[addr&uint64(a.FrameSize()-1):]
		p = p[:64]
		clear(p)
		binary.BigEndian.PutUint16(p[12:], 0x0800)
		h := p[14:]
		h[0], h[8] = 0x45, 64
		src := 10<<24 | uint32(rnd.IntN(1<<24))
		if len(srcs) > 0 && rnd.IntN(2) == 0 {
			src = srcs[rnd.IntN(len(srcs))]
		}
		binary.BigEndian.PutUint32(h[12:], src)
		binary.BigEndian.PutUint32(h[16:], 10<<24|uint32(rnd.IntN(1<<24)))
		l := h[20:]
		binary.BigEndian.PutUint16(l[0:], uint16(1024+rnd.IntN(60000)))
		dport := uint16(1 + rnd.IntN(65535))
		if rnd.IntN(2) == 0 {
			dport = svc[rnd.IntN(len(svc))]
		}
		binary.BigEndian.PutUint16(l[2:], dport)
		if rnd.IntN(4) == 0 {
			h[9] = 17
			binary.BigEndian.PutUint16(h[2:], 28)
			binary.BigEndian.PutUint16(l[4:], 8)
		} else {
			h[9] = 6
			binary.BigEndian.PutUint16(h[2:], 40)
			l[12], l[13] = 5<<4, 0x02
		}
		descs = append(descs, rings.Desc{Addr: addr, Len: 64})
	}
	return descs
}

// cpuTime returns the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchResult is one row of the benchmark's JSON.
type benchResult struct {
	Backend   string  `json:"backend"`
	Rules     int     `json:"rules"`
	Batch     int     `json:"batch"`
	Mpps      float64 `json:"mpps,omitempty"`
	HostCores float64 `json:"host_cores,omitempty"`
	MedianUs  float64 `json:"median_us,omitempty"`
	P99Us     float64 `json:"p99_us,omitempty"`
	Note      string  `json:"note,omitempty"`
}

// benchCPU runs workers goroutines, each with its own runner of g on
// 256-packet batches over descs, for d, and returns Mpps and busy cores.
func benchCPU(g *pipelines.Graph, a *rings.Arena, descs []rings.Desc, workers int, d time.Duration) (float64, float64) {
	var total atomic.Uint64
	var stop atomic.Bool
	var wg sync.WaitGroup
	c0, t0 := cpuTime(), time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			r := g.NewRunner(pipelines.RunnerOptions{})
			b := rings.NewBatch(256, a)
			n := uint64(0)
			for off := (w * 4096) % len(descs); !stop.Load(); off = (off + 256) % (len(descs) - 256) {
				b.Clear()
				for _, dd := range descs[off : off+256] {
					b.Append(dd, 0, 0)
				}
				r.Process(b)
				n += 256
			}
			total.Add(n)
		}()
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	wall := time.Since(t0)
	return float64(total.Load()) / wall.Seconds() / 1e6, float64(cpuTime()-c0) / float64(wall)
}

// benchGPU keeps c's ring full with batch-packet slots over descs from one
// locked goroutine (producer and consumer). It first runs, untimed, two
// laps of the ring checking results against the CPU lookup over the same
// blob (every packet of the first 64 slots, the first 8 of the others:
// a host lookup at 100 000 rules runs at about 1.6 Mpps, so checking all
// of them would be the benchmark), then measures d without checks.
func benchGPU(t *testing.T, c *Classifier, prog *Program, descs []rings.Desc, batch int, d time.Duration) (mpps, cores float64, mismatches int) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	arena := c.Arena()
	var k pipelines.FilterKey
	verify := func(s *Slot, n int) {
		for i := range min(n, s.count) {
			dd := s.Descs[i]
			want := Fallback
			have := haveBytes(dd.Addr, uint64(c.o.FrameSize-1), uint64(len(arena)))
			if parseCommon(arena[dd.Addr:dd.Addr+uint64(have)], int(dd.Len), have, &k) {
				want = uint32(prog.Blob.Lookup(&k))
			}
			if s.Results[i] != want {
				mismatches++
			}
		}
	}
	off := 0
	// run keeps the ring full until done says stop; it returns the packets
	// completed and those handed back.
	run := func(check bool, done func(slots int, i int) bool) (pkts, fallbacks uint64) {
		slots := 0
		for i := 0; ; i++ {
			for {
				s, ok := c.Acquire()
				if !ok {
					break
				}
				if off+batch > len(descs) {
					off = 0
				}
				copy(s.Descs, descs[off:off+batch])
				off += batch
				c.Submit(batch, prog)
			}
			for {
				s, ok := c.Completed()
				if !ok {
					break
				}
				if check {
					n := 8
					if slots < 64 {
						n = batch
					}
					verify(s, n)
				}
				for _, r := range s.Results[:s.count] {
					if r == Fallback {
						fallbacks++
					}
				}
				pkts += uint64(s.count)
				slots++
				c.Release()
			}
			// The clock every pass (a pass can turn the whole ring over:
			// 4 M packets at batch 4096), the driver now and then.
			if done(slots, i) {
				return pkts, fallbacks
			}
			if i&1023 == 0 {
				if err := c.Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	warm := time.Now().Add(30 * time.Second)
	_, fb := run(true, func(slots, _ int) bool {
		if time.Now().After(warm) {
			t.Fatalf("batch %d: %d slots in 30s", batch, slots)
		}
		return slots >= 2*c.o.Slots
	})
	c0, t0 := cpuTime(), time.Now()
	deadline := t0.Add(d)
	pkts, fallbacks := run(false, func(int, int) bool { return time.Now().After(deadline) })
	wall := time.Since(t0)
	cores = float64(cpuTime()-c0) / float64(wall)
	// Drain what is in flight so the next run starts empty.
	for c.InFlight() > 0 {
		if _, ok := c.Completed(); ok {
			c.Release()
		}
	}
	if fallbacks+fb != 0 {
		t.Errorf("%d packets handed back in a benchmark of plain TCP/UDP", fallbacks+fb)
	}
	return float64(pkts) / wall.Seconds() / 1e6, cores, mismatches
}

// benchLatency measures slot ready -> verdict seen by the host, one slot
// in flight, iters times.
func benchLatency(t *testing.T, c *Classifier, prog *Program, descs []rings.Desc, batch, iters int) (median, p99 float64) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	lat := make([]time.Duration, 0, iters)
	for it := 0; it < iters+iters/10; it++ {
		s := waitAcquire(t, c)
		off := (it * batch) % (len(descs) - batch)
		copy(s.Descs, descs[off:off+batch])
		t0 := time.Now()
		c.Submit(batch, prog)
		for {
			if _, ok := c.Completed(); ok {
				break
			}
		}
		dt := time.Since(t0)
		c.Release()
		if it >= iters/10 { // warm-up first
			lat = append(lat, dt)
		}
	}
	slices.Sort(lat)
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	return us(lat[len(lat)/2]), us(lat[len(lat)*99/100])
}

func TestGPUBench(t *testing.T) {
	if v := os.Getenv("WARPFLOW_GPU_BENCH"); v != "1" && v != "latency" {
		t.Skip("set WARPFLOW_GPU_BENCH=1 to run the GPU benchmark")
	}
	emulate := os.Getenv("WARPFLOW_GPU_BENCH_EMULATE") == "1"
	if !emulate {
		if err := Available(); err != nil {
			t.Skip(err)
		}
	}
	d := time.Second
	if emulate {
		d = 200 * time.Millisecond
	}
	const maxBatch = 4096
	o := DefaultOptions()
	o.Emulate = emulate
	o.SlotCap = maxBatch
	o.PollNs = 5000 // idle blocks: one poll per ~5 us, not a PCIe read flood
	o.FrameSize = 2048
	o.ArenaBytes = 1 << 17 * 2048 // 131072 frames: 256 MiB pinned
	if emulate {
		o.ArenaBytes = 1 << 14 * 2048
	}
	// Development knobs: the kernel's block count and idle poll interval.
	if v, err := strconv.Atoi(os.Getenv("WARPFLOW_GPU_BLOCKS")); err == nil {
		o.Blocks = v
	}
	if v, err := strconv.Atoi(os.Getenv("WARPFLOW_GPU_POLLNS")); err == nil {
		o.PollNs = uint32(v)
	}
	var desc string
	var results []benchResult
	rnd := rand.New(rand.NewPCG(42, 42))
	var latBlob *pipelines.FilterBlob
	var latSrcs []uint32
	counts := []int{1000, 10000, 100000}
	// WARPFLOW_GPU_BENCH=latency (development): the latency part alone.
	latencyOnly := os.Getenv("WARPFLOW_GPU_BENCH") == "latency"
	if latencyOnly {
		counts = []int{10000}
	}
	if emulate {
		counts = []int{1000}
	}
	for _, n := range counts {
		y, srcs := benchRules(n, rnd)
		tb := time.Now()
		g, err := pipelines.Load("bench.yaml", []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		fp, err := pipelines.GraphFilter(g)
		if err != nil {
			t.Fatal(err)
		}
		build := time.Since(tb)
		// A classifier per rule set, its program loaded before the first
		// Submit launches the kernel (see Classifier.Load).
		c, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		if desc == "" {
			desc = c.Describe()
			t.Logf("device: %s; host: %d CPUs, GOMAXPROCS %d", desc, runtime.NumCPU(), runtime.GOMAXPROCS(0))
		}
		prog, err := c.Load(fp.Blob)
		if err != nil {
			t.Fatal(err)
		}
		a, err := rings.NewArenaOn(c.Arena(), rings.ArenaOptions{Frames: len(c.Arena()) / o.FrameSize, FrameSize: o.FrameSize, Headroom: 256})
		if err != nil {
			t.Fatal(err)
		}
		descs := benchFrames(a, a.Frames(), srcs, rnd)
		note := fmt.Sprintf("compile %.2fs, blob %.1f MiB", build.Seconds(), float64(8*len(fp.Blob.Words))/(1<<20))

		if latencyOnly {
			latBlob, latSrcs = fp.Blob, srcs
			c.Close()
			continue
		}
		cm, cc := benchCPU(g, a, descs, runtime.NumCPU(), d)
		results = append(results, benchResult{Backend: "cpu", Rules: n, Batch: 256, Mpps: cm, HostCores: cc, Note: fmt.Sprintf("%d workers; %s", runtime.NumCPU(), note)})
		t.Logf("%d rules: CPU %.1f Mpps on %.2f cores", n, cm, cc)
		for _, batch := range []int{1024, maxBatch} {
			gm, gc, mis := benchGPU(t, c, prog, descs, batch, d)
			if mis != 0 {
				t.Errorf("%d rules batch %d: %d verdict mismatches against the CPU lookup", n, batch, mis)
			}
			results = append(results, benchResult{Backend: "cuda", Rules: n, Batch: batch, Mpps: gm, HostCores: gc, Note: fmt.Sprintf("%d mismatches in 2 checked laps", mis)})
			t.Logf("%d rules, batch %d: %.1f Mpps on %.2f host cores", n, batch, gm, gc)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if n == 10000 || emulate {
			latBlob, latSrcs = fp.Blob, srcs
		}
	}
	// Latency on a classifier of its own: one block, spinning, one slot in
	// flight.
	lo := o
	lo.Blocks, lo.Slots, lo.PollNs = 1, 2, 0
	lo.ArenaBytes = 1 << 14 * 2048
	lc, err := Open(lo)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	la, err := rings.NewArenaOn(lc.Arena(), rings.ArenaOptions{Frames: len(lc.Arena()) / lo.FrameSize, FrameSize: lo.FrameSize, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	ldescs := benchFrames(la, la.Frames(), latSrcs, rnd)
	lprog, err := lc.Load(latBlob)
	if err != nil {
		t.Fatal(err)
	}
	for _, batch := range []int{1, 32, 256, maxBatch} {
		iters := 20000
		if batch == maxBatch {
			iters = 2000
		}
		if emulate {
			iters = 100
		}
		med, p99 := benchLatency(t, lc, lprog, ldescs, batch, iters)
		results = append(results, benchResult{Backend: "cuda-latency", Rules: latBlob.Rules, Batch: batch, MedianUs: med, P99Us: p99, Note: "one slot in flight, one block"})
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-13s %7s %6s %9s %10s %10s %9s  %s\n", "backend", "rules", "batch", "Mpps", "host cores", "median us", "p99 us", "note")
	for _, r := range results {
		fmt.Fprintf(&sb, "%-13s %7d %6d %9.1f %10.2f %10.2f %9.2f  %s\n", r.Backend, r.Rules, r.Batch, r.Mpps, r.HostCores, r.MedianUs, r.P99Us, r.Note)
	}
	t.Log("\n" + sb.String())
	if dir := os.Getenv("WARPFLOW_BENCH_OUT"); dir != "" {
		js, _ := json.MarshalIndent(map[string]any{"device": desc, "cpus": runtime.NumCPU(), "results": results}, "", "  ")
		if err := os.WriteFile(filepath.Join(dir, "gpubench.json"), js, 0o644); err != nil {
			t.Error(err)
		}
	}
}
