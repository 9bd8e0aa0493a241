package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warpflow/warpflow/pipelines"
)

// TestReadPipelineFile: the watch reads through symlinks but only a
// regular file, bounded, and a FIFO in the file's place does not block it.
func TestReadPipelineFile(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.yaml")
	os.WriteFile(ok, []byte("name: x\n"), 0o644)
	link := filepath.Join(dir, "link.yaml")
	os.Symlink("ok.yaml", link)
	if b, err := readPipelineFile(link); err != nil || string(b) != "name: x\n" {
		t.Fatalf("through a symlink: %q %v", b, err)
	}
	big := filepath.Join(dir, "big.yaml")
	os.WriteFile(big, make([]byte, pipelines.MaxConfigBytes+1), 0o644)
	if _, err := readPipelineFile(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("an oversize file: %v", err)
	}
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	wantNotRegular(t, "a FIFO in the pipeline file's place", 2*time.Second, func() error { _, err := readPipelineFile(fifo); return err })
	if _, err := readPipelineFile(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("a missing file read")
	}
	if _, err := readPipelineFile(dir); err == nil {
		t.Error("a directory read")
	}
}

// TestStartupPipelineFIFO: the daemon reads its startup pipeline with
// the watch's reader (New and CheckPipeline alike), so a FIFO in the
// pipeline file's place is an error at once: os.Open of a FIFO with no
// writer blocked, and warpflowd hung at start with nothing logged.
func TestStartupPipelineFIFO(t *testing.T) {
	cfg, err := LoadConfig("../../cmd/warpflowd/warpflowd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Pipeline = filepath.Join(t.TempDir(), "p.yaml")
	if err := syscall.Mkfifo(cfg.Pipeline, 0o644); err != nil {
		t.Fatal(err)
	}
	wantNotRegular(t, "a FIFO as the startup pipeline", 5*time.Second, func() error { return CheckPipeline(cfg) })
}

// wantNotRegular runs read, which reads a FIFO that has no writer, and
// fails unless it returns the "not a regular file" error within wait
// (a read that opens the FIFO blocks for ever).
func wantNotRegular(t *testing.T, what string, wait time.Duration, read func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- read() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s: %v", what, err)
		}
	case <-time.After(wait):
		t.Fatalf("reading %s blocked", what)
	}
}

// TestDirWatch: a ConfigMap-style ..data rename in the directory is
// signalled, and removing the directory says it is gone; Close returns.
func TestDirWatch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cm")
	os.Mkdir(dir, 0o755)
	signals := make(chan watchSignal, 1)
	w, err := watchDir(dir, signals)
	if err != nil {
		t.Fatal(err)
	}
	wait := func(want watchSignal) {
		t.Helper()
		select {
		case s := <-signals:
			if s != want {
				t.Fatalf("signal %d, want %d", s, want)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("no signal %d within 2s", want)
		}
	}
	os.Mkdir(filepath.Join(dir, "..1"), 0o755)
	os.Symlink("..1", filepath.Join(dir, "..data_tmp"))
	os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data"))
	wait(watchChanged)
	for len(signals) > 0 {
		<-signals
	}
	os.RemoveAll(dir)
	deadline := time.After(2 * time.Second)
	for got := false; !got; {
		select {
		case s := <-signals:
			got = s == watchGone
		case <-deadline:
			t.Fatal("removing the directory was not signalled as gone")
		}
	}
	closed := make(chan struct{})
	go func() { w.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not return")
	}
	// A second watch, closed while nothing happens: Close wakes the reader.
	os.Mkdir(dir, 0o755)
	w2, err := watchDir(dir, signals)
	if err != nil {
		t.Fatal(err)
	}
	w2.Close()
	if _, err := watchDir(filepath.Join(dir, "nope"), signals); err == nil {
		t.Error("watching a missing directory worked")
	}
}
