package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/warpflow/warpflow/internal/lab"

	"github.com/warpflow/warpflow/internal/testwait"
)

// The README's commands, run as written.
//
// README.md marks the shell blocks a reader is meant to run with an HTML
// comment on the line before the block, which a reader of the rendered
// page does not see:
//
//	<!-- readme-test: NAME -->
//	```sh
//	...
//	```
//
// TestREADMECommands (root) runs every marked block in order, each
// command as written, in one interactive bash on a pseudo-terminal (the
// util-linux script(1) tool gives it one), in a copy of this checkout: the
// same shell a reader types into, so `&`, `%1`, `wait` and Ctrl-C work as
// they do for them. A command's exit status is read after it from `$?`,
// and each command must exit 0 unless its check says otherwise; the
// checks below hold key output (the pipeline list shows the running
// pipeline, the capture after the swap has its packets, ...). The two
// commands that need a person at the keyboard get one: `top` is sent
// keys (d, then q) a few seconds after it starts, `stats --watch` a
// Ctrl-C. The blocks use the lab's default prefix (wf), the daemon's
// default socket and capture directory and /tmp/pipeline.svg, so the test
// runs only when none of those exists (failing with the reason
// otherwise) and removes what it made. TestREADMEBlocks (no root) checks
// that the marked blocks and the checks still match each other.

// readmePath is the README, from this package's directory.
const readmePath = "../../README.md"

// readmeBlock is one marked shell block.
type readmeBlock struct {
	name string
	line int // of the marker
	cmds []readmeCmd
}

// readmeCmd is one command of a block as written: continuation lines
// joined with their backslash-newlines, trailing comment kept (the shell
// drops it).
type readmeCmd struct {
	text string
	line int
}

var readmeMarker = regexp.MustCompile(`^<!-- readme-test: ([a-z0-9-]+) -->$`)

