package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/dataplane/afxdp"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/workers"
	"github.com/warpflow/warpflow/xdp"
)

// Daemon is a configured, attached dataplane, ready to Run.
type Daemon struct {
	cfg   Config
	log   *slog.Logger
	graph *pipelines.Graph
	progs map[string]*xdp.Program // by interface
	// ifaces are every interface the daemon uses, receiving or not.
	ifaces []string
	queues []*queue
	shared []*afxdp.SharedUMEM // closed after the queues

	linkLosses atomic.Uint64
	rep        *repeats // rate-limits log lines that can repeat
	closeOnce  sync.Once
	draining   atomic.Bool                   // Run's context ended: /readyz says so (health.go)
	watch      atomic.Pointer[pipelineWatch] // the pipeline file's watch, while Run runs it (watch.go)
	off        offloadState                  // the kernel half of the split pipeline (offload.go)
	rss        rssStates                     // symmetric RSS for stateful stages (rss.go)

	// The control side: the pipeline store and the running pipeline's
	// name (ctlMu serialises loads, swaps, removes and captures), the
	// capture.
	started time.Time
	swaps   atomic.Uint64
	ctlMu   sync.Mutex
	store   map[string]*stored
	running string
	capMu   sync.Mutex
	capture *capture
	// samples are the sample stages' files (samples.go).
	samples sampleFiles
}

// queue is one served receive queue and its engine.
type queue struct {
	idx    int // in Daemon.queues
	q      *afxdp.Queue
	eng    *dataplane.Engine
	ifaces []string // interfaces it uses: its own and its outputs
	cpu    int      // -1: not pinned
	cancel context.CancelFunc
	lost   atomic.Bool  // its interface went: stopped, not failed
	state  atomic.Int32 // queueStarting, queueRunning or queueStopped (health.go)
}

