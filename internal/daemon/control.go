package daemon

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/pipelines"
)

// maxStored bounds the pipeline store (and so the label sets the metrics
// can grow to).
const maxStored = 64

// swapTimeout bounds how long a swap waits for the previous swap's grace
// period on a queue.
const swapTimeout = 5 * time.Second

// stored is one pipeline in the daemon's store.
type stored struct {
	name   string
	file   string
	source string
	graph  *pipelines.Graph
	at     time.Time
	by     string
}

// Backend returns the daemon as the control server's backend.
func (d *Daemon) Backend() control.Backend { return backend{d} }

type backend struct{ d *Daemon }

func (b backend) Pipelines() control.PipelineList { return b.d.pipelines() }
func (b backend) Load(peer string, r control.LoadRequest) (control.PipelineInfo, error) {
	return b.d.load(peer, r)
}
func (b backend) Show(name string) (control.PipelineDetail, error) { return b.d.show(name) }
func (b backend) Remove(name string) error                         { return b.d.remove(name) }
func (b backend) Swap(name string) (control.SwapReply, error)      { return b.d.Swap(name) }
func (b backend) Stats() control.Stats                             { return b.d.Stats() }
func (b backend) Ports() control.PortsReply                        { return b.d.ports() }
func (b backend) Capture() control.CaptureInfo                     { return b.d.captureInfo() }
func (b backend) CaptureStart(r control.CaptureRequest) (control.CaptureInfo, error) {
	return b.d.captureStart(r)
}
func (b backend) CaptureStop() (control.CaptureInfo, error) { return b.d.captureStop("stopped") }

func (d *Daemon) info(s *stored) control.PipelineInfo {
	pi := control.Info(s.name, s.file, s.graph)
	pi.Running, pi.LoadedAt, pi.LoadedBy = s.name == d.running, s.at, s.by
	return pi
}

func (d *Daemon) pipelines() control.PipelineList {
	d.ctlMu.Lock()
	defer d.ctlMu.Unlock()
	l := control.PipelineList{Running: d.running}
	if len(d.queues) > 0 {
		l.Generation, _ = d.queues[0].eng.Generation()
	}
	names := make([]string, 0, len(d.store))
	for n := range d.store {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		l.Pipelines = append(l.Pipelines, d.info(d.store[n]))
	}
	return l
}

// runnable checks that g can run on this daemon as configured: every tx
// port maps to an interface the queues transmit on, and the pass rule.
func (d *Daemon) runnable(g *pipelines.Graph) (map[string]string, error) {
	if err := d.checkPass(g); err != nil {
		return nil, err
	}
	pi, err := d.portInterfaces(g)
	if err != nil {
		return nil, err
	}
	queues := make([]outputter, len(d.queues))
	for i, qq := range d.queues {
		queues[i] = qq.q
	}
	if err := checkOutputs(g.Name(), pi, queues); err != nil {
		return nil, err
	}
	return pi, nil
}

// checkTables checks the stage tables of all queues' engines together
// against the memory the daemon can still take (each engine checked its
// own, but the queues' add up): the running plans', or with preps a
// swap's new tables (those handed over whole excepted). The tables are
// allocated when the workers first run, so nothing is taken yet.
func (d *Daemon) checkTables(pipeline string, preps []*dataplane.PreparedSwap) error {
	var need uint64
	runners := 0
	for i, qq := range d.queues {
		var b uint64
		var n int
		if preps != nil {
			b, n = preps[i].TableBytes()
		} else if qq.eng != nil {
			b, n = qq.eng.TableBytes()
		}
		need, runners = need+b, runners+n
	}
	return dataplane.CheckTableMemory(pipeline, need, runners)
}

// outputter is what checkOutputs needs of a queue (an *afxdp.Queue).
type outputter interface {
	Interface() string
	Output(iface string) dataplane.Port
}

