package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/internal/lab"
)

const labLong = `Lab builds a test topology on this host: three network namespaces joined by
two veth pairs, with everything set so that packet counts on them are exact.

  <prefix>-gen          <prefix>-dp                    <prefix>-sink
  gen0 198.18.0.1/24 -- dp0 198.18.0.2/24
  02:77:66:00:00:01     02:77:66:00:00:02
                        dp1 198.19.0.2/24 -- sink0 198.19.0.1/24
                        02:77:66:00:00:03    02:77:66:00:00:04

The dataplane (warpflowd) runs inside <prefix>-dp, reading dp0 and writing
dp1. gen routes 198.19.0.0/24 via 198.18.0.2 and sink routes 198.18.0.0/24
via 198.19.0.2, with permanent neighbour entries for those MACs; ARP,
multicast and IPv6 are off on the four veths, and so are checksum offload,
TSO, GSO and GRO (set in-process through the SIOCETHTOOL ioctl: no
ethtool tool needed). gen0 and sink0 carry an XDP_PASS program, because a frame transmitted
into a veth reaches its peer only if the peer has XDP or GRO; dp0 and dp1
are left for the dataplane.

Needs root. Typical use:

  warpctl lab up                    # build the lab "wf" (--napi threaded, --queues N)
  warpctl lab status                # what exists, with counters (--json)
  warpctl lab xdp-pass --drop dp0   # no dataplane yet: give dp0 a receiver that drops
  warpctl gen --netns wf-gen --iface gen0 --count 1000000
  warpctl lab xdp-pass --remove dp0 # leave dp0 to the dataplane
  warpctl lab down                  # remove it all

--prefix runs several labs side by side (namespaces PREFIX-gen and so on).`

