package daemon

import (
	"log/slog"
	"slices"
	"time"

	"github.com/warpflow/warpflow/counters"
	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/dataplane/afxdp"
	"github.com/warpflow/warpflow/gpu"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/xdp"
)

// The stats types are the control API's: the daemon fills them from each
// queue's engine snapshot (dataplane.Stats) and the kernel's counters
// read beside it; warpctl and the Prometheus exposition read them.
type (
	Stats      = control.Stats
	Counts     = control.Counts
	Frames     = control.Frames
	QueueStats = control.QueueStats
)

// Stats reads every queue's counters. Safe while Run runs; it must not race
// Close.
func (d *Daemon) Stats() Stats {
	s := Stats{LinkLosses: d.linkLosses.Load(), Swaps: d.swaps.Load(), UptimeNs: time.Since(d.started).Nanoseconds()}
	if len(d.queues) > 0 {
		s.Generation, s.Pipeline = d.queues[0].eng.Generation()
	}
	if ci := d.captureInfo(); ci.Active || ci.Stopped != "" {
		s.Capture = &ci
	}
	s.Watch = d.watchStats()
	s.RSS = d.rssStats()
	for _, qq := range d.queues {
		qs := d.queueStats(qq)
		s.Queues = append(s.Queues, qs)
		addCounts(&s.Totals, &qs.Counts)
		s.Stages = addStages(s.Stages, qs.Stages)
	}
	s.KernelRules = d.addKernelReasons(&s.Totals)
	s.Totals.Balanced = balanced(&s.Totals)
	s.Totals.BatchFill = dataplane.Fill(s.Totals.EngineReceived, s.Totals.Batches)
	s.SampleFiles = d.samples.files()
	return s
}

// balanced is the balance every packet received keeps (control.Stats).
func balanced(c *Counts) bool {
	return c.Received == c.Transmitted+c.Dropped+c.Passed+c.XDPDropped+c.XDPPassed
}

// queueStats is one queue's engine snapshot with the kernel's counters
// for the queue beside it.
func (d *Daemon) queueStats(qq *queue) QueueStats {
	rx := qq.q.RX()
	qs := FromEngine(rx.Name(), qq.eng.Stats())
	qs.Bind = rx.Socket().Bound().String()
	if prog := d.progs[qq.q.Interface()]; prog != nil {
		qs.Attach = prog.Attached().String()
		if c, err := prog.Counters(qq.q.Queue()); err == nil {
			qs.Program = programCounters(c)
			qs.Redirected, qs.NoSocket = c.Redirected, c.NoSocket
			addKernelVerdicts(&qs, c)
		}
	}
	for _, c := range qq.q.Copies() {
		qs.TXCopied += c.Copied()
	}
	var kernel socketDrops
	for _, p := range qq.q.Ports() {
		qs.TXAbandoned += p.Abandoned()
		qs.Sockets = append(qs.Sockets, control.SocketCounters{Port: p.Name(), Counters: socketCounters(p)})
		if st, err := p.Socket().Stats(); err == nil {
			kernel.add(st)
		}
	}
	kernel.into(&qs.Counts)
	qs.Balanced = balanced(&qs.Counts)
	return qs
}

// FromEngine is queue's engine snapshot in the API's form: the one
// conversion from dataplane.Stats to the wire types. What the kernel
// counted for the queue (its XDP program, its sockets) the daemon adds
// beside it (queueStats).
func FromEngine(queue string, es dataplane.Stats) QueueStats {
	qs := QueueStats{
		Queue: queue,
		Counts: Counts{
			Received: es.Received, ReceivedBytes: es.ReceivedBytes, EngineReceived: es.Received,
			Transmitted: es.Transmitted, Dropped: es.Dropped, Passed: es.Passed,
			Batches: es.Batches, BatchFill: es.BatchFill(), FramesLost: es.FramesLost,
		},
		Stages:   stageStats(es.Stages),
		Executor: executorStats(es.Executor),
	}
	for _, dc := range es.Drops {
		qs.Drops = append(qs.Drops, control.DropCount{Reason: dc.Reason, Packets: dc.Packets, Bytes: dc.Bytes})
	}
	for _, pc := range es.Ports {
		qs.Ports = append(qs.Ports, control.PortCount{Port: pc.Port, Packets: pc.Packets, Bytes: pc.Bytes})
	}
	if es.Frames != nil {
		qs.Frames = frames(*es.Frames)
	}
	qs.Balanced = balanced(&qs.Counts)
	return qs
}

