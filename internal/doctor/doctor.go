package doctor

import (
	"fmt"
	"net"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
)

// Level is how a finding bears on running warpflowd.
type Level string

const (
	OK   Level = "OK"   // works as warpflowd needs
	Warn Level = "WARN" // works, slower or with a caveat
	Fail Level = "FAIL" // warpflowd will not run like this
)

// Finding is one line of the report.
type Finding struct {
	// Interface is the interface it is about; "" for the kernel and the
	// process.
	Interface string `json:"interface"`
	Check     string `json:"check"`
	Level     Level  `json:"level"`
	Message   string `json:"message"`
	Fix       string `json:"fix,omitempty"`
}

func (f Finding) String() string {
	s := fmt.Sprintf("%-4s %s %s: %s", f.Level, orDash(f.Interface), f.Check, f.Message)
	if f.Fix != "" {
		s += "; fix: " + f.Fix
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Required are the capabilities warpflowd needs: the systemd unit's
// (cmd/warpflowd/warpflowd.service; a test keeps the two equal).
var Required = []string{"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_BPF", "CAP_IPC_LOCK"}

// Options says what to examine.
type Options struct {
	// Interfaces to examine; empty: every interface of this namespace
	// but loopback.
	Interfaces []string
	// Queue is the queue the AF_XDP binds are tried on.
	Queue int
	// FrameSize and Headroom are the daemon's umem.frame_size and
	// umem.headroom, for the MTU check.
	FrameSize, Headroom int
	// Try makes the binds and the RSS key write (see the package doc).
	Try bool
}

// DefaultOptions are the daemon's defaults, trying on queue 0.
func DefaultOptions() Options {
	return Options{FrameSize: 4096, Try: true}
}

// Run examines the system and the interfaces. An interface that does not
// exist is a FAIL finding, not an error; the error is for a run that
// could not look at all.
func Run(o Options) ([]Finding, error) {
	if o.FrameSize != 2048 && o.FrameSize != 4096 {
		return nil, fmt.Errorf("frame size %d: want 2048 or 4096 (umem.frame_size)", o.FrameSize)
	}
	if o.Queue < 0 || o.Queue > 1023 {
		return nil, fmt.Errorf("queue %d: want 0..1023", o.Queue)
	}
	names := o.Interfaces
	if len(names) == 0 {
		links, err := netlink.LinkList()
		if err != nil {
			return nil, fmt.Errorf("list interfaces: %w", err)
		}
		for _, l := range links {
			if l.Attrs().Flags&net.FlagLoopback == 0 {
				names = append(names, l.Attrs().Name)
			}
		}
		sort.Strings(names)
	}
	out := system()
	for _, n := range names {
		out = append(out, examine(n, o)...)
	}
	return out, nil
}

// Failed reports whether any finding is a FAIL.
func Failed(fs []Finding) bool {
	for _, f := range fs {
		if f.Level == Fail {
			return true
		}
	}
	return false
}

// Counts sums the findings by level ("3 OK, 1 WARN, 0 FAIL").
func Counts(fs []Finding) string {
	n := map[Level]int{}
	for _, f := range fs {
		n[f.Level]++
	}
	return fmt.Sprintf("%d OK, %d WARN, %d FAIL", n[OK], n[Warn], n[Fail])
}

func join(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "; ")
}
