package main

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gdamore/tcell/v2"
	"github.com/warpflow/warpflow/internal/control"
)

// topStats is a daemon whose stage "slow" sees few packets, many drops and
// high ns, and "fast" the opposite; each fetch adds packets.
type topStats struct {
	mu sync.Mutex
	n  uint64
}

func (f *topStats) fetch() (control.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	stages := []control.StageStats{
		{Name: "fast", Kind: "parse", Packets: f.n * 1000, Nanos: f.n * 1000 * 5},
		{Name: "slow", Kind: "filter", Packets: f.n * 10, Nanos: f.n * 10 * 900, Drops: []control.DropCount{{Reason: "acl", Packets: f.n * 9}}},
	}
	return control.Stats{Pipeline: "demo", Generation: 2, Totals: control.Counts{Received: f.n * 1000},
		Queues: []control.QueueStats{{Queue: "dp0/0", Counts: control.Counts{Received: f.n * 1000}, Stages: stages}}, Stages: stages}, nil
}

// lockedScreen serialises the view's Show with the test's reads (the
// simulation screen does not lock its cells between the two).
type lockedScreen struct {
	tcell.SimulationScreen
	mu sync.Mutex
}

func (s *lockedScreen) Show() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.SimulationScreen.Show()
}

// screenText returns the simulation screen's rows as text.
func screenText(s *lockedScreen) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	cells, w, h := s.GetContents()
	rows := make([]string, h)
	for y := range h {
		var b strings.Builder
		for x := range w {
			c := cells[y*w+x]
			if len(c.Runes) > 0 {
				b.WriteString(string(c.Runes))
			} else {
				b.WriteByte(' ')
			}
		}
		rows[y] = strings.TrimRight(b.String(), " ")
	}
	return rows
}

// stageOrder is the order the stage rows appear in.
func stageOrder(rows []string) string {
	var names []string
	for _, r := range rows {
		if f := strings.Fields(r); len(f) > 0 && (f[0] == "fast" || f[0] == "slow") {
			names = append(names, f[0])
		}
	}
	return strings.Join(names, ",")
}

// TestTop drives `top` on tcell's simulation screen: it shows the stages
// with rates, and the sort keys change the order.
func TestTop(t *testing.T) {
	scr := &lockedScreen{SimulationScreen: tcell.NewSimulationScreen("UTF-8")}
	if err := scr.Init(); err != nil {
		t.Fatal(err)
	}
	defer scr.Fini()
	scr.SetSize(120, 30)
	f := &topStats{}
	done := make(chan error, 1)
	go func() { done <- runTop(scr, f.fetch, "rate", 20*time.Millisecond) }()
	wait := func(what string, ok func([]string) bool) []string {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			rows := screenText(scr)
			if ok(rows) {
				return rows
			}
			if time.Now().After(deadline) {
				t.Fatalf("screen never showed %s:\n%s", what, strings.Join(rows, "\n"))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	rows := wait("rates sorted by rate", func(r []string) bool {
		return stageOrder(r) == "fast,slow" && strings.Contains(strings.Join(r, "\n"), "[sort: rate]") && strings.Contains(strings.Join(r, "\n"), "kpps")
	})
	if !strings.Contains(rows[0], "pipeline demo (gen 2") {
		t.Fatalf("header: %q", rows[0])
	}
	scr.InjectKey(tcell.KeyRune, 'd', tcell.ModNone)
	wait("sorted by drops", func(r []string) bool {
		return stageOrder(r) == "slow,fast" && strings.Contains(strings.Join(r, "\n"), "[sort: drops]")
	})
	scr.InjectKey(tcell.KeyRune, 'i', tcell.ModNone)
	wait("drops reversed", func(r []string) bool {
		return stageOrder(r) == "fast,slow" && strings.Contains(strings.Join(r, "\n"), "[sort: drops, reversed]")
	})
	scr.InjectKey(tcell.KeyRune, 's', tcell.ModNone) // drops -> ns
	wait("the next key", func(r []string) bool {
		return strings.Contains(strings.Join(r, "\n"), "[sort: ns, reversed]") && stageOrder(r) == "fast,slow"
	})
	scr.InjectKey(tcell.KeyRune, 'i', tcell.ModNone)
	wait("ns", func(r []string) bool { return stageOrder(r) == "slow,fast" })
	scr.InjectKey(tcell.KeyRune, 'q', tcell.ModNone)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("q did not quit")
	}
}
