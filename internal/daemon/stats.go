package daemon

import (
	"log/slog"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/dataplane/afxdp"
	"github.com/warpflow/warpflow/xdp"
)

// Stats is what the daemon counted, in total and per queue. Every field
// is read without pausing the data path: the engines' published counters,
// their frame accounting, the rings' indices, the sockets' and the XDP
// program's kernel counters.
type Stats struct {
	Totals     Counts       `json:"totals"`
	Queues     []QueueStats `json:"queues"`
	LinkLosses uint64       `json:"link_losses"`
}

// Counts are verdict counters and frame accounting, summed or per queue.
type Counts struct {
	Received    uint64            `json:"received"`
	Transmitted uint64            `json:"transmitted"`
	Dropped     uint64            `json:"dropped"`
	Passed      uint64            `json:"passed"`
	Drops       map[string]uint64 `json:"drops"` // by reason, zero counts left out
	// Balanced is received == transmitted + dropped + passed.
	Balanced bool   `json:"balanced"`
	Frames   Frames `json:"frames"`
	// Redirected is what the XDP programs handed to the queues' sockets;
	// NoSocket what they passed to the kernel's stack for want of a
	// socket on the frame's queue.
	Redirected uint64 `json:"xdp_redirected"`
	NoSocket   uint64 `json:"xdp_no_socket"`
	// TXCopied counts packets an output copied into a UMEM of its own
	// because it could not share the receiving queue's (afxdp.CopyPort).
	TXCopied uint64 `json:"tx_copied"`
	// Kernel counts frames the kernel dropped before the engine saw them
	// (socket XDP_STATISTICS: RX ring full, fill ring empty, invalid
	// descriptors), by reason.
	Kernel map[string]uint64 `json:"kernel_drops"`
}

// Frames is a frame account with its total.
type Frames struct {
	dataplane.FrameAccount
	Total int `json:"total"`
}

// LogValue logs a frame account as a group of its places (text logs would
// print the nested struct otherwise); zero places are left out.
func (f Frames) LogValue() slog.Value {
	a := f.FrameAccount
	attrs := []slog.Attr{slog.Int("total", f.Total)}
	for _, p := range []struct {
		name string
		n    int
	}{
		{"free", a.Free}, {"fill", a.Fill}, {"kernel_rx", a.KernelRX}, {"rx", a.RX}, {"port", a.Port},
		{"engine", a.Engine}, {"tx", a.TX}, {"kernel_tx", a.KernelTX}, {"completion", a.Completion},
		{"output", a.Output}, {"lost", a.Lost}, {"unreported", a.Unreported},
	} {
		if p.n != 0 {
			attrs = append(attrs, slog.Int(p.name, p.n))
		}
	}
	return slog.GroupValue(attrs...)
}

// QueueStats is one queue's view.
type QueueStats struct {
	Queue  string `json:"queue"`
	Attach string `json:"attach"`
	Bind   string `json:"bind"`
	Counts
	// Program is the XDP program's counters for this queue.
	Program xdp.QueueCounters `json:"program"`
	// Ports are the queue's AF_XDP ports' own counters (kicks, wake-ups,
	// a TX ring found full, a fill ring left starved), by port name.
	Ports map[string]afxdp.Counters `json:"ports"`
}

// Stats reads every queue's counters. Safe while Run runs; it must not race
// Close.
func (d *Daemon) Stats() Stats {
	s := Stats{LinkLosses: d.linkLosses.Load()}
	s.Totals.Drops, s.Totals.Kernel = map[string]uint64{}, map[string]uint64{}
	for _, qq := range d.queues {
		qs := d.queueStats(qq)
		s.Queues = append(s.Queues, qs)
		t := &s.Totals
		t.Received += qs.Received
		t.Transmitted += qs.Transmitted
		t.Dropped += qs.Dropped
		t.Passed += qs.Passed
		for k, v := range qs.Drops {
			t.Drops[k] += v
		}
		t.TXCopied += qs.TXCopied
		t.Redirected += qs.Redirected
		t.NoSocket += qs.NoSocket
		for k, v := range qs.Kernel {
			t.Kernel[k] += v
		}
		addFrames(&t.Frames, qs.Frames)
	}
	s.Totals.Balanced = s.Totals.Received == s.Totals.Transmitted+s.Totals.Dropped+s.Totals.Passed
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
			Received: snap.Received, Transmitted: snap.Transmitted, Dropped: snap.Dropped, Passed: snap.Passed,
			Drops: map[string]uint64{}, Kernel: map[string]uint64{},
		},
	}
	qs.Balanced = qs.Received == qs.Transmitted+qs.Dropped+qs.Passed
	for _, dc := range snap.Drops {
		if dc.Packets > 0 {
			qs.Drops[dc.Reason] = dc.Packets
		}
	}
	fa := qq.eng.Frames()
	qs.Frames = Frames{FrameAccount: fa, Total: fa.Total()}
	if prog := d.progs[qq.q.Interface()]; prog != nil {
		qs.Attach = prog.Attached().String()
		if c, err := prog.Counters(qq.q.Queue()); err == nil {
			qs.Program = c
			qs.Redirected, qs.NoSocket = c.Redirected, c.NoSocket
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
		"xdp_redirected", t.Redirected, "xdp_no_socket", t.NoSocket, "tx_copied", t.TXCopied,
		"frames", t.Frames, "link_losses", s.LinkLosses)
	for _, q := range s.Queues {
		d.log.Debug(msg+" (queue)", "queue", q.Queue, "stats", q)
	}
}
