package daemon

import (
	"slices"
	"time"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/dataplane/afxdp"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/pipelines"
)

// The stats types are the control API's: the daemon fills them, warpctl
// and the Prometheus exposition read them.
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
	s.Totals.Drops, s.Totals.Kernel = map[string]uint64{}, map[string]uint64{}
	s.Totals.Ports = map[string]control.PortCount{}
	for _, qq := range d.queues {
		qs := d.queueStats(qq)
		s.Queues = append(s.Queues, qs)
		t := &s.Totals
		t.Received += qs.Received
		t.ReceivedBytes += qs.ReceivedBytes
		t.Batches += qs.Batches
		for k, v := range qs.Counts.Ports {
			pc := t.Ports[k]
			pc.Packets += v.Packets
			pc.Bytes += v.Bytes
			t.Ports[k] = pc
		}
		t.Transmitted += qs.Transmitted
		t.Dropped += qs.Dropped
		t.Passed += qs.Passed
		for k, v := range qs.Drops {
			t.Drops[k] += v
		}
		t.TXCopied += qs.TXCopied
		t.Redirected += qs.Redirected
		t.NoSocket += qs.NoSocket
		t.XDPDropped += qs.XDPDropped
		t.XDPPassed += qs.XDPPassed
		for k, v := range qs.Kernel {
			t.Kernel[k] += v
		}
		addFrames(&t.Frames, qs.Frames)
	}
	s.StageCounters, s.Samples = sumStageCounters(s.Queues)
	s.KernelRules = d.addKernelReasons(&s.Totals)
	s.Totals.Balanced = s.Totals.Received == s.Totals.Transmitted+s.Totals.Dropped+s.Totals.Passed
	s.Totals.BatchFill = fill(s.Totals.Received, s.Totals.Batches)
	return s
}

func (d *Daemon) queueStats(qq *queue) QueueStats {
	snap := qq.eng.Snapshot()
	rx := qq.q.RX()
	qs := QueueStats{
		Queue: rx.Name(),
		Bind:  rx.Socket().Bound().String(),
		Ports: map[string]afxdp.Counters{},
		Counts: Counts{
			Received: snap.Received, ReceivedBytes: snap.ReceivedBytes, Transmitted: snap.Transmitted, Dropped: snap.Dropped, Passed: snap.Passed,
			Drops: map[string]uint64{}, Kernel: map[string]uint64{}, Ports: map[string]control.PortCount{},
			Batches: snap.Batches, BatchFill: fill(snap.Received, snap.Batches),
		},
		Workers: qq.eng.WorkerStats(),
	}
	qs.Balanced = qs.Received == qs.Transmitted+qs.Dropped+qs.Passed
	for _, dc := range snap.Drops {
		if dc.Packets > 0 {
			qs.Drops[dc.Reason] = dc.Packets
		}
	}
	for _, pc := range snap.Ports {
		qs.Counts.Ports[pc.Port] = control.PortCount{Packets: pc.Packets, Bytes: pc.Bytes}
	}
	qs.Stages = stageStats(qq.eng.Graph(), qq.eng.Stages())
	addStageCounters(qs.Stages, qq.eng.StageCounters(), qq.eng.Samples())
	fa := qq.eng.Frames()
	qs.Frames = Frames{FrameAccount: fa, Total: fa.Total()}
	if prog := d.progs[qq.q.Interface()]; prog != nil {
		qs.Attach = prog.Attached().String()
		if c, err := prog.Counters(qq.q.Queue()); err == nil {
			qs.Program = c
			qs.Redirected, qs.NoSocket = c.Redirected, c.NoSocket
			addKernelVerdicts(&qs, c)
		}
	}
	for _, c := range qq.q.Copies() {
		qs.TXCopied += c.Copied()
	}
	for _, p := range qq.q.Ports() {
		qs.Ports[p.Name()] = p.Counters()
		if st, err := p.Socket().Stats(); err == nil {
			addKernel(qs.Kernel, "rx_ring_full", st.RXRingFull)
			addKernel(qs.Kernel, "rx_fill_ring_empty", st.RXFillRingEmpty)
			addKernel(qs.Kernel, "rx_dropped", st.RXDropped)
			addKernel(qs.Kernel, "rx_invalid_descs", st.RXInvalidDescs)
			addKernel(qs.Kernel, "tx_invalid_descs", st.TXInvalidDescs)
		}
	}
	return qs
}

func addKernel(m map[string]uint64, k string, v uint64) {
	if v > 0 {
		m[k] += v
	}
}