// checkOutputs refuses, in one line naming the interface and the fix, a
// pipeline (port map pi) that transmits on an interface some queue has no
// transmit socket on: the daemon opens them at start only (on the
// interfaces of its ports map, its transmit-only interfaces and its
// startup pipeline's), never during a swap.
func checkOutputs(pipeline string, pi map[string]string, queues []outputter) error {
	ports := make([]string, 0, len(pi))
	for port := range pi {
		ports = append(ports, port)
	}
	sort.Strings(ports)
	for _, port := range ports {
		iface := pi[port]
		for _, q := range queues {
			if q.Output(iface) == nil {
				return fmt.Errorf("pipeline %q transmits on port %q to interface %s, which queue %s of %s has no transmit socket on (warpflowd opens them at start only, on the interfaces of its ports map and its transmit-only ones): add `ports: {%s: %s}` to the daemon config and restart it", pipeline, port, iface, outputQueueName(q), q.Interface(), port, iface)
			}
		}
	}
	return nil
}

func outputQueueName(q outputter) string {
	if p := q.Output(q.Interface()); p != nil {
		return p.Name()
	}
	return q.Interface()
}

func (d *Daemon) load(peer string, r control.LoadRequest) (control.PipelineInfo, error) {
	file := r.File
	if file == "" {
		file = "pipeline.yaml"
	}
	g, err := pipelines.Load(file, []byte(r.Source))
	if err != nil {
		return control.PipelineInfo{}, control.PipelineProblems(err)
	}
	if _, err := d.runnable(g); err != nil {
		return control.PipelineInfo{}, &control.Error{Code: control.ErrInvalidPipeline.Code, Message: "pipeline cannot run on this daemon", Problems: []string{err.Error()}}
	}
	// The kernel half too, now: a swap to the pipeline parses nothing.
	g.Offload(d.off.mode)
	name := r.Name
	if name == "" {
		name = g.Name()
	}
	if err := control.ValidName(name); err != nil {
		return control.PipelineInfo{}, fmt.Errorf("%w (the pipeline's own name; give one with --name)", err)
	}
	d.ctlMu.Lock()
	defer d.ctlMu.Unlock()
	if name == d.running {
		return control.PipelineInfo{}, control.Errorf(control.ErrConflict, "pipeline %q is running: load the new version under another name and swap to it", name)
	}
	if _, ok := d.store[name]; !ok && len(d.store) >= maxStored {
		return control.PipelineInfo{}, control.Errorf(control.ErrRefused, "the store holds %d pipelines already: remove one first", maxStored)
	}
	s := &stored{name: name, file: file, source: r.Source, graph: g, at: time.Now(), by: peer}
	d.store[name] = s
	return d.info(s), nil
}

func (d *Daemon) show(name string) (control.PipelineDetail, error) {
	d.ctlMu.Lock()
	defer d.ctlMu.Unlock()
	s, ok := d.store[name]
	if !ok {
		return control.PipelineDetail{}, d.notFound(name)
	}
	nodes := control.Nodes(s.graph)
	split := d.split(s)
	control.MarkSplit(nodes, split)
	return control.PipelineDetail{PipelineInfo: d.info(s), Graph: nodes, Source: s.source, DOT: control.DOT(s.graph.Name(), nodes), Split: split}, nil
}

func (d *Daemon) notFound(name string) error {
	names := make([]string, 0, len(d.store))
	for n := range d.store {
		names = append(names, n)
	}
	sort.Strings(names)
	return control.Errorf(control.ErrNotFound, "no pipeline %q (stored: %v)", name, names)
}

func (d *Daemon) remove(name string) error {
	d.ctlMu.Lock()
	defer d.ctlMu.Unlock()
	if _, ok := d.store[name]; !ok {
		return d.notFound(name)
	}
	if name == d.running {
		return control.Errorf(control.ErrConflict, "pipeline %q is running: swap to another one first", name)
	}
	delete(d.store, name)
	return nil
}

