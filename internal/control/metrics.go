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
	"github.com/warpflow/warpflow/counters"
)

// The metrics carry the counters of Stats, named by the Prometheus
// conventions (warpflow_ prefix, units in the name, _total for counters),
// from one read per scrape. Two kinds of family:
//
//   - the model's own, one table (families): the verdict counters, the
//     kernel's beside them, the frame places, the stages' packets and
//     drops, the workers, the daemon's state. Their labels are bounded:
//     queue (the served queues, fixed at start), port (the pipelines' tx
//     ports), reason (their drop reasons and the engine's), stage and
//     kind (their stages; the store holds at most 64 pipelines), place
//     (dataplane.FramePlaces), worker (fixed per queue), backend, and
//     for the split pipeline's kernel rules interface, pipeline, rule
//     (an index below 64) and action.
//   - the declared ones (counters.Decl): each family a stage kind, an
//     executor or a socket declares is a metric of its own,
//     counters.Decl.Metric: warpflow_<kind>_<name>... with labels queue
//     and stage (executor: queue and backend; socket: queue and port) and
//     the family's own label, whose values are its bounded key set (a
//     family's folded keys summed into one series keyed "other"; a
//     stats-only family left out). Nothing here knows one family from
//     another or reads a key.
//
// What each family counts is in docs/COUNTERS.md (its metrics table is
// generated from families and the declarations). The kernel counts its
// rules' drops per interface, not per queue: dropped_in_xdp_packets_total
// has them by reason over the whole daemon, so `grep ^warpflow_dropped`
// shows the kernel's share beside the workers'.

// Family is one metric family of the model's own (not a declared one).
type Family struct {
	Name   string // warpflow_...
	Help   string
	Gauge  bool
	Labels []string
	// collect emits the family's series from one Stats read.
	collect func(s *Stats, emit func(v float64, labels ...string))
}

// perQueue makes a family's collect that emits one series per queue from
// v, labelled by the queue.
func perQueue(v func(q *QueueStats) uint64) func(*Stats, func(float64, ...string)) {
	return func(s *Stats, emit func(float64, ...string)) {
		for i := range s.Queues {
			emit(float64(v(&s.Queues[i])), s.Queues[i].Queue)
		}
	}
}