// socketDrops are the kernel's drops before the pipeline, from the
// sockets' XDP_STATISTICS. What counts as a drop, once: a frame the kernel
// had no room for on the RX ring (rx_ring_full), one it dropped for want
// of a fill frame or for its size (rx_dropped: in copy mode the kernel
// counts a drop for an empty fill ring there and in rx_fill_ring_empty
// both, so the latter, the times it found the ring empty, is kept apart
// and never added), and descriptors it found invalid.
type socketDrops struct {
	ringFull, dropped, rxInvalid, txInvalid, fillEmpty uint64
}

func (k *socketDrops) add(st xdp.Statistics) {
	k.ringFull += st.RXRingFull
	k.dropped += st.RXDropped
	k.rxInvalid += st.RXInvalidDescs
	k.txInvalid += st.TXInvalidDescs
	k.fillEmpty += st.RXFillRingEmpty
}

// into sets c's kernel drops: every reason, zeros too (stable series).
func (k *socketDrops) into(c *Counts) {
	c.KernelDrops = []control.DropCount{
		{Reason: "rx_ring_full", Packets: k.ringFull},
		{Reason: "rx_dropped", Packets: k.dropped},
		{Reason: "rx_invalid_descs", Packets: k.rxInvalid},
		{Reason: "tx_invalid_descs", Packets: k.txInvalid},
	}
	c.KernelDropped = k.ringFull + k.dropped + k.rxInvalid + k.txInvalid
	c.FillRingEmpty = k.fillEmpty
}

// socketCounters are port p's own counters as it declares them.
func socketCounters(p *afxdp.Port) []counters.Group {
	l := afxdp.CounterLayout()
	vals := make([]counters.Value, l.Len())
	p.ReadCounters(vals)
	return l.Groups(vals)
}

func programCounters(c xdp.QueueCounters) control.ProgramCounters {
	return control.ProgramCounters{Packets: c.Packets, Redirected: c.Redirected, NoSocket: c.NoSocket, RedirectFailed: c.RedirectFailed,
		Dropped: c.Dropped, Passed: c.Passed, OffUnparsed: c.OffUnparsed, OffNoMatch: c.OffNoMatch, OffRaced: c.OffRaced}
}

// frames is an account in the API's form: every place, in order.
func frames(a dataplane.FrameAccount) Frames {
	f := Frames{Total: a.Total()}
	for _, p := range dataplane.FramePlaces() {
		f.Places = append(f.Places, control.FramePlace{Place: p.Name, Frames: p.Frames(&a)})
	}
	return f
}

// stageStats is the engine's stages in the API's form.
func stageStats(stages []dataplane.StageReport) []control.StageStats {
	out := make([]control.StageStats, 0, len(stages))
	for _, st := range stages {
		cs := control.StageStats{Name: st.Name, Kind: st.Kind, Calls: st.Calls, Packets: st.Packets, Bytes: st.Bytes,
			Nanos: st.Nanos, NsPerPacket: st.NsPerPacket(), Counters: st.Counters, File: st.File}
		for _, dc := range st.Drops {
			cs.Drops = append(cs.Drops, control.DropCount{Reason: dc.Reason, Packets: dc.Packets, Bytes: dc.Bytes})
		}
		out = append(out, cs)
	}
	return out
}

