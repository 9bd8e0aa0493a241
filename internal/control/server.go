package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Backend is what the server controls: the daemon. Every method is called
// from the server's goroutines; it must be safe for concurrent use. Peer
// names the client for the daemon's own records (loaded_by).
type Backend interface {
	Pipelines() PipelineList
	Load(peer string, r LoadRequest) (PipelineInfo, error)
	Show(name string) (PipelineDetail, error)
	Remove(name string) error
	Swap(name string) (SwapReply, error)
	Stats() Stats
	Ports() PortsReply
	Capture() CaptureInfo
	CaptureStart(r CaptureRequest) (CaptureInfo, error)
	CaptureStop() (CaptureInfo, error)
}

// Options configures a Server.
type Options struct {
	// Socket is the unix socket path (DefaultSocket when empty).
	Socket string
	// Group, when set, is the group (name or number) whose members may use
	// the socket: it is made 0660 and chowned to it. Otherwise 0600.
	Group string
	// TCP, when set, also serves on this address; a bare port (":9000" or
	// "9000") listens on loopback only. There is no authentication on TCP
	// beyond reachability: keep it on loopback.
	TCP string
	// ReadTimeout bounds reading a request, WriteTimeout writing a reply.
	ReadTimeout, WriteTimeout time.Duration
}

// DefaultOptions returns the socket path and timeouts warpflowd uses.
func DefaultOptions() Options {
	return Options{Socket: DefaultSocket, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}
}

// Server serves the control API.
type Server struct {
	opts    Options
	b       Backend
	log     *slog.Logger
	gid     int // the allowed group, -1: none
	srv     *http.Server
	ln      []net.Listener
	wg      sync.WaitGroup
	closeMu sync.Mutex
	closed  bool
}

type peerKey struct{}

// Peer is a connected client, from SO_PEERCRED (unix socket), or a TCP
// address.
type Peer struct {
	UID, GID, PID int
	Addr          string // TCP only
}

func (p Peer) String() string {
	if p.Addr != "" {
		return "tcp " + p.Addr
	}
	return fmt.Sprintf("uid %d pid %d", p.UID, p.PID)
}

// NewServer checks the socket path, creates the socket (and the TCP
// listener when configured) and returns a server ready to Serve. On
// failure nothing is left behind.
func NewServer(o Options, b Backend, log *slog.Logger) (_ *Server, err error) {
	if o.Socket == "" {
		o.Socket = DefaultSocket
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 10 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 30 * time.Second
	}
	s := &Server{opts: o, b: b, log: log, gid: -1}
	if o.Group != "" {
		gid, err := lookupGroup(o.Group)
		if err != nil {
			return nil, err
		}
		s.gid = gid
	}
	defer func() {
		if err != nil {
			for _, ln := range s.ln {
				ln.Close()
			}
		}
	}()
	ln, err := listenUnix(o.Socket, s.gid)
	if err != nil {
		return nil, err
	}
	s.ln = append(s.ln, ln)
	if o.TCP != "" {
		addr := o.TCP
		if !strings.Contains(addr, ":") {
			addr = ":" + addr
		}
		if strings.HasPrefix(addr, ":") {
			addr = "127.0.0.1" + addr
		}
		tl, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("control tcp listener %s: %w", addr, err)
		}
		s.ln = append(s.ln, tl)
	}
	mux := http.NewServeMux()
	s.routes(mux)
	s.srv = &http.Server{
		Handler:           s.guard(mux),
		ReadTimeout:       o.ReadTimeout,
		ReadHeaderTimeout: o.ReadTimeout,
		WriteTimeout:      o.WriteTimeout,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, peerKey{}, peerOf(c))
		},
	}
	return s, nil
}

// Addrs are the addresses the server listens on (the socket first).
func (s *Server) Addrs() []string {
	var out []string
	for _, ln := range s.ln {
		out = append(out, ln.Addr().String())
	}
	return out
}

// Serve serves until Close; it returns at once (the listeners are served
// on their own goroutines).
func (s *Server) Serve() {
	for _, ln := range s.ln {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("control server", "addr", ln.Addr().String(), "err", err)
			}
		}()
	}
}

// Close stops serving (in-flight requests get up to a second), removes
// the socket and returns once the serving goroutines are gone.
func (s *Server) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return net.ErrClosed
	}
	s.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	for _, ln := range s.ln {
		ln.Close() // Serve never ran: Shutdown does not close them
	}
	s.wg.Wait()
	os.Remove(s.opts.Socket)
	return err
}

