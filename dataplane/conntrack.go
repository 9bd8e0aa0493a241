package dataplane

import (
	"context"
	"errors"
	"fmt"
	"sync"

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
	sts := make([]pipelines.FlowPoster, len(p.runners))
	for i, r := range p.runners {
		st, ok := r.Stage(name).(pipelines.FlowPoster)
		if !ok {
			return res, fmt.Errorf("stage %q: %w", name, ErrNoConntrack)
		}
		sts[i] = st
	}
	// A count or a flush (nothing listed) goes to every running worker
	// at once: each scans its own table, and the whole takes as long as
	// the largest, not the sum. A listing goes worker after worker, each
	// asked for what the limit leaves (at most Limit flows held), and so
	// does any query of quiescent runners, served here.
	if running && q.Limit == 0 && len(sts) > 1 {
		parts := make([]FlowResult, len(sts))
		errs := make([]error, len(sts))
		var wg sync.WaitGroup
		for i, st := range sts {
			wg.Go(func() { errs[i] = flowsOf(ctx, st, q, name, true, &parts[i]) })
		}
		wg.Wait()
		var first error
		for i := range parts {
			res.Matched += parts[i].Matched
			res.Entries += parts[i].Entries
			res.Capacity += parts[i].Capacity
			res.Bytes += parts[i].Bytes
			if first == nil {
				first = errs[i]
			}
		}
		if first != nil {
			return res, first
		}
	} else {
		for _, st := range sts {
			if err := flowsOf(ctx, st, q, name, running, &res); err != nil {
				return res, err
			}
		}
	}
	res.Truncated = res.Matched > len(res.Flows) && !q.Flush && q.Limit > 0
	return res, nil
}

// flowsOf runs q over one worker's table (stage st), a chunk at a time,
// adding to res: its flows, up to what q.Limit leaves of res's, and its
// figures. running says a worker serves the requests; else they are
// served here.
func flowsOf(ctx context.Context, st pipelines.FlowPoster, q FlowQuery, name string, running bool, res *FlowResult) error {
	sv, _ := st.(pipelines.Servicer)
	for from := 0; from >= 0; {
		req := &pipelines.FlowRequest{Flush: q.Flush, Filter: q.Filter, From: from, Limit: max(q.Limit-len(res.Flows), 0)}
		if err := st.Post(req); err != nil {
			return err
		}
		if !running {
			sv.Serve() // quiescent: no worker runs
		}
		select {
		case <-req.Done:
		case <-ctx.Done():
			if st.Cancel(req) {
				return fmt.Errorf("conntrack %s: workers busy: %w", name, ctx.Err())
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
	return nil
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