// readmeBlocks reads the marked blocks of the README text.
func readmeBlocks(text string) ([]readmeBlock, error) {
	lines := strings.Split(text, "\n")
	var blocks []readmeBlock
	for i := 0; i < len(lines); i++ {
		m := readmeMarker.FindStringSubmatch(lines[i])
		if m == nil {
			if strings.Contains(lines[i], "readme-test") {
				return nil, fmt.Errorf("README.md:%d: a readme-test marker not of the form <!-- readme-test: NAME -->", i+1)
			}
			continue
		}
		b := readmeBlock{name: m[1], line: i + 1}
		if i+1 >= len(lines) || lines[i+1] != "```sh" {
			return nil, fmt.Errorf("README.md:%d: marker %q is not followed by a ```sh block", i+1, b.name)
		}
		i += 2
		var cur *readmeCmd
		for ; i < len(lines) && lines[i] != "```"; i++ {
			l := lines[i]
			if cur != nil {
				cur.text += "\n" + l
			} else {
				t := strings.TrimSpace(l)
				if t == "" || strings.HasPrefix(t, "#") {
					continue
				}
				b.cmds = append(b.cmds, readmeCmd{text: l, line: i + 1})
				cur = &b.cmds[len(b.cmds)-1]
			}
			if !strings.HasSuffix(l, `\`) {
				cur = nil
			}
		}
		if i == len(lines) {
			return nil, fmt.Errorf("README.md:%d: block %q never ends", b.line, b.name)
		}
		if len(b.cmds) == 0 {
			return nil, fmt.Errorf("README.md:%d: block %q has no command", b.line, b.name)
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// readmeCheck is what one command must do: exit rc (0 unless set) and
// print output matching every regexp of want; keys, when set, is typed
// while it runs (for the commands that need a terminal); after checks
// what it left behind, before anything is cleaned up.
type readmeCheck struct {
	block, cmd string // a regexp: the block's one command it matches
	rc         int
	want       []string
	keys       func(s *readmeShell)
	after      func(t *testing.T)
}

// readmeChecks: the blocks to run, in README order, and their checks.
var readmeBlockNames = []string{"try", "lab", "live", "walkthrough", "stateful"}

var readmeChecks = []readmeCheck{
	{block: "try", cmd: "go run ./cmd/warpctl replay", want: []string{`accounting OK: received 300 = `}},

	{block: "lab", cmd: "lab up", want: []string{`lab wf up`}},
	{block: "lab", cmd: "xdp-pass --drop dp0", want: []string{`wf-dp/dp0: wf_lab_drop attached`, `warpctl lab xdp-pass --remove dp0`}},
	{block: "lab", cmd: "gen --count", want: []string{`sent \d+ frames .* stopped by count`}},
	{block: "lab", cmd: "gen --engine afxdp", want: []string{`sent 1000000 frames .*engine afxdp`}},
	{block: "lab", cmd: "lab status", want: []string{`lab wf: up`, `dp0 .* xdp wf_lab_drop`, `warpflowd cannot attach there until warpctl lab xdp-pass --remove dp0`}},
	{block: "lab", cmd: "xdp-pass --remove dp0", want: []string{`wf-dp/dp0: xdp removed`}},
	{block: "lab", cmd: "lab down", want: []string{`lab wf removed`}},

	{block: "live", cmd: "go build", want: nil},
	{block: "live", cmd: "gen --count 1000000", want: []string{`sent 1000000 frames`, `msg=stats .*balanced=true`}},
	{block: "live", cmd: "^kill %1", want: []string{`msg="final stats" .*balanced=true`, `msg="stopped cleanly"`}},
	{block: "live", cmd: "lab down", want: []string{`lab wf removed`}},

	{block: "walkthrough", cmd: "pipeline list", want: []string{`(?m)^\*\s+lab-forward\s`, `running: lab-forward`}},
	{block: "walkthrough", cmd: "pipeline validate", want: []string{`pipeline "lab-drop-discard" OK`}},
	{block: "walkthrough", cmd: "pipeline load", want: []string{`loaded "lab-drop-discard"`}},
	{block: "walkthrough", cmd: `^bin/warpctl stats +#`, want: []string{`lab-forward`}},
	{block: "walkthrough", cmd: "bin/warpctl top", keys: typeTop, want: []string{`pipeline lab-forward`, `rx [0-9.]+k \([0-9.]+kpps\)`, `\[sort: drops\]`}},
	{block: "walkthrough", cmd: "pipeline swap lab-drop-discard", want: []string{`swapped lab-forward -> lab-drop-discard`}},
	{block: "walkthrough", cmd: "capture start", want: []string{`capture of acl to /var/lib/warpflow/captures/acl.pcap`, `kernel rules run on the workers`}},
	{block: "walkthrough", cmd: "stats --watch", keys: typeCtrlC, rc: 130, want: []string{`discard`, `dropped \d+ in all: [1-9]\d* by the XDP program's kernel rules`}},
	{block: "walkthrough", cmd: "capture status", want: []string{`100 written, 0 missed; ended: count 100 reached`,
		`(?s)(198\.18\.0\.1\.\d+ > 198\.19\.0\.1\.9: UDP.*){3}`}, after: checkREADMECapture},
	{block: "walkthrough", cmd: "curl -s localhost:9464/metrics", want: []string{`(?m)^warpflow_dropped\S*\{[^}]*reason="discard"[^}]*\} [1-9]`, `(?m)^warpflow_dropped_in_xdp_packets_total\{reason="discard"\} [1-9]`}},
	{block: "walkthrough", cmd: "dot -Tsvg", after: checkREADMESVG},
	{block: "walkthrough", cmd: "pipeline swap lab-forward", want: []string{`swapped lab-drop-discard -> lab-forward`, `removed "lab-drop-discard"`}},
	{block: "walkthrough", cmd: "^kill %2 %1", want: []string{`msg="final stats" .*balanced=true`, `msg="stopped cleanly"`, `lab wf removed`}},
	{block: "stateful", cmd: "gen --count 100000", want: []string{`sent 100000 frames`}},
	{block: "stateful", cmd: "conntrack count", want: []string{`pipeline lab-stateful, stage ct: 1000 flows in 1 queue\(s\), tables of 131072 flows`, `(?m)^1000 matched`}},
	{block: "stateful", cmd: "conntrack list --sport 1024", want: []string{`(?m)^1 matched`, `udp\s+198\.18\.0\.1:1024 > 198\.19\.0\.1:9\s+198\.19\.0\.1:9 > 198\.19\.0\.2:\d+\s+unreplied snat`}},
	{block: "stateful", cmd: `stats --json`, want: []string{`"interface":\s*"dp0"`, `"result":\s*"unsupported"`}},
	{block: "stateful", cmd: "conntrack flush --all", want: []string{`flushed 1000 flows of ct \(0 left\)`}},
	{block: "stateful", cmd: "^kill %1", want: []string{`msg="final stats" .* dropped=0 passed=0 xdp_dropped=0 xdp_passed=0 balanced=true `, `msg="stopped cleanly"`}},
	{block: "stateful", cmd: "lab down", want: []string{`lab wf removed`}},
}

// typeTop lets top draw a few frames, sorts by drops, then quits.
func typeTop(s *readmeShell) {
	time.Sleep(3 * time.Second)
	s.send("d")
	time.Sleep(1500 * time.Millisecond)
	s.send("q")
	time.Sleep(500 * time.Millisecond)
}

// typeCtrlC lets stats --watch print a few times, then interrupts it.
func typeCtrlC(s *readmeShell) {
	time.Sleep(3500 * time.Millisecond)
	s.send("\x03")
	time.Sleep(500 * time.Millisecond)
}

// checkREADMECapture: the capture started after the swap holds the 100
// packets the swapped-in pipeline drops in the kernel (UDP to port 9).
func checkREADMECapture(t *testing.T) {
	f, err := os.Open("/var/lib/warpflow/captures/acl.pcap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		data, _, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("acl.pcap record %d: %v", n+1, err)
		}
		if len(data) < 38 || data[23] != 17 || data[36] != 0 || data[37] != 9 {
			t.Fatalf("acl.pcap packet %d is not UDP to port 9: % x", n+1, data[:min(len(data), 38)])
		}
		n++
	}
	if n != 100 {
		t.Fatalf("acl.pcap: %d packets, want the capture's count, 100", n)
	}
}

// checkREADMESVG: dot drew the pipeline.
func checkREADMESVG(t *testing.T) {
	svg, err := os.ReadFile("/tmp/pipeline.svg")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "acl", "drop:discard", "rewrite"} {
		if !bytes.Contains(svg, []byte(want)) {
			t.Fatalf("/tmp/pipeline.svg lacks %q:\n%s", want, svg)
		}
	}
}

// checkFor returns the check of command c of block b, and an error when
// more than one matches.
func checkFor(b readmeBlock, c readmeCmd) (*readmeCheck, error) {
	var found *readmeCheck
	for i := range readmeChecks {
		ch := &readmeChecks[i]
		if ch.block == b.name && regexp.MustCompile(ch.cmd).MatchString(c.text) {
			if found != nil {
				return nil, fmt.Errorf("README.md:%d: checks %q and %q both match %q", c.line, found.cmd, ch.cmd, c.text)
			}
			found = ch
		}
	}
	return found, nil
}

// loadREADMEBlocks reads the marked blocks and checks that they are the
// ones this test knows, in order, and that every check matches exactly
// one command (a check that matches nothing would pass silently).
func loadREADMEBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	text, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := readmeBlocks(string(text))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	used := map[*readmeCheck]int{}
	for _, b := range blocks {
		names = append(names, b.name)
		for _, c := range b.cmds {
			ch, err := checkFor(b, c)
			if err != nil {
				t.Fatal(err)
			}
			if ch != nil {
				used[ch]++
			}
		}
	}
	if strings.Join(names, " ") != strings.Join(readmeBlockNames, " ") {
		t.Fatalf("README.md's marked blocks are %v, want %v (a new marked block needs its checks here)", names, readmeBlockNames)
	}
	for i := range readmeChecks {
		if ch := &readmeChecks[i]; used[ch] != 1 {
			t.Errorf("check %q of block %q matches %d commands of README.md, want 1", ch.cmd, ch.block, used[ch])
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return blocks
}

// TestREADMEBlocks: the marked blocks parse and match the checks (no root
// needed: a README edit that leaves a check behind fails here too).
func TestREADMEBlocks(t *testing.T) {
	blocks := loadREADMEBlocks(t)
	n := 0
	for _, b := range blocks {
		n += len(b.cmds)
	}
	t.Logf("%d marked blocks, %d commands", len(blocks), n)
	// The parser itself, on a block with a continuation and comments.
	got, err := readmeBlocks("x\n<!-- readme-test: a -->\n```sh\n# c\nfoo \\\n  bar  # d\n\nbaz\n```\n")
	if err != nil || len(got) != 1 || len(got[0].cmds) != 2 || got[0].cmds[0].text != "foo \\\n  bar  # d" || got[0].cmds[1].text != "baz" || got[0].cmds[1].line != 8 {
		t.Fatalf("parse: %+v %v", got, err)
	}
	for _, bad := range []string{"<!-- readme-test: a -->\n```\nfoo\n```\n", "<!-- readme-test: a -->\n```sh\nfoo\n", "<!-- readme-test a -->\n", "<!-- readme-test: a -->\n```sh\n# only\n```\n"} {
		if _, err := readmeBlocks(bad); err == nil {
			t.Errorf("parse accepted %q", bad)
		}
	}
}

// The default names the blocks use: each must be absent before the test
// (or, for the directories the daemon makes, absent or empty), and what
// the test made is removed after it.
const (
	readmeSocket     = "/run/warpflow/warpflowd.sock"
	readmeRunDir     = "/run/warpflow"
	readmeStateDir   = "/var/lib/warpflow"
	readmeCaptureDir = "/var/lib/warpflow/captures"
	readmeCapture    = "/var/lib/warpflow/captures/acl.pcap"
	readmeSVG        = "/tmp/pipeline.svg"
)

func TestREADMECommands(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the README's commands run as root, and CI runs as root: not skipping under CI=true")
		}
		t.Skip("runs the README's commands as written: needs root (they build a lab of namespaces, veths and XDP programs)")
	}
	for _, tool := range []string{"script", "bash", "go", "nsenter", "tcpdump", "curl", "dot"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("the README's commands need %s (.ci/run installs it): %v", tool, err)
			}
			t.Skipf("the README's commands need %s, not installed", tool)
		}
	}
	blocks := loadREADMEBlocks(t)

	// Nothing of the defaults' names may exist.
	for _, ns := range lab.Namespaces(lab.DefaultPrefix) {
		if _, err := os.Lstat(filepath.Join(lab.NamespaceDir, ns)); err == nil {
			t.Fatalf("namespace %s exists: the README's commands build the default lab %q; remove it (warpctl lab down) or run this test where it does not exist", ns, lab.DefaultPrefix)
		}
	}
	for _, p := range []string{readmeSocket, readmeCapture, readmeSVG} {
		if _, err := os.Lstat(p); err == nil {
			t.Fatalf("%s exists: the README's commands make it (a warpflowd on the default socket, an earlier capture, an earlier drawing); remove it or run this test where it does not exist", p)
		}
	}
	made := map[string]bool{}
	for _, dir := range []string{readmeRunDir, readmeStateDir, readmeCaptureDir} {
		if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
			made[dir] = true
		}
	}
	if !made[readmeCaptureDir] {
		if ents, err := os.ReadDir(readmeCaptureDir); err != nil || len(ents) != 0 {
			t.Fatalf("%s holds files (or cannot be read: %v): the README's capture lands there; run this test where it is empty or absent", readmeCaptureDir, err)
		}
	}

	dir := copyCheckout(t)
	sh := startREADMEShell(t, dir)
	t.Cleanup(func() {
		defer cleanREADME(t, made) // also when close gives up (Fatalf)
		sh.close(t)
	})
	for _, b := range blocks {
		for _, c := range b.cmds {
			ch, _ := checkFor(b, c)
			want := 0
			var keys func(*readmeShell)
			if ch != nil {
				want, keys = ch.rc, ch.keys
			}
			start := time.Now()
			rc, out := sh.run(t, c.text, keys, 5*time.Minute)
			t.Logf("README.md:%d [%s] %s\n  exit %d in %s\n%s", c.line, b.name, c.text, rc, time.Since(start).Round(time.Millisecond), clip(squeeze(out), 4000))
			if rc != want {
				t.Fatalf("README.md:%d: %s\nexited %d, want %d; its output:\n%s", c.line, c.text, rc, want, out)
			}
			if ch == nil {
				continue
			}
			for _, re := range ch.want {
				if !regexp.MustCompile(re).MatchString(out) {
					t.Fatalf("README.md:%d: %s\nits output lacks %s:\n%s", c.line, c.text, re, out)
				}
			}
			if ch.after != nil {
				ch.after(t)
			}
		}
	}
}

