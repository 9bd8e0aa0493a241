package benchshape_test

import (
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