// outputsFor are queue qq's outputs for pipeline g with port map pi: its
// transmit sockets and its sample files (opened where g names files the
// daemon does not write yet).
func (d *Daemon) outputsFor(qq *queue, pi map[string]string, g *pipelines.Graph) (dataplane.Outputs, error) {
	outs := dataplane.Outputs{Ports: map[string]dataplane.Port{}}
	for port, iface := range pi {
		outs.Ports[port] = qq.q.Output(iface)
	}
	var err error
	outs.Samples, err = d.sampleOutputs(g, qq.idx)
	return outs, err
}

// Swap makes the stored pipeline name the running one on every queue and
// in every XDP program, live, both halves of the split together.
//
// Nothing is parsed or compiled here: the pipeline's graph and its kernel
// half (pipelines.Graph.Offload) were made when it was loaded. The swap
// first does everything that can fail or take time, changing nothing a
// frame sees: it builds and checks every queue's plan
// (dataplane.Engine.PrepareSwap, which also starts a worker pool where
// the new plan needs another) and writes the new kernel rules into the
// idle slot of every program (stageKernel). A refusal at any of these
// steps leaves both halves as they were. Then it publishes every queue's
// plan, and each queue's I/O loop, at the batch boundary at which it
// takes its plan up, flips its interface's program to the new rule set
// (one map write: kernelFlip.flip, the plan's AtTakeUp) before it
// receives the new plan's first frame.
//
// What "at once" means: on a queue, the kernel flip and the workers'
// switch happen at the same point of the I/O loop, with no frame received
// between them. The two halves still see a frame at different times (the
// XDP program when it arrives, the workers when the I/O loop receives it
// from the socket's ring), so the frames that passed the program before
// the flip and were still in the RX ring at that boundary (at most the
// ring's size plus the NAPI batch in flight) went through the old rules
// undecided and are processed by the new plan. Every other frame is
// wholly old (decided by the old rules, or received before the boundary)
// or wholly new (it entered the program after the flip). This is correct
// for first-match semantics because a kernel rule set is a prefix of its
// own pipeline's first filter that only drops or passes: a frame the old
// prefix did not decide left the program unchanged, and the new plan runs
// the whole new pipeline on it, the new prefix included, so it gets
// exactly the new pipeline's verdict; a frame the old prefix decided got
// exactly the old pipeline's (its first match is in the prefix). No
// frame gets a verdict neither pipeline gives, and on the queue that
// flipped no frame decided after the flip sees the old pipeline (in
// TestLiveSplitSwapAtOnce, 0 - 106 frames were in flight at a flip under
// 20 kpps). With several queues on an interface the
// first to take its plan up flips the program; the others take theirs up
// at their next batch boundary, and until then a frame the new rules did
// not decide is processed there by the old plan, which gives it the old
// pipeline's verdict whole. The reply comes once every queue has taken
// its plan up: after it, no frame sees the old pipeline.
//
// A capture in progress follows the swap when the new pipeline has its
// stage (and edge, by the stage it leads to): the new plan's runners take
// the same tap before it is published, so the capture goes on as one
// file with no batch missed. Otherwise the capture ends once the swap is
// done (the old pipeline's batches up to it are in the file), with the
// reason; a refused swap leaves it running.
func (d *Daemon) Swap(name string) (control.SwapReply, error) {
	start := time.Now()
	d.ctlMu.Lock()
	defer d.ctlMu.Unlock()
	var rep control.SwapReply
	s, ok := d.store[name]
	if !ok {
		return rep, d.notFound(name)
	}
	if name == d.running {
		return rep, control.Errorf(control.ErrConflict, "pipeline %q is already running", name)
	}
	pi, err := d.runnable(s.graph)
	if err != nil {
		return rep, control.Errorf(control.ErrRefused, "%v", err)
	}
	var newTap *pipelines.Tap
	var endCapture string // why the capture ends once the swap is done
	if c := d.activeCapture(); c != nil {
		// A view of the capture's one tap (shared count and buffers) at
		// its point in the new pipeline.
		if t, err := c.tap.Follow(s.graph); err != nil {
			endCapture = fmt.Sprintf("the pipeline was swapped to %q, which has no such tap point (%v)", name, err)
		} else {
			newTap = t
		}
	}

	// The workers' half: every queue's plan built and checked, none
	// published. Each plan's AtTakeUp flips its interface's kernel rules,
	// staged below (k is set before any plan is published).
	var k *kernelSwap
	preps := make([]*dataplane.PreparedSwap, len(d.queues))
	abort := func() {
		for _, ps := range preps {
			if ps != nil {
				ps.Abort()
			}
		}
	}
	for i, qq := range d.queues {
		outs, err := d.outputsFor(qq, pi, s.graph)
		if err != nil {
			abort()
			return rep, control.Errorf(control.ErrRefused, "%v", err)
		}
		outs.Tap = newTap
		iface := qq.q.Interface()
		ps, err := qq.eng.PrepareSwap(s.graph, outs, dataplane.SwapOptions{Timeout: swapTimeout, AtTakeUp: func() error {
			if f := k.flips[iface]; f != nil {
				return f.flip()
			}
			return nil
		}})
		if err != nil {
			abort()
			return rep, control.Errorf(control.ErrRefused, "queue %s: %v", qq.q.RX().Name(), err)
		}
		preps[i] = ps
	}
	if err := d.checkTables(name, preps); err != nil {
		abort()
		return rep, control.Errorf(control.ErrRefused, "%v", err)
	}
	prepared := time.Now()
	// The kernel half: staged in every program's idle slot (an empty set
	// while a capture that follows needs the workers to run the rules).
	k, err = d.stageKernel(s.graph.Offload(d.off.mode), newTap != nil && newTap.SeesKernel(d.off.mode))
	if err != nil {
		abort()
		return rep, control.Errorf(control.ErrRefused, "%v", err)
	}
	// Symmetric RSS before any queue runs a stateful plan (rss.go; once
	// per interface, in kernel_load_ns).
	d.ensureSymmetricRSS(s.graph)
	staged := time.Now()

	// Publish: from here on nothing is refused. Only a queue whose engine
	// stopped since it was prepared (its interface went) refuses; it
	// serves nothing any more.
	var problems []string
	results := make([]*dataplane.SwapResult, len(d.queues))
	publishedAt := make([]time.Time, len(d.queues))
	for i, qq := range d.queues {
		res, err := preps[i].Publish()
		publishedAt[i] = time.Now()
		if err != nil {
			d.log.Error("swap: a queue stopped before its new plan was published", "queue", qq.q.RX().Name(), "pipeline", name, "err", err)
			problems = append(problems, fmt.Sprintf("queue %s stopped before its plan was published: %v", qq.q.RX().Name(), err))
			continue
		}
		results[i] = &res
	}
	ctx, cancel := context.WithTimeout(context.Background(), swapTimeout)
	defer cancel()
	last := staged
	for i, qq := range d.queues {
		at := int64(-1)
		if results[i] != nil {
			t, err := qq.eng.WaitTakenUp(ctx, *results[i])
			switch {
			case t.IsZero():
				problems = append(problems, fmt.Sprintf("queue %s: %v", qq.q.RX().Name(), err))
			case err != nil:
				// The plan is in force; its interface's kernel flip
				// failed there: flipRest below tries again.
				d.log.Warn("swap: the kernel rules did not flip at the queue's batch boundary", "queue", qq.q.RX().Name(), "err", err)
				fallthrough
			default:
				at = t.Sub(publishedAt[i]).Nanoseconds()
				last = maxTime(last, t)
			}
		}
		rep.ActiveAfterNs = append(rep.ActiveAfterNs, at)
	}
	// A program no queue flipped (its queues stopped, or their flip
	// failed) is flipped from here: the kernel half never lags the swap.
	if err := k.flipRest(); err != nil {
		problems = append(problems, err.Error()+" (the old kernel rules stay in force there; each frame still gets the old pipeline's verdict or the new one's)")
	}
	d.commitKernel(k)
	switch {
	case newTap != nil:
		rep.Capture = "follows"
		d.log.Info("capture follows the swap", "pipeline", name)
	case endCapture != "":
		// The old plans tapped up to the swap; the new ones have no tap.
		d.captureStopLocked(endCapture)
		rep.Capture = "ended: " + endCapture
	}
	var r0 *dataplane.SwapResult
	for _, r := range results {
		if r != nil {
			r0 = r
			break
		}
	}
	rep.From, rep.To, rep.Queues = d.running, name, len(d.queues)
	if r0 != nil {
		rep.Generation = r0.Generation
		rep.PoolChange, rep.Kept, rep.Reset, rep.Added, rep.Removed = r0.PoolChange, r0.Kept, r0.Reset, r0.Added, r0.Removed
		rep.CountersReset = r0.CountersReset
		rep.StateKept, rep.StateReset = r0.StateKept, r0.StateReset
	}
	d.running = name
	d.graph = s.graph
	d.swaps.Add(1)
	done := time.Now()
	rep.Timing = control.SwapTiming{
		PrepareNs:    prepared.Sub(start).Nanoseconds(),
		KernelLoadNs: staged.Sub(prepared).Nanoseconds(),
		FlipNs:       last.Sub(staged).Nanoseconds(),
		TotalNs:      done.Sub(start).Nanoseconds(),
	}
	d.log.Info("pipeline swapped", "from", rep.From, "to", name, "generation", rep.Generation,
		"prepare", time.Duration(rep.Timing.PrepareNs).String(), "kernel_load", time.Duration(rep.Timing.KernelLoadNs).String(),
		"flip", time.Duration(rep.Timing.FlipNs).String(), "total", time.Duration(rep.Timing.TotalNs).String())
	if len(problems) > 0 {
		// The swap happened (every plan is published; the programs that
		// could flip did): say what did not go as it should.
		return rep, control.Errorf(control.ErrInternal, "swapped to %q, but: %s", name, strings.Join(problems, "; "))
	}
	return rep, nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (d *Daemon) ports() control.PortsReply {
	var r control.PortsReply
	for _, in := range d.cfg.Interfaces {
		ii := control.InterfaceInfo{Name: in.Name, Receives: in.Receives(), AttachAsked: orDefault(in.Attach, "auto"), BindAsked: orDefault(in.Bind, "auto")}
		if prog := d.progs[in.Name]; prog != nil {
			ii.Attach = prog.Attached().String()
		}
		for _, qq := range d.queues {
			if qq.q.Interface() == in.Name {
				ii.Queues = append(ii.Queues, qq.q.Queue())
			}
		}
		r.Interfaces = append(r.Interfaces, ii)
	}
	for _, qq := range d.queues {
		es := qq.eng.Stats()
		qp := control.QueuePorts{
			Queue:  qq.q.RX().Name(),
			Frames: frames(*es.Frames),
			UMEM:   control.UMEMInfo{Frames: d.cfg.UMEM.Frames, FrameSize: d.cfg.UMEM.FrameSize, Headroom: d.cfg.UMEM.Headroom},
		}
		for _, p := range qq.q.Ports() {
			so := p.Socket()
			qp.Sockets = append(qp.Sockets, control.SocketInfo{Port: p.Name(), Interface: so.Interface(), Queue: qq.q.Queue(), Bind: so.Bound().String(), Counters: socketCounters(p)})
		}
		r.Queues = append(r.Queues, qp)
	}
	return r
}

var errNoCapture = errors.New("no capture")
