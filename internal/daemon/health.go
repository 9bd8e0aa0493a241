package daemon

import (
	"fmt"

	"github.com/warpflow/warpflow/internal/control"
)

// A queue's life as /readyz reports it (queue.state): starting until Run
// starts its engine, running while the engine runs, stopped once it has
// returned (lost or draining say why).
const (
	queueStarting int32 = iota
	queueRunning
	queueStopped
)

// Ready is /readyz's answer: ready when every configured receive queue's
// engine runs the running pipeline and the daemon is not draining. It
// reads atomics only, so a probe never waits on a swap or the data path.
func (d *Daemon) Ready() control.Readiness {
	r := control.Readiness{Queues: make([]control.QueueReadiness, 0, len(d.queues))}
	if len(d.queues) > 0 {
		_, r.Pipeline = d.queues[0].eng.Generation()
	}
	draining := d.draining.Load()
	if draining {
		r.Problems = append(r.Problems, "draining: the daemon is stopping")
	}
	for _, qq := range d.queues {
		name := qq.q.RX().Name()
		st := control.QueueStopped
		switch {
		case qq.lost.Load():
			st = control.QueueLost
			r.Problems = append(r.Problems, fmt.Sprintf("queue %s: an interface it uses (%v) went away", name, qq.ifaces))
		case qq.state.Load() == queueStarting:
			st = control.QueueStarting
			r.Problems = append(r.Problems, fmt.Sprintf("queue %s: not running yet", name))
		case qq.state.Load() == queueRunning && draining:
			st = control.QueueStopping
		case qq.state.Load() == queueRunning:
			st = control.QueueRunning
		default:
			r.Problems = append(r.Problems, fmt.Sprintf("queue %s: its engine stopped", name))
		}
		r.Queues = append(r.Queues, control.QueueReadiness{Queue: name, State: st})
	}
	if len(d.queues) == 0 {
		r.Problems = append(r.Problems, "no receive queue is configured")
	}
	r.Ready = len(r.Problems) == 0
	return r
}