// families are the model's own metric families: what every exporter and
// the dashboard (Dashboard) iterate.
var families = []Family{
	{Name: "warpflow_received_packets_total", Help: "Packets that arrived at the pipeline on the queue: read from its RX ring by the engine, or decided by the XDP program's kernel rules.", Labels: []string{"queue"},
		collect: perQueue(func(q *QueueStats) uint64 { return q.Received })},
	{Name: "warpflow_received_bytes_total", Help: "Bytes received.", Labels: []string{"queue"},
		collect: perQueue(func(q *QueueStats) uint64 { return q.ReceivedBytes })},
	{Name: "warpflow_batched_packets_total", Help: "Packets the engine read from the queue's RX ring, in the batches it completed (received minus the kernel rules' decisions; over batches_total it is the fill per batch).", Labels: []string{"queue"},
		collect: perQueue(func(q *QueueStats) uint64 { return q.EngineReceived })},
	{Name: "warpflow_batches_total", Help: "Batches the engine completed.", Labels: []string{"queue"},
		collect: perQueue(func(q *QueueStats) uint64 { return q.Batches })},
	{Name: "warpflow_transmitted_packets_total", Help: "Packets a tx port accepted.", Labels: []string{"queue", "port"},
		collect: func(s *Stats, emit func(float64, ...string)) {
			for _, q := range s.Queues {
				for _, p := range q.Ports {
					emit(float64(p.Packets), q.Queue, p.Port)
				}
			}
		}},
	{Name: "warpflow_transmitted_bytes_total", Help: "Bytes a tx port accepted.", Labels: []string{"queue", "port"},
		collect: func(s *Stats, emit func(float64, ...string)) {
			for _, q := range s.Queues {
				for _, p := range q.Ports {
					emit(float64(p.Bytes), q.Queue, p.Port)
				}
			}
		}},
	{Name: "warpflow_dropped_packets_total", Help: "Packets the workers or the engine dropped, by reason (the pipeline's and the engine's; the kernel rules' drops are xdp_dropped_packets_total, and by reason dropped_in_xdp_packets_total).", Labels: []string{"queue", "reason"},
		collect: func(s *Stats, emit func(float64, ...string)) {
			for _, q := range s.Queues {
				for _, d := range q.Drops {
					emit(float64(d.Packets), q.Queue, d.Reason)
				}
			}
		}},
	{Name: "warpflow_dropped_in_xdp_packets_total", Help: "Packets the split pipeline's kernel rules dropped in the XDP program, by reason, over every interface and rule set since start (the kernel counts its rules per interface; per queue: xdp_dropped_packets_total).", Labels: []string{"reason"},
		collect: func(s *Stats, emit func(float64, ...string)) {
			for _, d := range s.Totals.Drops {
				if d.XDPPackets > 0 {
					emit(float64(d.XDPPackets), d.Reason)
				}
			}
		}},
	{Name: "warpflow_passed_packets_total", Help: "Packets the workers passed to the kernel's stack (the kernel rules' passes are xdp_passed_packets_total).", Labels: []string{"queue"},
		collect: perQueue(func(q *QueueStats) uint64 { return q.Passed })},
	{Name: "warpflow_xdp_dropped_packets_total", Help: "Frames the split pipeline's kernel rules dropped in the XDP program (no socket or worker saw them).", Labels: []string{"queue"},
		collect: perQueue(func(q *QueueStats) uint64 { return q.XDPDropped })},
	{Name: "warpflow_xdp_passed_packets_total", Help: "Frames the split pipeline's kernel rules passed to the kernel's stack in the XDP program.", Labels: []string{"queue"},
		collect: perQueue(func(q *QueueStats) uint64 { return q.XDPPassed })},
	{Name: "warpflow_xdp_redirected_packets_total", Help: "Frames the XDP program redirected to the queue's socket.", Labels: []string{"queue"},
		collect: perQueue(func(q *QueueStats) uint64 { return q.Redirected })},
	{Name: "warpflow_xdp_no_socket_packets_total", Help: "Frames the XDP program passed on for want of a socket on their queue.", Labels: []string{"queue"},
		collect: perQueue(func(q *QueueStats) uint64 { return q.NoSocket })},
	{Name: "warpflow_xdp_rule_packets_total", Help: "Frames a kernel rule of the running pipeline's split decided since its rule set was loaded.", Labels: []string{"interface", "pipeline", "rule", "action"},
		collect: func(s *Stats, emit func(float64, ...string)) {
			for _, r := range s.KernelRules {
				emit(float64(r.Packets), r.Interface, r.Pipeline, strconv.Itoa(r.Rule), r.Action)
			}
		}},
	{Name: "warpflow_xdp_rule_bytes_total", Help: "Bytes of the frames a kernel rule of the running pipeline's split decided since its rule set was loaded.", Labels: []string{"interface", "pipeline", "rule", "action"},
		collect: func(s *Stats, emit func(float64, ...string)) {
			for _, r := range s.KernelRules {
				emit(float64(r.Bytes), r.Interface, r.Pipeline, strconv.Itoa(r.Rule), r.Action)
			}
		}},
	{Name: "warpflow_kernel_dropped_packets_total", Help: "Frames the kernel dropped before the pipeline saw them (the sockets' XDP_STATISTICS), by reason: rx_ring_full, rx_dropped (no fill frame, or too big), rx_invalid_descs, tx_invalid_descs.", Labels: []string{"queue", "reason"},
		collect: func(s *Stats, emit func(float64, ...string)) {
			for _, q := range s.Queues {
				for _, d := range q.KernelDrops {
					emit(float64(d.Packets), q.Queue, d.Reason)
				}
			}
		}},
	{Name: "warpflow_rx_fill_ring_empty_total", Help: "Times the kernel found the queue's fill ring empty (in copy mode each is one kernel drop, rx_dropped; not drops in themselves).", Labels: []string{"queue"},
		collect: perQueue(func(q *QueueStats) uint64 { return q.FillRingEmpty })},
	{Name: "warpflow_tx_copied_packets_total", Help: "Packets an output copied into a UMEM of its own (it could not share the receiving queue's).", Labels: []string{"queue"},
		collect: perQueue(func(q *QueueStats) uint64 { return q.TXCopied })},
	{Name: "warpflow_frames_lost_total", Help: "UMEM frames an output that owns what it transmits (a sharing AF_XDP output) had not given back when the queue's engine stopped, after its drain timeout: counted as transmitted (a share of it, not another verdict), 0 while the queue runs.", Labels: []string{"queue"},
		collect: perQueue(func(q *QueueStats) uint64 { return q.FramesLost })},
	{Name: "warpflow_frames", Gauge: true, Help: "Frames of the queue's UMEM in each place (they sum to its frame count).", Labels: []string{"queue", "place"},
		collect: func(s *Stats, emit func(float64, ...string)) {
			for _, q := range s.Queues {
				for _, p := range q.Frames.Places {
					emit(float64(p.Frames), q.Queue, p.Place)
				}
			}
		}},
	{Name: "warpflow_stage_packets_total", Help: "Packets that arrived at a pipeline stage.", Labels: []string{"queue", "stage", "kind"},
		collect: perStage(func(st *StageStats) float64 { return float64(st.Packets) })},
	{Name: "warpflow_stage_bytes_total", Help: "Bytes that arrived at a pipeline stage.", Labels: []string{"queue", "stage", "kind"},
		collect: perStage(func(st *StageStats) float64 { return float64(st.Bytes) })},
	{Name: "warpflow_stage_calls_total", Help: "Vectors (batches) a stage processed.", Labels: []string{"queue", "stage", "kind"},
		collect: perStage(func(st *StageStats) float64 { return float64(st.Calls) })},
	{Name: "warpflow_stage_seconds_total", Help: "Time spent in a stage (with timing on).", Labels: []string{"queue", "stage", "kind"},
		collect: perStage(func(st *StageStats) float64 { return float64(st.Nanos) / 1e9 })},
	{Name: "warpflow_stage_dropped_packets_total", Help: "Packets a stage sent to a drop, by reason.", Labels: []string{"queue", "stage", "reason"},
		collect: func(s *Stats, emit func(float64, ...string)) {
			for _, q := range s.Queues {
				for _, st := range q.Stages {
					for _, d := range st.Drops {
						emit(float64(d.Packets), q.Queue, st.Name, d.Reason)
					}
				}
			}
		}},
	{Name: "warpflow_executor_info", Gauge: true, Help: "What runs the queue's pipeline (value 1): backend inline, cpu or cuda.", Labels: []string{"queue", "backend"},
		collect: func(s *Stats, emit func(float64, ...string)) {
			for _, q := range s.Queues {
				emit(1, q.Queue, q.Executor.Backend)
			}
		}},
	{Name: "warpflow_worker_packets_total", Help: "Packets a CPU worker processed.", Labels: []string{"queue", "worker"},
		collect: perWorker(func(w *Worker) uint64 { return w.Packets })},
	{Name: "warpflow_worker_batches_total", Help: "Batches of packets a CPU worker processed (not the empty ones that take a control request or a conntrack tick to it).", Labels: []string{"queue", "worker"},
		collect: perWorker(func(w *Worker) uint64 { return w.Batches })},
	{Name: "warpflow_worker_parks_total", Help: "Times a CPU worker parked for want of work.", Labels: []string{"queue", "worker"},
		collect: perWorker(func(w *Worker) uint64 { return w.Parks })},
	{Name: "warpflow_sample_written_packets_total", Help: "Packets the daemon wrote to a sample stage's file (its rotations included).", Labels: []string{"stage"},
		collect: func(s *Stats, emit func(float64, ...string)) {
			for _, f := range s.SampleFiles {
				emit(float64(f.Written), f.Stage)
			}
		}},
	{Name: "warpflow_sample_missed_packets_total", Help: "Packets a sample stage kept that its file's writer had no room for (the data path never waits for the disk).", Labels: []string{"stage"},
		collect: func(s *Stats, emit func(float64, ...string)) {
			for _, f := range s.SampleFiles {
				emit(float64(f.Missed), f.Stage)
			}
		}},
	{Name: "warpflow_pipeline_swaps_total", Help: "Live pipeline swaps.",
		collect: func(s *Stats, emit func(float64, ...string)) { emit(float64(s.Swaps)) }},
	{Name: "warpflow_pipeline_generation", Gauge: true, Help: "The running plan's generation (1 at start, +1 per swap).",
		collect: func(s *Stats, emit func(float64, ...string)) { emit(float64(s.Generation)) }},
	{Name: "warpflow_pipeline_info", Gauge: true, Help: "The running pipeline (value 1).", Labels: []string{"pipeline"},
		collect: func(s *Stats, emit func(float64, ...string)) { emit(1, s.Pipeline) }},
	{Name: "warpflow_link_losses_total", Help: "Interfaces lost while running.",
		collect: func(s *Stats, emit func(float64, ...string)) { emit(float64(s.LinkLosses)) }},
	{Name: "warpflow_uptime_seconds", Gauge: true, Help: "Seconds since the daemon started.",
		collect: func(s *Stats, emit func(float64, ...string)) { emit(time.Duration(s.UptimeNs).Seconds()) }},
	{Name: "warpflow_capture_written_packets_total", Help: "Packets the current or last capture wrote.",
		collect: func(s *Stats, emit func(float64, ...string)) {
			if s.Capture != nil {
				emit(float64(s.Capture.Written))
			}
		}},
	{Name: "warpflow_pipeline_watch_total", Help: "Changes of the watched pipeline file, by result: swapped in, refused (invalid: the running pipeline kept), failed (a queue refused the swap).", Labels: []string{"result"},
		collect: func(s *Stats, emit func(float64, ...string)) {
			if w := s.Watch; w != nil {
				emit(float64(w.Swapped), WatchSwapped)
				emit(float64(w.Refused), WatchRefused)
				emit(float64(w.Failed), WatchFailed)
			}
		}},
	{Name: "warpflow_pipeline_watch_in_sync", Gauge: true, Help: "1 when the watched pipeline file holds what runs from it, 0 after a refused or failed change until the file is fixed.",
		collect: func(s *Stats, emit func(float64, ...string)) {
			if w := s.Watch; w != nil {
				emit(map[bool]float64{true: 1}[w.InSync])
			}
		}},
}

