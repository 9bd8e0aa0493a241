package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/control/client"
)

// Exit codes of the commands that talk to warpflowd, on top of the common
// ones (0 success, 1 failure, 2 usage).
const (
	codeUnreachable = 4 // no daemon at the socket, or no permission on it
	codeRefused     = 5 // the daemon refused: invalid pipeline, unknown name, conflict, forbidden
)

const controlExitCodesHelp = `Exit codes:
  0    success
  1    failure (the daemon failed the request, or output failed)
  2    usage: bad flags or arguments
  4    warpflowd unreachable: no socket, nothing listening, no permission, or
       a socket path another user could replace (refused, naming the part)
  5    refused by warpflowd: invalid pipeline, unknown name, conflict, forbidden,
       no or wrong token over TCP`

// ctlOpts are the flags every daemon command has.
type ctlOpts struct {
	socket    string
	tokenFile string
	json      bool
	timeout   time.Duration
	// From the contexts file (context.go): the context's name and inline
	// token; with --all, every context, for a command that allowsAll.
	context   string
	token     string
	all       bool
	allowsAll bool
	contexts  []ctlContext
}

// addCtlFlags adds --socket, --token-file and --timeout (and --json for
// read commands) to cmd.
func addCtlFlags(cmd *cobra.Command, o *ctlOpts, withJSON bool) {
	def := os.Getenv("WARPCTL_SOCKET")
	if def == "" {
		def = control.DefaultSocket
	}
	cmd.Flags().StringVar(&o.socket, "socket", def, "warpflowd's control socket (or tcp://HOST:PORT); default $WARPCTL_SOCKET or "+control.DefaultSocket)
	cmd.Flags().StringVar(&o.tokenFile, "token-file", os.Getenv("WARPCTL_TOKEN_FILE"),
		"over tcp://, the daemon's control token file (default $WARPCTL_TOKEN_FILE, else "+control.DefaultTokenFile+" where readable; $WARPCTL_TOKEN gives the token itself)")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 30*time.Second, "give up on the daemon after this long")
	if withJSON {
		cmd.Flags().BoolVar(&o.json, "json", false, "print the reply as JSON")
	}
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error { return o.resolve(cmd) }
}

// client is the daemon's client. Over TCP it sends the token: from
// $WARPCTL_TOKEN, else --token-file (or $WARPCTL_TOKEN_FILE), else the
// default token file when this user may read it (the daemon says what is
// missing otherwise). A unix socket needs none.
func (o *ctlOpts) client() *client.Client {
	var opts []client.Option
	switch {
	case !strings.HasPrefix(o.socket, "tcp://"):
	case o.token != "": // the context's own
		opts = append(opts, client.WithToken(o.token))
	case o.context != "" && o.tokenFile != "": // the context's own file
		opts = append(opts, client.WithTokenFile(o.tokenFile, false))
	case os.Getenv("WARPCTL_TOKEN") != "":
		opts = append(opts, client.WithToken(os.Getenv("WARPCTL_TOKEN")))
	case o.tokenFile != "":
		opts = append(opts, client.WithTokenFile(o.tokenFile, false))
	default:
		opts = append(opts, client.WithTokenFile(control.DefaultTokenFile, true))
	}
	return client.New(o.socket, opts...)
}

func (o *ctlOpts) ctx(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	parent := cmd.Context()
	if parent == nil {
		parent = context.Background()
	}
	return context.WithTimeout(parent, o.timeout)
}

// ctlError maps a client error to the exit codes above.
func ctlError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, client.ErrUnreachable) {
		return failf(codeUnreachable, "%v (is warpflowd running? pick its socket with --socket)", err)
	}
	if errors.Is(err, client.ErrUnsafeSocket) {
		return failf(codeUnreachable, "%v", err)
	}
	if errors.Is(err, client.ErrToken) {
		return failf(codeUsage, "%v", err)
	}
	var ce *control.Error
	if errors.As(err, &ce) {
		switch ce.Code {
		case control.ErrInvalidPipeline.Code, control.ErrNotFound.Code, control.ErrConflict.Code,
			control.ErrRefused.Code, control.ErrForbidden.Code, control.ErrBadRequest.Code, control.ErrUnauthorized.Code:
			return failf(codeRefused, "%s", ce.Error())
		}
		return failf(codeFailed, "%s", ce.Error())
	}
	return failf(codeFailed, "%v", err)
}

func writeJSONOut(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return failf(codeFailed, "encode: %v", err)
	}
	return nil
}

// newControlCommands are the commands that drive a running warpflowd.
func newControlCommands() []*cobra.Command {
	return []*cobra.Command{newPipelineCommand(), newStatsCommand(), newTopCommand(), newPortsCommand(), newCaptureCommand(), newConntrackCommand()}
}

// completePipelines completes stored pipeline names from the daemon.
func completePipelines(o *ctlOpts) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		l, err := o.client().Pipelines(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		for _, p := range l.Pipelines {
			names = append(names, p.Name)
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

func fmtCount(n uint64) string {
	switch {
	case n >= 10_000_000_000:
		return fmt.Sprintf("%.1fG", float64(n)/1e9)
	case n >= 10_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 100_000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}
