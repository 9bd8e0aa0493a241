package daemon

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/internal/control"
)

// countersDoc is the page that says what every counter means.
const countersDoc = "../../docs/COUNTERS.md"

// countersDocSections are the page's generated parts: each lies between
// "<!-- generated: NAME -->" and "<!-- end: NAME -->", made from the
// lists the code itself iterates.
var countersDocSections = []struct {
	name string
	make func() string
}{
	{"places", placesTable},
	{"declared", declaredTable},
	{"metrics", metricsTable},
}

// TestCountersDocGenerated: the tables of docs/COUNTERS.md are what the
// code counts and exports: the frame places (dataplane.FramePlaces), every
// declared counter (the stage kinds', the executors', the sockets') and
// every metric family, with their help. A counter added anywhere fails
// this test until the page lists it (-update rewrites the tables; the
// prose around them is the page's own).
func TestCountersDocGenerated(t *testing.T) {
	page, err := os.ReadFile(countersDoc)
	if err != nil {
		t.Fatal(err)
	}
	got := page
	for _, s := range countersDocSections {
		begin, end := []byte("<!-- generated: "+s.name+" -->\n"), []byte("<!-- end: "+s.name+" -->")
		i, j := bytes.Index(got, begin), bytes.Index(got, end)
		if i < 0 || j < i {
			t.Fatalf("%s has no generated %s section (%q ... %q)", countersDoc, s.name, begin, end)
		}
		i += len(begin)
		got = append(append(append([]byte{}, got[:i]...), s.make()...), got[j:]...)
	}
	if *updateDashboard {
		if err := os.WriteFile(countersDoc, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(got, page) {
		t.Fatalf("%s's tables are not what the code counts: go test ./internal/daemon -run TestCountersDocGenerated -update", countersDoc)
	}
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func placesTable() string {
	var b strings.Builder
	b.WriteString("| place | the frames ... |\n| --- | --- |\n")
	for _, p := range dataplane.FramePlaces() {
		fmt.Fprintf(&b, "| `%s` | %s |\n", p.Name, cell(p.Help))
	}
	return b.String()
}

func declaredTable() string {
	var b strings.Builder
	b.WriteString("| owner | counter | kind | key | metric | what it counts |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, d := range DeclaredCounters() {
		key, metric := "-", "(stats only)"
		if d.Label != "" {
			key = d.Label
		}
		if ms := d.Metrics(); len(ms) > 0 {
			metric = "`" + ms[0].Name + "`"
			if len(ms) > 1 {
				metric += ", `" + ms[1].Name + "`"
			}
		}
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s | %s | %s |\n", d.Owner, d.Name, d.Kind, key, metric, cell(d.Help))
	}
	return b.String()
}

func metricsTable() string {
	var b strings.Builder
	b.WriteString("| metric | type | labels | what it counts |\n| --- | --- | --- | --- |\n")
	for _, f := range control.Families() {
		typ := "counter"
		if f.Gauge {
			typ = "gauge"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.Name, typ, strings.Join(f.Labels, ", "), cell(f.Help))
	}
	return b.String()
}
