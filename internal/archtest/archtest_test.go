package archtest

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/warpflow/warpflow/"

// boundary lists the packages allowed to import unsafe or
// golang.org/x/sys/unix, each with what it needs them for. docs/DESIGN.md
// ("The OS and memory boundary") says the same; keep both in step.
var boundary = map[string]struct{ unsafe, unix bool }{
	"xdp":                {true, true},  // AF_XDP sockets, UMEM, the shared rings
	"gpu":                {true, false}, // the CUDA driver through purego, device-mapped memory
	"workers":            {true, false}, // sched_setaffinity for pinned workers
	"internal/hugemem":   {true, true},  // flow tables in 2 MiB-aligned mappings (raw mmap/munmap to trim), typed over them
	"internal/nic":       {true, true},  // ethtool ioctls (SIOCETHTOOL) for the lab's offloads
	"internal/trust":     {true, true},  // SO_PEERGROUPS, openat2 beneath capture_dir, lstat walks
	"pipelines":          {true, false}, // unsafe.Sizeof of a flow entry (memory budgets) only
	"internal/daemon":    {false, true}, // inotify for --watch, and the daemon's socket options
	"internal/doctor":    {false, true}, // probes: uname, socket options, errno names
	"internal/livebench": {false, true}, // pinning the benchmark's processes and NAPI threads
}

type pkg struct {
	ImportPath string
	Imports    []string
	CgoFiles   []string
	Standard   bool
}

func listModule(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"...")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list: %v\n%s", err, errb.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(&out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages: is this the module root?", len(pkgs))
	}
	return pkgs
}

// TestBoundary: unsafe and x/sys/unix appear only in the packages the
// table names, and no package of the default build uses cgo.
func TestBoundary(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range listModule(t) {
		rel := strings.TrimPrefix(p.ImportPath, module)
		if len(p.CgoFiles) > 0 {
			t.Errorf("%s: cgo files %v in the default build", rel, p.CgoFiles)
		}
		allowed, listed := boundary[rel]
		for _, imp := range p.Imports {
			switch {
			case imp == "unsafe" && !allowed.unsafe:
				t.Errorf("%s imports unsafe but is not in the boundary table (docs/DESIGN.md)", rel)
			case imp == "golang.org/x/sys/unix" && !allowed.unix:
				t.Errorf("%s imports golang.org/x/sys/unix but is not in the boundary table (docs/DESIGN.md)", rel)
			case (imp == "unsafe" || imp == "golang.org/x/sys/unix") && listed:
				seen[rel] = true
			}
		}
	}
	// A listed package that no longer needs its exception leaves the table.
	for rel := range boundary {
		if !seen[rel] {
			t.Errorf("%s is in the boundary table but imports neither unsafe nor x/sys/unix: remove it there and in docs/DESIGN.md", rel)
		}
	}
}

// TestDirection: the core packages import only what docs/DESIGN.md's
// direction allows (cmd → dataplane → pipelines, workers → rings; xdp →
// rings), and nothing imports cmd.
func TestDirection(t *testing.T) {
	may := map[string][]string{
		"rings":     {},
		"counters":  {}, // the counter vocabulary stages declare: a leaf, like rings
		"workers":   {"rings"},
		"xdp":       {"rings"},
		"pipelines": {"rings", "counters", "internal/hugemem", "internal/yamlbound"},
		"dataplane": {"pipelines", "workers", "rings", "counters"},
	}
	for _, p := range listModule(t) {
		rel := strings.TrimPrefix(p.ImportPath, module)
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			to := strings.TrimPrefix(imp, module)
			if strings.HasPrefix(to, "cmd/") {
				t.Errorf("%s imports %s: nothing imports cmd", rel, to)
			}
			if allowed, core := may[rel]; core && !slices.Contains(allowed, to) {
				t.Errorf("%s imports %s: docs/DESIGN.md's direction allows only %v", rel, to, allowed)
			}
		}
	}
}