// copyCheckout copies this checkout's files (tracked, and untracked ones
// git does not ignore: what a clone of this tree holds, not bin/) into a
// temporary directory, where the README's commands run and build.
func copyCheckout(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files in %s: %v", root, err)
	}
	dst := t.TempDir()
	n := 0
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, rel)
		fi, err := os.Lstat(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in this worktree
		}
		if err != nil {
			t.Fatal(err)
		}
		to := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err == nil {
				err = os.Symlink(target, to)
			}
			if err != nil {
				t.Fatal(err)
			}
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(src)
			if err == nil {
				err = os.WriteFile(to, data, fi.Mode().Perm())
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		n++
	}
	if n < 100 {
		t.Fatalf("copied %d files of the checkout: git ls-files found too few", n)
	}
	return dst
}

// cleanREADME removes what the README's commands made: the capture, the
// drawing, the daemon's directories where they did not exist before, and
// the lab if a failure left it.
func cleanREADME(t *testing.T, made map[string]bool) {
	for _, p := range []string{readmeCapture, readmeSVG} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("clean up: %v", err)
		}
	}
	if made[readmeRunDir] {
		os.Remove(readmeSocket) // only if a daemon died without removing it
	}
	for _, d := range []string{readmeCaptureDir, readmeStateDir, readmeRunDir} {
		if made[d] {
			if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("clean up: %v", err)
			}
		}
	}
	if err := lab.Down(lab.DefaultPrefix); err != nil && !errors.Is(err, lab.ErrNoLab) {
		t.Errorf("clean up: lab down: %v", err)
	}
}

