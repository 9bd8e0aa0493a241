package control

import (
	"encoding/json"
	"net/http"
)

// Health endpoints on the metrics listener, for a supervisor's probes (a
// Kubernetes DaemonSet's livenessProbe and readinessProbe, a load
// balancer's health check):
//
//	GET /healthz  200 "ok": the process runs and serves HTTP. It says
//	              nothing about the data path, so a liveness probe on it
//	              restarts only a daemon that stopped answering at all.
//	GET /readyz   200 with a Readiness body when every configured queue
//	              is up and running the pipeline; 503 with the same body
//	              and the problems otherwise (before the queues run, after
//	              a queue stopped or lost its interface, while draining).
//
// A rolling update that waits for readiness (a DaemonSet's maxUnavailable:
// 1) therefore never moves on to the next node before this node's
// dataplane is serving again. Neither endpoint takes a lock on the data
// path or allocates per packet; /readyz reads the daemon's queue states.

// Readiness is /readyz's body.
type Readiness struct {
	Ready bool `json:"ready"`
	// Pipeline is the running pipeline's name.
	Pipeline string           `json:"pipeline"`
	Queues   []QueueReadiness `json:"queues"`
	// Problems are why the daemon is not ready, one line each.
	Problems []string `json:"problems,omitempty"`
}

// QueueReadiness is one configured receive queue's state.
type QueueReadiness struct {
	Queue string `json:"queue"` // as in stats: IFACE/qN
	// State is "running", "starting" (Run has not started its engine
	// yet), "stopping" (the daemon drains), "stopped" (its engine ended)
	// or "lost" (an interface it uses went away).
	State string `json:"state"`
}

// Queue states (QueueReadiness.State).
const (
	QueueRunning  = "running"
	QueueStarting = "starting"
	QueueStopping = "stopping"
	QueueStopped  = "stopped"
	QueueLost     = "lost"
)

// HealthHandlers registers /healthz and /readyz on mux. ready is called
// once per /readyz request; nil means there is no daemon to ask, and
// /readyz answers 503.
func HealthHandlers(mux *http.ServeMux, ready func() Readiness) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		r := Readiness{Problems: []string{"no daemon behind this listener"}}
		if ready != nil {
			r = ready()
		}
		if r.Queues == nil {
			r.Queues = []QueueReadiness{}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if !r.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		json.NewEncoder(w).Encode(r)
	})
}
