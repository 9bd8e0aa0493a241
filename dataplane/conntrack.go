package dataplane

import (
	"context"
	"errors"
	"fmt"

	"github.com/warpflow/warpflow/pipelines"
)

// The control plane's view of the conntrack tables: list, count and
// flush the flows of a conntrack stage, over every worker's table. The
// tables belong to the workers; a request goes to each worker's stage
// instance and the worker serves it between batches, a chunk of the
// table at a time (pipelines.FlowScanChunk entries), so a large table is
// listed or flushed without holding traffic up for long. An idle engine
// runs empty batches to take the requests to its workers. When the
// engine is not running (before Run, or after) the runners are
// quiescent and the requests are served on the caller's goroutine.

// FlowQuery is one list, count or flush.
type FlowQuery struct {
	Stage  string // the conntrack stage; "" for the pipeline's only one
	Filter pipelines.FlowFilter
	Flush  bool
	Limit  int // most flows to list (0: count only)
}

// FlowResult is a FlowQuery's answer, summed over the workers.
type FlowResult struct {
	Stage    string
	Flows    []pipelines.FlowInfo // at most Limit
	Matched  int                  // flows that matched (flushed, for a flush)
	Entries  int                  // flows in the tables
	Capacity int                  // flows the tables hold
	Bytes    int                  // the tables' memory
	Workers  int
	// Truncated says more flows matched than Limit.
	Truncated bool
}

// ErrNoConntrack is returned for a pipeline without the conntrack stage
// asked for.
var ErrNoConntrack = errors.New("no conntrack stage")

// Flows runs q over the newest plan's tables. ctx bounds the wait for
// busy workers; a request a worker has not taken by then is withdrawn
// and the error wraps ctx's.
func (e *Engine) Flows(ctx context.Context, q FlowQuery) (FlowResult, error) {
	c := &e.ctl
	c.mu.Lock()
	p, running := c.latest, c.running
	if running {
		// The workers serve it: no need to hold up swaps and stats
		// meanwhile. (If the engine stops first, the wait ends with ctx.)
		c.mu.Unlock()
	} else {
		defer c.mu.Unlock() // quiescent runners, served here: RunContext must not start
	}
	name, err := conntrackStage(p.graph, q.Stage)
	if err != nil {
		return FlowResult{}, err
	}
	res := FlowResult{Stage: name, Workers: len(p.runners)}
	for _, r := range p.runners {
		st, ok := r.Stage(name).(pipelines.FlowPoster)
		if !ok {
			return res, fmt.Errorf("stage %q: %w", name, ErrNoConntrack)
		}
		sv, _ := st.(pipelines.Servicer)
		for from := 0; from >= 0; {
			req := &pipelines.FlowRequest{Flush: q.Flush, Filter: q.Filter, From: from, Limit: max(q.Limit-len(res.Flows), 0)}
			if err := st.Post(req); err != nil {
				return res, err
			}
			if !running {
				sv.Serve() // quiescent: no worker runs
			}
			select {
			case <-req.Done:
			case <-ctx.Done():
				if st.Cancel(req) {
					return res, fmt.Errorf("conntrack %s: workers busy: %w", name, ctx.Err())
				}
				<-req.Done // taken: the worker finishes this chunk
			}
			res.Flows = append(res.Flows, req.Flows...)
			res.Matched += req.Matched
			if req.Next < 0 {
				res.Entries += req.Entries
				res.Capacity += req.Capacity
				res.Bytes += req.Bytes
			}
			from = req.Next
		}
	}
	res.Truncated = res.Matched > len(res.Flows) && !q.Flush && q.Limit > 0
	return res, nil
}

// conntrackStage resolves a conntrack stage name in g ("" when g has
// exactly one).
func conntrackStage(g *pipelines.Graph, name string) (string, error) {
	var found []string
	for _, s := range g.Stages() {
		if s.Kind == "conntrack" {
			if s.Name == name {
				return name, nil
			}
			found = append(found, s.Name)
		}
	}
	switch {
	case name != "":
		return "", fmt.Errorf("pipeline %q has no conntrack stage %q (it has %v): %w", g.Name(), name, found, ErrNoConntrack)
	case len(found) == 0:
		return "", fmt.Errorf("pipeline %q: %w", g.Name(), ErrNoConntrack)
	case len(found) > 1:
		return "", fmt.Errorf("pipeline %q has %d conntrack stages (%v): name one", g.Name(), len(found), found)
	}
	return found[0], nil
}