// readmeShell is an interactive bash on a pseudo-terminal (script(1)),
// fed the README's commands as a reader types them.
type readmeShell struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	bash int // bash's pid: the session leader of everything it starts

	mu   sync.Mutex
	out  []byte
	more chan struct{} // a token when output arrived
	done chan struct{} // closed when script exits
}

// startREADMEShell starts the shell in dir: no rc files, no line editing
// (the terminal's own line discipline, as for any program reading it),
// echo off, empty prompts, a 40x120 terminal.
func startREADMEShell(t *testing.T, dir string) *readmeShell {
	t.Helper()
	s := &readmeShell{more: make(chan struct{}, 1), done: make(chan struct{})}
	s.cmd = exec.Command("script", "-qfec", "bash --norc --noprofile --noediting -i", "/dev/null")
	s.cmd.Dir = dir
	s.cmd.Env = append(os.Environ(), "TERM=xterm")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stdout, s.cmd.Stderr = w, w
	if s.in, err = s.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start script: %v", err)
	}
	w.Close()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				s.mu.Lock()
				s.out = append(s.out, buf[:n]...)
				s.mu.Unlock()
				select {
				case s.more <- struct{}{}:
				default:
				}
			}
			if err != nil {
				r.Close()
				return
			}
		}
	}()
	go func() {
		s.cmd.Wait()
		close(s.done)
	}()
	s.send("stty -echo rows 40 cols 120; PS1=; PS2=; printf '@@%s@@\\n' ready\n")
	if _, err := s.waitFor(regexp.MustCompile(`@@ready@@`), 0, 30*time.Second); err != nil {
		s.close(t)
		t.Fatalf("the shell did not start: %v", err)
	}
	for _, p := range procs() {
		if p.ppid == s.cmd.Process.Pid {
			s.bash = p.pid
		}
	}
	if s.bash == 0 {
		s.close(t)
		t.Fatal("no bash under script")
	}
	return s
}