func newLabCommand() *cobra.Command {
	var prefix string
	cmd := &cobra.Command{
		Use:   "lab up|down|status",
		Short: "Build, inspect or remove the netns + veth test topology",
		Long:  labLong,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if err := lab.ValidatePrefix(prefix); err != nil {
				return failf(codeUsage, "--prefix: %v", err)
			}
			return nil
		},
	}
	cmd.PersistentFlags().StringVar(&prefix, "prefix", lab.DefaultPrefix, "lab name: namespaces PREFIX-gen, PREFIX-dp, PREFIX-sink")

	o := lab.DefaultOptions()
	var napi string
	var jsonOut bool
	upCmd := &cobra.Command{
		Use:   "up",
		Short: "Build the lab (refuses if it exists, unless --force)",
		Long: `Up builds the lab. It refuses when any of its namespaces exists; --force
removes that lab first. --napi threaded gives dp0 and dp1 threaded NAPI
(/sys/class/net/IF/threaded, kernel threads napi/dpN-ID that can be pinned);
the kernel accepts that only while NAPI exists, so GRO is switched on for the
write and off again. --queues gives every veth that many rx and tx queues.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := lab.ParseNAPIMode(napi)
			if err != nil {
				return failf(codeUsage, "--napi: %v", err)
			}
			o.Prefix, o.NAPI = prefix, m
			t, err := lab.Up(o)
			if err != nil {
				return failf(codeFailed, "lab up: %v", err)
			}
			if jsonOut {
				return printJSON(cmd, t)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "lab %s up (queues %d, napi %s)\n", t.Prefix, t.Queues, t.NAPI)
			for _, e := range []lab.Endpoint{t.Gen, t.DP0, t.DP1, t.Sink} {
				fmt.Fprintf(w, "  %-10s %-6s ifindex %-3d %s %s\n", e.Namespace, e.Name, e.Ifindex, e.MAC, e.Addr)
			}
			fmt.Fprintf(w, "dataplane: run warpflowd inside %s on %s (in) and %s (out)\n", t.DP0.Namespace, t.DP0.Name, t.DP1.Name)
			return nil
		},
	}
	upCmd.Flags().StringVar(&napi, "napi", "default", "NAPI of dp0 and dp1: default or threaded")
	upCmd.Flags().IntVar(&o.Queues, "queues", o.Queues, "rx and tx queues per veth")
	upCmd.Flags().BoolVar(&o.Force, "force", false, "remove an existing lab of this prefix first")
	upCmd.Flags().BoolVar(&jsonOut, "json", false, "print the topology as JSON")

	downCmd := &cobra.Command{
		Use:   "down",
		Short: "Remove the lab's namespaces and veths, nothing else",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := lab.Down(prefix)
			if errors.Is(err, lab.ErrNoLab) {
				fmt.Fprintf(cmd.OutOrStdout(), "lab %s: nothing to remove\n", prefix)
				return nil
			}
			if err != nil {
				return failf(codeFailed, "lab down: %v", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "lab %s removed\n", prefix)
			return nil
		},
	}

	var statusJSON bool
	statusCmd := &cobra.Command{
		Use:   "status",
		Short: "Say what exists of the lab: namespaces, links, addresses, XDP programs, counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := lab.Status(prefix)
			if err != nil {
				return failf(codeFailed, "lab status: %v", err)
			}
			if statusJSON {
				return printJSON(cmd, st)
			}
			st.WriteText(cmd.OutOrStdout())
			return nil
		},
	}
	statusCmd.Flags().BoolVar(&statusJSON, "json", false, "print as JSON")

	var remove, drop bool
	passCmd := &cobra.Command{
		Use:   "xdp-pass IFACE",
		Short: "Attach (or --remove) an XDP_PASS program on one of the lab's veths, e.g. dp0 when no dataplane runs",
		Long: `xdp-pass attaches the lab's XDP_PASS program to IFACE (gen0, dp0, dp1 or
sink0) in its namespace, so that frames its peer transmits by XDP_TX or
redirect arrive (a veth without XDP or GRO drops them silently). Use it on
dp0 to try 'warpctl gen' without a dataplane; it stays until --remove or
'lab down', and warpflowd cannot attach beside it: remove it before
starting one ('lab status' says when one is left on dp0 or dp1).
With --drop the program drops every frame instead (XDP_DROP, no stack
work): the cheapest receiver, to measure what the generator offers.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, ok := map[string]string{lab.GenIface: lab.GenNS(prefix), lab.DP0Iface: lab.DPNS(prefix),
				lab.DP1Iface: lab.DPNS(prefix), lab.SinkIface: lab.SinkNS(prefix)}[args[0]]
			if !ok {
				return failf(codeUsage, "xdp-pass %q: want gen0, dp0, dp1 or sink0", args[0])
			}
			if remove {
				if err := lab.DetachXDP(ns, args[0]); err != nil {
					return failf(codeFailed, "%v", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s/%s: xdp removed\n", ns, args[0])
				return nil
			}
			attach, name := lab.AttachPass, lab.PassProgramName
			if drop {
				attach, name = lab.AttachDrop, lab.DropProgramName
			}
			if err := attach(ns, args[0]); err != nil {
				return failf(codeFailed, "%v", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s/%s: %s attached (native)\n", ns, args[0], name)
			if args[0] == lab.DP0Iface || args[0] == lab.DP1Iface {
				// It stays until removed (or lab down), and a dataplane
				// cannot attach beside it.
				fmt.Fprintf(cmd.OutOrStdout(), "it stays until removed: before starting warpflowd on %s, %s\n", args[0], lab.RemoveCommand(prefix, args[0]))
			}
			return nil
		},
	}
	passCmd.Flags().BoolVar(&remove, "remove", false, "detach instead")
	passCmd.Flags().BoolVar(&drop, "drop", false, "attach a program that returns XDP_DROP instead of XDP_PASS")

	cmd.AddCommand(upCmd, downCmd, statusCmd, passCmd)
	return cmd
}

func printJSON(cmd *cobra.Command, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return failf(codeFailed, "json: %v", err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s\n", data)
	return nil
}
