package yamlbound_test

import (
	"strings"
	"testing"

	"github.com/warpflow/warpflow/internal/benchshape"
	"github.com/warpflow/warpflow/internal/yamlbound"
	"github.com/warpflow/warpflow/pipelines"
)

// TestRepositoryYAMLPasses: every YAML file in the repository (pipelines
// valid and invalid, the daemon's example config, CI, deploy) and the
// bench generator's 100,000-rule pipeline pass Check under the pipeline
// limits: nothing refused, no syntax error noticed where there is none.
func TestRepositoryYAMLPasses(t *testing.T) {
	lim := pipelines.ConfigLimits()
	files := yamlbound.RepoYAML(t)
	for path, data := range files {
		st, err := yamlbound.Check(data, lim)
		switch {
		case strings.HasSuffix(path, "invalid/aliases.yaml"):
			if err == nil {
				t.Errorf("%s: accepted", path)
			}
		case err != nil:
			t.Errorf("%s: %v", path, err)
		case !st.Complete && !strings.Contains(path, "/invalid/"):
			t.Errorf("%s: a syntax error noticed at line %d, column %d", path, st.ErrorLine, st.ErrorCol)
		}
	}
	big := []byte(benchshape.Default("b", 100_000))
	st, err := yamlbound.Check(big, lim)
	if err != nil || !st.Complete || st.Nodes*2 > lim.MaxNodes || st.Depth*4 > lim.MaxDepth || len(big)*4 > lim.MaxBytes {
		t.Fatalf("the 100,000-rule bench pipeline (%d bytes): %+v, %v: refused or within a factor of 2 of a limit", len(big), st, err)
	}
	t.Logf("%d YAML files; 100,000 rules: %d bytes, %d nodes, depth %d", len(files), len(big), st.Nodes, st.Depth)
}
