package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/pipelines"
)

func newValidateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "validate PIPELINE.yaml...",
		Short: "Check pipeline configs and report every problem with file:line:column",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bad := 0
			for _, path := range args {
				g, err := pipelines.LoadFile(path)
				if err != nil {
					fmt.Fprintln(cmd.ErrOrStderr(), err)
					bad++
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: pipeline %q OK: %d stages, ports %v, drop reasons %v\n",
					path, g.Name(), len(g.Stages()), g.Ports(), g.Reasons())
			}
			if bad > 0 {
				return failf(codeFailed, "%d of %d pipelines invalid", bad, len(args))
			}
			return nil
		},
	}
}
