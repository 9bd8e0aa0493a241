package daemon_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/control/client"

	"github.com/warpflow/warpflow/internal/testwait"
)

// configMapDir lays a directory out the way the kubelet lays out a
// ConfigMap volume: the files in a hidden timestamped directory, a ..data
// symlink to it, and each key a symlink through ..data
// (pipeline.yaml -> ..data/pipeline.yaml).
type configMapDir struct {
	dir  string
	data string // the current ..data target
	n    int
}

func newConfigMapDir(t *testing.T, files map[string]string) *configMapDir {
	t.Helper()
	c := &configMapDir{dir: t.TempDir()}
	c.update(t, files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(c.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (c *configMapDir) path(name string) string { return filepath.Join(c.dir, name) }

// update writes files into a new timestamped directory, renames a fresh
// ..data symlink onto it (the atomic step) and removes the old directory,
// as the kubelet's atomic writer does.
func (c *configMapDir) update(t *testing.T, files map[string]string) {
	t.Helper()
	c.n++
	ts := fmt.Sprintf("..2026_12_01_00_00_%02d.%d", c.n, c.n)
	if err := os.Mkdir(filepath.Join(c.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(c.dir, ts, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if c.data != "" {
		if err := os.RemoveAll(filepath.Join(c.dir, c.data)); err != nil {
			t.Fatal(err)
		}
	}
	c.data = ts
}

// waitWatch polls stats (5 s at most) until ok says the watch got there.
func waitWatch(t *testing.T, c *client.Client, what string, ok func(control.Stats) bool) control.Stats {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		s, err := c.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if s.Watch == nil {
			t.Fatal("stats has no watch: the daemon does not watch its pipeline file")
		}
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watch did not get to %s within 5s: pipeline %s, watch %+v last %+v", what, s.Pipeline, *s.Watch, s.Watch.Last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLiveWatchConfigMapSwap: warpflowd with watch: true on a pipeline
// file laid out like a ConfigMap volume. Under load, the ..data symlink is
// renamed six times between A (drops port 9) and B (drops port 7): each
// time the daemon swaps the new pipeline in, and afterwards every sequence
// number is accounted for exactly as in TestLiveSwapUnderLoad (nothing
// lost, nothing forwarded twice, each packet forwarded or dropped by a
// pipeline that does that to its port). Then an invalid file is refused,
// counted and logged and A keeps running; putting A's content back
// brings the watch in sync without a swap; the store holds the startup
// pipeline and the watch's current one only; /metrics says the same.
func TestLiveWatchConfigMapSwap(t *testing.T) {
	requireLive(t, "tcpreplay", "tcpdump", "curl")
	const n, pps, swaps = 80000, 20000, 6 // 4 s of traffic
	capture := seqCapture(t, n)
	cm := newConfigMapDir(t, map[string]string{"pipeline.yaml": liveSwapA})

	topo := newLab(t)
	sink := startSinkCapture(t, topo)
	lc := startControlled(t, topo, cm.path("pipeline.yaml"), swapBuffers+"watch: true\n")
	d, c, ctx := lc.d, lc.c, context.Background()
	if w := d.waitFor(t, "pipeline watch", 5*time.Second); w["dir"] != cm.dir {
		t.Fatalf("watching %v, want the pipeline file's directory %s", w["dir"], cm.dir)
	}
	waitWatch(t, c, "watching", func(s control.Stats) bool { return s.Watch.Watching && s.Watch.InSync })

	sent := make(chan int, 1)
	go func() { sent <- tcpreplay(t, topo, capture, pps) }()
	waitTraffic(t, c, 1000)
	for i := range swaps {
		text, name := liveSwapB, "b"
		if i%2 == 1 {
			text, name = liveSwapA, "a"
		}
		cm.update(t, map[string]string{"pipeline.yaml": text})
		s := waitWatch(t, c, fmt.Sprintf("swap %d to %s", i+1, name), func(s control.Stats) bool {
			return s.Watch.Swapped == uint64(i+1) && s.Pipeline == name
		})
		if l := s.Watch.Last; l == nil || l.Result != control.WatchSwapped || l.Pipeline != name || !s.Watch.InSync {
			t.Fatalf("after swap %d: %+v", i+1, s.Watch)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// An invalid file: refused, the running A kept.
	cm.update(t, map[string]string{"pipeline.yaml": "name: bad\nstages:\n  - {name: parse, type: parse, next: nowhere}\n"})
	s := waitWatch(t, c, "refusing the invalid file", func(s control.Stats) bool { return s.Watch.Refused == 1 })
	if s.Pipeline != "a" || s.Swaps != swaps || s.Watch.InSync || s.Watch.Last.Result != control.WatchRefused || !strings.Contains(s.Watch.Last.Error, "nowhere") {
		t.Fatalf("after the invalid file: pipeline %s, swaps %d, watch %+v last %+v", s.Pipeline, s.Swaps, *s.Watch, *s.Watch.Last)
	}
	if m := d.waitFor(t, "pipeline file refused; the running pipeline keeps running", 2*time.Second); !strings.Contains(fmt.Sprint(m["err"]), "nowhere") {
		t.Errorf("refusal log line: %v", m)
	}
	if s.Totals.Received >= n {
		t.Fatalf("the traffic ended before the swaps were done (%d received): they were not under load", s.Totals.Received)
	}
	if nsent := testwait.Recv(t, sent, fmt.Sprintf("tcpreplay to send %d packets at %d pps", n, pps), replayWithin(n, pps)); nsent != n {
		t.Fatalf("tcpreplay sent %d of %d", nsent, n)
	}
	st := statsAfterReplay(t, c, topo, n)
	if st.Generation != swaps+1 || st.Swaps != swaps || st.Pipeline != "a" || st.Watch.Refused != 1 || st.Watch.Swapped != swaps {
		t.Fatalf("after %d swaps and a refusal: generation %d, swaps %d, pipeline %s, watch %+v", swaps, st.Generation, st.Swaps, st.Pipeline, *st.Watch)
	}
	tot := st.Totals
	lostBefore := checkArrivals(t, topo, st, n)
	if !tot.Balanced || tot.Received != tot.Transmitted+dropped(tot, "a_nine")+dropped(tot, "b_seven")+tot.Passed+tot.XDPPassed {
		t.Fatalf("received %d of %d: transmitted %d, drops %v, passed %d, balanced %v", tot.Received, n, tot.Transmitted, tot.Drops, tot.Passed, tot.Balanced)
	}

	// The metrics say what stats say.
	out, err := inNS(topo.DP0.Namespace, "curl", "-sf", "--max-time", "10", "http://"+lc.metricsAddr+"/metrics").Output()
	if err != nil {
		t.Fatalf("scrape (10 s at most): %v", err)
	}
	for _, want := range []string{
		`warpflow_pipeline_watch_total{result="swapped"} 6`,
		`warpflow_pipeline_watch_total{result="refused"} 1`,
		`warpflow_pipeline_watch_total{result="failed"} 0`,
		`warpflow_pipeline_watch_in_sync 0`,
	} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(want) + `$`).Match(out) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// `warpctl stats` prints the watch's line.
	if text, stderr, code := warpctl(t, lc.sock, "stats"); code != 0 || !strings.Contains(text, "watch "+cm.path("pipeline.yaml")+": NOT in sync") || !strings.Contains(text, "swapped 6, refused 1, failed 0") {
		t.Errorf("warpctl stats: exit %d %s\n%s", code, stderr, text)
	}

	// Back to A's content: in sync again, without a swap.
	cm.update(t, map[string]string{"pipeline.yaml": liveSwapA})
	s = waitWatch(t, c, "in sync again", func(s control.Stats) bool { return s.Watch.InSync })
	if s.Swaps != swaps || s.Watch.Swapped != swaps {
		t.Fatalf("putting the running content back swapped: %+v", *s.Watch)
	}
	// The store does not grow with every change.
	list, err := c.Pipelines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Pipelines) > 2 {
		t.Errorf("the store holds %d pipelines after %d watched changes: %+v", len(list.Pipelines), swaps, list.Pipelines)
	}

	frames := stopWithSink(t, d, sink, topo)
	checkSwapSink(t, frames, n, tot, lostBefore)
}
