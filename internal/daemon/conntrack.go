package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/pipelines"
)

// Conntrack serves the conntrack endpoints: the query runs on every
// queue's engine (each has its own tables: a queue's flows are its own),
// and the answers are summed, flows tagged with their queue.
func (b backend) Conntrack(ctx context.Context, q control.ConntrackQuery) (control.ConntrackReply, error) {
	return b.d.conntrack(ctx, q)
}

// A query holds ctlMu throughout: the running pipeline cannot change
// under it (the reply's pipeline and stage are those of every queue's
// flows, and a flush never spans a swap), and queries run one at a time,
// as they must: each worker's stage takes one request at a time, and a
// second query was refused midway (ErrFlowBusy), after a flush had
// already emptied some queues. A query waits for a load or swap in
// progress; ctx still bounds the whole of it.
func (d *Daemon) conntrack(ctx context.Context, q control.ConntrackQuery) (control.ConntrackReply, error) {
	rep := control.ConntrackReply{Queues: len(d.queues), Flushed: q.Flush, Flows: []control.ConntrackFlow{}}
	f := pipelines.FlowFilter{Proto: q.Proto, Port: q.Port, SrcPort: q.SrcPort, DstPort: q.DstPort, State: q.State}
	for _, p := range []struct {
		s   string
		dst *netip.Prefix
	}{{q.Src, &f.Src}, {q.Dst, &f.Dst}, {q.Addr, &f.Addr}} {
		if p.s == "" {
			continue
		}
		pf, err := control.ParsePrefix(p.s)
		if err != nil {
			return rep, control.Errorf(control.ErrBadRequest, "conntrack: %q: want an address or prefix", control.Clip(p.s))
		}
		*p.dst = pf
	}
	d.ctlMu.Lock()
	defer d.ctlMu.Unlock()
	if err := ctx.Err(); err != nil || ctxPast(ctx) {
		// Waited past the deadline for a load or swap: nothing touched.
		// (ctxPast: the deadline's timer may not have fired yet on a
		// busy machine.)
		if err == nil {
			err = context.DeadlineExceeded
		}
		return rep, control.Errorf(control.ErrInternal, "conntrack: gave up waiting for a pipeline load or swap in progress: %v", err)
	}
	rep.Pipeline = d.running
	stage, err := ctStage(d.graph, q.Stage)
	if err != nil {
		return rep, err
	}
	// Each queue's engine answers for its own workers. A count or a flush
	// (no flows listed) asks every queue at once: the whole takes as long
	// as the slowest queue's scan, not the sum of all of them, so a large
	// table on many queues is through before the deadline. A listing asks
	// one queue after another, each for what the limit leaves, so that no
	// more than the limit is ever held.
	results := make([]dataplane.FlowResult, len(d.queues))
	errs := make([]error, len(d.queues))
	if q.Limit == 0 {
		var wg sync.WaitGroup
		for i, qq := range d.queues {
			wg.Go(func() {
				results[i], errs[i] = qq.eng.Flows(ctx, dataplane.FlowQuery{Stage: stage, Filter: f, Flush: q.Flush})
			})
		}
		wg.Wait()
	} else {
		listed := 0
		for i, qq := range d.queues {
			results[i], errs[i] = qq.eng.Flows(ctx, dataplane.FlowQuery{Stage: stage, Filter: f, Flush: q.Flush, Limit: max(q.Limit-listed, 0)})
			if errs[i] != nil {
				break
			}
			listed += len(results[i].Flows)
		}
	}
	var failed error
	for i, qq := range d.queues {
		res, err := results[i], errs[i]
		if err != nil {
			if errors.Is(err, dataplane.ErrNoConntrack) {
				return rep, control.Errorf(control.ErrNotFound, "%v", err)
			}
			if failed == nil {
				failed = fmt.Errorf("queue %s: %w", qq.ctName(), err)
			}
			rep.Matched += res.Matched // a flush's chunks done before it stopped
			if q.Limit > 0 {
				break // the queues after it were not asked
			}
			continue
		}
		rep.Stage = res.Stage
		rep.Entries += res.Entries
		rep.Capacity += res.Capacity
		rep.TableBytes += res.Bytes
		rep.Matched += res.Matched
		rep.Truncated = rep.Truncated || res.Truncated
		for _, fl := range res.Flows {
			rep.Flows = append(rep.Flows, control.ConntrackFlow{
				Queue: qq.ctName(), Proto: fl.Proto, ProtoName: control.ProtoName(fl.Proto), Zone: fl.Zone,
				Src: fl.Src.String(), Dst: fl.Dst.String(), SrcPort: fl.SrcPort, DstPort: fl.DstPort,
				ReplySrc: fl.ReplySrc.String(), ReplyDst: fl.ReplyDst.String(), ReplySrcPort: fl.ReplySrcPort, ReplyDstPort: fl.ReplyDstPort,
				State: fl.State, Replied: fl.Replied, Assured: fl.Assured, SNAT: fl.SNAT, DNAT: fl.DNAT, ExpiresMs: fl.ExpiresMS,
			})
		}
	}
	if failed != nil {
		if q.Flush {
			// Say what was done: the other queues, and this one's chunks
			// before it stopped, are flushed.
			return rep, control.Errorf(control.ErrInternal, "%v (flushed %d flows before it stopped; run the flush again for the rest)", failed, rep.Matched)
		}
		return rep, control.Errorf(control.ErrInternal, "%v", failed)
	}
	if rep.Capacity > 0 {
		rep.BytesPerFlow = float64(rep.TableBytes) / float64(rep.Capacity)
	}
	if !q.Flush && q.Limit > 0 && rep.Matched > len(rep.Flows) {
		rep.Truncated = true
	}
	return rep, nil
}

// ctName names queue qq in conntrack replies (its receive port; its index
// for an engine without one, as in tests).
func (qq *queue) ctName() string {
	if qq.q == nil {
		return fmt.Sprint(qq.idx)
	}
	return qq.q.RX().Name()
}

// ctStage resolves the query's conntrack stage in the running graph g:
// "" is the only one; two or more and none named is the client's
// mistake, named with the choices. A nil g leaves it to the engines.
func ctStage(g *pipelines.Graph, name string) (string, error) {
	if g == nil {
		return name, nil
	}
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
		return "", control.Errorf(control.ErrNotFound, "pipeline %q has no conntrack stage %q (it has %v)", g.Name(), control.Clip(name), found)
	case len(found) == 0:
		return "", control.Errorf(control.ErrNotFound, "pipeline %q has no conntrack stage", g.Name())
	case len(found) > 1:
		return "", control.Errorf(control.ErrBadRequest, "pipeline %q has %d conntrack stages (%v): name one with stage (warpctl --stage)", g.Name(), len(found), found)
	}
	return found[0], nil
}

// ctxPast reports whether ctx's deadline has passed.
func ctxPast(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}