// New checks cfg, loads the pipeline, attaches the programs and opens the
// queues. On failure it undoes what it made.
func New(cfg Config, log *slog.Logger) (d *Daemon, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	made := &Daemon{cfg: cfg, log: log, progs: map[string]*xdp.Program{}, store: map[string]*stored{}, started: time.Now(),
		rep: newRepeats(log, repeatEvery)}
	d = made
	defer func() {
		if err != nil {
			made.Close() // the returns below have already set d to nil
		}
	}()
	src, err := readPipelineFile(cfg.PipelinePath())
	if err != nil {
		return nil, err
	}
	d.graph, err = pipelines.Load(cfg.PipelinePath(), src)
	if err != nil {
		return nil, err
	}
	if d.off.mode, d.off.plan, err = planOffload(cfg.Offload, d.graph); err != nil {
		return nil, err
	}
	if err := d.checkPass(d.graph); err != nil {
		return nil, err
	}
	portIface, err := d.portInterfaces(d.graph)
	if err != nil {
		return nil, err
	}
	name := d.graph.Name()
	if control.ValidName(name) != nil {
		name = "startup"
	}
	d.store[name] = &stored{name: name, file: cfg.PipelinePath(), source: string(src), graph: d.graph, at: time.Now(), by: "config"}
	d.running = name
	if err := xdp.Probe(); err != nil {
		return nil, explain("AF_XDP", err)
	}
	for _, in := range cfg.Interfaces {
		d.ifaces = append(d.ifaces, in.Name)
		if _, err := net.InterfaceByName(in.Name); err != nil {
			return nil, fmt.Errorf("interface %s: not found in this network namespace: check the name with `ip link` (run warpflowd in the namespace that has it)", in.Name)
		}
	}
	d.ensureSymmetricRSS(d.graph)
	outputs := txInterfaces(&cfg, portIface)
	var inPort uint16
	for _, in := range cfg.Interfaces {
		if !in.Receives() {
			continue
		}
		queues := in.Queues
		if len(queues) == 0 {
			n, err := xdp.RXQueues(in.Name)
			if err != nil {
				return nil, explain("interface "+in.Name, err)
			}
			for q := range n {
				queues = append(queues, q)
			}
		}
		attach, err := xdp.ParseAttachMode(orDefault(in.Attach, "auto"))
		if err != nil {
			return nil, err
		}
		prog, err := xdp.LoadProgram(xdp.ProgramOptions{Interface: in.Name, Attach: attach, Queues: slices.Max(queues) + 1})
		if err != nil {
			return nil, explain("attach XDP program to "+in.Name, err)
		}
		d.progs[in.Name] = prog
		if err := d.loadKernelRules(in.Name, prog, d.off.plan); err != nil {
			if errors.Is(err, xdp.ErrNotSupported) {
				return nil, fmt.Errorf("%w: set `offload: none` in the daemon config (the workers then run the whole pipeline)", err)
			}
			return nil, err
		}
		bind, err := xdp.ParseBindMode(orDefault(in.Bind, "auto"))
		if err != nil {
			return nil, err
		}
		var shared *afxdp.SharedUMEM
		if cfg.UMEM.Shared {
			shared, err = afxdp.NewSharedUMEM(xdp.UMEMOptions{Frames: cfg.UMEM.Frames, FrameSize: cfg.UMEM.FrameSize, Headroom: cfg.UMEM.Headroom}, len(queues))
			if err != nil {
				return nil, explain("interface "+in.Name, err)
			}
			d.shared = append(d.shared, shared)
		}
		for part, qi := range queues {
			qq, err := d.openQueue(in.Name, qi, bind, outputs, portIface, inPort, shared, part)
			if err != nil {
				return nil, err
			}
			// Each engine checked its own tables; the queues' together
			// must fit too (none is allocated before traffic comes).
			if err := d.checkTables(d.graph.Name(), nil); err != nil {
				return nil, err
			}
			if err := prog.Register(qi, qq.q.RX().Socket()); err != nil {
				return nil, explain(fmt.Sprintf("register %s queue %d in the XDP program", in.Name, qi), err)
			}
			x := qq.eng.Stats().Executor
			d.log.Info("queue up", "interface", in.Name, "queue", qi,
				"attach", prog.Attached().String(), "bind", qq.q.RX().Socket().Bound().String(),
				"umem", map[bool]string{true: "shared", false: "own"}[shared != nil],
				"frames", cfg.UMEM.Frames, "frame_size", cfg.UMEM.FrameSize, "cpu", qq.cpu,
				"executor", x.Backend, "workers", len(x.Workers))
			inPort++
		}
	}
	return d, nil
}

// checkPass refuses a pipeline that can pass when the config says so.
func (d *Daemon) checkPass(g *pipelines.Graph) error {
	if d.cfg.Pass != "refuse" {
		return nil
	}
	for _, st := range g.Stages() {
		if st.Kind == "pass" {
			return fmt.Errorf("pipeline %q stage %q passes packets to the kernel, which an AF_XDP port cannot do: remove the pass stage, or set `pass: drop` in the daemon config to count them as dropped (reason pass_full)", g.Name(), st.Name)
		}
	}
	return nil
}

// portInterfaces maps every tx port of pipeline g to its interface.
func (d *Daemon) portInterfaces(g *pipelines.Graph) (map[string]string, error) {
	known := map[string]bool{}
	for _, in := range d.cfg.Interfaces {
		known[in.Name] = true
	}
	m := map[string]string{}
	for _, port := range g.Ports() {
		iface, ok := d.cfg.Ports[port]
		if !ok {
			iface = port
		}
		if !known[iface] {
			return nil, fmt.Errorf("pipeline %q transmits on port %q, which maps to no configured interface (%s): add the interface to the daemon config's interfaces (receive: false to only transmit) and `ports: {%s: IFACE}`, then restart warpflowd", g.Name(), port, iface, port)
		}
		m[port] = iface
	}
	return m, nil
}

