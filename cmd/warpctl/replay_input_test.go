package main

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "123": 123, "500M": 500 << 20, "4G": 4 << 30, "2GiB": 2 << 30, "10kb": 10 << 10, "1T": 1 << 40} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "M", "4X", "-1", "99999999999T"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q): no error", in)
		}
	}
	f := replayFlags{maxOutput: "auto", loops: 1}
	if got := maxOutputFor(f, replayInput{data: make([]byte, 1<<20)}); got != maxOutputFloor {
		t.Errorf("auto for 1 MiB: %d, want the 4 GiB floor", got)
	}
	if got := autoMaxOutput(1<<30, 2); got != 32<<30 {
		t.Errorf("auto for 1 GiB twice: %d, want 32 GiB", got)
	}
	if got := autoMaxOutput(0, 1); got != maxOutputUnsized {
		t.Errorf("auto for a pipe: %d, want %d", got, int64(maxOutputUnsized))
	}
}

// TestReplayStdinAndMaxOutput: "-" reads standard input, and a gzip that
// expands past --max-output stops with a line naming the flag.
func TestReplayStdinAndMaxOutput(t *testing.T) {
	sample, err := os.ReadFile("../../testdata/captures/mixed.pcap")
	if err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(sample)
	for range 40 {
		zw.Write(sample[24:]) // the records again, without the file header
	}
	zw.Close()
	path := filepath.Join(t.TempDir(), "in.pcap.gz")
	if err := os.WriteFile(path, z.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	old := os.Stdin
	os.Stdin = f
	defer func() { os.Stdin = old }()
	out := filepath.Join(t.TempDir(), "out")
	stdout, stderr, code := run(t, "replay", "--out", out, "--max-output", "8K", "-")
	if code != codeFailed || !strings.Contains(stderr, "output limit reached") || !strings.Contains(stderr, "(--max-output 8K; 0 for no limit)") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "accounting OK") {
		t.Errorf("no balanced report so far:\n%s", stdout)
	}
	if _, _, code := run(t, "replay", "-", "-"); code != codeUsage {
		t.Errorf("two '-': exit %d, want usage", code)
	}
	if _, stderr, code := run(t, "replay", "--max-output", "lots"); code != codeUsage || !strings.Contains(stderr, "--max-output lots") {
		t.Errorf("bad --max-output: exit %d, %s", code, stderr)
	}
}