func perStage(v func(st *StageStats) float64) func(*Stats, func(float64, ...string)) {
	return func(s *Stats, emit func(float64, ...string)) {
		for _, q := range s.Queues {
			for i := range q.Stages {
				emit(v(&q.Stages[i]), q.Queue, q.Stages[i].Name, q.Stages[i].Kind)
			}
		}
	}
}

func perWorker(v func(w *Worker) uint64) func(*Stats, func(float64, ...string)) {
	return func(s *Stats, emit func(float64, ...string)) {
		for _, q := range s.Queues {
			for i := range q.Executor.Workers {
				emit(float64(v(&q.Executor.Workers[i])), q.Queue, strconv.Itoa(i))
			}
		}
	}
}

// Families returns the model's own metric families (not the declared
// ones: DeclaredMetrics).
func Families() []Family { return families }

// The owners of declared families that are not stage kinds.
const (
	OwnerExecutor = "executor"
	OwnerSocket   = "socket"
)

// DeclaredLabels are the labels an exporter sets on a declared family of
// owner (a stage kind, OwnerExecutor or OwnerSocket), before the family's
// own.
func DeclaredLabels(owner string) []string {
	switch owner {
	case OwnerExecutor:
		return []string{"queue", "backend"}
	case OwnerSocket:
		return []string{"queue", "port"}
	}
	return []string{"queue", "stage"}
}

