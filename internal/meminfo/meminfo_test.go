package meminfo

import (
	"os"
	"path/filepath"
	"strings"
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
	none := filepath.Join(dir, "none")
	at := func(meminfo, cgroup string) paths {
		return paths{meminfo: meminfo, cgroup: cgroup, cgroup2Root: root, mountinfo: none}
	}
	write(t, mi, "MemTotal:       24000000 kB\nMemFree:        20000000 kB\nMemAvailable:   23000000 kB\n")

	// No cgroup v2 line: MemAvailable alone.
	write(t, cg, "4:memory:/x\n")
	r, ok := available(at(mi, cg))
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
	r, ok = available(at(mi, cg))
	if !ok || r.Bytes != 2000000000 || r.Source != "cgroup /svc.slice memory.max" {
		t.Fatalf("parent limit: %+v %v", r, ok)
	}

	// The service's own limit, tighter still; usage over it is no room.
	write(t, filepath.Join(root, "svc.slice/warpflowd.service/memory.max"), "500\n")
	r, _ = available(at(mi, cg))
	if r.Bytes != 0 || r.Source != "cgroup /svc.slice/warpflowd.service memory.max" {
		t.Fatalf("own limit under usage: %+v", r)
	}

	// A limit larger than MemAvailable: MemAvailable binds.
	write(t, filepath.Join(root, "svc.slice/warpflowd.service/memory.max"), "900000000000\n")
	write(t, filepath.Join(root, "svc.slice/memory.max"), "max\n")
	r, _ = available(at(mi, cg))
	if r.Bytes != 23000000<<10 || r.Source != "MemAvailable" {
		t.Fatalf("loose limit: %+v", r)
	}

	// A path that climbs out of the mount is cleaned, not followed.
	write(t, cg, "0::/../../etc\n")
	if _, ok := cgroupDir(cg, root); ok {
		t.Fatal("a cgroup path with .. was taken")
	}

	// Nothing readable: nothing known.
	if _, ok := available(at(none, none)); ok {
		t.Fatal("ok with no files")
	}
	// Garbage in meminfo: not a number, not known.
	write(t, mi, "MemAvailable: lots kB\n")
	if _, ok := available(at(mi, none)); ok {
		t.Fatal("ok with an unreadable MemAvailable")
	}
}

// TestAvailableCgroup1: a cgroup v1 memory controller (a hybrid or legacy
// host, an older container runtime) bounds the room as v2's does: the
// memory line of /proc/self/cgroup under the memory mount that
// mountinfo names, a container's mount root taken off, the tightest
// limit up to the mount, v1's "no limit" number none.
func TestAvailableCgroup1(t *testing.T) {
	dir := t.TempDir()
	mi := filepath.Join(dir, "meminfo")
	cg := filepath.Join(dir, "cgroup")
	mounts := filepath.Join(dir, "mountinfo")
	fs := filepath.Join(dir, "sys fs") // a space: mountinfo escapes it
	mem := filepath.Join(fs, "memory")
	p := paths{meminfo: mi, cgroup: cg, cgroup2Root: filepath.Join(dir, "v2"), mountinfo: mounts}
	write(t, mi, "MemAvailable:   23000000 kB\n")
	// This dev VM's shape: hybrid, v2's 0:: line at / with no memory.max.
	write(t, cg, "9:name=systemd:/\n5:devices:/\n4:cpuacct,memory:/process_api/abc\n0::/\n")
	esc := strings.ReplaceAll(mem, " ", "\\040")
	write(t, mounts, "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"+
		"32 31 0:29 / "+esc+"/cpu rw,relatime - cgroup cgroup rw,cpu\n"+
		"35 31 0:32 / "+esc+" rw,relatime - cgroup cgroup rw,cpuacct,memory\n")
	noLimit := "9223372036854771712\n"
	write(t, filepath.Join(mem, "process_api/abc/memory.limit_in_bytes"), noLimit)
	write(t, filepath.Join(mem, "process_api/abc/memory.usage_in_bytes"), "1132855296\n")
	write(t, filepath.Join(mem, "process_api/memory.limit_in_bytes"), noLimit)
	write(t, filepath.Join(mem, "process_api/memory.usage_in_bytes"), "2000000000\n")
	write(t, filepath.Join(mem, "memory.limit_in_bytes"), noLimit)
	write(t, filepath.Join(mem, "memory.usage_in_bytes"), "9000000000\n")
	if r, ok := available(p); !ok || r.Source != "MemAvailable" || r.Bytes != 23000000<<10 {
		t.Fatalf("no v1 limit: %+v %v", r, ok)
	}
	// A limit on the parent: it binds.
	write(t, filepath.Join(mem, "process_api/memory.limit_in_bytes"), "3000000000\n")
	if r, _ := available(p); r.Bytes != 1000000000 || r.Source != "cgroup v1 /process_api memory.limit_in_bytes" {
		t.Fatalf("parent's v1 limit: %+v", r)
	}
	// The process's own, tighter; and usage over a limit is no room.
	write(t, filepath.Join(mem, "process_api/abc/memory.limit_in_bytes"), "1000000\n")
	if r, _ := available(p); r.Bytes != 0 || r.Source != "cgroup v1 /process_api/abc memory.limit_in_bytes" {
		t.Fatalf("own v1 limit under usage: %+v", r)
	}

	// A container: its cgroup mounted as the mount's root.
	write(t, cg, "4:memory:/docker/ctr\n")
	write(t, mounts, "35 31 0:32 /docker/ctr "+esc+" ro - cgroup cgroup rw,memory\n")
	ctr := filepath.Join(dir, "ctr")
	if err := os.Rename(filepath.Join(mem), ctr); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(mem, "memory.limit_in_bytes"), "4000000000\n")
	write(t, filepath.Join(mem, "memory.usage_in_bytes"), "1000000000\n")
	if r, _ := available(p); r.Bytes != 3000000000 || r.Source != "cgroup v1 / memory.limit_in_bytes" {
		t.Fatalf("container's v1 limit: %+v", r)
	}
	// A mount root with a space, escaped in mountinfo as the mount
	// point is.
	write(t, cg, "4:memory:/docker/c tr\n")
	write(t, mounts, "35 31 0:32 /docker/c\\040tr "+esc+" ro - cgroup cgroup rw,memory\n")
	if r, _ := available(p); r.Bytes != 3000000000 || r.Source != "cgroup v1 / memory.limit_in_bytes" {
		t.Fatalf("escaped mount root: %+v", r)
	}
	write(t, cg, "4:memory:/docker/ctr\n")
	write(t, mounts, "35 31 0:32 /docker/ctr "+esc+" ro - cgroup cgroup rw,memory\n")
	// A path outside the mount's root, or climbing out with .., is not
	// taken; nor is a memory line with no memory mount.
	for _, line := range []string{"4:memory:/docker/other\n", "4:memory:/docker/ctr/../../etc\n"} {
		write(t, cg, line)
		if _, _, ok := cgroup1Dir(cg, mounts); ok {
			t.Errorf("%q taken", line)
		}
	}
	write(t, cg, "4:memory:/docker/ctr\n")
	write(t, mounts, "32 31 0:29 / "+esc+" rw - cgroup cgroup rw,cpu\n")
	if _, _, ok := cgroup1Dir(cg, mounts); ok {
		t.Error("a cgroup mount without the memory option taken")
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
