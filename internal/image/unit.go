package image

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// UnitCapabilities returns the capabilities the systemd unit at path
// grants warpflowd (its AmbientCapabilities, in the unit's order, CAP_
// prefixed as systemd writes them). It fails when the unit has none or
// when its CapabilityBoundingSet differs from them, so that the one list
// other places copy from (the image's label, the tests' containers, the
// Kubernetes manifests' check) is the one the unit really runs with.
func UnitCapabilities(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("unit capabilities: %w", err)
	}
	defer f.Close()
	var ambient, bounding []string
	sawBounding := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		var list *[]string
		switch strings.TrimSpace(key) {
		case "AmbientCapabilities":
			list = &ambient
		case "CapabilityBoundingSet":
			list, sawBounding = &bounding, true
		default:
			continue
		}
		value = strings.TrimSpace(value)
		if value == "" { // systemd: an empty assignment resets the list
			*list = nil
			continue
		}
		if strings.HasPrefix(value, "~") {
			return nil, fmt.Errorf("%s:%d: %s=%s: a negated list is not a list of what the daemon holds", path, n, key, value)
		}
		for _, c := range strings.Fields(value) {
			c = strings.ToUpper(c)
			if !strings.HasPrefix(c, "CAP_") {
				return nil, fmt.Errorf("%s:%d: %q is not a capability name (CAP_...)", path, n, c)
			}
			if !slices.Contains(*list, c) {
				*list = append(*list, c)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("unit capabilities: %s: %w", path, err)
	}
	if len(ambient) == 0 {
		return nil, fmt.Errorf("%s: no AmbientCapabilities= line", path)
	}
	if sawBounding {
		a, b := slices.Clone(ambient), slices.Clone(bounding)
		slices.Sort(a)
		slices.Sort(b)
		if !slices.Equal(a, b) {
			return nil, fmt.Errorf("%s: AmbientCapabilities (%s) and CapabilityBoundingSet (%s) differ", path, strings.Join(ambient, " "), strings.Join(bounding, " "))
		}
	}
	return ambient, nil
}

// Short drops the CAP_ prefix: the spelling podman's --cap-add and
// Kubernetes' capabilities.add take ("NET_ADMIN").
func Short(caps []string) []string {
	out := make([]string, len(caps))
	for i, c := range caps {
		out[i] = strings.TrimPrefix(c, "CAP_")
	}
	return out
}

// UnitStopTimeout returns the unit's TimeoutStopSec (the last one set):
// how long systemd lets SIGTERM's drain run before SIGKILL, which a
// Kubernetes pod's terminationGracePeriodSeconds must match. It takes
// what the unit file here writes: whole seconds ("10"), or one Go-style
// duration ("10s", "1min" as "1m").
func UnitStopTimeout(path string) (time.Duration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("unit stop timeout: %w", err)
	}
	value := ""
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, "="); ok && strings.TrimSpace(k) == "TimeoutStopSec" {
			value = strings.TrimSpace(v)
		}
	}
	if value == "" {
		return 0, fmt.Errorf("%s: no TimeoutStopSec= (systemd's default would apply: set it, so the drain time is written down)", path)
	}
	if n, err := strconv.Atoi(value); err == nil && n > 0 {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(strings.ReplaceAll(value, "min", "m"))
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s: TimeoutStopSec=%s: want seconds such as 10 or 10s", path, value)
	}
	return d, nil
}