func executorStats(x *dataplane.ExecutorStats) control.Executor {
	if x == nil {
		return control.Executor{}
	}
	out := control.Executor{Backend: x.Backend, Counters: x.Counters}
	for _, w := range x.Workers {
		out.Workers = append(out.Workers, control.Worker{Batches: w.Batches, Packets: w.Packets, Parks: w.Parks})
	}
	return out
}

// addCounts adds a queue's counts into the totals.
func addCounts(t, q *Counts) {
	t.Received += q.Received
	t.ReceivedBytes += q.ReceivedBytes
	t.EngineReceived += q.EngineReceived
	t.Transmitted += q.Transmitted
	t.Dropped += q.Dropped
	t.Passed += q.Passed
	t.XDPDropped += q.XDPDropped
	t.XDPPassed += q.XDPPassed
	t.Batches += q.Batches
	t.Redirected += q.Redirected
	t.NoSocket += q.NoSocket
	t.TXCopied += q.TXCopied
	t.TXAbandoned += q.TXAbandoned
	t.FramesLost += q.FramesLost
	t.KernelDropped += q.KernelDropped
	t.FillRingEmpty += q.FillRingEmpty
	t.Drops = addDrops(t.Drops, q.Drops)
	t.KernelDrops = addDrops(t.KernelDrops, q.KernelDrops)
	for _, p := range q.Ports {
		i := slices.IndexFunc(t.Ports, func(x control.PortCount) bool { return x.Port == p.Port })
		if i < 0 {
			t.Ports = append(t.Ports, p)
			continue
		}
		t.Ports[i].Packets += p.Packets
		t.Ports[i].Bytes += p.Bytes
	}
	t.Frames.Add(q.Frames)
}

// addDrops adds src's drops into dst by reason, keeping dst's order and
// appending reasons it lacks.
func addDrops(dst, src []control.DropCount) []control.DropCount {
	for _, d := range src {
		i := slices.IndexFunc(dst, func(x control.DropCount) bool { return x.Reason == d.Reason })
		if i < 0 {
			dst = append(dst, d)
			continue
		}
		dst[i].Packets += d.Packets
		dst[i].Bytes += d.Bytes
		dst[i].XDPPackets += d.XDPPackets
	}
	return dst
}

// addStages adds a queue's stages into the totals' by name: packets,
// drops and their own counters.
func addStages(dst, src []control.StageStats) []control.StageStats {
	for _, st := range src {
		i := slices.IndexFunc(dst, func(x control.StageStats) bool { return x.Name == st.Name })
		if i < 0 {
			st.Drops = slices.Clone(st.Drops)
			st.Counters = counters.AddGroups(nil, st.Counters...)
			dst = append(dst, st)
			continue
		}
		t := &dst[i]
		t.Calls += st.Calls
		t.Packets += st.Packets
		t.Bytes += st.Bytes
		t.Nanos += st.Nanos
		if t.Packets > 0 {
			t.NsPerPacket = float64(t.Nanos) / float64(t.Packets)
		}
		t.Drops = addDrops(t.Drops, st.Drops)
		t.Counters = counters.AddGroups(t.Counters, st.Counters...)
	}
	return dst
}

// logStats logs the totals (msg) and, at debug level, each queue: the
// same counters `warpctl stats` shows first, the stages' own counters
// among them (the busiest logCounters of each, as the declarations name
// them).
func (d *Daemon) logStats(msg string) {
	s := d.Stats()
	d.log.Info(msg, StatsLine(s)...)
	for _, q := range s.Queues {
		d.log.Debug(msg+" (queue)", "queue", q.Queue, "stats", q)
	}
}

