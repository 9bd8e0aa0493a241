package gpu

import (
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// The kernel's source, for its host build.
//
//go:embed kernel.cu wf_layout.h host/shim.h host/main.cc
var kernelSource embed.FS

// BuildHostKernel compiles kernel.cu's shared code for the host
// (host/main.cc through host/shim.h) with the C++ compiler ($CXX, else
// g++) into dir, and returns the program's path: Options.Emulator for an
// emulated kernel. The source is the one built into this package, so the
// program runs the very code the package's PTX was made from.
func BuildHostKernel(dir string) (string, error) {
	src := filepath.Join(dir, "src")
	for _, name := range []string{"kernel.cu", "wf_layout.h", "host/shim.h", "host/main.cc"} {
		b, err := kernelSource.ReadFile(name)
		if err != nil {
			return "", err
		}
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return "", err
		}
	}
	cxx := os.Getenv("CXX")
	if cxx == "" {
		cxx = "g++"
	}
	if _, err := exec.LookPath(cxx); err != nil {
		return "", fmt.Errorf("host build of kernel.cu: no C++ compiler (%s): %w", cxx, err)
	}
	out := filepath.Join(dir, "wfkernel")
	cmd := exec.Command(cxx, "-O2", "-std=c++17", "-Wall", "-Wno-unused-function", "-I", src, "-o", out, filepath.Join(src, "host", "main.cc"))
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("host build of kernel.cu: %s: %w\n%s", cmd, err, msg)
	}
	return out, nil
}
