package xdp

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/warpflow/warpflow/internal/testwait"
)

// TestBusyHintWorksFromTheHost: a daemon started inside a named network
// namespace (nsenter --net=/run/netns/NAME, as the README runs warpflowd
// on the lab) that finds an interface taken by a leftover program says
// which program it is and gives a detach command that works from the
// host's namespace, where the user types it: `ip -n NAME link set dev IF
// xdp off` (without -n it fails there with "Cannot find device"). The test
// runs the command from the host's namespace and checks that the program
// is gone and the daemon's program then attaches.
func TestBusyHintWorksFromTheHost(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("needs ip(8) (iproute2; .ci/run installs it): %v", err)
	}
	var b [3]byte
	rand.Read(b[:])
	name := "wfhint" + hex.EncodeToString(b[:])
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	ns, err := netns.NewNamed(name) // also moves this thread into it
	if err != nil {
		orig.Close()
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ns.Close()
		if err := netns.Set(orig); err != nil {
			t.Errorf("restore netns: %v", err)
			return
		}
		orig.Close()
		runtime.UnlockOSThread()
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("delete netns %s: %v", name, err)
		}
	})
	newVeth(t, "wfhint0", "wfhint1", 1)
	leftover, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "wf_leftover", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1 /* XDP_DROP */), asm.Return()},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer leftover.Close()
	l, err := netlink.LinkByName("wfhint0")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetXdpFdWithFlags(l, leftover.FD(), 4 /* XDP_FLAGS_DRV_MODE */); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netlink.LinkSetXdpFdWithFlags(l, -1, 4) })

	_, err = LoadProgram(ProgramOptions{Interface: "wfhint0"})
	want := "ip -n " + name + " link set dev wfhint0 xdp off"
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "wf_leftover") {
		t.Fatalf("LoadProgram over a leftover = %v, want ErrBusy naming the program and %q", err, want)
	}
	// The user types the fix in the host's namespace: a goroutine of its
	// own runs on a thread that never left it.
	out := make(chan error, 1)
	go func() {
		o, err := exec.Command("sh", "-c", want).CombinedOutput()
		if err != nil {
			err = errors.New(err.Error() + ": " + string(o))
		}
		out <- err
	}()
	if err := testwait.Recv(t, out, "the hint's command in the host's namespace", testwait.Deadline); err != nil {
		t.Fatalf("%s from the host's namespace: %v", want, err)
	}
	p, err := LoadProgram(ProgramOptions{Interface: "wfhint0"})
	if err != nil {
		t.Fatalf("LoadProgram after the hint's command: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}
