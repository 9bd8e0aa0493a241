package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/internal/gen"
	"github.com/warpflow/warpflow/internal/lab"
)

func TestLabGenUsage(t *testing.T) {
	for _, args := range [][]string{
		{"lab", "up", "--napi", "busy"},
		{"lab", "up", "--prefix", "Bad-Prefix"},
		{"lab", "xdp-pass", "eth0"},
		{"gen", "--count", "0"},
		{"gen", "--duration", "0s"},
		{"gen", "--size", "63"},
		{"gen", "--engine", "dpdk"},
		{"gen", "--dst-mac", "zz"},
		{"gen", "--src-ip", "::1"},
	} {
		_, errOut, code := run(t, args...)
		if code != codeUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, codeUsage, errOut)
		}
	}
}

// TestLabGenCommands runs the README's lab commands end to end (root).
func TestLabGenCommands(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root, and CI=true forbids skipping")
		}
		t.Skip("needs root (netns, veth, XDP)")
	}
	b := make([]byte, 2)
	rand.Read(b)
	p := "wt" + hex.EncodeToString(b)
	t.Cleanup(func() { lab.Down(p) })

	out, errOut, code := run(t, "lab", "up", "--prefix", p)
	if code != 0 || !strings.Contains(out, "lab "+p+" up") {
		t.Fatalf("lab up: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := run(t, "lab", "up", "--prefix", p); code != codeFailed || !strings.Contains(errOut, "already exists") {
		t.Errorf("second lab up: exit %d: %s", code, errOut)
	}
	out, _, code = run(t, "lab", "status", "--prefix", p, "--json")
	var st lab.State
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || !st.Complete {
		t.Fatalf("lab status --json: exit %d\n%s", code, out)
	}
	if l, _ := st.Link("sink0"); l.XDP == nil || l.XDP.Name != lab.PassProgramName {
		t.Errorf("sink0 xdp: %+v", l.XDP)
	}

	// Into a bare dp0 the live engine's frames vanish, and gen says so.
	out, errOut, code = run(t, "gen", "--netns", lab.GenNS(p), "--count", "1000")
	if code != 0 || !strings.Contains(out, "sent 1000 frames") || !strings.Contains(errOut, "vanished") {
		t.Errorf("gen into bare dp0: exit %d\n%s%s", code, out, errOut)
	}
	// The drop program stays on dp0 until removed, and says how.
	remove := "warpctl lab xdp-pass --prefix " + p + " --remove dp0"
	if out, errOut, code := run(t, "lab", "xdp-pass", "--prefix", p, "--drop", "dp0"); code != 0 || !strings.Contains(out, remove) {
		t.Fatalf("xdp-pass: exit %d, want the command that removes it (%s):\n%s%s", code, remove, out, errOut)
	}
	for _, engine := range []string{"live", "afxdp"} {
		out, errOut, code = run(t, "gen", "--netns", lab.GenNS(p), "--engine", engine, "--count", "5000", "--flows", "7", "--json")
		var res gen.Result
		if code != 0 || json.Unmarshal([]byte(out), &res) != nil {
			t.Fatalf("gen --engine %s --json: exit %d\n%s%s", engine, code, out, errOut)
		}
		if res.Sent != 5000 || res.IfaceTXPackets != 5000 || len(res.Warnings) != 0 || res.Stopped != "count" {
			t.Errorf("gen --engine %s: %+v", engine, res)
		}
	}
	out, _, code = run(t, "lab", "status", "--prefix", p)
	if code != 0 || !strings.Contains(out, "the lab's "+lab.DropProgramName+" is on dp0: warpflowd cannot attach there until "+remove) {
		t.Errorf("status after xdp-pass --drop, want the leftover named with its fix:\n%s", out)
	}
	if out, errOut, code := run(t, "lab", "xdp-pass", "--prefix", p, "--remove", "dp0"); code != 0 {
		t.Fatalf("xdp-pass --remove: exit %d %s%s", code, out, errOut)
	}
	out, _, code = run(t, "lab", "status", "--prefix", p)
	if code != 0 || strings.Contains(out, lab.DropProgramName) || strings.Contains(out, "cannot attach") {
		t.Errorf("status after xdp-pass --remove:\n%s", out)
	}
	if out, _, code := run(t, "lab", "down", "--prefix", p); code != 0 || !strings.Contains(out, "removed") {
		t.Errorf("lab down: exit %d %s", code, out)
	}
	if out, _, code := run(t, "lab", "down", "--prefix", p); code != 0 || !strings.Contains(out, "nothing to remove") {
		t.Errorf("second lab down: exit %d %s", code, out)
	}
	if out, _, code := run(t, "lab", "status", "--prefix", p); code != 0 || !strings.Contains(out, "not up") {
		t.Errorf("status after down: exit %d %s", code, out)
	}
}
