//go:build !linux

package cpuaffinity

import (
	"errors"
	"testing"
)

func TestNotSupported(t *testing.T) {
	if Supported {
		t.Fatal("Supported is true off Linux")
	}
	if err := PinThread(0); !errors.Is(err, ErrNotSupported) {
		t.Errorf("PinThread(0) = %v, want ErrNotSupported", err)
	}
	if _, err := ThreadCPUs(); !errors.Is(err, ErrNotSupported) {
		t.Errorf("ThreadCPUs() = %v, want ErrNotSupported", err)
	}
}
