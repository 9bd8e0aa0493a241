package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/internal/control"
	"go.yaml.in/yaml/v3"
)

// Contexts name the daemons warpctl talks to, like kubeconfig's: a file
// of named contexts, each a unix socket or an authenticated TCP endpoint,
// chosen with --context NAME; --all runs a read command (stats, pipeline
// list, ports) on every one of them (context_all.go).
//
//	# ~/.config/warpctl/config.yaml (or $WARPCTL_CONFIG)
//	current: edge-1            # used when neither --socket nor --context is given
//	contexts:
//	  - name: edge-1
//	    socket: /run/warpflow/warpflowd.sock
//	  - name: edge-2
//	    tcp: 10.0.0.2:9000     # warpflowd --control-tcp 10.0.0.2:9000
//	    token_file: /etc/warpctl/edge-2.token
//
// The file is read strictly (unknown keys are errors, with their line),
// bounded (64 KiB, no anchors or aliases), and must be a regular file
// that only its owner may write; one holding a token inline (token:) must
// also be readable by its owner alone, as a token file must.

// contextFile is the contexts file's shape.
type contextFile struct {
	Current  string       `yaml:"current"`
	Contexts []ctlContext `yaml:"contexts"`
}

// ctlContext is one daemon.
type ctlContext struct {
	Name      string `yaml:"name"`
	Socket    string `yaml:"socket"`
	TCP       string `yaml:"tcp"`
	Token     string `yaml:"token"`
	TokenFile string `yaml:"token_file"`
}

// target is where the context points, as --socket takes it.
func (c ctlContext) target() string {
	if c.TCP != "" {
		return "tcp://" + c.TCP
	}
	return c.Socket
}

const maxContextFile = 64 << 10

// contextPath is the contexts file: $WARPCTL_CONFIG, else
// $XDG_CONFIG_HOME/warpctl/config.yaml, else ~/.config/warpctl/config.yaml.
func contextPath() string {
	if p := os.Getenv("WARPCTL_CONFIG"); p != "" {
		return p
	}
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "warpctl", "config.yaml")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".config", "warpctl", "config.yaml")
	}
	return ""
}