func (s *readmeShell) send(text string) {
	io.WriteString(s.in, text)
}

// waitFor waits until re matches the output from offset from, and
// returns the match's indices (absolute).
func (s *readmeShell) waitFor(re *regexp.Regexp, from int, timeout time.Duration) ([]int, error) {
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		m := re.FindSubmatchIndex(s.out[from:])
		s.mu.Unlock()
		if m != nil {
			for i := range m {
				if m[i] >= 0 {
					m[i] += from
				}
			}
			return m, nil
		}
		select {
		case <-s.more:
		case <-s.done:
			// Drain what the reader still holds, then give up.
			time.Sleep(100 * time.Millisecond)
			s.mu.Lock()
			m = re.FindSubmatchIndex(s.out[from:])
			s.mu.Unlock()
			if m == nil {
				return nil, errors.New("the shell exited")
			}
		case <-deadline:
			return nil, fmt.Errorf("no %s after %s", re, timeout)
		}
	}
}

var rcMarker = regexp.MustCompile(`@@rc=(\d+)@@`)

// run types cmd, then keys (if any) while it runs, then a line that
// prints its exit status, and returns the status and what the terminal
// showed meanwhile (escape sequences and carriage returns removed).
func (s *readmeShell) run(t *testing.T, cmd string, keys func(*readmeShell), timeout time.Duration) (int, string) {
	t.Helper()
	s.mu.Lock()
	from := len(s.out)
	s.mu.Unlock()
	s.send(cmd + "\n")
	if keys != nil {
		keys(s)
	}
	// A newline first: after keys typed to a program that had already
	// exited, the shell reads them as a line of their own and fails, so
	// the status printed is not a false 0.
	s.send("\nprintf '\\n@@rc=%d@@\\n' \"$?\"\n")
	m, err := s.waitFor(rcMarker, from, timeout)
	s.mu.Lock()
	raw := string(s.out[from:])
	if m != nil {
		raw = string(s.out[from:m[0]])
	}
	s.mu.Unlock()
	out := cleanTerminal(raw)
	if err != nil {
		t.Fatalf("%s: %v; the terminal showed:\n%s", cmd, err, out)
	}
	rc, _ := strconv.Atoi(string(s.out[m[2]:m[3]]))
	return rc, out
}

