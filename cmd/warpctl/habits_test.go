package main

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/warpflow/warpflow/dataplane"
)

// TestMain lets a test run this binary as warpctl itself (a child process
// for signals and real exit codes): WARPCTL_TEST_MAIN=1 runs main.
func TestMain(m *testing.M) {
	if os.Getenv("WARPCTL_TEST_MAIN") == "1" {
		os.Args = append([]string{"warpctl"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const realDir = "../../testdata/captures/realworld/"

// readCapture reads a whole output capture, failing t on any error (so a
// capture cut mid-record fails).
func readCapture(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	n := 0
	for {
		_, _, err := r.ReadPacketData()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatalf("%s: record %d: %v", path, n+1, err)
		}
		n++
	}
}

func TestHelpListsExitCodes(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"replay", "--help"}, {"validate", "--help"}} {
		out, _, code := run(t, args...)
		if code != 0 || !strings.Contains(out, "130  interrupted") || !strings.Contains(out, "3    replay --expect") {
			t.Errorf("%v: exit %d, help lacks the exit codes:\n%s", args, code, out)
		}
	}
}

func TestVersion(t *testing.T) {
	a, _, code1 := run(t, "version")
	b, _, code2 := run(t, "--version")
	if code1 != 0 || code2 != 0 || a != b || !strings.HasPrefix(a, "warpctl github.com/warpflow/warpflow ") || !strings.Contains(a, "go1.") {
		t.Fatalf("version %q (exit %d), --version %q (exit %d)", a, code1, b, code2)
	}
}

// TestReplayOutStale: --out refuses a directory that holds anything; with
// --force it removes what the earlier replay wrote (including a sample file
// this pipeline no longer writes) and nothing else.
func TestReplayOutStale(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	capture := "../../testdata/captures/mixed.pcap"
	if _, e, code := run(t, "replay", "--out", dir, capture); code != 0 {
		t.Fatalf("first replay: exit %d: %s", code, e)
	}
	manifest, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if err != nil || !strings.Contains(string(manifest), "out0.pcap\n") || !strings.Contains(string(manifest), "sample.pcap\n") {
		t.Fatalf("manifest %q: %v", manifest, err)
	}
	_, e, code := run(t, "replay", "--out", dir, capture)
	if code != codeUsage || !strings.Contains(e, "is not empty") || !strings.Contains(e, "--force") {
		t.Fatalf("second replay without --force: exit %d: %s", code, e)
	}
	// A pipeline without the sample stage: --force must remove the stale
	// sample.pcap, which this run does not write.
	noSample := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(noSample, []byte("name: p\nstages:\n  - {name: parse, type: parse}\n  - {name: out0, type: tx, port: out0}\n"), 0o644)
	if _, e, code := run(t, "replay", "--force", "--out", dir, "--pipeline", noSample, capture); code != 0 {
		t.Fatalf("--force: exit %d: %s", code, e)
	}
	files, _ := listFiles(dir)
	if strings.Join(files, " ") != ".warpctl-outputs counters.json out0.pcap" {
		t.Fatalf("after --force the directory holds %v", files)
	}
	if n := readCapture(t, filepath.Join(dir, "out0.pcap")); n != 300 {
		t.Fatalf("out0.pcap holds %d packets, want all 300", n)
	}
	// Something warpctl did not write is never removed.
	mine := filepath.Join(dir, "notes.txt")
	os.WriteFile(mine, []byte("mine"), 0o644)
	_, e, code = run(t, "replay", "--force", "--out", dir, capture)
	if code != codeUsage || !strings.Contains(e, "notes.txt") {
		t.Fatalf("--force over a foreign file: exit %d: %s", code, e)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Fatal("--force removed a file it did not write")
	}
}

// TestReplayJSONShapeOnErrors: every capture is in the list, with its
// report (complete or up to the error), its error, and the golden result.
func TestReplayJSONShapeOnErrors(t *testing.T) {
	golden := filepath.Join(t.TempDir(), "g")
	good := "../../testdata/captures/linktypes/ethernet.pcap"
	if _, e, code := run(t, "replay", "--out", golden, good, realDir+"corrupt-tail.pcap"); code != codeFailed {
		t.Fatalf("writing goldens: exit %d: %s", code, e)
	}
	out, _, code := run(t, "replay", "--json", "--expect", golden, good, realDir+"corrupt-tail.pcap", "no-such.pcap")
	if code != codeFailed {
		t.Fatalf("exit %d", code)
	}
	var res replayJSON
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(res.Captures) != 3 {
		t.Fatalf("%d captures: %s", len(res.Captures), out)
	}
	ok, tail, missing := res.Captures[0], res.Captures[1], res.Captures[2]
	if ok.Report == nil || ok.Error != "" || ok.Golden == nil || !ok.Golden.Match {
		t.Errorf("good capture: %+v", ok)
	}
	if tail.Report == nil || tail.Report.Received != 18 || !strings.Contains(tail.Error, "record 19") || tail.Golden != nil {
		t.Errorf("corrupt tail: %+v", tail)
	}
	if missing.Report != nil || !strings.Contains(missing.Error, "no-such.pcap") {
		t.Errorf("missing capture: %+v", missing)
	}
}

// TestReplayCorruptTailCLI: the report of the good records is printed, the
// outputs are well-formed and counters.json is written, then the error.
func TestReplayCorruptTailCLI(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	out, e, code := run(t, "replay", "--out", dir, realDir+"corrupt-tail.pcap")
	if code != codeFailed || !strings.Contains(e, "record 19: corrupt capture") {
		t.Fatalf("exit %d: %s", code, e)
	}
	if !strings.Contains(out, "accounting OK: received 18") || !strings.Contains(out, "STAGE") {
		t.Fatalf("no report of the good records:\n%s", out)
	}
	n := readCapture(t, filepath.Join(dir, "out0.pcap")) + readCapture(t, filepath.Join(dir, "out1.pcap"))
	if n != 18 {
		t.Fatalf("%d packets written, want 18", n)
	}
	if _, err := os.Stat(filepath.Join(dir, dataplane.CountersFile)); err != nil {
		t.Fatal(err)
	}
}

// TestReplayRealworldCLI: the real-world captures replay with what each
// case should show in the report.
func TestReplayRealworldCLI(t *testing.T) {
	for _, c := range []struct {
		file string
		want []string
	}{
		{"v21-be.pcap", []string{"accounting OK: received 18 = transmitted 18"}},
		{"modified-redhat.pcap", []string{"accounting OK: received 18 = transmitted 18"}},
		{"jumbo-9000.pcap", []string{"accounting OK: received 18 = transmitted 18"}},
		{"gro-64k.pcap", []string{"accounting OK: received 18 = transmitted 18"}},
		{"snaplen-96.pcap", []string{"cut by the capture: 12 packets", "accounting OK: received 18 = transmitted 18 + dropped 0"}},
		{"zero-length.pcap", []string{"input drop zero_length", "4 records not received (input drops)"}},
	} {
		out, e, code := run(t, "replay", realDir+c.file)
		if code != 0 {
			t.Errorf("%s: exit %d: %s", c.file, code, e)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: report lacks %q:\n%s", c.file, w, out)
			}
		}
		if strings.Contains(out, "internal_bad_edge") || keptInFile.MatchString(out) {
			t.Errorf("%s: report mentions what did not happen:\n%s", c.file, out)
		}
	}
}

