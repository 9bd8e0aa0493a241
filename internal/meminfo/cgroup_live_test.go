package meminfo

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAvailableInCgroup (root) runs Available in a process placed in a
// memory cgroup of its own with a 256 MiB limit, made here: cgroup v2
// where the host's unified hierarchy has the memory controller, else the
// v1 memory hierarchy (this project's dev VM is hybrid: v1 memory). The
// room it reports must be bound by that cgroup and name it: the
// end-to-end check of what TestAvailable and TestAvailableCgroup1 check on
// synthetic trees.
func TestAvailableInCgroup(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		availableChild()
		return
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root, and CI runs as root: not skipping under CI=true")
		}
		t.Skip("needs root (makes a memory cgroup)")
	}
	const limit = 256 << 20
	name := fmt.Sprintf("warpflow-meminfo-test-%d", os.Getpid())
	dir, v1, err := makeMemoryCgroup(name, limit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroup(t, dir) })

	cmd := exec.Command(os.Args[0], "-test.run=^TestAvailableInCgroup$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), "room "); ok {
				lines <- l
			}
		}
		exited <- cmd.Wait()
	}()
	// Into the cgroup before it reads anything: it waits for a line.
	procs := filepath.Join(dir, "cgroup.procs")
	if err := os.WriteFile(procs, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		cmd.Process.Kill()
		t.Fatalf("move the child into %s: %v", dir, err)
	}
	fmt.Fprintln(stdin, "go")
	var line string
	select {
	case line = <-lines:
	case err := <-exited:
		t.Fatalf("child exited without a room line: %v", err)
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("no room line from the child in 30 s")
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("child: %v", err)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("child did not exit in 30 s")
	}
	bytesStr, source, _ := strings.Cut(line, " ")
	got, err := strconv.ParseUint(bytesStr, 10, 64)
	if err != nil {
		t.Fatalf("room line %q", line)
	}
	want := "cgroup /" + name + " memory.max"
	if v1 {
		want = "cgroup v1 /" + name + " memory.limit_in_bytes"
	}
	// The room is the limit less what the child already uses (its
	// runtime, charged to the cgroup since it moved).
	if source != want || got > limit || got < limit/2 {
		t.Fatalf("room %d from %q, want at most %d (and not under half) from %q", got, source, limit, want)
	}
	t.Logf("%s cgroup: %d bytes of room from %q", map[bool]string{true: "v1", false: "v2"}[v1], got, source)
}

const childEnv = "WARPFLOW_MEMINFO_CHILD"

// availableChild is the test's child: it waits to be moved into the
// cgroup, then prints what Available says.
func availableChild() {
	bufio.NewReader(os.Stdin).ReadString('\n')
	r, ok := Available()
	if !ok {
		fmt.Println("room 0 unknown")
		return
	}
	fmt.Printf("room %d %s\n", r.Bytes, r.Source)
}

// makeMemoryCgroup makes cgroup name with a memory limit: under the
// cgroup v2 root where it has the memory controller (enabling it for
// children if need be), else under the v1 memory hierarchy.
func makeMemoryCgroup(name string, limit uint64) (dir string, v1 bool, err error) {
	const v2root, v1root = "/sys/fs/cgroup", "/sys/fs/cgroup/memory"
	parent, files := v2root, v2Files
	if c, err := os.ReadFile(filepath.Join(v2root, "cgroup.controllers")); err == nil && slices.Contains(strings.Fields(string(c)), "memory") {
		sub := filepath.Join(v2root, "cgroup.subtree_control")
		if s, err := os.ReadFile(sub); err == nil && !slices.Contains(strings.Fields(string(s)), "memory") {
			if err := os.WriteFile(sub, []byte("+memory"), 0o644); err != nil {
				return "", false, fmt.Errorf("enable the memory controller in %s: %w", sub, err)
			}
		}
	} else if _, err := os.Stat(filepath.Join(v1root, v1Files.limit)); err == nil {
		parent, files, v1 = v1root, v1Files, true
	} else {
		return "", false, errors.New("no memory controller: neither /sys/fs/cgroup (v2) has it nor /sys/fs/cgroup/memory (v1) exists")
	}
	dir = filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", false, err
	}
	if err := os.WriteFile(filepath.Join(dir, files.limit), []byte(strconv.FormatUint(limit, 10)), 0o644); err != nil {
		os.Remove(dir)
		return "", false, err
	}
	return dir, v1, nil
}

// removeCgroup removes dir once its processes are gone (the child has
// been waited for; the kernel may take a moment to let go).
func removeCgroup(t *testing.T, dir string) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("remove %s: %v", dir, err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
