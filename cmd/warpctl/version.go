package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// versionString is the module version and commit from the binary's build
// information: what `go install ...@version` or a build in a checkout
// recorded. A build without VCS stamping (-buildvcs=false, or outside a
// checkout) says so rather than inventing a commit.
func versionString() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "warpctl: no build information in this binary"
	}
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var rev, when string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	commit := "commit unknown (built without VCS information)"
	if rev != "" {
		commit = "commit " + rev
		if when != "" {
			commit += " (" + when + ")"
		}
		if modified {
			commit += ", with uncommitted changes"
		}
	}
	return fmt.Sprintf("warpctl %s %s, %s, %s", info.Main.Path, version, commit, runtime.Version())
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the module version and commit this binary was built from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), versionString())
			return nil
		},
	}
}