// TestReplayInterruptCLI delivers SIGINT to a running replay (this test
// binary run as warpctl): it exits 130 with the report so far, well-formed
// outputs, counters.json and the manifest.
func TestReplayInterruptCLI(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(os.Args[0], "replay", "--json", "--loops", "1000000", "--out", dir, "../../testdata/captures/mixed.pcap")
	cmd.Env = append(os.Environ(), "WARPCTL_TEST_MAIN=1")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The outputs are created once the signal handler is installed.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if fi, err := os.Stat(filepath.Join(dir, "out0.pcap")); err == nil && fi.Size() > 24 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("replay did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("replay did not stop after SIGINT")
	}
	if code := cmd.ProcessState.ExitCode(); code != codeInterrupted {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, codeInterrupted, stderr.String())
	}
	var res replayJSON
	if err := json.Unmarshal([]byte(stdout.String()), &res); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	if !res.Interrupted || len(res.Captures) != 1 || res.Captures[0].Error != "interrupted" || res.Captures[0].Report == nil {
		t.Fatalf("result %s", stdout.String())
	}
	rep := res.Captures[0].Report
	if rep.Received == 0 || !rep.Balanced {
		t.Fatalf("report %s", rep.AccountingLine())
	}
	n := readCapture(t, filepath.Join(dir, "out0.pcap")) + readCapture(t, filepath.Join(dir, "out1.pcap")) + readCapture(t, filepath.Join(dir, "pass.pcap"))
	if uint64(n) != rep.Transmitted+rep.Passed {
		t.Fatalf("outputs hold %d packets, the report says %d", n, rep.Transmitted+rep.Passed)
	}
	for _, f := range []string{dataplane.CountersFile, manifestFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(stderr.String(), "interrupted during") {
		t.Fatalf("stderr %q", stderr.String())
	}
}

func TestValidateJSONAndStageCount(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("name: x\nstages:\n  - {name: a, type: parse, next: nowhere}\n  - {name: b, type: frobnicate}\n"), 0o644)
	out, _, code := run(t, "validate", "--json", "../../pipelines/default.yaml", bad)
	if code != codeFailed {
		t.Fatalf("exit %d", code)
	}
	var res validateJSON
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(res.Pipelines) != 2 {
		t.Fatalf("%s", out)
	}
	def, b := res.Pipelines[0], res.Pipelines[1]
	// default.yaml has 9 stages; the graph adds 6 drop terminals beside them.
	if !def.Valid || def.Stages != 9 || def.Name != "default" || len(def.Ports) != 2 {
		t.Errorf("default: %+v", def)
	}
	if b.Valid || len(b.Errors) != 2 || b.Errors[0].Line != 3 || b.Errors[0].Column == 0 || b.Errors[1].Stage != "b" {
		t.Errorf("bad: %+v", b)
	}
	text, _, _ := run(t, "validate", "../../pipelines/default.yaml")
	if !strings.Contains(text, "OK: 9 stages") {
		t.Errorf("text: %s", text)
	}
}

func TestProgressLine(t *testing.T) {
	got := progressLine("c.pcap", dataplane.ReplayProgress{Received: 2_000_000, Fraction: 0.25}, 10*time.Second)
	if got != "c.pcap:  25.0%  2000000 packets, 0.20 Mpps, ETA 30s" {
		t.Errorf("%q", got)
	}
	got = progressLine("c.pcap", dataplane.ReplayProgress{Received: 5, Fraction: -1}, time.Second)
	if got != "c.pcap: 5 packets, 0.00 Mpps" {
		t.Errorf("%q", got)
	}
}

// keptInFile is the report's line that says a sample stage wrote a file.
var keptInFile = regexp.MustCompile(`(?m)^sample \S+: kept \d+ of \d+ candidates in `)

// TestReplayNoOutSampleLine: without --out the report does not claim a
// sample file was written.
func TestReplayNoOutSampleLine(t *testing.T) {
	out, _, _ := run(t, "replay")
	if !strings.Contains(out, "(not written: no --out)") || keptInFile.MatchString(out) {
		t.Fatalf("%s", out)
	}
}
