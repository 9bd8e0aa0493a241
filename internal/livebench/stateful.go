package livebench

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/warpflow/warpflow/internal/lab"
)

// The stateful mode (issue 16): warpflowd running parse, conntrack, a
// ct-matching filter, SNAT and tx, beside the Linux kernel doing the same
// as a router with nftables (ct state rules, snat), at the same offered
// load, on the same lab: frames from gen0 arrive on dp0, are tracked,
// translated to dp1's address and leave by dp1 for sink0. The figure is
// what reached sink0, counted by the kernel: sink0's XDP drop program sees
// every frame (rx_queue_0_xdp_packets) and drops it before sink0's stack
// could answer (a UDP port unreachable would come back through the
// router).
//
// The generator is internal/gen's AF_XDP engine here, for both peers,
// not the live-frames engine of the other modes: the kernel router builds
// its skb on the live engine's page, rewrites the Ethernet header (and
// the TTL and source address) in place when it forwards, and the page
// goes back to the generator's page pool as it is, so the generator sends
// those bytes next time round: frames addressed to sink0's MAC arrive on
// dp0, and the kernel drops them as not its own (dp0's RX otherhost
// counter: 2,000,000 of 2,000,000 frames of a flood in one try on the
// lab; 10% at 200 kpps). The AF_XDP engine's frames are copied out of its
// UMEM into each skb, so nothing downstream can change what it sends.
//
// Where the work runs: with warpflowd, dp0's XDP program redirects to its
// socket and warpflowd's loop (on the dataplane's CPU) tracks, translates
// and transmits on dp1. With nftables, dp0 runs the lab's XDP pass program
// (veth takes the generator's XDP_TX frames only with an XDP program, and
// its NAPI then counts rx_queue_0_xdp_packets) and the kernel forwards in
// dp0's NAPI: in setup B the napi/dp0 thread, pinned to the dataplane's
// CPU, so both peers have that one CPU; in setup A the softirq on the
// generator's CPU, where the kernel shares the generator's core instead
// (setup A's nftables figure is not one core's).

//go:embed pipelines/stateful.yaml
var statefulPipeline []byte

// PeerNftables is the kernel router: IPv4 forwarding with nftables in the
// lab's dataplane namespace.
const PeerNftables = "nftables"

// nftRuleset is the router's nftables table: what the stateful pipeline
// does, in nft. The forward chain drops invalid packets and new telnet,
// accepts the rest; postrouting source-NATs the generator's network out of
// dp1 to dp1's address.
const nftRuleset = `table ip wfbench {
	chain forward {
		type filter hook forward priority filter; policy accept;
		ct state invalid counter drop
		ct state new tcp dport 23 counter drop
		counter
	}
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		oifname "dp1" ip saddr 198.18.0.0/24 counter snat to 198.19.0.2
	}
}
`

// nftRouter runs the kernel as the stateful router in namespace ns.
type nftRouter struct {
	ns      string
	started bool
}

func nft(ns string, stdin string, args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, "nft"}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("nft %s in %s: %w: %s", strings.Join(args, " "), ns, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func (r *nftRouter) start(ctx context.Context, mode Mode) error {
	if mode != Stateful {
		return fmt.Errorf("the nftables router runs only the stateful mode, not %s", mode)
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return fmt.Errorf("nftables: %w (apt-get install nftables)", err)
	}
	r.started = true
	nft(r.ns, "", "delete", "table", "ip", "wfbench") // one left over
	if _, err := nft(r.ns, nftRuleset, "-f", "-"); err != nil {
		return err
	}
	if err := ipForward(r.ns, "1"); err != nil {
		return err
	}
	// The dataplane namespace's conntrack starts empty, so that the flows
	// of an earlier sample are not already in it.
	flushConntrack(r.ns)
	return lab.AttachPass(r.ns, lab.DP0Iface)
}

func (r *nftRouter) granted() string { return "kernel" }

// stop reports the rules' counters (for the record) and undoes start.
func (r *nftRouter) stop() (string, error) {
	if !r.started {
		return "", nil
	}
	r.started = false
	var errs []string
	rep, err := nft(r.ns, "", "list", "table", "ip", "wfbench")
	if err != nil {
		errs = append(errs, err.Error())
	}
	if _, err := nft(r.ns, "", "delete", "table", "ip", "wfbench"); err != nil {
		errs = append(errs, err.Error())
	}
	if err := ipForward(r.ns, "0"); err != nil {
		errs = append(errs, err.Error())
	}
	flushConntrack(r.ns)
	if err := lab.DetachXDP(r.ns, lab.DP0Iface); err != nil {
		errs = append(errs, err.Error())
	}
	rep = strings.Join(strings.Fields(rep), " ")
	if len(errs) > 0 {
		return rep, fmt.Errorf("nftables router: %s", strings.Join(errs, "; "))
	}
	return rep, nil
}

// sinkDrop puts the lab's XDP drop program on sink0 in place of its pass
// program (on), or back (off).
func sinkDrop(ns string, on bool) error {
	if err := lab.DetachXDP(ns, lab.SinkIface); err != nil {
		return err
	}
	if on {
		return lab.AttachDrop(ns, lab.SinkIface)
	}
	return lab.AttachPass(ns, lab.SinkIface)
}

// ipCounters are a namespace's IP counters of /proc/net/snmp.
type ipCounters struct{ InReceives, ForwDatagrams uint64 }

// readIPCounters reads ns's IP counters (/proc/thread-self/net: the
// namespace of the thread that reads, which lab.Do sets).
func readIPCounters(ns string) (ipCounters, error) {
	var c ipCounters
	err := lab.Do(ns, func() error {
		b, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		c, err = parseSNMP(string(b))
		return err
	})
	return c, err
}

// parseSNMP reads InReceives and ForwDatagrams from /proc/net/snmp's two
// "Ip:" lines (names, then values).
func parseSNMP(s string) (ipCounters, error) {
	var names []string
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Ip:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		if len(f) != len(names) {
			return ipCounters{}, fmt.Errorf("/proc/net/snmp: %d Ip names, %d values", len(names), len(f))
		}
		var c ipCounters
		found := 0
		for i, n := range names {
			var dst *uint64
			switch n {
			case "InReceives":
				dst = &c.InReceives
			case "ForwDatagrams":
				dst = &c.ForwDatagrams
			default:
				continue
			}
			v, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return ipCounters{}, fmt.Errorf("/proc/net/snmp: Ip %s: %w", n, err)
			}
			*dst = v
			found++
		}
		if found != 2 {
			return ipCounters{}, errors.New("/proc/net/snmp: no Ip InReceives and ForwDatagrams")
		}
		return c, nil
	}
	return ipCounters{}, errors.New("/proc/net/snmp: no Ip lines")
}

// ipForward sets net.ipv4.ip_forward in ns (/proc/sys/net resolves
// against the namespace of the thread that opens it).
func ipForward(ns, v string) error {
	return lab.Do(ns, func() error {
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte(v), 0o644); err != nil {
			return fmt.Errorf("net.ipv4.ip_forward=%s in %s: %w", v, ns, err)
		}
		return nil
	})
}

// flushConntrack empties ns's conntrack table where conntrack-tools is
// installed (its entries expire by themselves otherwise: UDP in 30 s).
func flushConntrack(ns string) {
	if _, err := exec.LookPath("conntrack"); err == nil {
		exec.Command("ip", "netns", "exec", ns, "conntrack", "-F").Run()
	}
}
