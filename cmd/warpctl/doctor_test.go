package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/internal/doctor"
	"github.com/warpflow/warpflow/internal/lab"
)

// doctorIn runs the built warpctl doctor in namespace ns through `ip
// netns exec` (which mounts sysfs for it, as the help says to).
func doctorIn(t *testing.T, bin, ns string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, bin, "doctor"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if errb.Len() > 0 {
		t.Logf("stderr: %s", errb.String())
	}
	return out.String(), code
}

func findingOf(t *testing.T, fs []doctor.Finding, iface, check string) doctor.Finding {
	t.Helper()
	for _, f := range fs {
		if f.Interface == iface && f.Check == check {
			return f
		}
	}
	t.Fatalf("no %s finding for %q", check, iface)
	return doctor.Finding{}
}

// TestDoctorOnLab: warpctl doctor on the lab's veths, one with an XDP
// program left on it on purpose, and on loopback. It must say copy mode
// and why (veth has no zero-copy: tried, refused, copy granted), find the
// leftover program with the command that removes it, read the NAPI
// settings through the namespace's sysfs, print one line per finding, and
// exit 1 on a FAIL and 0 without one.
func TestDoctorOnLab(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root, and CI=true forbids skipping")
		}
		t.Skip("needs root (netns, veth, XDP, AF_XDP)")
	}
	bin := filepath.Join(t.TempDir(), "warpctl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	b := make([]byte, 3)
	rand.Read(b)
	p := "dr" + hex.EncodeToString(b)
	topo, err := lab.Up(func() lab.Options { o := lab.DefaultOptions(); o.Prefix = p; return o }())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Down(p); err != nil {
			t.Error(err)
		}
	})
	ns := topo.DP0.Namespace
	if err := lab.AttachDrop(ns, topo.DP0.Name); err != nil { // the leftover
		t.Fatal(err)
	}

	js, code := doctorIn(t, bin, ns, "dp0", "dp1", "--json")
	var fs []doctor.Finding
	if err := json.Unmarshal([]byte(js), &fs); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, js)
	}
	if code != 1 {
		t.Errorf("exit %d with a FAIL, want 1", code)
	}
	left := findingOf(t, fs, "dp0", "xdp_attached")
	if left.Level != doctor.Fail || !strings.Contains(left.Message, "without a bpf_link") || left.Fix != "ip link set dev dp0 xdpdrv off" {
		t.Errorf("the leftover program: %+v", left)
	}
	for _, iface := range []string{"dp0", "dp1"} {
		zc := findingOf(t, fs, iface, "zero_copy")
		if zc.Level != doctor.Warn || !strings.HasPrefix(zc.Message, "copy mode:") || !strings.Contains(zc.Message, "veth has no AF_XDP zero-copy") ||
			!strings.Contains(zc.Message, "copy-mode bind was granted") {
			t.Errorf("%s zero-copy: %+v", iface, zc)
		}
		if f := findingOf(t, fs, iface, "napi"); f.Level != doctor.OK || !strings.HasPrefix(f.Message, "NAPI ") {
			t.Errorf("%s napi (sysfs through ip netns exec): %+v", iface, f)
		}
		if f := findingOf(t, fs, iface, "mtu"); f.Level != doctor.OK {
			t.Errorf("%s mtu 1500 with 4096-byte frames: %+v", iface, f)
		}
		if f := findingOf(t, fs, iface, "driver"); !strings.HasPrefix(f.Message, "veth ") {
			t.Errorf("%s driver: %+v", iface, f)
		}
	}
	if f := findingOf(t, fs, "", "capabilities"); f.Level != doctor.OK {
		t.Errorf("capabilities as root: %+v", f)
	}

	// The text form: one line per finding and the counts.
	text, code := doctorIn(t, bin, ns, "dp0", "dp1")
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if code != 1 || len(lines) != len(fs)+1 || lines[len(lines)-1] != doctor.Counts(fs) {
		t.Fatalf("text: exit %d, %d lines for %d findings:\n%s", code, len(lines), len(fs), text)
	}
	for _, l := range lines[:len(lines)-1] {
		if !strings.HasPrefix(l, "OK ") && !strings.HasPrefix(l, "WARN ") && !strings.HasPrefix(l, "FAIL ") {
			t.Errorf("line %q has no level", l)
		}
	}
	t.Logf("warpctl doctor dp0 dp1:\n%s", text)

	// The fix it printed, applied, leaves no FAIL: exit 0.
	if out, err := exec.Command("ip", "netns", "exec", ns, "ip", "link", "set", "dev", "dp0", "xdpdrv", "off").CombinedOutput(); err != nil {
		t.Fatalf("the printed fix: %v\n%s", err, out)
	}
	if text, code := doctorIn(t, bin, ns, "dp0", "dp1"); code != 0 || strings.Contains(text, "FAIL ") {
		t.Errorf("after the fix: exit %d\n%s", code, text)
	}

	// Loopback: generic XDP only, copy mode, and its 65536 MTU does not
	// fit a frame.
	js, code = doctorIn(t, bin, ns, "lo", "--json")
	fs = nil
	if err := json.Unmarshal([]byte(js), &fs); err != nil || code != 1 {
		t.Fatalf("doctor lo --json: exit %d %v\n%s", code, err, js)
	}
	if f := findingOf(t, fs, "lo", "mtu"); f.Level != doctor.Fail || !strings.Contains(f.Message, "mtu 65536") {
		t.Errorf("lo mtu: %+v", f)
	}
	if f := findingOf(t, fs, "lo", "zero_copy"); f.Level != doctor.Warn || !strings.HasPrefix(f.Message, "copy mode:") {
		t.Errorf("lo zero-copy: %+v", f)
	}
	if f := findingOf(t, fs, "lo", "xdp_modes"); f.Level == doctor.OK && !strings.Contains(f.Message, "does not say") {
		t.Errorf("lo xdp modes: %+v, want generic only (or unknown on a kernel before 6.3)", f)
	}
}