// listenUnix checks path's directory, removes a stale socket of ours and
// listens with the mode the options ask for.
func listenUnix(path string, gid int) (net.Listener, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("control socket %s: want an absolute path", path)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("control socket directory %s: %w", dir, err)
	}
	if err := checkDir(dir); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		st := fi.Sys().(*syscall.Stat_t)
		switch {
		case fi.Mode()&os.ModeSocket == 0:
			return nil, fmt.Errorf("control socket %s: %w: a %s is in the way (not a socket); remove it or pick another path", path, ErrUnsafeSocket, fi.Mode().Type())
		case int(st.Uid) != os.Geteuid():
			return nil, fmt.Errorf("control socket %s: %w: owned by uid %d, not us (uid %d); another user's daemon?", path, ErrUnsafeSocket, st.Uid, os.Geteuid())
		}
		if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
			c.Close()
			return nil, fmt.Errorf("control socket %s: another warpflowd is serving on it", path)
		}
		os.Remove(path) // a stale socket of ours
	}
	// The socket is created with the umask's mode: make it private from
	// the start, then open it to the group.
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	if gid >= 0 {
		if err := os.Chown(path, os.Geteuid(), gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("control socket %s: group %d: %w", path, gid, err)
		}
		if err := os.Chmod(path, 0o660); err != nil {
			ln.Close()
			return nil, fmt.Errorf("control socket %s: %w", path, err)
		}
	}
	return ln, nil
}

// ErrUnsafeSocket is wrapped by the errors for a socket path others could
// hijack or spoof.
var ErrUnsafeSocket = errors.New("unsafe control socket path")

// checkDir refuses a directory another user could swap the socket in:
// one writable by others without the sticky bit, or owned by another
// user (root's directories are fine).
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("control socket directory %s: %w", dir, err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	mode := fi.Mode()
	if mode&0o002 != 0 && mode&os.ModeSticky == 0 {
		return fmt.Errorf("control socket directory %s: %w: writable by everyone (mode %v); use a directory like /run/warpflow", dir, ErrUnsafeSocket, mode.Perm())
	}
	if mode&0o002 != 0 {
		return fmt.Errorf("control socket directory %s: %w: world-writable (mode %v, sticky), so another user could take the name first; use a private directory like /run/warpflow", dir, ErrUnsafeSocket, mode.Perm())
	}
	if int(st.Uid) != os.Geteuid() && st.Uid != 0 {
		return fmt.Errorf("control socket directory %s: %w: owned by uid %d, not us (uid %d) or root", dir, ErrUnsafeSocket, st.Uid, os.Geteuid())
	}
	return nil
}

// peerOf reads a unix connection's peer credentials (SO_PEERCRED); for TCP
// it records the address.
func peerOf(c net.Conn) Peer {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{UID: -1, GID: -1, PID: -1, Addr: c.RemoteAddr().String()}
	}
	p := Peer{UID: -1, GID: -1, PID: -1}
	raw, err := uc.SyscallConn()
	if err != nil {
		return p
	}
	raw.Control(func(fd uintptr) {
		cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
		if err == nil {
			p.UID, p.GID, p.PID = int(cred.Uid), int(cred.Gid), int(cred.Pid)
		}
	})
	return p
}

// allowed says whether a unix peer may use the API: root, our own uid, or
// (with a configured group) a peer whose gid is the group. The socket's
// mode already keeps others out; this is the check behind it.
func (s *Server) allowed(p Peer) bool {
	if p.Addr != "" {
		return true // TCP: loopback by default, configured explicitly
	}
	return p.UID == 0 || p.UID == os.Geteuid() || (s.gid >= 0 && p.GID == s.gid)
}

// guard refuses peers that may not use the API and bounds request bodies.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := r.Context().Value(peerKey{}).(Peer)
		if !s.allowed(p) {
			s.log.Warn("control request refused", "peer_uid", p.UID, "peer_pid", p.PID, "method", r.Method, "path", r.URL.Path, "result", "forbidden")
			writeError(w, Errorf(ErrForbidden, "uid %d may not use this socket", p.UID))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBytes)
		next.ServeHTTP(w, r)
	})
}