func (d *Daemon) openQueue(iface string, qi int, bind xdp.BindMode, outputs []string, portIface map[string]string, inPort uint16, shared *afxdp.SharedUMEM, part int) (*queue, error) {
	cfg := d.cfg
	so := xdp.DefaultSocketOptions(iface, qi)
	so.RXSize, so.TXSize = cfg.Rings.RX, cfg.Rings.TX
	so.FillSize, so.CompletionSize = cfg.Rings.Fill, cfg.Rings.Completion
	so.Bind = bind
	so.BusyPoll = xdp.BusyPollOptions{Prefer: cfg.BusyPoll.Prefer, Usec: cfg.BusyPoll.Usec, Budget: cfg.BusyPoll.Budget}
	q, err := afxdp.OpenQueue(afxdp.QueueOptions{
		Interface: iface, Queue: qi, Outputs: outputs, InPort: inPort, Socket: so, Shared: shared, Part: part,
		ForceTXCopy: cfg.TXCopy,
		UMEM:        xdp.UMEMOptions{Frames: cfg.UMEM.Frames, FrameSize: cfg.UMEM.FrameSize, Headroom: cfg.UMEM.Headroom},
	})
	if err != nil {
		return nil, explain(fmt.Sprintf("open %s queue %d", iface, qi), err)
	}
	qq := &queue{idx: len(d.queues), q: q, cpu: -1, ifaces: append([]string{iface}, outputs...)}
	d.queues = append(d.queues, qq)
	if n := len(d.queues) - 1; n < len(cfg.CPUs) {
		qq.cpu = cfg.CPUs[n]
	}
	outs, err := d.outputsFor(qq, portIface, d.graph)
	if err != nil {
		return nil, err
	}
	for _, out := range outputs {
		outs.Spare = append(outs.Spare, q.Output(out))
	}
	for out, c := range q.Copies() {
		d.log.Warn("output copies packets", "interface", out, "queue", qi, "reason", c.Reason())
	}
	if cfg.Pass == "drop" {
		outs.Pass = refusePass{}
	}
	eo := dataplane.DefaultOptions()
	eo.Workers = cfg.WorkersPerQueue
	eo.Timing = cfg.Timing
	eo.TrackFrames = cfg.TrackFrames
	if eo.NewExecutor, err = executorFor(d.graph); err != nil {
		return nil, err
	}
	qq.eng, err = dataplane.NewEngine(d.graph, q.Arena(), q.RX(), outs, eo)
	if err != nil {
		return nil, fmt.Errorf("engine for %s queue %d: %w", iface, qi, err)
	}
	return qq, nil
}

// refusePass is the pass output of a live queue under `pass: drop`: it
// takes nothing, so the engine counts every passed packet as a pass_full
// drop and recycles its frame.
type refusePass struct{}

func (refusePass) Name() string { return "kernel" }
func (refusePass) Receive(*rings.Batch) (int, error) {
	return 0, dataplane.ErrNotReceiver
}
func (refusePass) Transmit(*rings.Arena, []rings.Desc) (int, error) { return 0, nil }
func (refusePass) Recycle([]rings.Desc)                             {}
func (refusePass) Close() error                                     { return nil }

// ErrLinkLost is returned by Run when an interface disappeared and the
// config says to exit.
var ErrLinkLost = errors.New("interface lost")

// ErrNothingLeft is returned by Run when, under on_link_loss: continue,
// every queue stopped because interfaces it used disappeared: a daemon
// with nothing left to serve fails (so that Restart=on-failure restarts
// it) instead of stopping cleanly.
var ErrNothingLeft = errors.New("nothing left to serve")

// repeatEvery is how often a repeating log line (repeats) is logged at
// most.
const repeatEvery = 30 * time.Second

type queueDone struct {
	qq  *queue
	err error
}