// loadContexts reads the contexts file; a missing file is no contexts
// (exists false), not an error.
func loadContexts(path string) (cf contextFile, exists bool, err error) {
	if path == "" {
		return cf, false, nil
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return cf, false, nil
	}
	if err != nil {
		return cf, true, fmt.Errorf("contexts file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return cf, true, fmt.Errorf("contexts file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return cf, true, fmt.Errorf("contexts file %s: a %v, not a regular file", path, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() && st.Uid != 0 {
		return cf, true, fmt.Errorf("contexts file %s: owned by uid %d, not you or root: whoever owns it chooses which daemons you talk to", path, st.Uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return cf, true, fmt.Errorf("contexts file %s: mode %04o lets others change it: chmod go-w %s", path, fi.Mode().Perm(), path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxContextFile+1))
	if err != nil {
		return cf, true, fmt.Errorf("contexts file %s: %w", path, err)
	}
	if len(data) > maxContextFile {
		return cf, true, fmt.Errorf("contexts file %s: larger than %d bytes", path, maxContextFile)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return cf, true, fmt.Errorf("contexts file %s: %w", path, err)
	}
	if err := plainYAML(&root, 0); err != nil {
		return cf, true, fmt.Errorf("contexts file %s: %w", path, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cf); err != nil && !errors.Is(err, io.EOF) {
		return cf, true, fmt.Errorf("contexts file %s: %w", path, err)
	}
	if err := cf.validate(path, fi.Mode().Perm()); err != nil {
		return cf, true, err
	}
	return cf, true, nil
}

// plainYAML refuses anchors and aliases (an alias expands into copies of
// what it names: a few hundred bytes can stand for gigabytes) and bounds
// the nesting.
func plainYAML(n *yaml.Node, depth int) error {
	if depth > 16 {
		return fmt.Errorf("line %d: nested deeper than 16 levels", n.Line)
	}
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return fmt.Errorf("line %d: YAML anchors and aliases are not accepted", n.Line)
	}
	for _, c := range n.Content {
		if err := plainYAML(c, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func (cf contextFile) validate(path string, perm fs.FileMode) error {
	var p []string
	seen := map[string]bool{}
	for i, c := range cf.Contexts {
		where := fmt.Sprintf("contexts[%d]", i)
		if c.Name != "" {
			where = fmt.Sprintf("context %q", c.Name)
		}
		if err := control.ValidName(c.Name); err != nil {
			p = append(p, fmt.Sprintf("%s: name: %v", where, err))
		}
		if seen[c.Name] {
			p = append(p, where+": listed twice")
		}
		seen[c.Name] = true
		switch {
		case (c.Socket == "") == (c.TCP == ""):
			p = append(p, where+": want exactly one of socket (a path) or tcp (HOST:PORT)")
		case c.Socket != "" && !filepath.IsAbs(c.Socket):
			p = append(p, fmt.Sprintf("%s: socket %q: want an absolute path", where, c.Socket))
		case c.Socket != "" && (c.Token != "" || c.TokenFile != ""):
			p = append(p, where+": a token is for tcp only (a unix socket's peer is known by its credentials)")
		case c.TCP != "" && !strings.Contains(c.TCP, ":"):
			p = append(p, fmt.Sprintf("%s: tcp %q: want HOST:PORT", where, c.TCP))
		}
		if c.Token != "" && c.TokenFile != "" {
			p = append(p, where+": want token or token_file, not both")
		}
		if c.Token != "" {
			if err := control.ValidToken(c.Token); err != nil {
				p = append(p, fmt.Sprintf("%s: token: %v", where, err))
			}
			if perm&0o077 != 0 {
				p = append(p, fmt.Sprintf("%s: an inline token in a file of mode %04o, which others may read: chmod 600 %s, or use token_file", where, perm, path))
			}
		}
	}
	if cf.Current != "" && !seen[cf.Current] {
		p = append(p, fmt.Sprintf("current: %q is not one of the contexts", cf.Current))
	}
	if len(p) > 0 {
		return fmt.Errorf("contexts file %s:\n  %s", path, strings.Join(p, "\n  "))
	}
	return nil
}

func (cf contextFile) find(name string) (ctlContext, bool) {
	for _, c := range cf.Contexts {
		if c.Name == name {
			return c, true
		}
	}
	return ctlContext{}, false
}

func (cf contextFile) names() []string {
	var out []string
	for _, c := range cf.Contexts {
		out = append(out, c.Name)
	}
	return out
}

// addContextFlags adds --context and --all to root, for every command.
func addContextFlags(root *cobra.Command) {
	pf := root.PersistentFlags()
	pf.String("context", "", "the daemon to talk to, by its name in the contexts file ($WARPCTL_CONFIG, else ~/.config/warpctl/config.yaml)")
	pf.Bool("all", false, "stats, pipeline list and ports: ask every daemon of the contexts file, one row each and a total; unreachable ones are listed, not fatal")
	root.AddCommand(newContextCommand())
}

// resolve applies --context (or the file's current context when neither
// --socket nor $WARPCTL_SOCKET is given) to o, and --all.
func (o *ctlOpts) resolve(cmd *cobra.Command) error {
	name, _ := cmd.Flags().GetString("context")
	// A command with an --all of its own (conntrack flush: every flow)
	// means that one, not every context.
	if cmd.LocalNonPersistentFlags().Lookup("all") == nil {
		o.all, _ = cmd.Flags().GetBool("all")
	}
	explicitSocket := cmd.Flags().Changed("socket")
	if o.all {
		if !o.allowsAll {
			return failf(codeUsage, "--all is for the read commands: stats, pipeline list and ports")
		}
		if name != "" || explicitSocket {
			return failf(codeUsage, "--all asks every context: leave out --context and --socket")
		}
	}
	if name != "" && explicitSocket {
		return failf(codeUsage, "--context %s and --socket %s: give one", name, o.socket)
	}
	path := contextPath()
	cf, exists, err := loadContexts(path)
	if err != nil {
		if name == "" && !o.all && (explicitSocket || os.Getenv("WARPCTL_SOCKET") != "") {
			return nil // the file is not needed: say nothing of it
		}
		return failf(codeUsage, "%v", err)
	}
	if o.all {
		if len(cf.Contexts) == 0 {
			return failf(codeUsage, "--all: no contexts in %s (see `warpctl context --help`)", orNone(path, exists))
		}
		o.contexts = cf.Contexts
		return nil
	}
	if name == "" {
		if explicitSocket || os.Getenv("WARPCTL_SOCKET") != "" || cf.Current == "" {
			return nil
		}
		name = cf.Current
	}
	c, ok := cf.find(name)
	if !ok {
		return failf(codeUsage, "--context %s: no such context in %s (contexts: %s)", name, orNone(path, exists), strings.Join(cf.names(), ", "))
	}
	o.use(c)
	return nil
}

func orNone(path string, exists bool) string {
	if !exists {
		return path + " (no such file)"
	}
	return path
}

// use points o at context c.
func (o *ctlOpts) use(c ctlContext) {
	o.socket, o.token, o.context = c.target(), c.Token, c.Name
	if c.TokenFile != "" {
		o.tokenFile = c.TokenFile
	}
}

func newContextCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "context",
		Short: "The named daemons of the contexts file (--context NAME, --all)",
		Long: `A contexts file names the daemons warpctl talks to, like kubeconfig: each a
unix socket or an authenticated TCP endpoint. It is $WARPCTL_CONFIG, else
$XDG_CONFIG_HOME/warpctl/config.yaml, else ~/.config/warpctl/config.yaml:

  current: edge-1            # when neither --socket nor --context is given
  contexts:
    - name: edge-1
      socket: /run/warpflow/warpflowd.sock
    - name: edge-2
      tcp: 10.0.0.2:9000     # warpflowd --control-tcp 10.0.0.2:9000
      token_file: /etc/warpctl/edge-2.token   # or token: (file mode 0600)

  warpctl --context edge-2 stats
  warpctl --all stats          # one row per daemon, a total, unreachable ones listed
  warpctl --all pipeline list
  warpctl --all ports

It must be a regular file only you (or root) own and may write; YAML
anchors and aliases are refused.`,
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the contexts, the current one marked",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path := contextPath()
			cf, exists, err := loadContexts(path)
			if err != nil {
				return failf(codeUsage, "%v", err)
			}
			w := cmd.OutOrStdout()
			if !exists {
				fmt.Fprintf(w, "no contexts file at %s\n", path)
				return nil
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "\tNAME\tTARGET\tTOKEN")
			for _, c := range cf.Contexts {
				mark, tok := "", "-"
				if c.Name == cf.Current {
					mark = "*"
				}
				switch {
				case c.Token != "":
					tok = "inline"
				case c.TokenFile != "":
					tok = c.TokenFile
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", mark, c.Name, c.target(), tok)
			}
			return tw.Flush()
		},
	}
	cmd.AddCommand(list)
	return cmd
}
