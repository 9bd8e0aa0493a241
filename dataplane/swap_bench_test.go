package dataplane

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"

	"github.com/warpflow/warpflow/internal/testwait"
)

// controlRig runs the default-shaped pipeline (and a twin with another
// drop reason, to swap to) over the preloaded bench capture, looping, to
// null ports, until cancelled.
type controlRig struct {
	e      *Engine
	cancel context.CancelFunc
	done   chan error
	outs   [2]Outputs
	graphs [2]*pipelines.Graph
}

func newControlRig(b *testing.B, workers int) *controlRig {
	b.Helper()
	def := "name: %s\nsettings: {workers: 1, batch_size: 64}\nstages:\n  - {name: parse, type: parse}\n" +
		"  - {name: acl, type: filter, rules: [{class: malformed, action: \"drop:malformed\"}, {proto: tcp, dst_port: 23, action: \"drop:%s\"}]}\n" +
		"  - {name: nat, type: rewrite, snat: {addr: 198.51.100.1, port: 4000}}\n" +
		"  - {name: flows, type: count, by: [protocol, vlan]}\n  - {name: out, type: tx, port: sink}\n"
	ga := mustLoad(b, fmt.Sprintf(def, "a", "telnet"))
	gb := mustLoad(b, fmt.Sprintf(def, "b", "telnet2"))
	arena, err := rings.NewArena(rings.ArenaOptions{Frames: 8192, FrameSize: 2048, Headroom: 256})
	if err != nil {
		b.Fatal(err)
	}
	ro := DefaultReplayOptions()
	ro.Preload, ro.Loops = true, -1
	in, err := OpenReplay("../testdata/captures/bench-64.pcap", arena, ro)
	if err != nil {
		b.Fatal(err)
	}
	o := DefaultOptions()
	o.Timing = false
	o.Workers = workers
	sink := NewNullPort("sink")
	r := &controlRig{done: make(chan error, 1)}
	r.outs[0] = Outputs{Ports: map[string]Port{"sink": sink}}
	r.outs[1] = r.outs[0]
	r.e, err = NewEngine(ga, arena, in, r.outs[0], o)
	if err != nil {
		b.Fatal(err)
	}
	r.graphs = [2]*pipelines.Graph{ga, gb}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.e.RunContext(ctx, nil) }()
	return r
}

func (r *controlRig) stop(b *testing.B) {
	r.cancel()
	if err := testwait.Recv(b, r.done, "RunContext to return after cancel", testwait.Deadline); err != nil {
		b.Fatal(err)
	}
}

// window runs for d with action called every every (0: never) and
// returns the Mpps over the window.
func (r *controlRig) window(d, every time.Duration, action func()) float64 {
	start, t0 := r.e.Stats().Received, time.Now()
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	end := time.After(d)
	for {
		select {
		case <-tick:
			action()
		case <-end:
			return float64(r.e.Stats().Received-start) / time.Since(t0).Seconds() / 1e6
		}
	}
}

// BenchmarkControlCost measures, over one looping replay, the throughput
// with and without one swap per second and with and without stats reads
// at 10 Hz, in alternating windows of the same run, and the time from Swap
// returning to the first batch on the new plan. Run it alone:
//
//	go test -run '^$' -bench BenchmarkControlCost -benchtime 1x ./dataplane/
//
// WARPFLOW_CONTROL_WINDOW sets each window's length (default 1s: one
// swap per second) and WARPFLOW_CONTROL_PAIRS the pairs of each kind
// (default 10). The ratios are per adjacent pair, their median reported.
func BenchmarkControlCost(b *testing.B) {
	window, pairs := time.Second, 10
	if s := os.Getenv("WARPFLOW_CONTROL_WINDOW"); s != "" {
		if d, err := time.ParseDuration(s); err == nil {
			window = d
		}
	}
	if s := os.Getenv("WARPFLOW_CONTROL_PAIRS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			pairs = n
		}
	}
	for _, w := range []struct {
		name    string
		workers int
	}{{"inline", 0}, {"1worker", 1}} {
		b.Run(w.name, func(b *testing.B) {
			for range b.N {
				r := newControlRig(b, w.workers)
				time.Sleep(200 * time.Millisecond) // warm up
				next := 1
				var lat []time.Duration
				swap := func() {
					res, err := r.e.Swap(r.graphs[next], r.outs[next], time.Second)
					if err != nil {
						b.Fatal(err)
					}
					returned := time.Now()
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					if r.e.WaitActive(ctx, res) {
						lat = append(lat, res.ActiveAt().Sub(returned))
					}
					cancel()
					next = 1 - next
				}
				stats := func() {
					_ = r.e.Stats()
					_ = r.e.Stats()
					_ = r.e.frames()
				}
				// Adjacent window pairs, so that the machine's load drifts
				// little within a pair: one swap in the middle of the swap
				// window (one per second at the default window), ten stats
				// reads per second in the stats window.
				var base, swapped, quiet, read, swapRatio, readRatio []float64
				for range pairs {
					x := r.window(window, 0, nil)
					y := r.window(window, window/2, swapOnce(swap))
					base, swapped, swapRatio = append(base, x), append(swapped, y), append(swapRatio, y/x)
					x = r.window(window, 0, nil)
					y = r.window(window, 100*time.Millisecond, stats)
					quiet, read, readRatio = append(quiet, x), append(read, y), append(readRatio, y/x)
				}
				// Latency: many swaps, 50 per second.
				r.window(2*time.Second, 20*time.Millisecond, swap)
				r.stop(b)
				b.ReportMetric(medianF(base), "Mpps-noswap")
				b.ReportMetric(medianF(swapped), "Mpps-swap1Hz")
				b.ReportMetric(medianF(swapRatio), "swap/noswap")
				b.ReportMetric(medianF(quiet), "Mpps-nostats")
				b.ReportMetric(medianF(read), "Mpps-stats10Hz")
				b.ReportMetric(medianF(readRatio), "stats/nostats")
				sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
				if len(lat) > 0 {
					b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "µs-to-new-plan-p50")
					b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds()), "µs-to-new-plan-p90")
					b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "µs-to-new-plan-max")
				}
				sort.Float64s(swapRatio)
				sort.Float64s(readRatio)
				b.Logf("%d pairs of %v windows: swap/noswap %.3f (sorted), stats/nostats %.3f (sorted); %d swaps timed", pairs, window, swapRatio, readRatio, len(lat))
			}
		})
	}
}

// swapOnce wraps swap so that it runs once per window (the ticker fires
// at window/2 and again at the window's end).
func swapOnce(swap func()) func() {
	var once sync.Once
	return func() { once.Do(swap) }
}

func medianF(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
