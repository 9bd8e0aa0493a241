package archtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/warpflow/warpflow/"

// boundary lists the packages allowed to import unsafe or
// golang.org/x/sys/unix, each with what it needs them for. docs/DESIGN.md
// ("The OS and memory boundary") says the same; keep both in step.
var boundary = map[string]struct{ unsafe, unix bool }{
	"xdp":                  {true, true},  // AF_XDP sockets, UMEM, the shared rings
	"internal/cpuaffinity": {true, true},  // sched_setaffinity/sched_getaffinity: the one CPU-affinity home
	"gpu":                  {true, false}, // the CUDA driver through purego, device-mapped memory
	"internal/hugemem":     {true, true},  // flow tables in 2 MiB-aligned mappings (raw mmap/munmap to trim), typed over them
	"internal/nic":         {true, true},  // ethtool ioctls (SIOCETHTOOL) for the lab's offloads
	"internal/trust":       {true, true},  // SO_PEERGROUPS, openat2 beneath capture_dir, lstat walks
	"pipelines":            {true, false}, // unsafe.Sizeof of a flow entry (memory budgets) only
	"internal/daemon":      {false, true}, // inotify for --watch, and the daemon's socket options
	"internal/doctor":      {false, true}, // probes: uname, socket options, errno names
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
	for _, msg := range boundaryErrors(listModule(t), boundary) {
		t.Error(msg)
	}
}

// boundaryErrors checks pkgs against table: one message per package
// that imports unsafe or x/sys/unix without its exception, per listed
// package that no longer imports either, and per package with cgo files.
func boundaryErrors(pkgs []pkg, table map[string]struct{ unsafe, unix bool }) []string {
	var errs []string
	seen := map[string]bool{}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(p.ImportPath, module)
		if len(p.CgoFiles) > 0 {
			errs = append(errs, fmt.Sprintf("%s: cgo files %v in the default build", rel, p.CgoFiles))
		}
		allowed, listed := table[rel]
		for _, imp := range p.Imports {
			switch {
			case imp == "unsafe" && !allowed.unsafe:
				errs = append(errs, rel+" imports unsafe but is not in the boundary table (docs/DESIGN.md)")
			case imp == "golang.org/x/sys/unix" && !allowed.unix:
				errs = append(errs, rel+" imports golang.org/x/sys/unix but is not in the boundary table (docs/DESIGN.md)")
			case (imp == "unsafe" || imp == "golang.org/x/sys/unix") && listed:
				seen[rel] = true
			}
		}
	}
	// A listed package that no longer needs its exception leaves the table.
	for _, rel := range slices.Sorted(maps.Keys(table)) {
		if !seen[rel] {
			errs = append(errs, rel+" is in the boundary table but imports neither unsafe nor x/sys/unix: remove it there and in docs/DESIGN.md")
		}
	}
	return errs
}

// TestBoundaryCatches: the check itself fails a package that reaches for
// unsafe or x/sys/unix without an exception (the old affinity homes
// among them), one with cgo, and a listed package that no longer needs
// its exception; and it passes the affinity home.
func TestBoundaryCatches(t *testing.T) {
	p := func(rel string, imports ...string) pkg { return pkg{ImportPath: module + rel, Imports: imports} }
	for _, c := range []struct {
		name string
		pkgs []pkg
		want []string // substrings, one per error, in order
	}{
		{"affinity home", []pkg{p("internal/cpuaffinity", "unsafe", "golang.org/x/sys/unix")}, nil},
		{"unsafe in workers", []pkg{p("internal/cpuaffinity", "unsafe"), p("workers", "rings", "unsafe")},
			[]string{"workers imports unsafe"}},
		{"unix in livebench", []pkg{p("internal/cpuaffinity", "unsafe"), p("internal/livebench", "golang.org/x/sys/unix")},
			[]string{"internal/livebench imports golang.org/x/sys/unix"}},
		{"unsafe anywhere new", []pkg{p("internal/cpuaffinity", "unsafe"), p("internal/bench", "fmt", "unsafe")},
			[]string{"internal/bench imports unsafe"}},
		{"cgo", []pkg{p("internal/cpuaffinity", "unsafe"), {ImportPath: module + "rings", CgoFiles: []string{"x.go"}}},
			[]string{"rings: cgo files"}},
		{"stale exception", []pkg{p("internal/cpuaffinity", "fmt")},
			[]string{"internal/cpuaffinity is in the boundary table but imports neither"}},
	} {
		table := map[string]struct{ unsafe, unix bool }{"internal/cpuaffinity": boundary["internal/cpuaffinity"]}
		got := boundaryErrors(c.pkgs, table)
		ok := len(got) == len(c.want)
		for i := 0; ok && i < len(got); i++ {
			ok = strings.Contains(got[i], c.want[i])
		}
		if !ok {
			t.Errorf("%s: errors %q, want ones containing %q", c.name, got, c.want)
		}
	}
}

// affinityCalls are the ways into sched_setaffinity/sched_getaffinity
// from Go: x/sys/unix's wrappers and its CPUSet, and the raw syscall
// numbers (of syscall or x/sys/unix). Only the affinity home may spell
// them; they are assembled here so this file does not match itself. Not
// caught: running taskset(1) as a command.
var affinityCalls = []string{
	"Sched" + "Setaffinity", "Sched" + "Getaffinity", "SCHED_" + "SETAFFINITY", "SCHED_" + "GETAFFINITY", "unix." + "CPUSet",
}

// TestOneAffinityHome: no Go file outside internal/cpuaffinity, tests
// included (go list's Imports leave test files out of TestBoundary),
// calls sched_setaffinity or sched_getaffinity itself, through x/sys/unix
// or through the syscall package (which needs no exception for
// syscall.RawSyscall, only unsafe for the mask). One implementation, one
// range limit, one wording of errors.
func TestOneAffinityHome(t *testing.T) {
	root := moduleRoot(t)
	home := filepath.Join(root, "internal", "cpuaffinity")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == home || (path != root && strings.HasPrefix(d.Name(), ".")) || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, call := range affinityCalls {
			if bytes.Contains(src, []byte(call)) {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s uses %s: CPU affinity goes through internal/cpuaffinity", rel, call)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// moduleRoot is the directory holding the module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestDirection: the core packages import only what docs/DESIGN.md's
// direction allows (cmd → dataplane → pipelines, workers → rings; xdp →
// rings; dataplane reads the memory room through internal/meminfo),
// nothing imports cmd, and only tests import internal/testwait.
func TestDirection(t *testing.T) {
	may := map[string][]string{
		"rings":     {},
		"counters":  {},                                // the counter vocabulary stages declare: a leaf, like rings
		"workers":   {"rings", "internal/cpuaffinity"}, // pinning, through the one affinity home
		"xdp":       {"rings"},
		"pipelines": {"rings", "counters", "internal/hugemem", "internal/yamlbound"},
		"dataplane": {"pipelines", "workers", "rings", "counters", "internal/meminfo"}, // the room for stage tables, a standard-library leaf
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
			if to == "internal/testwait" {
				t.Errorf("%s imports internal/testwait: only tests may (it imports testing)", rel)
			}
			if allowed, core := may[rel]; core && !slices.Contains(allowed, to) {
				t.Errorf("%s imports %s: docs/DESIGN.md's direction allows only %v", rel, to, allowed)
			}
		}
	}
}
