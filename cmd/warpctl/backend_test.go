package main

import (
	"errors"
	"io"
	"testing"

	"github.com/warpflow/warpflow/gpu"
	"github.com/warpflow/warpflow/pipelines"
)

// TestExecutorFor: the flag beats the pipeline's setting; cpu is the
// engine's default; cuda without a GPU is gpu.ErrUnavailable; anything
// else is refused.
func TestExecutorFor(t *testing.T) {
	g, err := pipelines.Load("b.yaml", []byte("name: b\nsettings: {backend: cuda}\nstages:\n  - {name: parse, type: parse}\n  - {name: f, type: filter}\n  - {name: out, type: tx, port: o}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if ex, err := executorFor("cpu", "refuse", g, io.Discard); ex != nil || err != nil {
		t.Errorf("cpu: %v, %v; want the default", ex != nil, err)
	}
	ex, err := executorFor("", "refuse", g, io.Discard) // the pipeline says cuda
	if gerr := gpu.Available(); gerr != nil {
		if !errors.Is(err, gpu.ErrUnavailable) {
			t.Errorf("cuda without a GPU: %v, want ErrUnavailable", err)
		}
	} else if ex == nil || err != nil {
		t.Errorf("cuda with a GPU: %v, %v", ex != nil, err)
	}
	if _, err := executorFor("tpu", "refuse", g, io.Discard); err == nil {
		t.Error("tpu accepted")
	}
}
