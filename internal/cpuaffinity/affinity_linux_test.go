package cpuaffinity

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warpflow/warpflow/internal/testwait"
	"golang.org/x/sys/unix"
)

// onLockedThread runs fn on a fresh goroutine locked to its OS thread and
// never unlocked, so a thread fn pins dies with the goroutine instead of
// going back to the runtime. It waits at most 10 s.
func onLockedThread(t *testing.T, fn func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		done <- fn()
	}()
	if err := testwait.Recv(t, done, "the locked goroutine to finish", 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

func allowed(t *testing.T) []int {
	t.Helper()
	var cpus []int
	onLockedThread(t, func() (err error) {
		cpus, err = ThreadCPUs()
		return err
	})
	if len(cpus) == 0 {
		t.Fatal("this thread may run on no CPU")
	}
	return cpus
}

// TestPinThread pins a locked thread to the last CPU it may use and reads
// the mask back, by the calling thread and by its TID, and checks that a
// thread locked meanwhile keeps the whole set: pinning is per thread.
func TestPinThread(t *testing.T) {
	all := allowed(t)
	cpu := all[len(all)-1]
	release := make(chan struct{})
	defer close(release)
	pinned := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the pinned thread dies with us
		pinned <- func() error {
			if err := PinThread(cpu); err != nil {
				return err
			}
			got, err := ThreadCPUs()
			if err != nil {
				return err
			}
			if !slices.Equal(got, []int{cpu}) {
				return fmt.Errorf("after PinThread(%d) the thread may run on %v", cpu, got)
			}
			byTID, err := TaskCPUs(unix.Gettid())
			if err != nil {
				return err
			}
			if !slices.Equal(byTID, []int{cpu}) {
				return fmt.Errorf("after PinThread(%d) TaskCPUs(own tid) = %v", cpu, byTID)
			}
			return nil
		}()
		select { // stay pinned while the other thread looks
		case <-release:
		case <-time.After(10 * time.Second):
		}
	}()
	if err := testwait.Recv(t, pinned, "the pinning goroutine to report", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if other := allowed(t); !slices.Equal(other, all) {
		t.Fatalf("another thread, while one is pinned to %d, may run on %v, want %v", cpu, other, all)
	}
}

// TestPinForbiddenCPU: a CPU in range that the kernel will not grant is
// EINVAL naming the CPU, and the thread's mask is left as it was.
func TestPinForbiddenCPU(t *testing.T) {
	all := allowed(t)
	bad := MaxCPU - 1
	if slices.Contains(all, bad) {
		t.Skipf("skipping: this machine allows CPU %d, so there is no forbidden CPU to try", bad)
	}
	onLockedThread(t, func() error {
		err := PinThread(bad)
		if !errors.Is(err, syscall.EINVAL) || err.Error() != "pin to cpu 4095: sched_setaffinity: invalid argument" {
			return fmt.Errorf("PinThread(%d) = %v, want EINVAL naming cpu 4095", bad, err)
		}
		if got, err := ThreadCPUs(); err != nil || !slices.Equal(got, all) {
			return fmt.Errorf("after a refused pin the thread may run on %v (%v), want %v", got, err, all)
		}
		return nil
	})
}

func TestNoSuchTask(t *testing.T) {
	const tid = 1 << 30 // above any pid_max (at most 2^22)
	if err := PinTask(tid, 0); !errors.Is(err, unix.ESRCH) || !strings.Contains(err.Error(), "pin task 1073741824 to cpu 0") {
		t.Errorf("PinTask(%d, 0) = %v, want ESRCH naming the task", tid, err)
	}
	if _, err := TaskCPUs(tid); !errors.Is(err, unix.ESRCH) || !strings.Contains(err.Error(), "task 1073741824") {
		t.Errorf("TaskCPUs(%d) = %v, want ESRCH naming the task", tid, err)
	}
	if err := PinProcess(tid, 0); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "process 1073741824") {
		t.Errorf("PinProcess(%d, 0) = %v, want not-exist naming the process", tid, err)
	}
}

// The helper child: the test binary run again with helperEnv set. With
// "wait" it prints "ready" and waits for stdin to close; with "self:CPU"
// it pins its own process to CPU, starts fresh locked threads, and
// prints where they (and all its threads) may run.
const helperEnv = "WARPFLOW_CPUAFFINITY_HELPER"

