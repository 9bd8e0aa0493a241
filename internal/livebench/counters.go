package livebench

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/warpflow/warpflow/internal/lab"
)

// parseEthtoolStats parses `ethtool -S IFACE` output ("     name: value"
// lines after a "NIC statistics:" header).
func parseEthtoolStats(out string) (map[string]uint64, error) {
	m := map[string]uint64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasSuffix(line, "statistics:") {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("ethtool -S: unexpected line %q", line)
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("ethtool -S: counter %q: %w", k, err)
		}
		m[strings.TrimSpace(k)] = n
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("ethtool -S: no counters in %q", out)
	}
	return m, nil
}

// ifaceCounters are one interface's kernel counters at one moment: the
// driver's (ethtool -S) and the link's (netlink).
type ifaceCounters struct {
	Ethtool   map[string]uint64
	RXPackets uint64
	TXPackets uint64
	RXDropped uint64
	TXDropped uint64
}

// readCounters reads iface's counters inside namespace ns.
func readCounters(ns, iface string) (ifaceCounters, error) {
	var c ifaceCounters
	err := lab.Do(ns, func() error {
		out, err := exec.Command("ethtool", "-S", iface).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ethtool -S %s in %s: %w: %s", iface, ns, err, strings.TrimSpace(string(out)))
		}
		if c.Ethtool, err = parseEthtoolStats(string(out)); err != nil {
			return fmt.Errorf("%s in %s: %w", iface, ns, err)
		}
		l, err := netlink.LinkByName(iface)
		if err != nil {
			return fmt.Errorf("link %s in %s: %w", iface, ns, err)
		}
		if s := l.Attrs().Statistics; s != nil {
			c.RXPackets, c.TXPackets = s.RxPackets, s.TxPackets
			c.RXDropped, c.TXDropped = s.RxDropped, s.TxDropped
		}
		return nil
	})
	return c, err
}

// xdpAttachMode says how an XDP program is attached to iface in ns:
// "native", "generic", "offload" or "none".
func xdpAttachMode(ns, iface string) (string, error) {
	mode := "none"
	err := lab.Do(ns, func() error {
		l, err := netlink.LinkByName(iface)
		if err != nil {
			return fmt.Errorf("link %s in %s: %w", iface, ns, err)
		}
		x := l.Attrs().Xdp
		if x == nil || !x.Attached {
			return nil
		}
		switch x.AttachMode {
		case nl.XDP_ATTACHED_DRV:
			mode = "native"
		case nl.XDP_ATTACHED_SKB:
			mode = "generic"
		case nl.XDP_ATTACHED_HW:
			mode = "offload"
		default:
			mode = fmt.Sprintf("mode %d", x.AttachMode)
		}
		return nil
	})
	return mode, err
}

// detachXDP removes whatever XDP program is left on iface in ns (a peer
// that died without detaching: libxdp attaches through netlink, not a
// bpf_link) and reports whether there was one.
func detachXDP(ns, iface string) (bool, error) {
	found := false
	err := lab.Do(ns, func() error {
		l, err := netlink.LinkByName(iface)
		if err != nil {
			return fmt.Errorf("link %s in %s: %w", iface, ns, err)
		}
		if x := l.Attrs().Xdp; x == nil || !x.Attached {
			return nil
		}
		found = true
		if err := netlink.LinkSetXdpFd(l, -1); err != nil {
			return fmt.Errorf("detach xdp from %s in %s: %w", iface, ns, err)
		}
		return nil
	})
	return found, err
}

// cpuTimes are one CPU's times from /proc/stat, in clock ticks.
type cpuTimes struct{ busy, total uint64 }

// readCPU reads cpu's line of /proc/stat.
func readCPU(cpu int) (cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	return parseCPU(string(b), cpu)
}

// parseCPU finds "cpuN user nice system idle iowait irq softirq steal ..."
// and counts idle and iowait as not busy.
func parseCPU(stat string, cpu int) (cpuTimes, error) {
	name := fmt.Sprintf("cpu%d", cpu)
	sc := bufio.NewScanner(strings.NewReader(stat))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[0] != name {
			continue
		}
		var t cpuTimes
		for i, v := range f[1:] {
			if i >= 8 { // guest times are already in user
				break
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return cpuTimes{}, fmt.Errorf("/proc/stat %s: %w", name, err)
			}
			t.total += n
			if i != 3 && i != 4 {
				t.busy += n
			}
		}
		return t, nil
	}
	return cpuTimes{}, fmt.Errorf("/proc/stat: no %s", name)
}
