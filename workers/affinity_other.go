//go:build !linux

package workers

import "runtime"

func validCPUs(cpus []int) error {
	return badOption("cpus %v: pinning is not supported on %s", cpus, runtime.GOOS)
}

func pinThread(cpu int) error { return nil }
