package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/daemon"
	"github.com/warpflow/warpflow/pipelines"
)

const (
	codeFailed = 1
	codeUsage  = 2
)

type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func main() {
	err := newCommand().Execute()
	if err == nil {
		return
	}
	code := codeFailed
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintln(os.Stderr, "warpflowd:", line)
	}
	os.Exit(code)
}

type flags struct {
	config, pipeline, attach, bind, ports, cpus  string
	ifaces                                       []string
	workers                                      int
	logFormat, logLevel, onLinkLoss, pass        string
	offload                                      string
	statsInterval                                time.Duration
	socket, socketGroup, controlTCP, metricsAddr string
	tokenFile, captureDir                        string
	timing, watch                                bool
}

func newCommand() *cobra.Command {
	var f flags
	cmd := &cobra.Command{
		Use:   "warpflowd",
		Short: "Run the Warpflow dataplane on AF_XDP interfaces",
		Long: `warpflowd attaches an XDP program to each receiving interface, opens one
AF_XDP socket per receive queue and runs the pipeline on every frame in
place, until SIGINT or SIGTERM; then it drains, detaches and exits 0.

Flags override the config file's fields. Exit codes: 0 clean stop,
1 failure (setup, an interface lost under on_link_loss: exit, or under
continue none left to serve), 2 usage or config error.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd, f)
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{codeUsage, err} })
	fl := cmd.Flags()
	fl.StringVarP(&f.config, "config", "c", "", "daemon config file (YAML)")
	fl.StringVar(&f.pipeline, "pipeline", "", "pipeline file (overrides the config's pipeline)")
	fl.StringArrayVar(&f.ifaces, "iface", nil, "interface to use, repeatable: NAME[,queues=0:1][,rx=false] (replaces the config's interfaces)")
	fl.StringVar(&f.ports, "port", "", "pipeline port to interface map: out0=dp1,out1=dp2")
	fl.StringVar(&f.attach, "attach", "", "XDP attach mode for every interface: auto, native or generic")
	fl.StringVar(&f.bind, "bind", "", "AF_XDP bind mode for every interface: auto, zerocopy or copy")
	fl.IntVar(&f.workers, "workers", -2, "worker goroutines per queue (0: inline; default: the config's, else the pipeline's)")
	fl.StringVar(&f.cpus, "cpus", "", "CPUs for the queues' I/O loops, in order: 1,2,3")
	fl.StringVar(&f.pass, "pass", "", "what the pass verdict does: refuse (the pipeline is refused) or drop")
	fl.StringVar(&f.offload, "offload", "", "split the pipeline with the XDP program: auto (its first drop/pass filter rules run in the kernel) or none")
	fl.StringVar(&f.onLinkLoss, "on-link-loss", "", "exit or continue when an interface disappears")
	fl.DurationVar(&f.statsInterval, "stats-interval", -1, "log a stats line this often (0: never)")
	fl.StringVar(&f.logFormat, "log-format", "", "log format: text or json")
	fl.StringVar(&f.logLevel, "log-level", "", "log level: debug, info, warn or error")
	fl.StringVar(&f.socket, "socket", "", "control socket path (default /run/warpflow/warpflowd.sock)")
	fl.StringVar(&f.socketGroup, "socket-group", "", "group allowed on the control socket (socket 0660, its directory root:GROUP 0750); default: owner only (0600)")
	fl.StringVar(&f.controlTCP, "control-tcp", "", "also serve the control API on TCP (a bare port listens on loopback; changes need the token); off by default")
	fl.StringVar(&f.tokenFile, "control-token-file", "", "the TCP bearer token's file, made 0600 if absent (default control.token beside the socket)")
	fl.StringVar(&f.captureDir, "capture-dir", "", "the directory captures are made in, by name (default "+daemon.DefaultCaptureDir+")")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at /metrics on this address (a bare port listens on loopback); off by default")
	fl.BoolVar(&f.timing, "timing", false, "measure per-stage time (stats ns/packet; a clock read per stage per batch)")
	fl.BoolVar(&f.watch, "watch", false, "follow the pipeline file: swap a changed file in live, keep the running pipeline when it is invalid")
	return cmd
}

func run(cmd *cobra.Command, f flags) error {
	cfg := daemon.DefaultConfig()
	if f.config != "" {
		var err error
		if cfg, err = daemon.LoadConfig(f.config); err != nil {
			return &exitError{codeUsage, err}
		}
	}
	if err := applyFlags(&cfg, f); err != nil {
		return &exitError{codeUsage, err}
	}
	if err := cfg.Validate(); err != nil {
		return &exitError{codeUsage, err}
	}
	log, err := newLogger(cfg.Log)
	if err != nil {
		return &exitError{codeUsage, err}
	}
	d, err := daemon.New(cfg, log)
	if err != nil {
		var ce *daemon.ConfigError
		var pe *pipelines.ErrorList
		if errors.As(err, &ce) || errors.As(err, &pe) {
			return &exitError{codeUsage, err}
		}
		return err
	}
	co := control.DefaultOptions()
	co.Socket, co.Group, co.TCP, co.TokenFile = cfg.Control.Socket, cfg.Control.Group, cfg.Control.TCP, cfg.Control.TokenFile
	srv, err := control.NewServer(co, d.Backend(), log)
	if err != nil {
		d.Close()
		return err
	}
	srv.Serve()
	log.Info("control API", "listen", srv.Addrs(), "token_file", srv.TokenFile(), "capture_dir", cfg.CaptureDir)
	var metrics *control.MetricsServer
	if cfg.MetricsAddr != "" {
		if metrics, err = control.ServeMetrics(cfg.MetricsAddr, d.Stats, d.Ready); err != nil {
			srv.Close()
			d.Close()
			return err
		}
		log.Info("metrics", "listen", metrics.Addr(), "path", "/metrics", "health", []string{"/healthz", "/readyz"})
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log.Info("running", "pipeline", cfg.PipelinePath(), "pid", os.Getpid())
	runErr := d.Run(ctx)
	srv.Close()
	if metrics != nil {
		metrics.Close()
	}
	closeErr := d.Close()
	if runErr != nil {
		return runErr
	}
	if closeErr != nil {
		return closeErr
	}
	log.Info("stopped cleanly")
	return nil
}

// applyFlags writes the flags that were given over cfg.
func applyFlags(cfg *daemon.Config, f flags) error {
	if f.pipeline != "" {
		cfg.Pipeline = f.pipeline
		if cfg.File != "" {
			// A flag's path is relative to where warpflowd runs, not to
			// the config file.
			if abs, err := filepath.Abs(f.pipeline); err == nil {
				cfg.Pipeline = abs
			}
		}
	}
	if len(f.ifaces) > 0 {
		cfg.Interfaces = nil
		for _, spec := range f.ifaces {
			in, err := parseIfaceFlag(spec)
			if err != nil {
				return err
			}
			cfg.Interfaces = append(cfg.Interfaces, in)
		}
	}
	if f.ports != "" {
		cfg.Ports = map[string]string{}
		for _, kv := range strings.Split(f.ports, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" || v == "" {
				return fmt.Errorf("--port %q: want PORT=IFACE[,PORT=IFACE...]", f.ports)
			}
			cfg.Ports[k] = v
		}
	}
	for i := range cfg.Interfaces {
		if f.attach != "" {
			cfg.Interfaces[i].Attach = f.attach
		}
		if f.bind != "" {
			cfg.Interfaces[i].Bind = f.bind
		}
	}
	if f.workers != -2 {
		cfg.WorkersPerQueue = f.workers
	}
	if f.cpus != "" {
		cfg.CPUs = nil
		for _, s := range strings.Split(f.cpus, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("--cpus %q: want a list of CPU numbers such as 1,2", f.cpus)
			}
			cfg.CPUs = append(cfg.CPUs, n)
		}
	}
	if f.pass != "" {
		cfg.Pass = f.pass
	}
	if f.offload != "" {
		cfg.Offload = f.offload
	}
	if f.onLinkLoss != "" {
		cfg.OnLinkLoss = f.onLinkLoss
	}
	if f.statsInterval >= 0 {
		cfg.StatsInterval = daemon.Duration(f.statsInterval)
	}
	if f.logFormat != "" {
		cfg.Log.Format = f.logFormat
	}
	if f.logLevel != "" {
		cfg.Log.Level = f.logLevel
	}
	if f.socket != "" {
		cfg.Control.Socket = f.socket
	}
	if f.socketGroup != "" {
		cfg.Control.Group = f.socketGroup
	}
	if f.controlTCP != "" {
		cfg.Control.TCP = f.controlTCP
	}
	if f.tokenFile != "" {
		cfg.Control.TokenFile = f.tokenFile
	}
	if f.captureDir != "" {
		cfg.CaptureDir = f.captureDir
	}
	if f.metricsAddr != "" {
		cfg.MetricsAddr = f.metricsAddr
	}
	if f.timing {
		cfg.Timing = true
	}
	if f.watch {
		cfg.Watch = true
	}
	return nil
}

// parseIfaceFlag reads NAME[,queues=0:1][,rx=false][,attach=M][,bind=M].
func parseIfaceFlag(spec string) (daemon.InterfaceConfig, error) {
	parts := strings.Split(spec, ",")
	in := daemon.InterfaceConfig{Name: parts[0]}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		switch k {
		case "queues":
			for _, s := range strings.Split(v, ":") {
				n, err := strconv.Atoi(s)
				if err != nil {
					return in, fmt.Errorf("--iface %q: queues=%s: want numbers separated by ':'", spec, v)
				}
				in.Queues = append(in.Queues, n)
			}
		case "rx":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return in, fmt.Errorf("--iface %q: rx=%s: want true or false", spec, v)
			}
			in.Receive = &b
		case "attach":
			in.Attach = v
		case "bind":
			in.Bind = v
		default:
			return in, fmt.Errorf("--iface %q: unknown option %q (known: queues, rx, attach, bind)", spec, k)
		}
	}
	return in, nil
}

func newLogger(c daemon.LogConfig) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.Level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", c.Level)
	}
	o := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, o)), nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, o)), nil
}