func TestMain(m *testing.M) {
	switch mode := os.Getenv(helperEnv); {
	case mode == "":
		os.Exit(m.Run())
	case mode == "wait":
		fmt.Println("ready")
		done := make(chan struct{})
		go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
		os.Exit(0)
	case strings.HasPrefix(mode, "self:"):
		cpu, _ := strconv.Atoi(strings.TrimPrefix(mode, "self:"))
		if err := PinProcess(0, cpu); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		// Threads made from now on inherit cpu: lock a few goroutines at
		// once so the runtime must make new threads for them.
		const n = 4
		out := make(chan string, n)
		hold := make(chan struct{})
		for range n {
			go func() {
				runtime.LockOSThread()
				got, err := ThreadCPUs()
				out <- fmt.Sprint(got, err)
				<-hold
			}()
		}
		for range n {
			fmt.Println("new thread:", <-out)
		}
		// Read the masks while the locked goroutines still hold their
		// threads: a locked goroutine that returns takes its thread with
		// it, and a thread gone between the readdir and the read is ESRCH.
		fmt.Println("threads:", threadMasks(os.Getpid()))
		close(hold)
		os.Exit(0)
	}
}

// threadMasks describes every thread of pid as TID=CPUS, one per thread.
func threadMasks(pid int) string {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, e := range tasks {
		tid, _ := strconv.Atoi(e.Name())
		cpus, err := TaskCPUs(tid)
		if errors.Is(err, unix.ESRCH) {
			continue // exited since the readdir: it runs nowhere
		}
		if err != nil {
			parts = append(parts, fmt.Sprintf("%d=error:%s", tid, strings.ReplaceAll(err.Error(), " ", "_")))
			continue
		}
		parts = append(parts, fmt.Sprintf("%d=%v", tid, cpus))
	}
	return strings.Join(parts, " ")
}

// TestPinProcessOther pins every thread of another (Go, so several
// threads) process and reads each one back.
func TestPinProcessOther(t *testing.T) {
	all := allowed(t)
	cpu := all[len(all)-1]
	// The context kills the helper should the deferred wait below time out.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=wait")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	defer func() {
		stdin.Close()
		select {
		case <-waited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			testwait.Recv(t, waited, "the helper process to exit after SIGKILL", testwait.Deadline)
		}
	}()
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
		io.Copy(io.Discard, stdout)
		waited <- cmd.Wait()
	}()
	if line := testwait.Recv(t, ready, "the helper process to say ready", 10*time.Second); line != "ready\n" {
		t.Fatalf("helper said %q", line)
	}
	if err := PinProcess(cmd.Process.Pid, cpu); err != nil {
		t.Fatal(err)
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tasks {
		tid, _ := strconv.Atoi(e.Name())
		got, err := TaskCPUs(tid)
		if err != nil && !errors.Is(err, unix.ESRCH) {
			t.Fatal(err)
		}
		if err == nil && !slices.Equal(got, []int{cpu}) {
			t.Errorf("helper thread %d may run on %v after PinProcess(%d)", tid, got, cpu)
		}
	}
	t.Logf("pinned %d threads of the helper to cpu %d (allowed %v)", len(tasks), cpu, all)
}

// TestPinProcessSelfInherited: a process that pins itself keeps every
// thread, and every thread it makes afterwards, on the CPU. Run in a
// child so this test's own process stays unpinned.
func TestPinProcessSelfInherited(t *testing.T) {
	all := allowed(t)
	cpu := all[len(all)-1]
	// The context kills a helper that hangs: Output then returns.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=self:%d", helperEnv, cpu))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	want := fmt.Sprint([]int{cpu})
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 5 {
		t.Fatalf("helper said:\n%s", out)
	}
	for _, l := range lines[:4] {
		if l != "new thread: "+want+" <nil>" {
			t.Errorf("helper: %q, want every new thread on %s", l, want)
		}
	}
	for _, f := range strings.Fields(strings.TrimPrefix(lines[4], "threads: ")) {
		if _, cpus, _ := strings.Cut(f, "="); cpus != want {
			t.Errorf("helper thread %s, want %s", f, want)
		}
	}
}
