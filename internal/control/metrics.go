package control

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/warpflow/warpflow/pipelines"
)

// The metrics carry the same counters as Stats, named by the Prometheus
// conventions: warpflow_ prefix, units in the name, _total for counters.
// Labels are bounded: queue (the served queues, fixed at start), port
// (the pipelines' tx ports), reason (their drop reasons and the engine's),
// stage and kind (their stages; the store holds at most 64 pipelines),
// place (the frame places), worker (fixed per queue), and for the split
// pipeline's kernel rules interface, pipeline, rule (an index below 64)
// and action; key, a stage's own counter, is bounded per stage by
// metricKey (a filter's first 256 rules, a count stage's fixed small key
// sets, never a VLAN ID or an arbitrary value).
//
// Every packet a queue received is in exactly one of transmitted,
// dropped (by the workers or the engine, by reason), passed (by them),
// xdp_dropped and xdp_passed (by the XDP program's kernel rules): so
// received = Σ transmitted + Σ dropped + passed + xdp_dropped + xdp_passed
// per queue, the balance of `warpctl stats`. The kernel counts its
// decisions per queue, and by rule per interface (xdp_rule_*), not by
// queue and reason together.
var (
	mReceived      = desc("received_packets_total", "Packets that arrived on the queue: read from its RX ring, or decided by the XDP program's kernel rules.", "queue")
	mReceivedBytes = desc("received_bytes_total", "Bytes received.", "queue")
	mTxPackets     = desc("transmitted_packets_total", "Packets a tx port accepted.", "queue", "port")
	mTxBytes       = desc("transmitted_bytes_total", "Bytes a tx port accepted.", "queue", "port")
	mDropped       = desc("dropped_packets_total", "Packets the workers or the engine dropped, by reason (the pipeline's and the engine's; the kernel rules' drops are xdp_dropped).", "queue", "reason")
	mPassed        = desc("passed_packets_total", "Packets the workers passed to the kernel's stack (the kernel rules' passes are xdp_passed).", "queue")
	mXDPDropped    = desc("xdp_dropped_packets_total", "Frames the split pipeline's kernel rules dropped in the XDP program (no socket or worker saw them).", "queue")
	mXDPPassed     = desc("xdp_passed_packets_total", "Frames the split pipeline's kernel rules passed to the kernel's stack in the XDP program.", "queue")
	mXDPRule       = desc("xdp_rule_packets_total", "Frames a kernel rule of the running pipeline's split decided since its rule set was loaded.", "interface", "pipeline", "rule", "action")
	mXDPRuleBytes  = desc("xdp_rule_bytes_total", "Bytes of the frames a kernel rule of the running pipeline's split decided since its rule set was loaded.", "interface", "pipeline", "rule", "action")
	mBatches       = desc("batches_total", "Batches the engine completed.", "queue")
	mKernel        = desc("kernel_dropped_packets_total", "Frames the kernel dropped before the engine saw them (XDP_STATISTICS), by reason.", "queue", "reason")
	mRedirected    = desc("xdp_redirected_packets_total", "Frames the XDP program redirected to the queue's socket.", "queue")
	mNoSocket      = desc("xdp_no_socket_packets_total", "Frames the XDP program passed on for want of a socket on their queue.", "queue")
	mTXCopied      = desc("tx_copied_packets_total", "Packets an output copied into a UMEM of its own (it could not share the receiving queue's).", "queue")
	mFrames        = desc("frames", "Frames of the queue's UMEM in each place.", "queue", "place")
	mStagePackets  = desc("stage_packets_total", "Packets that arrived at a pipeline stage.", "queue", "stage", "kind")
	mStageBytes    = desc("stage_bytes_total", "Bytes that arrived at a pipeline stage.", "queue", "stage", "kind")
	mStageCalls    = desc("stage_calls_total", "Vectors (batches) a stage processed.", "queue", "stage", "kind")
	mStageSeconds  = desc("stage_seconds_total", "Time spent in a stage (with timing on).", "queue", "stage", "kind")
	mStageDrops    = desc("stage_dropped_packets_total", "Packets a stage sent to a drop, by reason.", "queue", "stage", "reason")
	mWorkerPackets = desc("worker_packets_total", "Packets a CPU worker processed.", "queue", "worker")
	mWorkerBatches = desc("worker_batches_total", "Batches a CPU worker processed.", "queue", "worker")
	mWorkerParks   = desc("worker_parks_total", "Times a CPU worker parked for want of work.", "queue", "worker")
	mSwaps         = desc("pipeline_swaps_total", "Live pipeline swaps.")
	mGeneration    = desc("pipeline_generation", "The running plan's generation (1 at start, +1 per swap).")
	mPipeline      = desc("pipeline_info", "The running pipeline (value 1).", "pipeline")
	mLinkLosses    = desc("link_losses_total", "Interfaces lost while running.")
	mUptime        = desc("uptime_seconds", "Seconds since the daemon started.")
	mCapture       = desc("capture_written_packets_total", "Packets the current or last capture wrote.")
	mStageCounter  = desc("stage_key_packets_total", "A stage's own counter: a filter's hits per rule (key rule[i] for the first 256 rules, rule[other] for the rest summed, default), a count stage's total, class and named-protocol keys (other protocols summed as proto=other; VLAN keys only in stats), a rewrite's exceptions.", "queue", "stage", "kind", "key")
	mStageCounterB = desc("stage_key_bytes_total", "Bytes of stage_key_packets_total.", "queue", "stage", "kind", "key")
	mSampleCands   = desc("sample_candidate_packets_total", "Packets that reached a sample stage.", "queue", "stage")
	mSampleWritten = desc("sample_kept_packets_total", "Packets a sample stage kept (every N-th or the first N of its candidates).", "queue", "stage")
)

