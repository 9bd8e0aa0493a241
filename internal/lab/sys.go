package lab

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
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

// ethtoolFeatures sets offload features with the ethtool tool: netlink
// (rtnetlink) has no way to set them and the ethtool ioctl would need
// x/sys/unix outside package xdp.
func ethtoolFeatures(ns, iface string, kv ...string) error {
	_, err := run(ns, "ethtool", append([]string{"-K", iface}, kv...)...)
	return err
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
	if err := ethtoolFeatures(ns, iface, "gro", "on"); err != nil {
		return err
	}
	_, werr := sysfsInNS(ns, fmt.Sprintf("echo %s > /sys/class/net/%s/threaded", v, iface))
	gerr := ethtoolFeatures(ns, iface, "gro", "off")
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
