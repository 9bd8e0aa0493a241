package xdp

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/warpflow/warpflow/internal/testwait"
)

const killChildEnv = "WARPFLOW_XDP_KILL_CHILD"

// TestHelperProcessAttach is the child of TestKilledProcessLeavesNothing:
// it attaches the program and a socket to the interface named in the
// environment, says "ready" and waits to be killed. Run on its own it does
// nothing.
func TestHelperProcessAttach(t *testing.T) {
	iface := os.Getenv(killChildEnv)
	if iface == "" {
		return
	}
	u, err := NewUMEM(UMEMOptions{Frames: 64, FrameSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSocket(u, smallOptions(iface, 0))
	if err != nil {
		t.Fatal(err)
	}
	p, err := LoadProgram(ProgramOptions{Interface: iface})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Register(0, s); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("ready\n")
	time.Sleep(30 * time.Second) // killed long before
	os.Exit(3)
}

// TestKilledProcessLeavesNothing: a process holding the program (through
// its bpf_link) and a socket on an interface is killed with SIGKILL; the
// interface is left without an XDP program and its queue free, so a new
// program and socket attach cleanly.
func TestKilledProcessLeavesNothing(t *testing.T) {
	requireRoot(t)
	inNewNetns(t)
	v := newVeth(t, "wfkill0", "wfkill1", 1)
	// The child is forked from this goroutine's thread, so it starts in
	// this test's network namespace.
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcessAttach$", "-test.count=1")
	cmd.Env = append(os.Environ(), killChildEnv+"="+v.name)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := testwait.Exited(cmd)
	t.Cleanup(func() {
		cmd.Process.Kill()
		testwait.Recv(t, exited, "the attaching child to exit after SIGKILL (cleanup)", testwait.Deadline)
	})
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- line
	}()
	select {
	case line := <-ready:
		if strings.TrimSpace(line) != "ready" {
			t.Fatalf("child said %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("child not ready in 10s")
	}
	if !hasXDP(t, v.name) {
		t.Fatal("child's program is not attached")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testwait.Recv(t, exited, "the attaching child to exit after SIGKILL", testwait.Deadline)
	start := time.Now()
	for hasXDP(t, v.name) && time.Since(start) < time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	if hasXDP(t, v.name) {
		t.Fatalf("%s still has an XDP program 1s after its owner was killed", v.name)
	}
	u := newTestUMEM(t, 64)
	s := newTestSocket(t, u, smallOptions(v.name, 0)) // queue free again (NewSocket rides out the deferred release)
	p := newTestProgram(t, v.name)
	if err := p.Register(0, s); err != nil {
		t.Fatal(err)
	}
}

func hasXDP(t *testing.T, iface string) bool {
	t.Helper()
	l, err := netlink.LinkByName(iface)
	if err != nil {
		t.Fatal(err)
	}
	x := l.Attrs().Xdp
	return x != nil && x.Attached
}