func addFrames(dst *Frames, f Frames) {
	a, b := &dst.FrameAccount, f.FrameAccount
	a.Free += b.Free
	a.Fill += b.Fill
	a.KernelRX += b.KernelRX
	a.RX += b.RX
	a.Port += b.Port
	a.Engine += b.Engine
	a.TX += b.TX
	a.KernelTX += b.KernelTX
	a.Completion += b.Completion
	a.Output += b.Output
	a.Lost += b.Lost
	a.Unreported += b.Unreported
	dst.Total += f.Total
}

// logStats logs the totals (msg) and, at debug level, each queue.
func (d *Daemon) logStats(msg string) {
	s := d.Stats()
	t := s.Totals
	d.log.Info(msg,
		"received", t.Received, "transmitted", t.Transmitted, "dropped", t.Dropped, "passed", t.Passed,
		"balanced", t.Balanced, "drops", t.Drops, "kernel_drops", t.Kernel,
		"xdp_redirected", t.Redirected, "xdp_no_socket", t.NoSocket, "xdp_dropped", t.XDPDropped, "xdp_passed", t.XDPPassed, "tx_copied", t.TXCopied,
		"frames", t.Frames, "link_losses", s.LinkLosses)
	for _, q := range s.Queues {
		d.log.Debug(msg+" (queue)", "queue", q.Queue, "stats", q)
	}
}

func fill(packets, batches uint64) float64 {
	if batches == 0 {
		return 0
	}
	return float64(packets) / float64(batches)
}

// stageStats turns the engine's node counters into the API's, with each
// stage's drops by reason (the packets it sent to drop terminals).
func stageStats(g *pipelines.Graph, nodes []pipelines.NodeStats) []control.StageStats {
	info := g.Stages()
	out := make([]control.StageStats, 0, len(nodes))
	for _, n := range nodes {
		st := control.StageStats{Name: n.Name, Kind: n.Kind, Calls: n.Calls, Packets: n.Packets, Bytes: n.Bytes, Nanos: n.Nanos}
		if n.Packets > 0 && n.Nanos > 0 {
			st.NsPerPacket = float64(n.Nanos) / float64(n.Packets)
		}
		for _, si := range info {
			if si.Name != n.Name {
				continue
			}
			for e, c := range n.Edges {
				if c == 0 {
					continue
				}
				reason := pipelines.BadEdgeReason
				if e < len(si.Edges) {
					reason = ""
					for _, t := range info {
						if t.Name == si.Edges[e] && t.Kind == "drop" {
							reason = t.Target
						}
					}
				}
				if reason != "" {
					if st.Drops == nil {
						st.Drops = map[string]uint64{}
					}
					st.Drops[reason] += c
				}
			}
		}
		out = append(out, st)
	}
	return out
}

// addStageCounters attaches each stage's own counters and, to sample
// stages, their counts.
func addStageCounters(stages []control.StageStats, counters map[string][]pipelines.Counter, samples []dataplane.SampleCount) {
	for i := range stages {
		st := &stages[i]
		st.Counters = counters[st.Name]
		for k := range samples {
			if samples[k].Stage == st.Name {
				sc := samples[k]
				st.Sample = &sc
			}
		}
	}
}

// sumStageCounters sums the queues' stage counters and sample counts, in
// stage order (the first queue's, then stages only later queues have).
func sumStageCounters(queues []control.QueueStats) ([]control.StageCounterSet, []dataplane.SampleCount) {
	var sets []control.StageCounterSet
	var samples []dataplane.SampleCount
	for _, q := range queues {
		for _, st := range q.Stages {
			if len(st.Counters) > 0 {
				j := slices.IndexFunc(sets, func(s control.StageCounterSet) bool { return s.Stage == st.Name })
				if j < 0 {
					sets = append(sets, control.StageCounterSet{Stage: st.Name, Kind: st.Kind})
					j = len(sets) - 1
				}
				for _, c := range st.Counters {
					k := slices.IndexFunc(sets[j].Counters, func(x pipelines.Counter) bool { return x.Key == c.Key })
					if k < 0 {
						sets[j].Counters = append(sets[j].Counters, c)
						continue
					}
					sets[j].Counters[k].Packets += c.Packets
					sets[j].Counters[k].Bytes += c.Bytes
				}
			}
			if sc := st.Sample; sc != nil {
				j := slices.IndexFunc(samples, func(s dataplane.SampleCount) bool { return s.Stage == sc.Stage })
				if j < 0 {
					samples = append(samples, *sc)
					continue
				}
				samples[j].Candidates += sc.Candidates
				samples[j].Written += sc.Written
			}
		}
	}
	for _, set := range sets {
		dataplane.SortCounters(set.Counters)
	}
	return sets, samples
}
