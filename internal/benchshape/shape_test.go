package benchshape_test

import (
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/internal/benchshape"
	"github.com/warpflow/warpflow/pipelines"
)

// TestDefaultLoads: every size compiles, under the given name, to the
// shape the bench measures, with as many filter rules as asked for.
func TestDefaultLoads(t *testing.T) {
	for _, n := range []int{1, 2, 10, 1000} {
		src := benchshape.Default("shape", n)
		g, err := pipelines.Load("shape.yaml", []byte(src))
		if err != nil {
			t.Fatalf("%d rules: %v", n, err)
		}
		if g.Name() != "shape" {
			t.Fatalf("%d rules: name %q", n, g.Name())
		}
		var kinds []string
		for _, s := range g.Stages() {
			if !strings.HasPrefix(s.Name, "drop:") {
				kinds = append(kinds, s.Kind)
			}
		}
		if want := []string{"parse", "filter", "rewrite", "count", "tx"}; !slices.Equal(kinds, want) {
			t.Fatalf("%d rules: stage kinds %v, want %v", n, kinds, want)
		}
		if got := strings.Count(src, "action:"); got != n {
			t.Fatalf("%d rules asked for, %d written", n, got)
		}
		if g.Ports()[0] != "sink" {
			t.Fatalf("%d rules: ports %v, want [sink]", n, g.Ports())
		}
	}
}

// TestDefaultPrefixesValid: at the largest size the benchmarks use, every
// address prefix the shape writes parses (a 100,000-rule shape once wrote
// IPv6 groups of five hex digits past 65,535 rules), and the shape below
// 65,536 rules is what it always was.
func TestDefaultPrefixesValid(t *testing.T) {
	src := benchshape.Default("shape", 100_000)
	re := regexp.MustCompile(`(?:src|dst): "?([0-9a-f.:]+/[0-9]+)"?`)
	n := 0
	for _, m := range re.FindAllStringSubmatch(src, -1) {
		if _, err := netip.ParsePrefix(m[1]); err != nil {
			t.Fatalf("prefix %q: %v", m[1], err)
		}
		n++
	}
	if n != 100_000-1 {
		t.Fatalf("%d prefixes checked, want %d (one per rule after the class rule)", n, 100_000-1)
	}
	if !strings.Contains(benchshape.Default("shape", 1000), `{src: "2001:db8:3e7::/48", dst_port: 1000,`) {
		t.Fatal("rule 999 of the 1000-rule shape changed")
	}
}
