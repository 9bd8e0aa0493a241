package meminfo

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Room is how much memory a process may still allocate, and what said so.
type Room struct {
	Bytes uint64
	// Source names the bound that gave Bytes: "MemAvailable" or
	// "cgroup <path> memory.max".
	Source string
}

// Available returns the room this process has now. ok is false where
// neither bound can be read (not Linux, no /proc): then nothing is known
// and a caller should not refuse on it.
func Available() (r Room, ok bool) {
	return available("/proc/meminfo", "/proc/self/cgroup", "/sys/fs/cgroup")
}

// available is Available with its files named (tests give their own).
func available(meminfoPath, cgroupPath, cgroupRoot string) (r Room, ok bool) {
	if b, err := os.ReadFile(meminfoPath); err == nil {
		if v, found := memAvailable(b); found {
			r, ok = Room{Bytes: v, Source: "MemAvailable"}, true
		}
	}
	if dir, found := cgroupDir(cgroupPath, cgroupRoot); found {
		if left, by, limited := cgroupRoom(dir, cgroupRoot); limited && (!ok || left < r.Bytes) {
			rel, _ := filepath.Rel(filepath.Clean(cgroupRoot), by)
			r, ok = Room{Bytes: left, Source: fmt.Sprintf("cgroup /%s memory.max", strings.TrimPrefix(rel, "."))}, true
		}
	}
	return r, ok
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

// cgroupRoom is the smallest room left under the memory.max of dir and
// of each cgroup above it up to root (a parent's limit binds its
// children too), and the cgroup that sets it; limited is false when none
// sets one.
func cgroupRoom(dir, root string) (left uint64, by string, limited bool) {
	root = filepath.Clean(root)
	for d := dir; ; d = filepath.Dir(d) {
		max, errMax := readCgroupValue(filepath.Join(d, "memory.max"))
		cur, errCur := readCgroupValue(filepath.Join(d, "memory.current"))
		if errMax == nil && errCur == nil && max != noLimit {
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

// noLimit is memory.max's "max".
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
