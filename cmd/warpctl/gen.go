package main

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/internal/gen"
)

const genLong = `Gen sends Ethernet frames out of one interface from inside a network
namespace: synthetic IPv4/UDP frames of --size bytes (Ethernet header
included, FCS excluded, 64 to 1518) over --flows UDP source ports, or the
frames of a capture (--pcap, looped in order). It prints the rate it
achieved once a second and a summary at the end (--json for JSON), and
always stops: after --count frames or --duration, whichever comes first
(both are bounded by default), or on Ctrl-C.

Engines:
  live   XDP live-frame mode: BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES of
         a small XDP program that returns XDP_TX (xdp-tools' xdp-trafficgen
         method). The program takes a sequence number per run, writes the
         flow's UDP source port (checksum 0) and refuses runs past --count,
         so the count is exact. With --pcap it makes one syscall per frame:
         slow; prefer afxdp for captures.
  afxdp  An AF_XDP socket's TX ring (copy mode on veth): frames written into
         the UMEM once and recycled from the completion ring; the count is
         the completions.

The count reported is what the kernel took (live: program runs that
returned XDP_TX; afxdp: completions), never the request. On a veth, frames
from either engine reach the peer only if the peer has an XDP program or
GRO (the lab puts XDP_PASS on gen0 and sink0; dp0 gets the dataplane's):
otherwise they are dropped and show in iface_tx_dropped, or vanish.

Examples (after 'warpctl lab up', with warpflowd running in wf-dp):
  warpctl gen                                   # 1M 64-byte frames from wf-gen/gen0, as fast as possible
  warpctl gen --rate 1000000 --duration 5s --count 100000000
  warpctl gen --engine afxdp --size 1518 --flows 256 --count 1000000
  warpctl gen --pcap testdata/captures/mixed.pcap --engine afxdp --count 100000`

func newGenCommand() *cobra.Command {
	o := gen.DefaultOptions()
	var engine, srcMAC, dstMAC, srcIP, dstIP string
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "gen [flags]",
		Short: "Send synthetic UDP or captured frames from a namespace, bounded in count and time",
		Long:  genLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := gen.ParseEngine(engine)
			if err != nil {
				return failf(codeUsage, "--engine: %v", err)
			}
			o.Engine = e
			for _, m := range []struct {
				flag, s string
				dst     *net.HardwareAddr
			}{{"--src-mac", srcMAC, &o.SrcMAC}, {"--dst-mac", dstMAC, &o.DstMAC}} {
				if m.s == "" {
					continue
				}
				hw, err := net.ParseMAC(m.s)
				if err != nil || len(hw) != 6 {
					return failf(codeUsage, "%s %q: want an Ethernet address like 02:77:66:00:00:02", m.flag, m.s)
				}
				*m.dst = hw
			}
			for _, a := range []struct {
				flag, s string
				dst     *netip.Addr
			}{{"--src-ip", srcIP, &o.SrcIP}, {"--dst-ip", dstIP, &o.DstIP}} {
				if a.s == "" {
					continue
				}
				ip, err := netip.ParseAddr(a.s)
				if err != nil || !ip.Is4() {
					return failf(codeUsage, "%s %q: want an IPv4 address", a.flag, a.s)
				}
				*a.dst = ip
			}
			if o.Capture == "" && (o.Size < gen.MinFrame || o.Size > gen.MaxFrame) {
				return failf(codeUsage, "--size %d: want %d to %d", o.Size, gen.MinFrame, gen.MaxFrame)
			}
			if o.Count == 0 || o.Duration <= 0 {
				return failf(codeUsage, "--count %d --duration %s: both must be positive (every run is bounded)", o.Count, o.Duration)
			}
			if o.Rate < 0 {
				return failf(codeUsage, "--rate %g: must not be negative", o.Rate)
			}
			w, ew := cmd.OutOrStdout(), cmd.ErrOrStderr()
			o.Progress = func(p gen.Progress) {
				fmt.Fprintf(ew, "%6.1fs  %12d sent  %10.3f Mpps\n", p.Elapsed.Seconds(), p.Sent, p.PPS/1e6)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			res, err := gen.Run(ctx, o)
			if jsonOut && res.Stopped != "" {
				if perr := printJSON(cmd, res); perr != nil {
					return perr
				}
			} else if res.Stopped != "" {
				fmt.Fprintf(w, "sent %d frames (%d bytes, %.0f bytes each) in %.3fs: %.3f Mpps, %.3f Gbit/s; engine %s (%s) on %s ifindex %d in %q; stopped by %s\n",
					res.Sent, res.Bytes, res.FrameLen, res.Elapsed.Seconds(), res.PPS/1e6,
					float64(res.Bytes)*8/max(res.Elapsed.Seconds(), 1e-9)/1e9, res.Engine, res.Mode,
					res.Interface, res.Ifindex, res.Netns, res.Stopped)
				fmt.Fprintf(w, "interface %s: tx_packets +%d, tx_dropped +%d", res.Interface, res.IfaceTXPackets, res.IfaceTXDropped)
				if res.Over > 0 {
					fmt.Fprintf(w, "; %d extra runs refused by the program", res.Over)
				}
				if res.Unconfirmed > 0 {
					fmt.Fprintf(w, "; %d submitted frames never completed", res.Unconfirmed)
				}
				fmt.Fprintln(w)
				for _, m := range res.Warnings {
					fmt.Fprintln(ew, "warning:", m)
				}
			}
			if err != nil {
				return failf(codeFailed, "%v", err)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Netns, "netns", o.Netns, "network namespace to send from (\"\": this one)")
	fl.StringVar(&o.Interface, "iface", o.Interface, "interface to send out of")
	fl.IntVar(&o.Queue, "queue", o.Queue, "queue of the interface")
	fl.StringVar(&engine, "engine", o.Engine.String(), "live (XDP live frames) or afxdp (AF_XDP TX ring)")
	fl.StringVar(&o.Capture, "pcap", "", "send this capture's Ethernet frames, looped, instead of synthetic UDP")
	fl.IntVar(&o.Size, "size", o.Size, "synthetic frame size in bytes, Ethernet header included, FCS excluded (64..1518)")
	fl.IntVar(&o.Flows, "flows", o.Flows, "synthetic flows: distinct UDP source ports from --src-port up")
	fl.StringVar(&srcMAC, "src-mac", o.SrcMAC.String(), "synthetic source MAC")
	fl.StringVar(&dstMAC, "dst-mac", o.DstMAC.String(), "synthetic destination MAC (the lab's dp0)")
	fl.StringVar(&srcIP, "src-ip", o.SrcIP.String(), "synthetic source IPv4 address")
	fl.StringVar(&dstIP, "dst-ip", o.DstIP.String(), "synthetic destination IPv4 address (the lab's sink0)")
	fl.Uint16Var(&o.SrcPort, "src-port", o.SrcPort, "first UDP source port")
	fl.Uint16Var(&o.DstPort, "dst-port", o.DstPort, "UDP destination port")
	fl.IntVar(&o.Batch, "batch", 0, "live engine: kernel batch size, 1..256 (0: the kernel's 64)")
	fl.Float64Var(&o.Rate, "rate", 0, "frames per second (0: as fast as possible)")
	fl.Uint64Var(&o.Count, "count", o.Count, "stop after this many frames")
	fl.DurationVar(&o.Duration, "duration", o.Duration, "stop after this long")
	fl.BoolVar(&jsonOut, "json", false, "print the summary as JSON (progress still goes to stderr)")
	return cmd
}