// StatsLine is the stats log line's attributes for s: the totals'
// verdicts (transmitted with its shares that never left beside it:
// tx_abandoned, the packets, and frames_lost, the frames an output never
// gave back) and the kernel's beside them, drops by reason (the workers'
// and, apart, the kernel rules'), the frame places, each stage's busiest
// own counters and the executor's, as they are declared.
func StatsLine(s Stats) []any {
	t := s.Totals
	attrs := []any{
		"received", t.Received, "transmitted", t.Transmitted, "tx_abandoned", t.TXAbandoned, "frames_lost", t.FramesLost, "dropped", t.Dropped, "passed", t.Passed,
		"xdp_dropped", t.XDPDropped, "xdp_passed", t.XDPPassed, "balanced", t.Balanced,
		"drops", dropsValue(t.Drops, false), "xdp_drops", dropsValue(t.Drops, true),
		"kernel_dropped", t.KernelDropped, "kernel_drops", dropsValue(t.KernelDrops, false),
		"xdp_redirected", t.Redirected, "xdp_no_socket", t.NoSocket, "tx_copied", t.TXCopied,
		"batch_fill", t.BatchFill, "frames", t.Frames, "link_losses", s.LinkLosses,
	}
	if sc := stageCountersValue(s.Stages); len(sc) > 0 {
		attrs = append(attrs, slog.Attr{Key: "stage_counters", Value: slog.GroupValue(sc...)})
	}
	if len(s.Queues) > 0 {
		attrs = append(attrs, slog.Attr{Key: "executor", Value: executorValue(s.Queues)})
	}
	return attrs
}

// dropsValue logs drops as reason=packets, zeros left out: the workers'
// and the engine's, or (xdp) the kernel rules'.
func dropsValue(list []control.DropCount, xdp bool) slog.Value {
	var attrs []slog.Attr
	for _, dc := range list {
		n := dc.Packets
		if xdp {
			n = dc.XDPPackets
		}
		if n != 0 {
			attrs = append(attrs, slog.Uint64(dc.Reason, n))
		}
	}
	return slog.GroupValue(attrs...)
}

// executorValue is what runs the queues' pipelines, for the stats line:
// the backend (the first queue's: every queue runs the same one) and the
// executor's own counters summed over the queues, as it declares them
// (backend cuda: packets by path, device or fallback, and the slots in
// flight).
func executorValue(qs []control.QueueStats) slog.Value {
	var sum []counters.Group
	for _, q := range qs {
		sum = counters.AddGroups(sum, q.Executor.Counters...)
	}
	attrs := []slog.Attr{slog.String("backend", qs[0].Executor.Backend)}
	for _, kv := range control.TopCounters(sum, -1) {
		attrs = append(attrs, slog.Uint64(kv.Text, kv.Value))
	}
	return slog.GroupValue(attrs...)
}

// logCounters is how many of a stage's own counters the stats line
// shows: the busiest.
const logCounters = 10

// stageCountersValue is each stage's own counters as log attributes:
// stage.key=value, the key as the family names it (name, or name=key).
func stageCountersValue(stages []control.StageStats) []slog.Attr {
	var out []slog.Attr
	for _, st := range stages {
		var attrs []slog.Attr
		for _, kv := range control.TopCounters(st.Counters, logCounters) {
			attrs = append(attrs, slog.Uint64(kv.Text, kv.Value))
		}
		if attrs != nil {
			out = append(out, slog.Attr{Key: st.Name, Value: slog.GroupValue(attrs...)})
		}
	}
	return out
}

// DeclaredCounters lists every family of counters the daemon can export
// beside the model's own: each built-in stage kind's, the CUDA
// executor's and the AF_XDP sockets'. The Grafana dashboard is generated
// from it (control.Dashboard).
func DeclaredCounters() []control.Declared {
	var out []control.Declared
	for _, k := range pipelines.DeclaredCounters() {
		for _, d := range k.Counters {
			out = append(out, control.Declared{Owner: k.Kind, Decl: d})
		}
	}
	for _, d := range gpu.CounterDecls() {
		out = append(out, control.Declared{Owner: control.OwnerExecutor, Decl: d})
	}
	for _, f := range afxdp.CounterLayout().Families() {
		out = append(out, control.Declared{Owner: control.OwnerSocket, Decl: f.Decl})
	}
	return out
}
