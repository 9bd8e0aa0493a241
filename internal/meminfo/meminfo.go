package meminfo

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Room is how much memory a process may still allocate, and what said so.
type Room struct {
	Bytes uint64
	// Source names the bound that gave Bytes: "MemAvailable",
	// "cgroup <path> memory.max" or "cgroup v1 <path>
	// memory.limit_in_bytes".
	Source string
}

// Available returns the room this process has now. ok is false where
// neither bound can be read (not Linux, no /proc): then nothing is known
// and a caller should not refuse on it.
func Available() (r Room, ok bool) {
	return available(paths{
		meminfo: "/proc/meminfo", cgroup: "/proc/self/cgroup",
		cgroup2Root: "/sys/fs/cgroup", mountinfo: "/proc/self/mountinfo",
	})
}

// paths names the files Available reads (tests give their own).
type paths struct {
	meminfo, cgroup, cgroup2Root, mountinfo string
}

func available(p paths) (r Room, ok bool) {
	if b, err := os.ReadFile(p.meminfo); err == nil {
		if v, found := memAvailable(b); found {
			r, ok = Room{Bytes: v, Source: "MemAvailable"}, true
		}
	}
	take := func(left uint64, source string) {
		if !ok || left < r.Bytes {
			r, ok = Room{Bytes: left, Source: source}, true
		}
	}
	if dir, found := cgroupDir(p.cgroup, p.cgroup2Root); found {
		if left, by, limited := cgroupRoom(dir, p.cgroup2Root, v2Files); limited {
			take(left, fmt.Sprintf("cgroup %s memory.max", cgroupName(p.cgroup2Root, by)))
		}
	}
	// A cgroup v1 memory controller (hybrid and legacy hosts, older
	// container runtimes): its limit binds as v2's does, and so do its
	// parents' (v1's hierarchical mode, the only one since Linux 5.11,
	// which removed memory.use_hierarchy=0). A process is under one or
	// the other for memory, never both.
	if dir, mount, found := cgroup1Dir(p.cgroup, p.mountinfo); found {
		if left, by, limited := cgroupRoom(dir, mount, v1Files); limited {
			take(left, fmt.Sprintf("cgroup v1 %s memory.limit_in_bytes", cgroupName(mount, by)))
		}
	}
	return r, ok
}

// cgroupName is cgroup directory dir as the cgroup's path under its
// mount (root): "/", "/system.slice/x.service".
func cgroupName(root, dir string) string {
	rel, _ := filepath.Rel(filepath.Clean(root), dir)
	return "/" + strings.TrimPrefix(rel, ".")
}

// memAvailable reads MemAvailable (in kB) from /proc/meminfo's text.
func memAvailable(b []byte) (uint64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemAvailable:" {
			v, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil || v > 1<<53 {
				return 0, false
			}
			return v << 10, true
		}
	}
	return 0, false
}

// cgroupDir is this process's cgroup v2 directory (the "0::" line of
// /proc/self/cgroup under the cgroup2 mount), if there is one.
func cgroupDir(cgroupPath, root string) (string, bool) {
	b, err := os.ReadFile(cgroupPath)
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, found := strings.CutPrefix(line, "0::"); found {
			dir := filepath.Join(root, filepath.Clean("/"+rest))
			if _, err := os.Stat(filepath.Join(dir, "memory.max")); err != nil {
				return "", false
			}
			return dir, true
		}
	}
	return "", false
}

// cgroupFiles names a cgroup version's limit and usage files.
type cgroupFiles struct{ limit, usage string }

var (
	v2Files = cgroupFiles{"memory.max", "memory.current"}
	v1Files = cgroupFiles{"memory.limit_in_bytes", "memory.usage_in_bytes"}
)

// cgroupRoom is the smallest room left under the limit of dir and of each
// cgroup above it up to root (a parent's limit binds its children too),
// and the cgroup that sets it; limited is false when none sets one.
func cgroupRoom(dir, root string, files cgroupFiles) (left uint64, by string, limited bool) {
	root = filepath.Clean(root)
	for d := dir; ; d = filepath.Dir(d) {
		max, errMax := readCgroupValue(filepath.Join(d, files.limit))
		cur, errCur := readCgroupValue(filepath.Join(d, files.usage))
		if errMax == nil && errCur == nil && max < v1NoLimit {
			room := uint64(0)
			if max > cur {
				room = max - cur
			}
			if !limited || room < left {
				left, by, limited = room, d, true
			}
		}
		if d == root || !strings.HasPrefix(d, root+"/") {
			return left, by, limited
		}
	}
}

// v1NoLimit: cgroup v1 writes no limit as the largest page count in
// bytes (9223372036854771712 with 4 KiB pages), not as a word; any
// limit from 2^62 bytes up is none.
const v1NoLimit = 1 << 62

// memoryLine1 is the cgroup path on /proc/self/cgroup's v1 line whose
// controllers include memory.
func memoryLine1(cgroupText string) (string, bool) {
	for _, line := range strings.Split(cgroupText, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || f[0] == "0" {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == "memory" {
				return f[2], true
			}
		}
	}
	return "", false
}

// cgroup1Dir is this process's cgroup v1 memory directory: its path
// (memoryLine1) under the mount of a cgroup (v1) file system with the
// memory option, less the mount's own root (a container sees its cgroup
// mounted as its root). It returns the mount point too, where
// cgroupRoom's walk up stops.
func cgroup1Dir(cgroupPath, mountinfoPath string) (dir, mount string, ok bool) {
	b, err := os.ReadFile(cgroupPath)
	if err != nil {
		return "", "", false
	}
	path, found := memoryLine1(string(b))
	if !found {
		return "", "", false
	}
	path = filepath.Clean("/" + path)
	mi, err := os.ReadFile(mountinfoPath)
	if err != nil {
		return "", "", false
	}
	for _, line := range strings.Split(string(mi), "\n") {
		// ID parent major:minor root mountpoint options [optional...] - fstype source superoptions
		pre, post, found := strings.Cut(line, " - ")
		if !found {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 || qf[0] != "cgroup" || !slices.Contains(strings.Split(qf[2], ","), "memory") {
			continue
		}
		root, point := filepath.Clean(unescapeMount(pf[3])), unescapeMount(pf[4])
		rel := path
		if root != "/" {
			if path != root && !strings.HasPrefix(path, root+"/") {
				continue // another part of the hierarchy
			}
			rel = "/" + strings.TrimPrefix(strings.TrimPrefix(path, root), "/")
		}
		dir := filepath.Join(point, rel)
		if _, err := os.Stat(filepath.Join(dir, v1Files.limit)); err != nil {
			return "", "", false
		}
		return dir, point, true
	}
	return "", "", false
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space and
// the like) in a mount's root or mount point.
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		out.WriteByte(s[i])
	}
	return out.String()
}

// noLimit is memory.max's "max" (at or over v1NoLimit: no limit).
const noLimit = ^uint64(0)

func readCgroupValue(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return noLimit, nil
	}
	return strconv.ParseUint(s, 10, 64)
}
