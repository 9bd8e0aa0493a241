package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/warpflow/warpflow/internal/control"
)

// Client talks to one daemon. It is safe for concurrent use.
type Client struct {
	hc   *http.Client
	base string
	addr string
}

// ErrUnreachable is wrapped by errors for a daemon that cannot be reached
// (no socket, nothing listening, permission denied on the socket).
var ErrUnreachable = errors.New("warpflowd unreachable")

// New returns a client for the daemon at addr: a unix socket path, or
// tcp://HOST:PORT for a daemon configured to listen on TCP.
func New(addr string) *Client {
	c := &Client{addr: addr, base: "http://warpflowd"}
	tr := &http.Transport{MaxIdleConns: 2, IdleConnTimeout: 30 * time.Second}
	if rest, ok := strings.CutPrefix(addr, "tcp://"); ok {
		c.base = "http://" + rest
	} else {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", addr)
		}
	}
	c.hc = &http.Client{Transport: tr, Timeout: 60 * time.Second}
	return c
}

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w at %s: %v", ErrUnreachable, c.addr, unwrapURL(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read reply: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var er control.ErrorReply
		if json.Unmarshal(data, &er) == nil && er.Error != nil {
			er.Error.Status = resp.StatusCode
			return er.Error
		}
		return &control.Error{Code: control.ErrInternal.Code, Status: resp.StatusCode, Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(data)))}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode reply to %s %s: %w", method, path, err)
	}
	return nil
}

func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// Pipelines lists the stored pipelines.
func (c *Client) Pipelines(ctx context.Context) (control.PipelineList, error) {
	var v control.PipelineList
	return v, c.do(ctx, "GET", "/v1/pipelines", nil, &v)
}

// Load stores a pipeline (validated by the daemon) without running it.
func (c *Client) Load(ctx context.Context, r control.LoadRequest) (control.PipelineInfo, error) {
	var v control.PipelineInfo
	return v, c.do(ctx, "POST", "/v1/pipelines", r, &v)
}

// Show returns one stored pipeline's compiled graph.
func (c *Client) Show(ctx context.Context, name string) (control.PipelineDetail, error) {
	var v control.PipelineDetail
	return v, c.do(ctx, "GET", "/v1/pipelines/"+url.PathEscape(name), nil, &v)
}

// Remove deletes a stored pipeline (not the running one).
func (c *Client) Remove(ctx context.Context, name string) error {
	return c.do(ctx, "DELETE", "/v1/pipelines/"+url.PathEscape(name), nil, nil)
}

// Swap makes a stored pipeline the running one, live.
func (c *Client) Swap(ctx context.Context, name string) (control.SwapReply, error) {
	var v control.SwapReply
	return v, c.do(ctx, "POST", "/v1/pipelines/"+url.PathEscape(name)+"/swap", nil, &v)
}

// Stats reads every counter.
func (c *Client) Stats(ctx context.Context) (control.Stats, error) {
	var v control.Stats
	return v, c.do(ctx, "GET", "/v1/stats", nil, &v)
}

// Ports lists interfaces and queues.
func (c *Client) Ports(ctx context.Context) (control.PortsReply, error) {
	var v control.PortsReply
	return v, c.do(ctx, "GET", "/v1/ports", nil, &v)
}

// Capture returns the capture's state.
func (c *Client) Capture(ctx context.Context) (control.CaptureInfo, error) {
	var v control.CaptureInfo
	return v, c.do(ctx, "GET", "/v1/capture", nil, &v)
}

// CaptureStart starts a tap.
func (c *Client) CaptureStart(ctx context.Context, r control.CaptureRequest) (control.CaptureInfo, error) {
	var v control.CaptureInfo
	return v, c.do(ctx, "POST", "/v1/capture", r, &v)
}

// CaptureStop stops the tap and returns what it wrote.
func (c *Client) CaptureStop(ctx context.Context) (control.CaptureInfo, error) {
	var v control.CaptureInfo
	return v, c.do(ctx, "DELETE", "/v1/capture", nil, &v)
}
