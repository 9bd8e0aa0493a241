package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/warpflow/warpflow/internal/livebench"
)

func TestChart(t *testing.T) {
	mk := func(setup, load, peer string, rates ...float64) livebench.CaseResult {
		cr := livebench.CaseResult{Case: livebench.Case{Setup: setup, Load: load, Mode: "rxonly", Peer: peer}}
		for i, r := range rates {
			cr.Samples = append(cr.Samples, livebench.Sample{Repeat: i, Rate: r})
		}
		cr.Min, cr.Median, cr.Max = rates[0], rates[len(rates)/2], rates[len(rates)-1]
		return cr
	}
	res := livebench.Result{Options: livebench.OptionsJSON{Repeats: 3}, Cases: []livebench.CaseResult{
		mk("A", livebench.LoadFlood, livebench.PeerWarpflow, 2.5, 2.6, 2.7),
		mk("A", livebench.LoadFlood, livebench.PeerTestpmd, 2.2, 2.3, 2.4),
		mk("B", livebench.LoadControlled, livebench.PeerWarpflow, 0.9, 0.92, 0.93),
		mk("B", livebench.LoadFlood, livebench.PeerWarpflow, 0.8, 1.1, 1.3),
		mk("B", livebench.LoadFlood, livebench.PeerBefore, 0.5, 0.6, 0.7),
	}}
	path := filepath.Join(t.TempDir(), "live.png")
	if err := Chart(res, path); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() < 1000 {
		t.Fatalf("chart: %v, %v", st, err)
	}
	if err := Chart(livebench.Result{}, path); err == nil {
		t.Error("a chart of nothing: no error")
	}
}
