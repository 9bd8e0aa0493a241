package lab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netns"
)

// NamespaceDir is where named network namespaces are bound, as ip-netns(8)
// and the netns package do it.
const NamespaceDir = "/run/netns"

// Do runs fn on an OS thread that has joined the named network namespace,
// and returns fn's error. It runs fn on a goroutine of its own, locked to
// its thread, so the caller's thread never changes namespace; if the thread
// cannot be put back, it stays locked and Go discards it when the goroutine
// ends. Anything fn starts on another goroutine runs in the caller's
// namespace, not in name's. Child processes that fn starts (os/exec) inherit
// the namespace.
func Do(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("current namespace: %w", err)
			return
		}
		defer orig.Close()
		target, err := netns.GetFromName(name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open namespace %s: %w", name, err)
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter namespace %s: %w", name, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: it dies with this goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("leave namespace %s: %w", name, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// namespaceExists reports whether name is bound under NamespaceDir.
func namespaceExists(name string) bool {
	_, err := os.Stat(filepath.Join(NamespaceDir, name))
	return err == nil
}

// createNamespaces creates the named namespaces and returns a handle to
// each (the caller closes them). On failure it removes the ones it made.
func createNamespaces(names []string) (handles []netns.NsHandle, err error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		orig, gerr := netns.Get()
		if gerr != nil {
			runtime.UnlockOSThread()
			err = fmt.Errorf("current namespace: %w", gerr)
			return
		}
		defer orig.Close()
		for _, n := range names {
			h, nerr := netns.NewNamed(n) // moves this thread into n
			if nerr != nil {
				err = fmt.Errorf("create namespace %s: %w", n, nerr)
				break
			}
			handles = append(handles, h)
		}
		if serr := netns.Set(orig); serr != nil {
			err = errors.Join(err, fmt.Errorf("return to original namespace: %w", serr))
			return // thread stays locked and is discarded
		}
		runtime.UnlockOSThread()
	}()
	<-done
	if err != nil {
		for i, h := range handles {
			h.Close()
			_ = netns.DeleteNamed(names[i])
		}
		return nil, err
	}
	return handles, nil
}

// Start starts cmd inside the named network namespace (the child inherits
// the namespace of the thread that forks it); wait for it as usual. This is
// how tests run external tools (tcpreplay, tcpdump, warpflowd) in the lab
// without ip-netns(8), which would also hide bpffs from them.
func Start(name string, cmd *exec.Cmd) error {
	return Do(name, cmd.Start)
}
