package gpu

import (
	"fmt"
	"os"
	"testing"
)

// hostKernel is the host build of kernel.cu the emulated tests run
// (BuildHostKernel, once per test binary), or why there is none.
var (
	hostKernel    string
	hostKernelErr error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "wfkernel")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	hostKernel, hostKernelErr = BuildHostKernel(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// emulated returns kernel options that emulate the kernel with the host
// build; without a C++ compiler the test fails under CI (where .ci/run
// installs g++) and skips elsewhere, with the reason.
func emulated(t *testing.T) Options {
	t.Helper()
	if hostKernelErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(hostKernelErr)
		}
		t.Skip(hostKernelErr)
	}
	o := DefaultOptions()
	o.Emulate, o.Emulator = true, hostKernel
	return o
}

// onDevice returns kernel options for the GPU, or skips with the reason
// where there is none (CI has no GPU: these run on the device machine).
func onDevice(t *testing.T) Options {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	return DefaultOptions()
}
