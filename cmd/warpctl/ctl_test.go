package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestControlExitCodes: a daemon that is not there exits 4 with a hint;
// bad flags exit 2 before any request; pipeline validate works offline.
func TestControlExitCodes(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none.sock")
	for _, args := range [][]string{
		{"stats", "--json"}, {"pipeline", "list"}, {"pipeline", "swap", "x"}, {"ports"}, {"capture", "stop"},
	} {
		_, stderr, code := run(t, append(args, "--socket", none)...)
		if code != codeUnreachable || !strings.Contains(stderr, "is warpflowd running") {
			t.Errorf("%v: exit %d, %s", args, code, stderr)
		}
	}
	if _, stderr, code := run(t, "top", "--sort", "nope", "--socket", none); code != codeUsage {
		t.Errorf("top --sort nope: exit %d %s", code, stderr)
	}
	if _, stderr, code := run(t, "capture", "start", "--stage", "acl", "--file", "/tmp/x.pcap", "--count", "-5", "--socket", none); code != codeUsage {
		t.Errorf("capture --count -5: exit %d %s", code, stderr)
	}
	if out, stderr, code := run(t, "pipeline", "validate", "../../testdata/live/lab-drop-discard.yaml"); code != 0 || !strings.Contains(out, "OK") {
		t.Errorf("pipeline validate: exit %d %s %s", code, out, stderr)
	}
}
