package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/dataplane"
)

var _ = dataplane.Report{}

// run executes warpctl in-process and returns stdout, stderr and the exit
// code main would use.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := newRootCommand()
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs(args)
	err := cmd.Execute()
	if err != nil {
		errb.WriteString(err.Error() + "\n")
	}
	return out.String(), errb.String(), exitCode(err)
}

func TestEmbeddedSampleMatchesTestdata(t *testing.T) {
	want, err := os.ReadFile("../../testdata/captures/mixed.pcap")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sampleCapture, want) {
		t.Fatal("cmd/warpctl/sample.pcap differs from testdata/captures/mixed.pcap: copy it again after regenerating")
	}
}

// TestReplayDefault is the README's first command: replay the embedded
// sample through the embedded default pipeline.
func TestReplayDefault(t *testing.T) {
	out, errOut, code := run(t, "replay")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"pipeline \"default\"", "STAGE", "parse", "acl", "VERDICT", "tx out0", "drop telnet", "pass", "accounting OK"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestReplayJSON(t *testing.T) {
	out, errOut, code := run(t, "replay", "--json", "--workers", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res replayJSON
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not a JSON result: %v\n%s", err, out)
	}
	if len(res.Captures) != 1 || res.Captures[0].Report == nil || res.Captures[0].Error != "" {
		t.Fatalf("unexpected result: %s", out)
	}
	rep := res.Captures[0].Report
	if res.Captures[0].Capture != sampleName || !rep.Balanced || rep.Received == 0 || rep.Timing.Workers != 2 || len(rep.Stages) == 0 {
		t.Fatalf("unexpected report: %+v", rep)
	}
}

// TestReplayExpect turns a capture into a golden directory, checks that a
// second run matches it, then that a changed golden is reported with the
// first differing packet and exit code 3.
func TestReplayExpect(t *testing.T) {
	golden := filepath.Join(t.TempDir(), "golden")
	capture := "../../testdata/captures/mixed.pcap"
	if _, e, code := run(t, "replay", "--out", golden, capture); code != 0 {
		t.Fatalf("writing golden: exit %d: %s", code, e)
	}
	out, e, code := run(t, "replay", "--expect", golden, "--workers", "2", capture)
	if code != 0 || !strings.Contains(out, "outputs and counters match") {
		t.Fatalf("expected a match, exit %d:\n%s\n%s", code, out, e)
	}
	// Flip one byte of the tenth packet of out0.pcap (24-byte file header,
	// then 16-byte record headers).
	path := filepath.Join(golden, "out0.pcap")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := 24
	for i := 0; i < 9; i++ {
		caplen := int(data[off+8]) | int(data[off+9])<<8
		off += 16 + caplen
	}
	data[off+16+20] ^= 0xff
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, e, code = run(t, "replay", "--expect", golden, capture)
	if code != codeMismatch {
		t.Fatalf("exit %d, want %d: %s", code, codeMismatch, e)
	}
	if !strings.Contains(e, "out0.pcap: packet 9: byte 20") {
		t.Fatalf("mismatch report should name the first differing packet and byte: %s", e)
	}
}

func TestReplayUnsupportedLinkType(t *testing.T) {
	_, e, code := run(t, "replay", "../../testdata/captures/linktypes/unsupported-ieee802_11-105.pcap")
	if code != codeFailed {
		t.Fatalf("exit %d, want %d", code, codeFailed)
	}
	first := strings.SplitN(e, "\n", 2)[0]
	if !strings.Contains(first, "link type 105") {
		t.Fatalf("first line should name the link type: %q", first)
	}
}

func TestReplayBadInputs(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"replay", "no-such-file.pcap"}, codeFailed, "no-such-file.pcap"},
		{[]string{"replay", "../../testdata/captures/bad/corrupt-magic.pcap"}, codeFailed, "corrupt-magic.pcap"},
		{[]string{"replay", "../../testdata/captures/bad/huge-record.pcap"}, codeFailed, "huge-record.pcap"},
		{[]string{"replay", "--loops", "0"}, codeUsage, "--loops"},
		{[]string{"replay", "--workers", "-5"}, codeUsage, "--workers"},
		{[]string{"replay", "--workers", "1000"}, codeUsage, "--workers 1000: must be 0 (inline) to 64"},
		{[]string{"replay", "--batch", "-3"}, codeUsage, "--batch"},
		{[]string{"replay", "--batch", "0"}, codeUsage, "--batch 0: must be 1 to 1024"},
		{[]string{"replay", "--batch", "5000"}, codeUsage, "--batch 5000"},
		{[]string{"replay", "--frame-size", "3000"}, codeUsage, "--frame-size 3000"},
		{[]string{"replay", "--force"}, codeUsage, "--force needs --out"},
		{[]string{"validate"}, codeUsage, "name at least one pipeline config"},
		{[]string{"frobnicate"}, codeUsage, "unknown command"},
		{[]string{"version", "extra"}, codeUsage, "unknown command"},
		{[]string{"replay", "../../testdata/captures/realworld/corrupt-tail.pcap"}, codeFailed, "record 19"},
		{[]string{"replay", "--no-such-flag"}, codeUsage, "no-such-flag"},
		{[]string{"replay", "--pipeline", "../../testdata/pipelines/invalid/does-not-exist.yaml"}, codeFailed, "does-not-exist.yaml"},
		// Same stem, so the same output subdirectory: refused, not overwritten.
		{[]string{"replay", "--out", t.TempDir(), "../../testdata/captures/linktypes/ethernet.pcap", "../../testdata/captures/linktypes/ethernet.pcapng"}, codeUsage, "share the output directory"},
	} {
		_, e, code := run(t, c.args...)
		if code != c.code || !strings.Contains(e, c.want) {
			t.Errorf("%v: exit %d (want %d), stderr %q (want it to mention %q)", c.args, code, c.code, e, c.want)
		}
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("name: x\nstages:\n  - {name: a, type: parse, next: nowhere}\n  - {name: b, type: frobnicate}\n"), 0o644)
	_, e, code := run(t, "validate", bad)
	if code != codeFailed {
		t.Fatalf("exit %d, want %d", code, codeFailed)
	}
	for _, want := range []string{"bad.yaml:3:", "nowhere", "bad.yaml:4:", "frobnicate"} {
		if !strings.Contains(e, want) {
			t.Errorf("validate output lacks %q:\n%s", want, e)
		}
	}
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("name: x\nstages:\n  - {name: a, type: parse}\n  - {name: b, type: tx, port: p0}\n"), 0o644)
	if out, e, code := run(t, "validate", good); code != 0 || !strings.Contains(out, "OK") {
		t.Fatalf("exit %d: %s %s", code, out, e)
	}
}
