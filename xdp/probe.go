package xdp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Probe checks that the kernel has what this package needs: AF_XDP
// sockets, the XSKMAP map type and XDP programs. A missing piece is
// reported with an error wrapping ErrNotSupported and naming it; other
// failures (no permission) are returned as they are.
func Probe() error {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EAFNOSUPPORT) {
			return wrapNotSupported("probe AF_XDP socket (CONFIG_XDP_SOCKETS): %w", err)
		}
		return fmt.Errorf("probe AF_XDP socket: %w", permError(err, CapNetRaw))
	}
	unix.Close(fd)
	if err := features.HaveProgramType(ebpf.XDP); err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			return wrapNotSupported("probe XDP program type: %w", err)
		}
		return fmt.Errorf("probe XDP program type: %w", permError(err, CapBPF, CapNetAdmin))
	}
	if err := features.HaveMapType(ebpf.XSKMap); err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			return wrapNotSupported("probe XSKMAP: %w", err)
		}
		return fmt.Errorf("probe XSKMAP: %w", permError(err, CapBPF, CapNetAdmin))
	}
	return nil
}

// RXQueues returns the number of receive queues of iface: the rx-N
// directories under /sys/class/net/IF/queues, which count the queues the
// driver has active. /sys shows the network namespace it was mounted in,
// so when it does not show this namespace's iface (same name, same
// ifindex) the answer comes from netlink (IFLA_NUM_RX_QUEUES, the queues
// allocated, an upper bound of the active ones).
func RXQueues(iface string) (int, error) {
	ifc, err := net.InterfaceByName(iface)
	if err != nil {
		return 0, fmt.Errorf("rx queues of %q: interface not found: %w", iface, unix.ENODEV)
	}
	dir := filepath.Join("/sys/class/net", iface)
	if b, err := os.ReadFile(filepath.Join(dir, "ifindex")); err == nil {
		if idx, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && idx == ifc.Index {
			ents, err := os.ReadDir(filepath.Join(dir, "queues"))
			if err == nil {
				n := 0
				for _, e := range ents {
					if strings.HasPrefix(e.Name(), "rx-") {
						n++
					}
				}
				if n > 0 {
					return n, nil
				}
			}
		}
	}
	l, err := netlink.LinkByIndex(ifc.Index)
	if err != nil {
		return 0, fmt.Errorf("rx queues of %s: %w", iface, err)
	}
	if n := l.Attrs().NumRxQueues; n > 0 {
		return n, nil
	}
	return 1, nil
}