// Run runs every queue until ctx is done (nil: a clean stop, every engine
// drained) or, under on_link_loss: exit, an interface disappears (an
// ErrLinkLost error, after the same drain); under continue, until the
// last queue stopped for a lost interface (ErrNothingLeft). A queue whose
// engine fails on its own is logged; when none is left running Run returns
// the first such error. A link that goes down and comes back is logged
// both ways and is no error: the queues keep running through it.
func (d *Daemon) Run(parent context.Context) error {
	ctx, cancelAll := context.WithCancel(parent)
	defer cancelAll()
	done := make(chan queueDone, len(d.queues))
	for _, qq := range d.queues {
		qctx, cancel := context.WithCancel(ctx)
		qq.cancel = cancel
		go func() { done <- queueDone{qq, d.runQueue(qctx, qq)} }()
	}
	lost := make(chan string, 16)
	stopWatch := d.watchLinks(ctx, lost)
	defer stopWatch()
	if d.cfg.Watch {
		// It ends with ctx, as the drain begins: no file is swapped in
		// while the queues drain.
		defer d.startWatch(ctx)()
	}
	var tick <-chan time.Time
	if iv := time.Duration(d.cfg.StatsInterval); iv > 0 {
		t := time.NewTicker(iv)
		defer t.Stop()
		tick = t.C
	}
	var runErr error
	var lostIfaces []string // in the order lost
	for running := len(d.queues); running > 0; {
		select {
		case <-ctx.Done():
			d.draining.Store(true)
			ctx = context.Background() // fire once; keep collecting the queues
			cancelAll()
		case iface := <-lost:
			d.linkLosses.Add(1)
			lostIfaces = append(lostIfaces, iface)
			d.log.Error("interface lost", "interface", iface, "on_link_loss", d.cfg.OnLinkLoss, "link_losses", d.linkLosses.Load())
			for _, qq := range d.queues {
				if slices.Contains(qq.ifaces, iface) && !qq.lost.Swap(true) {
					qq.cancel()
				}
			}
			if d.cfg.OnLinkLoss == "exit" && runErr == nil {
				runErr = fmt.Errorf("%w: %s", ErrLinkLost, iface)
				cancelAll()
			}
		case <-tick:
			d.logStats("stats")
		case r := <-done:
			running--
			if r.err != nil && runErr == nil && !r.qq.lost.Load() {
				runErr = fmt.Errorf("%s queue %d: %w", r.qq.q.Interface(), r.qq.q.Queue(), r.err)
			}
		}
	}
	allLost := true
	for _, qq := range d.queues {
		allLost = allLost && qq.lost.Load()
	}
	if runErr == nil && allLost && len(lostIfaces) > 0 && parent.Err() == nil {
		// Not asked to stop, no queue failed: each one stopped because an
		// interface it used was lost (on_link_loss: continue). (A queue
		// can end before Run sees its context done: parent says whether
		// the daemon was asked to stop.)
		runErr = fmt.Errorf("%w: every queue stopped when %s disappeared (on_link_loss: continue keeps serving the other queues, and none is left)", ErrNothingLeft, strings.Join(lostIfaces, ", "))
	}
	d.rep.Flush(time.Now())
	d.logStats("final stats")
	return runErr
}

// runQueue pins and runs one queue's engine.
func (d *Daemon) runQueue(ctx context.Context, qq *queue) error {
	if qq.cpu >= 0 {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := workers.PinCurrentGoroutine(qq.cpu); err != nil {
			d.log.Warn("pin I/O loop", "interface", qq.q.Interface(), "queue", qq.q.Queue(), "cpu", qq.cpu, "err", err)
		}
	}
	qq.state.Store(queueRunning)
	err := qq.eng.RunContext(ctx, nil)
	// The engine is done with the queue's ports: each makes its last
	// flush and counts what never left its TX ring (tx_abandoned) now,
	// before the final stats are read, not when Close unmaps the UMEM.
	if n := qq.q.Settle(); n > 0 {
		d.log.Warn("frames still on TX rings at stop, never sent", "interface", qq.q.Interface(), "queue", qq.q.Queue(), "tx_abandoned", n)
	}
	// What an output that owns its frames (a sharing socket) never gave
	// back within the drain: the engine's error says so too, but it is
	// not logged for a queue stopped by a lost interface, and the count
	// is the counter's (frames_lost), not words in an error.
	if n := qq.eng.Stats().FramesLost; n > 0 {
		d.log.Warn("frames lost at stop, never given back by their output", "interface", qq.q.Interface(), "queue", qq.q.Queue(), "frames_lost", n)
	}
	qq.state.Store(queueStopped)
	if err != nil && !qq.lost.Load() {
		d.log.Error("queue stopped", "interface", qq.q.Interface(), "queue", qq.q.Queue(), "err", err)
	}
	return err
}

