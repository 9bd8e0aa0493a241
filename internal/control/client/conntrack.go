package client

import (
	"context"
	"net/http"

	"github.com/warpflow/warpflow/internal/control"
)

// Conntrack lists (q.Limit flows at most; 0 counts only) or, with
// q.Flush, flushes the flows of the running pipeline's conntrack stage
// that q's filters match.
func (c *Client) Conntrack(ctx context.Context, q control.ConntrackQuery) (control.ConntrackReply, error) {
	var out control.ConntrackReply
	method := http.MethodGet
	if q.Flush {
		method = http.MethodDelete
	}
	path := "/v1/conntrack"
	if v := q.Values().Encode(); v != "" {
		path += "?" + v
	}
	err := c.do(ctx, method, path, nil, &out)
	return out, err
}