// Declared is one declared family and its owner: a stage kind,
// OwnerExecutor or OwnerSocket.
type Declared struct {
	Owner string
	counters.Decl
}

// DeclaredMetric is one metric a declared family makes.
type DeclaredMetric struct {
	Name, Help string
	Gauge      bool
	Labels     []string
}

// Metrics lists the metrics family d makes: none for a stats-only
// family, its values, and the bytes beside them when it counts them.
func (d Declared) Metrics() []DeclaredMetric {
	if d.StatsOnly {
		return nil
	}
	labels := DeclaredLabels(d.Owner)
	if d.Label != "" {
		labels = append(labels, d.Label)
	}
	out := []DeclaredMetric{{Name: d.Metric(d.Owner), Help: d.Help, Gauge: d.Kind == counters.Gauge, Labels: labels}}
	if d.Bytes {
		out = append(out, DeclaredMetric{Name: d.BytesMetric(d.Owner), Help: "Bytes of " + d.Metric(d.Owner) + ".", Labels: labels})
	}
	return out
}

// collector turns one Stats read per scrape into metrics: the model's
// families and the declared ones. It is unchecked (Describe sends
// nothing): which declared families a scrape has depends on the pipeline
// running; TestMetricsLint checks what it makes.
type collector struct {
	stats func() Stats
	descs []*prometheus.Desc
}

