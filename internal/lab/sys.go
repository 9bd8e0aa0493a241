package lab

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/warpflow/warpflow/internal/nic"
)

// writeSysctl writes value to /proc/sys/KEY (KEY with slashes) inside the
// namespace ns. /proc/sys/net resolves against the namespace of the thread
// that opens it, so Do is enough here (sysfs is not: see threadedWrite).
func writeSysctl(ns, key, value string) error {
	return Do(ns, func() error {
		if err := os.WriteFile("/proc/sys/"+key, []byte(value), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=%s in %s: %w", strings.ReplaceAll(key, "/", "."), value, ns, err)
		}
		return nil
	})
}

// readSysctl reads /proc/sys/KEY inside ns.
func readSysctl(ns, key string) (string, error) {
	var v string
	err := Do(ns, func() error {
		b, err := os.ReadFile("/proc/sys/" + key)
		v = strings.TrimSpace(string(b))
		return err
	})
	return v, err
}

// run runs a command inside ns (the child inherits the namespace of the
// locked thread that starts it) and returns its combined output.
func run(ns string, name string, args ...string) (string, error) {
	var out []byte
	err := Do(ns, func() error {
		var e error
		out, e = exec.Command(name, args...).CombinedOutput()
		return e
	})
	if err != nil {
		return string(out), fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), ns, err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// setOffloads sets iface's offload features in ns in-process, through
// the SIOCETHTOOL ioctl (internal/nic, the one implementation in the
// repository; the socket it makes belongs to the namespace of the locked
// thread Do runs it on), so the lab needs no ethtool tool. Each setting is
// read back.
func setOffloads(ns, iface string, on bool, features ...nic.Offload) error {
	return Do(ns, func() error {
		for _, f := range features {
			if err := nic.SetOffload(iface, f, on); err != nil {
				return fmt.Errorf("offloads of %s in %s: %w", iface, ns, err)
			}
		}
		return nil
	})
}

// Offloads reads the four offload features Up turns off on iface in ns
// (tx checksum, TSO, GSO, GRO), in that order.
func Offloads(ns, iface string) (map[nic.Offload]bool, error) {
	got := map[nic.Offload]bool{}
	err := Do(ns, func() error {
		for _, f := range []nic.Offload{nic.TXChecksum, nic.TSO, nic.GSO, nic.GRO} {
			on, err := nic.GetOffload(iface, f)
			if err != nil {
				return fmt.Errorf("offloads of %s in %s: %w", iface, ns, err)
			}
			got[f] = on
		}
		return nil
	})
	return got, err
}

// sysfsInNS runs a shell snippet that sees the sysfs of namespace ns: sysfs
// shows the network namespace of whoever mounted it, so the snippet runs in
// a child with its own mount namespace (unshare --mount, private
// propagation) that mounts a fresh sysfs on /sys. Nothing leaks to the
// host's mounts.
func sysfsInNS(ns, script string) (string, error) {
	out, err := run(ns, "unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", "mount -t sysfs sysfs /sys && "+script)
	return strings.TrimSpace(out), err
}

// setThreaded writes /sys/class/net/IF/threaded (1 or 0) in ns. The kernel
// accepts the write only while the device has NAPI instances; a veth without
// XDP has them only with GRO on, so GRO is switched on around the write and
// off again. The value stays and applies to NAPI created later (by the
// dataplane's XDP program).
func setThreaded(ns, iface string, on bool) error {
	v := "0"
	if on {
		v = "1"
	}
	if err := setOffloads(ns, iface, true, nic.GRO); err != nil {
		return err
	}
	_, werr := sysfsInNS(ns, fmt.Sprintf("echo %s > /sys/class/net/%s/threaded", v, iface))
	gerr := setOffloads(ns, iface, false, nic.GRO)
	if werr != nil {
		return fmt.Errorf("set threaded napi on %s: %w", iface, werr)
	}
	return gerr
}

// threaded reads /sys/class/net/IF/threaded for each iface in ns, in order.
func threaded(ns string, ifaces ...string) ([]string, error) {
	var parts []string
	for _, i := range ifaces {
		parts = append(parts, "cat /sys/class/net/"+i+"/threaded")
	}
	out, err := sysfsInNS(ns, strings.Join(parts, " && "))
	if err != nil {
		return nil, err
	}
	vals := strings.Fields(out)
	if len(vals) != len(ifaces) {
		return nil, fmt.Errorf("read threaded in %s: unexpected output %q", ns, out)
	}
	return vals, nil
}
