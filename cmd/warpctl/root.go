package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	codeFailed   = 1 // the run failed (bad input, I/O error, unbalanced accounting)
	codeUsage    = 2 // bad flags or arguments
	codeMismatch = 3 // --expect found a difference
)

// exitError carries an exit code out of a command.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func failf(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "warpctl",
		Short:         "Control and offline tools for the Warpflow dataplane",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return failf(codeUsage, "%v", err)
	})
	root.AddCommand(newReplayCommand(), newValidateCommand(), newBenchCommand())
	root.AddCommand(newLabCommand(), newGenCommand())
	root.AddCommand(newControlCommands()...)
	return root
}
