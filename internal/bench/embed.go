package bench

import (
	_ "embed"
	"fmt"
	"os"
)

// benchCapture is a copy of testdata/captures/bench-64.pcap (a test keeps
// the two identical), so that `warpctl bench` needs no checkout.
//
//go:embed bench-64.pcap
var benchCapture []byte

// EmbeddedCaptureName is Result.Capture when the embedded capture was used.
const EmbeddedCaptureName = "embedded:bench-64.pcap"

// embeddedCapture writes the embedded capture to a temporary file and
// returns its path and a function that removes it.
func embeddedCapture() (string, func(), error) {
	f, err := os.CreateTemp("", "warpflow-bench-*.pcap")
	if err != nil {
		return "", nil, fmt.Errorf("bench capture: %w", err)
	}
	cleanup := func() { os.Remove(f.Name()) }
	if _, err := f.Write(benchCapture); err != nil {
		f.Close()
		cleanup()
		return "", nil, fmt.Errorf("bench capture: %w", err)
	}
	if err := f.Close(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("bench capture: %w", err)
	}
	return f.Name(), cleanup, nil
}
