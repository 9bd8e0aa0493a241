package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/trust"
)

// Client talks to one daemon. It is safe for concurrent use.
type Client struct {
	hc    *http.Client
	base  string
	addr  string
	tcp   bool
	token string
	// tokenFile is read once, at the first TCP request (tokenOnce).
	tokenFile     string
	tokenOptional bool
	tokenOnce     sync.Once
	tokenErr      error
}

// ErrUnreachable is wrapped by errors for a daemon that cannot be reached
// (no socket, nothing listening, permission denied on the socket).
var ErrUnreachable = errors.New("warpflowd unreachable")

// ErrUnsafeSocket is wrapped by the errors for a socket the client will
// not trust (control.ErrUnsafeSocket): a link, a directory or socket
// another user could replace, or a server process that is not root, us
// or the socket directory's owner.
var ErrUnsafeSocket = control.ErrUnsafeSocket

// Option configures a Client.
type Option func(*Client)

// WithToken sends tok as the bearer token (TCP only: a unix socket's
// peer is known by its credentials, and the token never travels there).
func WithToken(tok string) Option { return func(c *Client) { c.token = tok } }

// WithTokenFile reads the bearer token from path (ReadTokenFile) at the
// first request over TCP; a file that cannot be read fails every request
// with an error wrapping ErrToken. With optional, a file that does not
// exist or that this user may not read means no token (the daemon then
// says what it needs).
func WithTokenFile(path string, optional bool) Option {
	return func(c *Client) { c.tokenFile, c.tokenOptional = path, optional }
}

// ErrToken is wrapped by the errors for a token file that cannot be used.
var ErrToken = errors.New("control token")

// bearer is the token to send, read from the token file once.
func (c *Client) bearer() (string, error) {
	c.tokenOnce.Do(func() {
		if c.token != "" || c.tokenFile == "" {
			return
		}
		tok, err := ReadTokenFile(c.tokenFile)
		switch {
		case err == nil:
			c.token = tok
		case c.tokenOptional && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission)):
		default:
			c.tokenErr = fmt.Errorf("%w: %w", ErrToken, err)
		}
	})
	return c.token, c.tokenErr
}

// New returns a client for the daemon at addr: a unix socket path, or
// tcp://HOST:PORT for a daemon configured to listen on TCP. Before each
// connection to a socket it checks the socket's whole path as the daemon
// does (trust.Chain: no links, every directory owned by root, us or the
// daemon's own user and written by nobody else) and, once connected,
// that the serving process is one of those users.
func New(addr string, opts ...Option) *Client {
	c := &Client{addr: addr, base: "http://warpflowd"}
	for _, o := range opts {
		o(c)
	}
	tr := &http.Transport{MaxIdleConns: 2, IdleConnTimeout: 30 * time.Second}
	if rest, ok := strings.CutPrefix(addr, "tcp://"); ok {
		c.base, c.tcp = "http://"+rest, true
	} else {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return dialChecked(ctx, addr) }
	}
	c.hc = &http.Client{Transport: tr, Timeout: 60 * time.Second}
	return c
}

// dialChecked connects to the socket at path after checking its chain,
// and checks the peer it reached.
func dialChecked(ctx context.Context, path string) (net.Conn, error) {
	ck, err := trust.Chain{Owners: []int{os.Geteuid()}, Delegate: true}.Check(path, trust.Socket)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		conn.Close()
		return nil, fmt.Errorf("%s: not a unix connection", path)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, err
	}
	var cred trust.Cred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = trust.PeerCred(int(fd)) }); err != nil {
		cerr = err
	}
	if cerr != nil {
		conn.Close()
		return nil, fmt.Errorf("%s: peer credentials: %w", path, cerr)
	}
	if !slices.Contains(ck.Trusted, cred.UID) {
		conn.Close()
		return nil, fmt.Errorf("%w: %s is served by uid %d (pid %d), not root, us or the socket directory's owner", ErrUnsafeSocket, path, cred.UID, cred.PID)
	}
	return conn, nil
}

// ReadTokenFile reads a bearer token from path: a regular file (not a
// link) that only its owner can read, holding one token.
func ReadTokenFile(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", fmt.Errorf("control token file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("control token file: %w", err)
	}
	switch {
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("control token file %s: a %v, not a regular file", path, fi.Mode().Type())
	case fi.Mode().Perm()&0o077 != 0:
		return "", fmt.Errorf("control token file %s: mode %04o lets others read it: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	data, err := io.ReadAll(io.LimitReader(f, 4<<10+1))
	if err != nil {
		return "", fmt.Errorf("control token file %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(data))
	if err := control.ValidToken(tok); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return tok, nil
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
	if c.tcp {
		tok, err := c.bearer()
		if err != nil {
			return err
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if errors.Is(err, ErrUnsafeSocket) {
			return fmt.Errorf("refusing the control socket %s: %w", c.addr, unwrapURL(err))
		}
		return fmt.Errorf("%w at %s: %w", ErrUnreachable, c.addr, unwrapURL(err))
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
