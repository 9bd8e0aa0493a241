package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warpflow/warpflow/internal/control"
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
	os.WriteFile(big, make([]byte, control.MaxRequestBytes+1), 0o644)
	if _, err := readPipelineFile(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("an oversize file: %v", err)
	}
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := readPipelineFile(fifo); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("a FIFO: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("reading a FIFO in the pipeline file's place blocked")
	}
	if _, err := readPipelineFile(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("a missing file read")
	}
	if _, err := readPipelineFile(dir); err == nil {
		t.Error("a directory read")
	}
}

// TestReadPipelineConfigRefusesFIFO: the startup pipeline file is read
// (New's and CheckPipeline's read) only if it is a regular file: a FIFO
// in its place (os.Open of a FIFO
// with no writer blocks) is an error at once, not a daemon hung at start.
func TestReadPipelineConfigRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "p.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := readPipelineConfig(fifo); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "read pipeline config: "+fifo+" is not a regular file") {
			t.Errorf("a FIFO: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a FIFO as the startup pipeline blocked")
	}
	ok := filepath.Join(dir, "ok.yaml")
	os.WriteFile(ok, []byte("name: x\n"), 0o644)
	if b, err := readPipelineConfig(ok); err != nil || string(b) != "name: x\n" {
		t.Errorf("a regular file: %q %v", b, err)
	}
	if _, err := readPipelineConfig(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "read pipeline config: ") {
		t.Errorf("a missing file: %v", err)
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