func newCollector(stats func() Stats) *collector {
	c := &collector{stats: stats}
	for _, f := range families {
		c.descs = append(c.descs, prometheus.NewDesc(f.Name, f.Help, f.Labels, nil))
	}
	return c
}

func (c *collector) Describe(chan<- *prometheus.Desc) {}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	collectInto(ch, c.descs, &s)
	collectDeclared(ch, &s)
}

func collectInto(ch chan<- prometheus.Metric, descs []*prometheus.Desc, s *Stats) {
	for i, f := range families {
		t := prometheus.CounterValue
		if f.Gauge {
			t = prometheus.GaugeValue
		}
		d := descs[i]
		f.collect(s, func(v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, t, v, labels...)
		})
	}
}

// collectDeclared emits every declared family of s: the stages', the
// executors' and the sockets', per queue.
func collectDeclared(ch chan<- prometheus.Metric, s *Stats) {
	descs := map[string]*prometheus.Desc{}
	emit := func(owner string, groups []counters.Group, labels ...string) {
		for _, g := range groups {
			d := Declared{Owner: owner, Decl: g.Decl}
			ms := d.Metrics()
			if len(ms) == 0 {
				continue
			}
			// One series per key; folded keys summed into "other".
			var other counters.KeyValue
			folded := false
			series := func(kv counters.KeyValue, key string) {
				l := labels
				if g.Label != "" {
					l = append(append([]string(nil), labels...), key)
				}
				for k, m := range ms {
					dd := descs[m.Name]
					if dd == nil {
						dd = prometheus.NewDesc(m.Name, m.Help, m.Labels, nil)
						descs[m.Name] = dd
					}
					v, t := float64(kv.Value), prometheus.CounterValue
					if k == 1 {
						v = float64(kv.Bytes)
					} else if m.Gauge {
						t = prometheus.GaugeValue
					}
					ch <- prometheus.MustNewConstMetric(dd, t, v, l...)
				}
			}
			for _, kv := range g.Values {
				if kv.Folded {
					other.Value += kv.Value
					other.Bytes += kv.Bytes
					folded = true
					continue
				}
				series(kv, kv.Key)
			}
			if folded {
				series(other, counters.OtherKey)
			}
		}
	}
	for _, q := range s.Queues {
		for _, st := range q.Stages {
			emit(st.Kind, st.Counters, q.Queue, st.Name)
		}
		emit(OwnerExecutor, q.Executor.Counters, q.Queue, q.Executor.Backend)
		for _, sc := range q.Sockets {
			emit(OwnerSocket, sc.Counters, q.Queue, sc.Port)
		}
	}
}

// MetricsHandler serves the Prometheus exposition of stats (one call per
// scrape) and the Go runtime's and process's own metrics.
func MetricsHandler(stats func() Stats) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(stats), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
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