// maxRuleSeries bounds the per-rule series of one filter: rules from this
// index on are summed into key rule[other].
const maxRuleSeries = 256

// metricKey maps a stage counter's key to its metric label, bounded per
// stage whatever the traffic: a filter's rule index (capped), a count
// stage's fixed small key sets (total, class=*, named protocols), a
// rewrite's three keys. ok is false for keys left to the stats (a count
// stage's VLAN IDs: 4097 of them).
func metricKey(kind, key string) (label string, ok bool) {
	switch kind {
	case "filter":
		if n, found := strings.CutPrefix(key, "rule["); found {
			if i, err := strconv.Atoi(strings.TrimSuffix(n, "]")); err == nil && i >= maxRuleSeries {
				return "rule[other]", true
			}
		}
		return key, true
	case "count":
		switch {
		case strings.HasPrefix(key, "vlan="):
			return "", false
		case strings.HasPrefix(key, "proto="):
			if _, err := strconv.Atoi(key[len("proto="):]); err == nil {
				return "proto=other", true // a protocol number without a name
			}
		}
		return key, true
	}
	return key, true
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("warpflow_"+name, help, labels, nil)
}

// collector turns one Stats read per scrape into metrics.
type collector struct{ stats func() Stats }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mReceived, mReceivedBytes, mTxPackets, mTxBytes, mDropped, mPassed, mBatches, mKernel,
		mRedirected, mNoSocket, mXDPDropped, mXDPPassed, mXDPRule, mXDPRuleBytes, mTXCopied, mFrames, mStagePackets, mStageBytes, mStageCalls, mStageSeconds, mStageDrops,
		mWorkerPackets, mWorkerBatches, mWorkerParks, mSwaps, mGeneration, mPipeline, mLinkLosses, mUptime, mCapture,
		mStageCounter, mStageCounterB, mSampleCands, mSampleWritten, mWatch, mWatchInSync} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter(mSwaps, float64(s.Swaps))
	gauge(mGeneration, float64(s.Generation))
	gauge(mPipeline, 1, s.Pipeline)
	counter(mLinkLosses, float64(s.LinkLosses))
	gauge(mUptime, time.Duration(s.UptimeNs).Seconds())
	if s.Capture != nil {
		counter(mCapture, float64(s.Capture.Written))
	}
	watchMetrics(ch, s.Watch)
	for _, r := range s.KernelRules {
		rule := strconv.Itoa(r.Rule)
		counter(mXDPRule, float64(r.Packets), r.Interface, r.Pipeline, rule, r.Action)
		counter(mXDPRuleBytes, float64(r.Bytes), r.Interface, r.Pipeline, rule, r.Action)
	}
	for _, q := range s.Queues {
		counter(mReceived, float64(q.Received), q.Queue)
		counter(mReceivedBytes, float64(q.ReceivedBytes), q.Queue)
		for port, pc := range q.Counts.Ports {
			counter(mTxPackets, float64(pc.Packets), q.Queue, port)
			counter(mTxBytes, float64(pc.Bytes), q.Queue, port)
		}
		for reason, n := range q.Drops {
			counter(mDropped, float64(n), q.Queue, reason)
		}
		counter(mPassed, float64(q.Passed-min(q.XDPPassed, q.Passed)), q.Queue)
		counter(mXDPDropped, float64(q.XDPDropped), q.Queue)
		counter(mXDPPassed, float64(q.XDPPassed), q.Queue)
		counter(mBatches, float64(q.Batches), q.Queue)
		for reason, n := range q.Kernel {
			counter(mKernel, float64(n), q.Queue, reason)
		}
		counter(mRedirected, float64(q.Redirected), q.Queue)
		counter(mNoSocket, float64(q.NoSocket), q.Queue)
		counter(mTXCopied, float64(q.TXCopied), q.Queue)
		a := q.Frames.FrameAccount
		for _, p := range []struct {
			name string
			n    int
		}{
			{"free", a.Free}, {"fill", a.Fill}, {"kernel_rx", a.KernelRX}, {"rx", a.RX}, {"port", a.Port},
			{"engine", a.Engine}, {"tx", a.TX}, {"kernel_tx", a.KernelTX}, {"completion", a.Completion},
			{"output", a.Output}, {"lost", a.Lost}, {"unreported", a.Unreported},
		} {
			gauge(mFrames, float64(p.n), q.Queue, p.name)
		}
		for _, st := range q.Stages {
			counter(mStagePackets, float64(st.Packets), q.Queue, st.Name, st.Kind)
			counter(mStageBytes, float64(st.Bytes), q.Queue, st.Name, st.Kind)
			counter(mStageCalls, float64(st.Calls), q.Queue, st.Name, st.Kind)
			counter(mStageSeconds, float64(st.Nanos)/1e9, q.Queue, st.Name, st.Kind)
			for reason, n := range st.Drops {
				counter(mStageDrops, float64(n), q.Queue, st.Name, reason)
			}
			// Keys folded into one label are summed first: one series each.
			var folded map[string]pipelines.Counter
			var order []string
			for _, c := range st.Counters {
				label, ok := metricKey(st.Kind, c.Key)
				if !ok {
					continue
				}
				if folded == nil {
					folded = map[string]pipelines.Counter{}
				}
				f, seen := folded[label]
				if !seen {
					order = append(order, label)
				}
				f.Packets += c.Packets
				f.Bytes += c.Bytes
				folded[label] = f
			}
			for _, label := range order {
				counter(mStageCounter, float64(folded[label].Packets), q.Queue, st.Name, st.Kind, label)
				counter(mStageCounterB, float64(folded[label].Bytes), q.Queue, st.Name, st.Kind, label)
			}
			if sc := st.Sample; sc != nil {
				counter(mSampleCands, float64(sc.Candidates), q.Queue, st.Name)
				counter(mSampleWritten, float64(sc.Written), q.Queue, st.Name)
			}
		}
		for i, w := range q.Workers {
			id := strconv.Itoa(i)
			counter(mWorkerPackets, float64(w.Packets), q.Queue, id)
			counter(mWorkerBatches, float64(w.Batches), q.Queue, id)
			counter(mWorkerParks, float64(w.Parks), q.Queue, id)
		}
	}
}

