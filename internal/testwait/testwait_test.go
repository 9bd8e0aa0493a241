package testwait

import (
	"fmt"
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"time"
)

// fakeTB records a Fatalf and ends its goroutine, as testing.T does.
type fakeTB struct {
	testing.TB
	msg string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls fn with a fakeTB on a goroutine of its own and returns what it
// failed with ("" when it did not).
func run(fn func(tb testing.TB)) string {
	f := &fakeTB{}
	done := make(chan struct{})
	go func() { defer close(done); fn(f) }()
	<-done // fn returns or Goexits within its own bounded wait
	return f.msg
}

func TestRecv(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if msg := run(func(tb testing.TB) {
		if v := Recv(tb, ch, "a ready value", time.Second); v != 7 {
			t.Errorf("Recv = %d, want 7", v)
		}
	}); msg != "" {
		t.Fatalf("Recv of a ready value failed: %s", msg)
	}
	start := time.Now()
	msg := run(func(tb testing.TB) { Recv(tb, make(chan int), "nothing", 50*time.Millisecond) })
	if msg != "gave up after 50ms waiting for nothing" {
		t.Fatalf("Recv of nothing failed with %q", msg)
	}
	if d := time.Since(start); d < 50*time.Millisecond || d > 5*time.Second {
		t.Fatalf("Recv gave up after %v, want 50ms", d)
	}
}

func TestGroup(t *testing.T) {
	var wg sync.WaitGroup
	if msg := run(func(tb testing.TB) { Group(tb, &wg, "an empty group", time.Second) }); msg != "" {
		t.Fatalf("Group of a done group failed: %s", msg)
	}
	wg.Add(1)
	defer wg.Done()
	if msg := run(func(tb testing.TB) { Group(tb, &wg, "a member that never ends", 50*time.Millisecond) }); msg != "gave up after 50ms waiting for a member that never ends" {
		t.Fatalf("Group failed with %q", msg)
	}
}

func TestKillAndExited(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sleep(1): %v", err)
	}
	start := time.Now()
	if msg := run(func(tb testing.TB) { Kill(tb, cmd, "sleep 60", Deadline) }); msg != "" {
		t.Fatalf("Kill failed: %s", msg)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Kill took %v", d)
	}
	cmd = exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := Exited(cmd)
	if msg := run(func(tb testing.TB) { Recv(tb, exited, "sleep 60 to exit", 50*time.Millisecond) }); msg != "gave up after 50ms waiting for sleep 60 to exit" {
		t.Fatalf("Recv of a running process's exit failed with %q", msg)
	}
	cmd.Process.Kill()
	if msg := run(func(tb testing.TB) { Recv(tb, exited, "sleep 60 to exit after SIGKILL", Deadline) }); msg != "" {
		t.Fatalf("Exited after kill: %s", msg)
	}
}