var terminalEscapes = regexp.MustCompile(`\x1b(\[[0-9;?<=>]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[()*+][0-9A-Za-z]|[=>78DEHMNOZc])`)

// clip is s, or its first n bytes and a note of how much was left out.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("\n[... %d more bytes]", len(s)-n)
}

var spaceRuns = regexp.MustCompile(` {3,}`)

// squeeze shortens runs of spaces (a full-screen program's output, its
// escape sequences removed, is mostly spaces) for the log.
func squeeze(s string) string { return spaceRuns.ReplaceAllString(s, "  ") }

// cleanTerminal removes escape sequences and carriage returns.
func cleanTerminal(s string) string {
	return strings.ReplaceAll(terminalEscapes.ReplaceAllString(s, " "), "\r", "")
}

// close ends the shell and everything it started that still runs
// (background jobs a failed block left), by process id.
func (s *readmeShell) close(t *testing.T) {
	s.send("\nexit\n")
	select {
	case <-s.done:
	case <-time.After(10 * time.Second): // not a pass: what still runs is signalled, then killed, below
	}
	if s.bash != 0 {
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
			left := 0
			for _, p := range procs() {
				if p.sid == s.bash {
					syscall.Kill(p.pid, sig)
					left++
				}
			}
			if left == 0 {
				break
			}
			t.Logf("signalled %d processes the README's shell left with %v", left, sig)
			time.Sleep(3 * time.Second)
		}
	}
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		testwait.Recv(t, s.done, "the README's shell to exit after SIGKILL", testwait.Deadline)
	}
}

type procInfo struct{ pid, ppid, sid int }

// procs lists the processes of this machine with their parent and
// session (from /proc/PID/stat).
func procs() []procInfo {
	ents, _ := os.ReadDir("/proc")
	var out []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp session ...: comm may hold spaces.
		rest := string(data)
		if i := strings.LastIndexByte(rest, ')'); i >= 0 {
			rest = rest[i+1:]
		}
		f := strings.Fields(rest)
		if len(f) < 4 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		sid, _ := strconv.Atoi(f[3])
		out = append(out, procInfo{pid: pid, ppid: ppid, sid: sid})
	}
	return out
}