// MetricsHandler serves the Prometheus exposition of stats (one call per
// scrape) and the Go runtime's and process's own metrics.
func MetricsHandler(stats func() Stats) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{stats}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// MetricsAddr resolves a --metrics-addr value: a bare port (":9100" or
// "9100") listens on loopback; an explicit host is taken as given.
func MetricsAddr(addr string) (string, error) {
	if addr == "" {
		return "", fmt.Errorf("metrics address is empty")
	}
	if !strings.Contains(addr, ":") {
		addr = ":" + addr
	}
	if strings.HasPrefix(addr, ":") {
		addr = "127.0.0.1" + addr
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("metrics address %q: %w", addr, err)
	}
	return addr, nil
}

// MetricsServer serves /metrics on addr until Close.
type MetricsServer struct {
	srv *http.Server
	ln  net.Listener
}

// ServeMetrics listens on addr (see MetricsAddr) and serves /metrics, and
// /healthz and /readyz (health.go) with ready.
func ServeMetrics(addr string, stats func() Stats, ready func() Readiness) (*MetricsServer, error) {
	a, err := MetricsAddr(addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", a)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", MetricsHandler(stats))
	HealthHandlers(mux, ready)
	m := &MetricsServer{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second}}
	go m.srv.Serve(ln)
	return m, nil
}

// Addr is the address the metrics are served on.
func (m *MetricsServer) Addr() string { return m.ln.Addr().String() }

// Close stops serving.
func (m *MetricsServer) Close() error { return m.srv.Close() }
