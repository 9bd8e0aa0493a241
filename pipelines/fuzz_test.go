package pipelines

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bytes through Parse and Compile, with the real
// stage kinds and with the test kinds. Neither may panic; a failure must be
// a non-empty, positioned *ErrorList; a success must be a graph the runner
// can be built for.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"../testdata/pipelines/valid", "../testdata/pipelines/invalid"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, file := range files {
			if data, err := os.ReadFile(file); err == nil {
				f.Add(data)
			}
		}
	}
	f.Add([]byte(runnerConfig))
	f.Add([]byte("name: p\nstages:\n  - {name: a, type: t_mod, to: [b, \"drop:x\", a]}\n  - {name: b, type: t_sample, every: 3}\n  - {name: c, type: pass}\n"))
	f.Add([]byte("name: p\nsettings: {batch_size: 0x10, workers: -1}\nstages: [{name: a, type: t_parity, odd: a, next: drop:z}]\n"))
	f.Add([]byte("name: &a [*a]\n"))
	f.Add([]byte("{name: p, stages: [{name: a, type: pass}]}"))

	f.Fuzz(func(t *testing.T, data []byte) {
		for _, kinds := range []map[string]Kind{nil, tkKinds()} {
			g, err := loadWith("fuzz.yaml", data, kinds)
			if err != nil {
				var el *ErrorList
				if !errors.As(err, &el) || el.Len() == 0 {
					t.Fatalf("error %T %v is not a non-empty *ErrorList", err, err)
				}
				for _, e := range el.Errs {
					if e.Pos.File != "fuzz.yaml" || e.Msg == "" {
						t.Fatalf("unpositioned error %+v", e)
					}
				}
				continue
			}
			if g == nil {
				t.Fatal("nil graph without error")
			}
			if len(g.topo) != len(g.nodes) {
				t.Fatalf("topological order has %d of %d nodes", len(g.topo), len(g.nodes))
			}
			g.NewRunner(RunnerOptions{})
		}
	})
}
