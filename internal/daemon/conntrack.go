package daemon

import (
	"context"
	"errors"
	"net/netip"

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

func (d *Daemon) conntrack(ctx context.Context, q control.ConntrackQuery) (control.ConntrackReply, error) {
	rep := control.ConntrackReply{Pipeline: d.running, Queues: len(d.queues), Flushed: q.Flush, Flows: []control.ConntrackFlow{}}
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
	for _, qq := range d.queues {
		res, err := qq.eng.Flows(ctx, dataplane.FlowQuery{Stage: q.Stage, Filter: f, Flush: q.Flush, Limit: max(q.Limit-len(rep.Flows), 0)})
		if err != nil {
			if errors.Is(err, dataplane.ErrNoConntrack) {
				return rep, control.Errorf(control.ErrNotFound, "%v", err)
			}
			return rep, control.Errorf(control.ErrInternal, "queue %s: %v", qq.q.RX().Name(), err)
		}
		rep.Stage = res.Stage
		rep.Entries += res.Entries
		rep.Capacity += res.Capacity
		rep.TableBytes += res.Bytes
		rep.Matched += res.Matched
		rep.Truncated = rep.Truncated || res.Truncated
		for _, fl := range res.Flows {
			rep.Flows = append(rep.Flows, control.ConntrackFlow{
				Queue: qq.q.RX().Name(), Proto: fl.Proto, ProtoName: control.ProtoName(fl.Proto), Zone: fl.Zone,
				Src: fl.Src.String(), Dst: fl.Dst.String(), SrcPort: fl.SrcPort, DstPort: fl.DstPort,
				ReplySrc: fl.ReplySrc.String(), ReplyDst: fl.ReplyDst.String(), ReplySrcPort: fl.ReplySrcPort, ReplyDstPort: fl.ReplyDstPort,
				State: fl.State, Replied: fl.Replied, Assured: fl.Assured, SNAT: fl.SNAT, DNAT: fl.DNAT, ExpiresMs: fl.ExpiresMS,
			})
		}
	}
	if rep.Capacity > 0 {
		rep.BytesPerFlow = float64(rep.TableBytes) / float64(rep.Capacity)
	}
	if !q.Flush && q.Limit > 0 && rep.Matched > len(rep.Flows) {
		rep.Truncated = true
	}
	return rep, nil
}
