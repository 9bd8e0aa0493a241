package doctor

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/warpflow/warpflow/internal/image"
	"github.com/warpflow/warpflow/internal/lab"
)

// Required is the unit's list: doctor checks for what the daemon is
// really given.
func TestRequiredMatchesUnit(t *testing.T) {
	caps, err := image.UnitCapabilities("../../cmd/warpflowd/warpflowd.service")
	if err != nil {
		t.Fatal(err)
	}
	a, b := slices.Clone(caps), slices.Clone(Required)
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) {
		t.Fatalf("doctor.Required %v, the unit grants %v: keep them the same", Required, caps)
	}
}

func TestFindingsText(t *testing.T) {
	fs := []Finding{
		{Check: "kernel", Level: OK, Message: "Linux 6.1"},
		{Interface: "dp0", Check: "mtu", Level: Fail, Message: "too big", Fix: "ip link set dev dp0 mtu 1500"},
		{Interface: "dp0", Check: "zero_copy", Level: Warn, Message: "copy mode"},
	}
	if got := fs[1].String(); got != "FAIL dp0 mtu: too big; fix: ip link set dev dp0 mtu 1500" {
		t.Errorf("%q", got)
	}
	if got := fs[0].String(); got != "OK   - kernel: Linux 6.1" {
		t.Errorf("%q", got)
	}
	if !Failed(fs) || Failed(fs[2:]) || Counts(fs) != "1 OK, 1 WARN, 1 FAIL" {
		t.Errorf("Failed %v %v, counts %s", Failed(fs), Failed(fs[2:]), Counts(fs))
	}
	for _, o := range []Options{{FrameSize: 1000}, {FrameSize: 4096, Queue: -1}} {
		if _, err := Run(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if got := symmetricKey(4); got != "6d:5a:6d:5a" {
		t.Errorf("symmetric key %q", got)
	}
}

func find(t *testing.T, fs []Finding, iface, check string) Finding {
	t.Helper()
	for _, f := range fs {
		if f.Interface == iface && f.Check == check {
			return f
		}
	}
	t.Fatalf("no %s finding for %q in %v", check, iface, fs)
	return Finding{}
}

// TestAttachedPrograms: on the lab's veths, in their namespace, a program
// left attached without a bpf_link and one held through a bpf_link by
// this process are both FAIL with their own fix; a missing interface is
// FAIL; and with nothing attached the finding is OK.
func TestAttachedPrograms(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root, and CI runs as root: not skipping under CI=true")
		}
		t.Skip("needs root (a lab of namespaces and veths)")
	}
	var b [3]byte
	rand.Read(b[:])
	o := lab.DefaultOptions()
	o.Prefix = "o" + hex.EncodeToString(b[:])
	topo, err := lab.Up(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Down(o.Prefix); err != nil {
			t.Error(err)
		}
	})
	ns := topo.DP0.Namespace
	if err := lab.AttachPass(ns, topo.DP0.Name); err != nil { // the leftover
		t.Fatal(err)
	}
	err = lab.Do(ns, func() error {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "someone_else", Type: ebpf.XDP, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}})
		if err != nil {
			return err
		}
		defer prog.Close()
		l, err := netlink.LinkByName(topo.DP1.Name)
		if err != nil {
			return err
		}
		xl, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: l.Attrs().Index, Flags: link.XDPDriverMode})
		if err != nil {
			return err
		}
		defer xl.Close()
		fs, err := Run(Options{Interfaces: []string{topo.DP0.Name, topo.DP1.Name, "nosuch0"}, FrameSize: 4096, Try: false})
		if err != nil {
			return err
		}
		for _, f := range fs {
			t.Log(f)
		}
		left := find(t, fs, topo.DP0.Name, "xdp_attached")
		if left.Level != Fail || !strings.Contains(left.Message, "without a bpf_link") || left.Fix != "ip link set dev dp0 xdpdrv off" {
			t.Errorf("leftover on dp0: %+v", left)
		}
		held := find(t, fs, topo.DP1.Name, "xdp_attached")
		if held.Level != Fail || !strings.Contains(held.Message, `"someone_else"`) || !strings.Contains(held.Message, "through bpf_link") || !strings.Contains(held.Fix, "bpf_link") {
			t.Errorf("bpf_link on dp1: %+v", held)
		}
		if f := find(t, fs, "nosuch0", "link"); f.Level != Fail {
			t.Errorf("a missing interface: %+v", f)
		}
		if f := find(t, fs, topo.DP1.Name, "zero_copy"); f.Level != OK || !strings.Contains(f.Message, "not tried") {
			t.Errorf("zero_copy with Try off: %+v", f)
		}
		// sysfs here is the host's, not the lab namespace's.
		if f := find(t, fs, topo.DP1.Name, "napi"); f.Level != Warn || !strings.Contains(f.Fix, "ip netns exec") {
			t.Errorf("napi read through another namespace's sysfs: %+v", f)
		}
		xl.Close()
		if err := lab.DetachXDP(ns, topo.DP0.Name); err != nil {
			return err
		}
		fs, err = Run(Options{Interfaces: []string{topo.DP0.Name, topo.DP1.Name}, FrameSize: 4096})
		if err != nil {
			return err
		}
		for _, n := range []string{topo.DP0.Name, topo.DP1.Name} {
			if f := find(t, fs, n, "xdp_attached"); f.Level != OK {
				t.Errorf("%s after the programs went: %+v", n, f)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
