package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

// Exit codes, the same for every command (listed in --help).
const (
	codeFailed      = 1   // the run failed (bad input, I/O error, unbalanced accounting)
	codeUsage       = 2   // bad flags or arguments
	codeMismatch    = 3   // --expect found a difference
	codeInterrupted = 130 // stopped by SIGINT or SIGTERM (128 + SIGINT, as shells report)
)

const exitCodesHelp = `Exit codes (every command):
  0    success
  1    failure: bad input, I/O error, unbalanced accounting
  2    usage: bad flags or arguments
  3    replay --expect: the outputs differ from the golden directory
  130  interrupted (Ctrl-C or SIGTERM): what was done so far is reported`

// exitError carries an exit code out of a command.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func failf(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// exitCode is the exit status for an error from Execute: an exitError's
// code; otherwise cobra's own errors (unknown command, wrong number of
// arguments) are usage errors, since every command's RunE returns an
// exitError.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return codeUsage
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "warpctl",
		Short:         "Control and offline tools for the Warpflow dataplane",
		Long:          "Control and offline tools for the Warpflow dataplane.\n\n" + exitCodesHelp,
		Version:       versionString(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return failf(codeUsage, "%v", err)
	})
	root.AddCommand(newReplayCommand(), newValidateCommand(), newBenchCommand(), newVersionCommand())
	root.AddCommand(newLabCommand(), newGenCommand(), newDoctorCommand())
	root.AddCommand(newControlCommands()...)
	addContextFlags(root)
	return root
}