func (s *Server) routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/pipelines", s.read(func(*http.Request) (any, error) { return s.b.Pipelines(), nil }))
	mux.HandleFunc("POST /v1/pipelines", s.action("pipeline load", func(r *http.Request, p Peer) (any, []any, error) {
		var req LoadRequest
		if err := decode(r, &req); err != nil {
			return nil, nil, err
		}
		if err := req.Validate(); err != nil {
			return nil, []any{"file", req.File}, err
		}
		info, err := s.b.Load(p.String(), req)
		return info, []any{"file", req.File, "name", info.Name}, err
	}))
	mux.HandleFunc("GET /v1/pipelines/{name}", s.read(func(r *http.Request) (any, error) {
		name := r.PathValue("name")
		if err := ValidName(name); err != nil {
			return nil, err
		}
		return s.b.Show(name)
	}))
	mux.HandleFunc("DELETE /v1/pipelines/{name}", s.action("pipeline rm", func(r *http.Request, _ Peer) (any, []any, error) {
		name := r.PathValue("name")
		if err := ValidName(name); err != nil {
			return nil, nil, err
		}
		return struct {
			Removed string `json:"removed"`
		}{name}, []any{"name", name}, s.b.Remove(name)
	}))
	mux.HandleFunc("POST /v1/pipelines/{name}/swap", s.action("pipeline swap", func(r *http.Request, _ Peer) (any, []any, error) {
		name := r.PathValue("name")
		if err := ValidName(name); err != nil {
			return nil, nil, err
		}
		if err := decodeEmpty(r); err != nil {
			return nil, nil, err
		}
		rep, err := s.b.Swap(name)
		return rep, []any{"name", name, "from", rep.From, "generation", rep.Generation, "pool_change", rep.PoolChange, "reset", rep.Reset}, err
	}))
	mux.HandleFunc("GET /v1/stats", s.read(func(*http.Request) (any, error) { return s.b.Stats(), nil }))
	mux.HandleFunc("GET /v1/ports", s.read(func(*http.Request) (any, error) { return s.b.Ports(), nil }))
	mux.HandleFunc("GET /v1/capture", s.read(func(*http.Request) (any, error) { return s.b.Capture(), nil }))
	mux.HandleFunc("POST /v1/capture", s.action("capture start", func(r *http.Request, _ Peer) (any, []any, error) {
		var req CaptureRequest
		if err := decode(r, &req); err != nil {
			return nil, nil, err
		}
		if err := req.Validate(); err != nil {
			return nil, nil, err
		}
		info, err := s.b.CaptureStart(req)
		return info, []any{"stage", req.Stage, "edge", req.Edge, "file", req.File, "count", req.Count}, err
	}))
	mux.HandleFunc("DELETE /v1/capture", s.action("capture stop", func(*http.Request, Peer) (any, []any, error) {
		info, err := s.b.CaptureStop()
		return info, []any{"written", info.Written, "missed", info.Missed}, err
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, Errorf(ErrNotFound, "no endpoint %s %s", r.Method, r.URL.Path))
	})
}

// read serves a read-only request (not logged: top polls every second).
func (s *Server) read(fn func(*http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := fn(r)
		if err != nil {
			writeError(w, AsError(err))
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

// action serves a request that changes something and logs it: who (the
// peer's uid and pid), what, and the result.
func (s *Server) action(what string, fn func(*http.Request, Peer) (any, []any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, _ := r.Context().Value(peerKey{}).(Peer)
		start := time.Now()
		v, attrs, err := fn(r, p)
		args := []any{"action", what, "peer_uid", p.UID, "peer_pid", p.PID}
		if p.Addr != "" {
			args = append(args, "peer_addr", p.Addr)
		}
		args = append(args, attrs...)
		args = append(args, "took", time.Since(start).String())
		if err != nil {
			e := AsError(err)
			args = append(args, "result", e.Code, "err", e.Message)
			if len(e.Problems) > 0 {
				args = append(args, "problems", e.Problems)
			}
			s.log.Warn("control action failed", args...)
			writeError(w, e)
			return
		}
		s.log.Info("control action", append(args, "result", "ok")...)
		writeJSON(w, http.StatusOK, v)
	}
}

// decode reads a JSON body strictly: within the size limit, no unknown
// fields, one value and nothing after it.
func decode(r *http.Request, v any) error {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return Errorf(ErrTooLarge, "request body over %d bytes", mbe.Limit)
		}
		return Errorf(ErrBadRequest, "reading the request: %v", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return Errorf(ErrBadRequest, "empty request body: want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return Errorf(ErrBadRequest, "malformed request: %v", err)
	}
	if dec.More() {
		return Errorf(ErrBadRequest, "malformed request: data after the JSON object")
	}
	return nil
}

// decodeEmpty accepts an empty body or an empty JSON object.
func decodeEmpty(r *http.Request) error {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return Errorf(ErrBadRequest, "reading the request: %v", err)
	}
	if t := bytes.TrimSpace(data); len(t) != 0 && !bytes.Equal(t, []byte("{}")) {
		return Errorf(ErrBadRequest, "this request takes no body")
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, e *Error) {
	writeJSON(w, status(e.Code), ErrorReply{Error: e})
}
