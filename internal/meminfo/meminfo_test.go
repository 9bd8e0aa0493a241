package meminfo

import (
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestAvailable(t *testing.T) {
	dir := t.TempDir()
	mi := filepath.Join(dir, "meminfo")
	cg := filepath.Join(dir, "cgroup")
	root := filepath.Join(dir, "fs")
	write(t, mi, "MemTotal:       24000000 kB\nMemFree:        20000000 kB\nMemAvailable:   23000000 kB\n")

	// No cgroup v2 line: MemAvailable alone.
	write(t, cg, "4:memory:/x\n")
	r, ok := available(mi, cg, root)
	if !ok || r.Bytes != 23000000<<10 || r.Source != "MemAvailable" {
		t.Fatalf("no cgroup: %+v %v", r, ok)
	}

	// A cgroup without a limit, its parent with one smaller than
	// MemAvailable: the parent's room binds.
	write(t, cg, "0::/svc.slice/warpflowd.service\n")
	write(t, filepath.Join(root, "svc.slice/warpflowd.service/memory.max"), "max\n")
	write(t, filepath.Join(root, "svc.slice/warpflowd.service/memory.current"), "1000\n")
	write(t, filepath.Join(root, "svc.slice/memory.max"), "3000000000\n")
	write(t, filepath.Join(root, "svc.slice/memory.current"), "1000000000\n")
	r, ok = available(mi, cg, root)
	if !ok || r.Bytes != 2000000000 || r.Source != "cgroup /svc.slice memory.max" {
		t.Fatalf("parent limit: %+v %v", r, ok)
	}

	// The service's own limit, tighter still; usage over it is no room.
	write(t, filepath.Join(root, "svc.slice/warpflowd.service/memory.max"), "500\n")
	r, _ = available(mi, cg, root)
	if r.Bytes != 0 || r.Source != "cgroup /svc.slice/warpflowd.service memory.max" {
		t.Fatalf("own limit under usage: %+v", r)
	}

	// A limit larger than MemAvailable: MemAvailable binds.
	write(t, filepath.Join(root, "svc.slice/warpflowd.service/memory.max"), "900000000000\n")
	write(t, filepath.Join(root, "svc.slice/memory.max"), "max\n")
	r, _ = available(mi, cg, root)
	if r.Bytes != 23000000<<10 || r.Source != "MemAvailable" {
		t.Fatalf("loose limit: %+v", r)
	}

	// A path that climbs out of the mount is cleaned, not followed.
	write(t, cg, "0::/../../etc\n")
	if _, ok := cgroupDir(cg, root); ok {
		t.Fatal("a cgroup path with .. was taken")
	}

	// Nothing readable: nothing known.
	if _, ok := available(filepath.Join(dir, "none"), filepath.Join(dir, "none"), root); ok {
		t.Fatal("ok with no files")
	}
	// Garbage in meminfo: not a number, not known.
	write(t, mi, "MemAvailable: lots kB\n")
	if _, ok := available(mi, filepath.Join(dir, "none"), root); ok {
		t.Fatal("ok with an unreadable MemAvailable")
	}
}

func TestAvailableHere(t *testing.T) {
	r, ok := Available()
	if !ok {
		t.Skip("no /proc/meminfo here") // not Linux
	}
	if r.Bytes == 0 || r.Bytes > 1<<50 {
		t.Fatalf("implausible room %+v", r)
	}
}
