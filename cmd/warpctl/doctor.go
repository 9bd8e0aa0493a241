package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/internal/doctor"
)

func newDoctorCommand() *cobra.Command {
	o := doctor.DefaultOptions()
	var asJSON, noTry bool
	cmd := &cobra.Command{
		Use:   "doctor [IFACE...]",
		Short: "Check the NICs, kernel and capabilities warpflowd would run on",
		Long: `Doctor looks at each interface (every one but loopback when none is named)
and at the kernel and this process, and prints one finding per line:
OK, WARN (works, slower or with a caveat) or FAIL (warpflowd will not run
like this), each with the fix.

Per interface: link, driver, XDP modes, whether a zero-copy AF_XDP bind is
granted (tried on --queue; if refused, why, and whether copy mode is),
queues and channels, RSS (is the key symmetric; can a key be set, tried
by writing the current one back), MTU against the frame size, XDP programs
already attached (a leftover, another process's bpf_link, a libxdp
dispatcher), NAPI and IRQ-deferral settings, ring sizes. System: kernel,
AF_XDP, bpf_link, shared UMEM, preferred busy poll, capabilities.

The binds and the RSS write reconfigure nothing for good, but a zero-copy
bind briefly reconfigures that queue on some drivers: --no-try skips them.
It runs in this network namespace; for another one use
  ip netns exec NS warpctl doctor IFACE
(which also mounts sysfs for it, where the NAPI settings are read).

Exit status 1 when any finding is FAIL.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Interfaces = args
			o.Try = !noTry
			findings, err := doctor.Run(o)
			if err != nil {
				return failf(codeUsage, "doctor: %v", err)
			}
			w := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				if err := enc.Encode(findings); err != nil {
					return failf(codeFailed, "doctor: %v", err)
				}
			} else {
				for _, f := range findings {
					fmt.Fprintln(w, f)
				}
				fmt.Fprintln(w, doctor.Counts(findings))
			}
			if doctor.Failed(findings) {
				return failf(codeFailed, "")
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&asJSON, "json", false, "print the findings as JSON")
	fl.BoolVar(&noTry, "no-try", false, "do not try AF_XDP binds or an RSS key write")
	fl.IntVar(&o.Queue, "queue", o.Queue, "the queue the binds are tried on")
	fl.IntVar(&o.FrameSize, "frame-size", o.FrameSize, "the daemon's umem.frame_size (2048 or 4096), for the MTU check")
	fl.IntVar(&o.Headroom, "headroom", o.Headroom, "the daemon's umem.headroom, for the MTU check")
	return cmd
}
