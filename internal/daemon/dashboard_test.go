package daemon

import (
	"bytes"
	"flag"
	"os"
	"testing"

	"github.com/warpflow/warpflow/internal/control"
)

var updateDashboard = flag.Bool("update", false, "TestDashboardGenerated: rewrite docs/grafana-warpflow.json")

// dashboardFile is the committed Grafana dashboard.
const dashboardFile = "../../docs/grafana-warpflow.json"

// TestDashboardGenerated: the committed dashboard is what control.Dashboard
// makes from the model's families and every declared counter, so a
// counter a stage, an executor or a socket declares has its panel, and no
// panel queries a metric warpflowd does not export. -update rewrites it.
func TestDashboardGenerated(t *testing.T) {
	got, err := control.Dashboard(DeclaredCounters())
	if err != nil {
		t.Fatal(err)
	}
	if *updateDashboard {
		if err := os.WriteFile(dashboardFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not what control.Dashboard makes from the declarations: go test ./internal/daemon -run TestDashboardGenerated -update", dashboardFile)
	}
}

// TestDeclaredCountersCheck: every declared family passes
// counters.Decl.Check, and no two make the same metric.
func TestDeclaredCountersCheck(t *testing.T) {
	seen := map[string]string{}
	for _, f := range control.Families() {
		seen[f.Name] = "the model"
	}
	for _, d := range DeclaredCounters() {
		if err := d.Check(); err != nil {
			t.Errorf("%s: %v", d.Owner, err)
		}
		for _, m := range d.Metrics() {
			if by, dup := seen[m.Name]; dup {
				t.Errorf("%s %s makes %s, which %s makes too", d.Owner, d.Name, m.Name, by)
			}
			seen[m.Name] = d.Owner + " " + d.Name
		}
	}
}
