package pipelines

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/warpflow/warpflow/rings"

	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/internal/testwait"
)

// livePipeline has every LiveReporter stage: a filter with rules that the
// bench capture hits, a count by every key and a NAT rewrite.
const livePipeline = `name: live
stages:
  - {name: parse, type: parse}
  - name: acl
    type: filter
    default: accept
    rules:
      - {class: malformed, action: "drop:malformed"}
      - {proto: tcp, action: accept}
      - {proto: udp, dst_port: 0-30000, action: accept}
  - {name: flows, type: count, by: [protocol, vlan, class]}
  - {name: nat, type: rewrite, snat: {addr: 198.51.100.1, port: 4000}}
  - {name: out, type: tx, port: sink}
`

// liveRunner is a runner of livePipeline, a 64-packet batch and the
// bench capture's descriptors.
func liveRunner(t *testing.T) (*Runner, *rings.Batch, []rings.Desc) {
	t.Helper()
	g, err := Load("live.yaml", []byte(livePipeline))
	if err != nil {
		t.Fatal(err)
	}
	a, descs := shapeCapture(t, false)
	return g.NewRunner(RunnerOptions{}), rings.NewBatch(64, a), descs
}

func liveRun(tb testing.TB, r *Runner, b *rings.Batch, descs []rings.Desc, from, n int) {
	for start := from; start < from+n; start += b.Cap() {
		b.Clear()
		for k := start; k < min(start+b.Cap(), from+n); k++ {
			b.Append(descs[k%len(descs)], uint64(k), 0)
		}
		r.Process(b)
	}
}

// liveMap is LiveCounters (or Counters) keyed by stage and key.
func liveMap(list []StageCounter) map[string]Counter {
	m := map[string]Counter{}
	for _, c := range list {
		m[c.Stage+"/"+c.Key] = c.Counter
	}
	return m
}

// At rest (after a Publish) the live counters are the runner's own, for
// every stage that reports; before any packet there are none.
func TestLiveCountersMatchCounters(t *testing.T) {
	r, b, descs := liveRunner(t)
	if got := runnerList(r, true); len(got) != 0 {
		t.Fatalf("before any packet: %v", got)
	}
	for round, n := range []int{10, 64*3 + 5, 5000} {
		liveRun(t, r, b, descs, round*7000, n)
		r.Publish()
		want, got := runnerList(r, false), runnerList(r, true)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: live %v\nwant %v", round, got, want)
		}
	}
	m := liveMap(runnerList(r, true))
	for _, key := range []string{"flows/total", "flows/vlan=none", "flows/class=ok"} {
		if m[key].Packets == 0 {
			t.Errorf("%s: no packets (have %v)", key, m)
		}
	}
	rules := 0
	for k := range m {
		if len(k) > 8 && k[:8] == "acl/rule" {
			rules++
		}
	}
	if rules == 0 {
		t.Errorf("no filter rule hit: the test pipeline no longer fits the capture (%v)", m)
	}
}

// A full batch publishes only every publishEvery packets; a partial one at
// once, so a live port at rest is exact.
func TestLiveCountersPublishCadence(t *testing.T) {
	r, b, descs := liveRunner(t)
	liveRun(t, r, b, descs, 0, 64) // one full batch: below publishEvery
	if got := liveMap(runnerList(r, true))["flows/total"].Packets; got != 0 {
		t.Fatalf("after one full batch the live total is %d, want 0 (not published yet)", got)
	}
	liveRun(t, r, b, descs, 64, 3) // partial: publishes
	if got := liveMap(runnerList(r, true))["flows/total"].Packets; got != 67 {
		t.Fatalf("after a partial batch the live total is %d, want 67", got)
	}
}

// Readers on other goroutines while the runner processes (run it with
// -race): every counter only grows, and at the end equals the runner's.
func TestLiveCountersConcurrentRead(t *testing.T) {
	r, b, descs := liveRunner(t)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var reads atomic.Int64
	errs := make(chan string, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := map[string]Counter{}
			for !stop.Load() {
				for k, c := range liveMap(runnerList(r, true)) {
					if p := last[k]; c.Packets < p.Packets || c.Bytes < p.Bytes {
						errs <- k + " went down"
						return
					}
					last[k] = c
				}
				reads.Add(1)
			}
		}()
	}
	for i := 0; i < 40 || reads.Load() < 20; i++ {
		liveRun(t, r, b, descs, i*1000, 1000)
		if i > 4000 {
			break // bounded: readers starved on a loaded machine
		}
	}
	stop.Store(true)
	testwait.Group(t, &wg, "the live-counter readers to stop", testwait.Deadline)
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	r.Publish()
	if got, want := runnerList(r, true), runnerList(r, false); !slices.Equal(got, want) {
		t.Fatalf("at rest: live %v, want %v", got, want)
	}
}

// The hot path stays free of allocations with the live side: Process
// (which publishes) and Publish itself.
func TestLiveCountersZeroAllocs(t *testing.T) {
	r, b, descs := liveRunner(t)
	k := 0
	n := allocs.Count(200, func() {
		b.Clear()
		for range 37 { // partial: Process publishes every time
			b.Append(descs[k%len(descs)], uint64(k), 0)
			k++
		}
		r.Process(b)
		r.Publish()
	})
	if n != 0 {
		t.Fatalf("%d allocations in 200 batches, want 0", n)
	}
	if len(runnerList(r, true)) == 0 {
		t.Fatal("nothing published")
	}
}

// Not one allocation in many publishes, counted exactly. AllocsPerRun
// divides the count by the runs in integers, so a rare allocation (2 in
// 200 runs reads as 0) passes it: the type assertion Publish once made
// for every live stage allocated on a random one of its cache misses,
// about one publish in a thousand, until the call site's cache was
// built. (It fails on that code when run on its own, before another
// test has built the cache.)
func TestPublishNeverAllocates(t *testing.T) {
	r, b, descs := liveRunner(t)
	liveRun(t, r, b, descs, 0, b.Cap())
	if len(r.lives) == 0 {
		t.Fatal("the pipeline has no live stage: the test would test nothing")
	}
	const publishes = 1 << 15
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for range publishes {
		r.Publish()
	}
	runtime.ReadMemStats(&m1)
	if n := m1.Mallocs - m0.Mallocs; n != 0 {
		t.Fatalf("%d allocations in %d publishes, want 0", n, publishes)
	}
}

// Config prints tell equally configured stages from changed ones, and
// ignore positions and comments.
func TestStageConfigPrint(t *testing.T) {
	load := func(src string) map[string]string {
		g, err := Load("p.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, s := range g.Stages() {
			m[s.Name] = g.StageConfig(s.Name)
		}
		return m
	}
	base := load("name: p\nstages:\n  - {name: acl, type: filter, rules: [{proto: tcp, action: accept}]}\n  - {name: out, type: tx, port: a}\n")
	moved := load("name: p\n\n# a comment\nstages:\n  - name: acl\n    type: filter\n    rules:\n      - {proto: tcp, action: accept}\n  - {name: out, type: tx, port: a}\n")
	changed := load("name: p\nstages:\n  - {name: acl, type: filter, rules: [{proto: udp, action: accept}]}\n  - {name: out, type: tx, port: a}\n")
	if base["acl"] == "" || base["acl"] != moved["acl"] {
		t.Errorf("same filter, moved: %q vs %q", base["acl"], moved["acl"])
	}
	if base["acl"] == changed["acl"] {
		t.Errorf("changed rule, same print %q", base["acl"])
	}
	if base["out"] != changed["out"] {
		t.Errorf("unchanged tx stage prints differ")
	}
}