// watchLinks reports on lost the name of any used interface that is
// deleted: from a netlink subscription (RTM_DELLINK) and, every 250 ms,
// from the sockets of the queues still running (a deleted interface shows
// on its sockets as ENETDOWN in SO_ERROR: poll says nothing). It also logs
// each used interface going down (not up, or no carrier) and coming back,
// once per change: a flap is not a loss, and the queues keep running
// through it (xdp.ErrLinkDown: what waits on a TX ring goes when the link
// is back).
func (d *Daemon) watchLinks(ctx context.Context, lost chan<- string) (stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	if err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{
		ErrorCallback: func(err error) {
			if wctx.Err() == nil { // closing done ends the subscription with an error
				d.rep.Log(time.Now(), "netlink", slog.LevelWarn, "netlink link subscription", "err", err)
			}
		},
	}); err != nil {
		d.log.Warn("netlink link subscription failed; relying on socket errors", "err", err)
	}
	links := d.newLinkStates()
	reported := map[string]bool{}
	report := func(iface string) {
		if !reported[iface] {
			reported[iface] = true
			select {
			case lost <- iface:
			case <-wctx.Done():
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case u, ok := <-updates:
				if !ok { // the subscription ended (done closed, or a netlink error)
					updates = nil
					continue
				}
				if u.Link == nil || u.Attrs() == nil {
					continue
				}
				name := u.Attrs().Name
				if !slices.Contains(d.ifaces, name) {
					continue
				}
				if u.Header.Type == syscall.RTM_DELLINK {
					report(name)
					continue
				}
				links.update(name, u.Attrs().RawFlags, time.Now())
			case <-t.C:
				for _, qq := range d.queues {
					if qq.lost.Load() {
						continue // stopped: its sockets' errors are known
					}
					for _, p := range qq.q.Ports() {
						if err := p.Socket().Err(); err != nil {
							d.rep.Log(time.Now(), "socket "+p.Name(), slog.LevelWarn, "socket error", "port", p.Name(), "err", err)
							report(p.Socket().Interface())
						}
					}
				}
			}
		}
	}()
	return func() {
		cancel()
		close(done)
		wg.Wait()
	}
}

// linkStates is what watchLinks last saw of each used interface: up
// (administratively up with a carrier) or down, and since when.
type linkStates struct {
	log   *slog.Logger
	up    map[string]bool
	since map[string]time.Time
}

// newLinkStates reads the used interfaces' states now: the changes logged
// are from these.
func (d *Daemon) newLinkStates() *linkStates {
	ls := &linkStates{log: d.log, up: map[string]bool{}, since: map[string]time.Time{}}
	now := time.Now()
	for _, name := range d.ifaces {
		if l, err := netlink.LinkByName(name); err == nil {
			ls.up[name], ls.since[name] = linkUp(l.Attrs().RawFlags), now
		}
	}
	return ls
}

func linkUp(flags uint32) bool {
	return flags&syscall.IFF_UP != 0 && flags&syscall.IFF_RUNNING != 0
}

// update takes iface's flags from an RTM_NEWLINK and logs a change of
// state: netlink sends several messages for one change (flags, then
// operational state), and repeats unchanged ones.
func (ls *linkStates) update(iface string, flags uint32, now time.Time) {
	up := linkUp(flags)
	was, known := ls.up[iface]
	if known && was == up {
		return
	}
	ls.up[iface] = up
	since := ls.since[iface]
	ls.since[iface] = now
	switch {
	case !up:
		ls.log.Warn("link down", "interface", iface, "admin_up", flags&syscall.IFF_UP != 0, "carrier", flags&syscall.IFF_RUNNING != 0)
	case known:
		ls.log.Info("link up", "interface", iface, "down_for", now.Sub(since).Round(time.Millisecond).String())
	default:
		ls.log.Info("link up", "interface", iface)
	}
}

