package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestConntrackFlushAll: flush's own --all (every flow) is not the
// contexts' --all (every daemon, read commands only): flush --all goes to
// the daemon (unreachable here: exit 4), where it was refused as a usage
// error (exit 2, "--all is for the read commands") once the contexts'
// flag existed; and the usage checks of flush still hold.
func TestConntrackFlushAll(t *testing.T) {
	t.Setenv("WARPCTL_CONFIG", filepath.Join(t.TempDir(), "none.yaml"))
	sock := filepath.Join(t.TempDir(), "none.sock")
	_, stderr, code := run(t, "conntrack", "flush", "--all", "--socket", sock)
	if code != 4 || strings.Contains(stderr, "read commands") {
		t.Fatalf("flush --all: exit %d, %s; want 4 (daemon unreachable)", code, stderr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"conntrack", "flush", "--socket", sock}, "give a filter or --all"},
		{[]string{"conntrack", "flush", "--all", "--proto", "udp", "--socket", sock}, "one or the other"},
		{[]string{"conntrack", "list", "--all", "--socket", sock}, "read commands"},
	} {
		_, stderr, code := run(t, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Fatalf("%v: exit %d, %s; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}