// Close detaches and closes everything the daemon made. It is safe after a
// failed New and after Run.
func (d *Daemon) Close() error {
	var errs []error
	d.closeOnce.Do(func() {
		d.ctlMu.Lock()
		d.captureStopLocked("the daemon stopped")
		d.ctlMu.Unlock()
		for _, qq := range d.queues {
			if err := qq.q.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		if err := d.samples.close(); err != nil {
			errs = append(errs, fmt.Errorf("sample files: %w", err))
		}
		for _, sh := range d.shared {
			if err := sh.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		names := make([]string, 0, len(d.progs))
		for n := range d.progs {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if err := d.progs[n].Close(); err != nil {
				errs = append(errs, fmt.Errorf("detach from %s: %w", n, err))
			}
		}
		d.restoreRSS()
	})
	return errors.Join(errs...)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// txInterfaces are the interfaces every queue opens a transmit socket on
// at start: those the startup pipeline transmits on, every interface the
// ports map names and every transmit-only interface, so that a swap may
// move to a pipeline that transmits on any of them (a queue's own
// interface needs none: its receive socket transmits). Sorted.
func txInterfaces(cfg *Config, startup map[string]string) []string {
	out := uniqueValues(startup)
	add := func(iface string) {
		if !slices.Contains(out, iface) {
			out = append(out, iface)
		}
	}
	known := map[string]bool{}
	for _, in := range cfg.Interfaces {
		known[in.Name] = true
		if !in.Receives() {
			add(in.Name)
		}
	}
	for _, iface := range cfg.Ports {
		if known[iface] {
			add(iface)
		}
	}
	sort.Strings(out)
	return out
}

func uniqueValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

// explain wraps a setup error with what failed and, for the errors a user
// can fix, how.
func explain(what string, err error) error {
	var pe *xdp.PermissionError
	switch {
	case errors.As(err, &pe), errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return fmt.Errorf("%s: %w%s", what, err, capabilityHint(pe))
	case errors.Is(err, syscall.EBUSY):
		return fmt.Errorf("%s: %w: another process (another warpflowd?) holds this interface's XDP hook or queue; stop it or pick other queues", what, err)
	case errors.Is(err, xdp.ErrNotSupported):
		return fmt.Errorf("%s: %w: this kernel or driver lacks it (needs Linux >= 5.10 with CONFIG_XDP_SOCKETS; try attach: generic or bind: copy)", what, err)
	case errors.Is(err, syscall.ENODEV), errors.Is(err, syscall.ENXIO):
		return fmt.Errorf("%s: %w: no such interface or queue (check `ip link` and `ethtool -l`)", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// capabilityHint follows a refused operation's error, which names what
// that operation lacked when xdp knew (pe): every other capability of the
// daemon's that the process lacks, read now, so that one error lists all
// that later steps would stop on too, and never one the process has.
// Empty when it lacks none.
func capabilityHint(pe *xdp.PermissionError) string {
	all := xdp.DataplaneCapabilities()
	missing, err := xdp.MissingCapabilities(all...)
	if err != nil || len(missing) == 0 {
		return ""
	}
	fix := "run warpflowd as root or through the systemd unit in cmd/warpflowd, which grants " + all.String()
	var others xdp.CapSet
	for _, c := range missing {
		if pe == nil || !slices.Contains(pe.Missing, c) {
			others = append(others, c)
		}
	}
	switch {
	case len(others) == 0:
		return "; " + fix
	case pe != nil && len(pe.Missing) > 0:
		return fmt.Sprintf("; warpflowd also lacks %s, which later steps need: %s", others, fix)
	}
	return fmt.Sprintf("; warpflowd lacks %s: %s", others, fix)
}
