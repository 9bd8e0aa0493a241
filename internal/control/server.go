package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/warpflow/warpflow/internal/trust"
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
	// "9000") listens on loopback only. TCP has no peer credential: every
	// request that changes something needs the bearer token in TokenFile,
	// and so does a read from anywhere but loopback.
	TCP string
	// TokenFile is the TCP listener's bearer token (TokenFileFor(Socket)
	// when empty), made at the first start with TCP when it does not
	// exist (mode 0600). Unused without TCP.
	TokenFile string
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
	gid     int    // the allowed group, -1: none
	token   string // the TCP bearer token ("" without TCP)
	srv     *http.Server
	ln      []net.Listener
	wg      sync.WaitGroup
	closeMu sync.Mutex
	closed  bool
	// loading admits one pipeline load at a time, from reading its body
	// to the backend's answer (see MaxRequestBytes).
	loading chan struct{}
	// listing admits maxListings conntrack listings at a time, from the
	// query to the last byte of the reply (conntrack.go).
	listing chan struct{}
}

type peerKey struct{}

// Peer is a connected client, from SO_PEERCRED and SO_PEERGROUPS (unix
// socket), or a TCP address.
type Peer struct {
	UID, GID, PID int
	// Groups are the peer's supplementary groups at connect time.
	Groups []int
	Addr   string // TCP only
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
	s := &Server{opts: o, b: b, log: log, gid: -1, loading: make(chan struct{}, 1), listing: make(chan struct{}, maxListings)}
	if o.Group != "" {
		gid, err := LookupGroup(o.Group)
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
	if err := prepareSocketDir(o.Socket, s.gid, log); err != nil {
		return nil, err
	}
	ln, err := listenUnix(o.Socket, s.gid)
	if err != nil {
		return nil, err
	}
	s.ln = append(s.ln, ln)
	if o.TCP != "" {
		if o.TokenFile == "" {
			o.TokenFile = TokenFileFor(o.Socket)
			s.opts.TokenFile = o.TokenFile
		}
		var made bool
		if s.token, made, err = loadToken(o.TokenFile); err != nil {
			return nil, err
		}
		if made {
			log.Info("control token made", "file", o.TokenFile, "mode", "0600")
		}
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

// TokenFile is the TCP bearer token's file ("" without TCP).
func (s *Server) TokenFile() string {
	if s.token == "" {
		return ""
	}
	return s.opts.TokenFile
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

// socketDirMode is the socket directory's mode when the daemon makes it:
// its group (the socket group, when configured) may reach the socket.
const socketDirMode = 0o750

// prepareSocketDir makes the socket's directory where it is missing and
// checks its whole chain (trust.Chain: no links, owned by root or us,
// written by nobody else). With a socket group it gives a directory of
// ours that group (and search permission), and refuses to start when the
// group still could not reach the socket, naming the directory in the
// way.
func prepareSocketDir(path string, gid int, log *slog.Logger) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fmt.Errorf("control socket %s: want a clean absolute path", Clip(path))
	}
	dir := filepath.Dir(path)
	ck, err := trust.Chain{Owners: []int{os.Geteuid()}}.MkdirChain(dir, socketDirMode, gid)
	if err != nil {
		return fmt.Errorf("control socket directory: %w", err)
	}
	if gid < 0 {
		return nil
	}
	if int(ck.Stat.Uid) == os.Geteuid() && (int(ck.Stat.Gid) != gid || ck.Stat.Mode&0o010 == 0) {
		// A directory of ours made before (another run, systemd's
		// RuntimeDirectory): open it to the group, nothing more.
		if err := setGroup(dir, gid); err != nil {
			return fmt.Errorf("control socket directory %s: %w", dir, err)
		}
		mode := ck.Stat.Mode&0o7777 | 0o050
		if err := syscall.Chmod(dir, mode); err != nil {
			return fmt.Errorf("control socket directory %s: %w", dir, err)
		}
		log.Info("control socket directory opened to its group", "dir", dir, "gid", gid, "mode", fmt.Sprintf("%04o", mode))
	}
	if err := trust.Reachable(dir, gid); err != nil {
		return fmt.Errorf("control socket group: %w", err)
	}
	return nil
}

// setGroup gives path (the socket or its directory, ours) group gid. A
// path that has it already is left alone: a daemon whose own group is
// the socket's (the systemd unit's Group=) needs no CAP_CHOWN, and one
// in neither that group nor holding CAP_CHOWN is told so.
func setGroup(path string, gid int) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err == nil && int(st.Gid) == gid {
		return nil
	}
	if err := os.Lchown(path, -1, gid); err != nil {
		if errors.Is(err, syscall.EPERM) {
			return fmt.Errorf("group %d: %w: warpflowd (uid %d, gid %d) is not in that group and has no CAP_CHOWN; run it with that group (the systemd unit's Group= or SupplementaryGroups=)", gid, err, os.Geteuid(), os.Getegid())
		}
		return fmt.Errorf("group %d: %w", gid, err)
	}
	return nil
}

// listenUnix removes a stale socket of ours and listens with the mode the
// options ask for (the directory was checked by prepareSocketDir).
func listenUnix(path string, gid int) (net.Listener, error) {
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
		if err := setGroup(path, gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("control socket %s: %w", path, err)
		}
		if err := os.Chmod(path, 0o660); err != nil {
			ln.Close()
			return nil, fmt.Errorf("control socket %s: %w", path, err)
		}
	}
	return ln, nil
}

// ErrUnsafeSocket is wrapped by the errors for a socket path others could
// hijack or spoof: the trust package's sentinel, so errors.Is matches the
// server's refusals and the client's alike.
var ErrUnsafeSocket = trust.ErrUnsafe

// peerOf reads a unix connection's peer credentials (SO_PEERCRED and all
// its groups: trust.PeerCred); for TCP it records the address. A peer
// whose credentials cannot be read is uid -1: refused.
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
		if cred, err := trust.PeerCred(int(fd)); err == nil {
			p.UID, p.GID, p.PID, p.Groups = cred.UID, cred.GID, cred.PID, cred.Groups
		}
	})
	return p
}

// allowed says whether a unix peer may use the API: root, our own uid, or
// (with a configured group) a member of the group, by its primary or any
// supplementary group. The socket's mode already keeps others out; this
// is the check behind it.
func (s *Server) allowed(p Peer) bool {
	if p.UID < 0 {
		return false
	}
	if p.UID == 0 || p.UID == os.Geteuid() {
		return true
	}
	return s.gid >= 0 && (p.GID == s.gid || slices.Contains(p.Groups, s.gid))
}

// guard refuses peers that may not use the API (TCP: tcpAllowed) and
// bounds request bodies: an announced length over the largest limit is
// 413 before anything is read, and no handler can read past it.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := r.Context().Value(peerKey{}).(Peer)
		if p.Addr != "" {
			if err := s.tcpAllowed(r, p); err != nil {
				s.log.Warn("control request refused", "peer_addr", p.Addr, "method", r.Method, "path", Clip(r.URL.Path), "result", "unauthorized")
				w.Header().Set("WWW-Authenticate", `Bearer realm="warpflowd"`)
				writeError(w, AsError(err))
				return
			}
		} else if !s.allowed(p) {
			s.log.Warn("control request refused", "peer_uid", p.UID, "peer_gid", p.GID, "peer_pid", p.PID, "method", r.Method, "path", Clip(r.URL.Path), "result", "forbidden")
			msg := fmt.Sprintf("uid %d may not use this socket", p.UID)
			if s.gid >= 0 {
				msg += fmt.Sprintf(" (not root, not uid %d, not in group %d)", os.Geteuid(), s.gid)
			}
			writeError(w, Errorf(ErrForbidden, "%s", msg))
			return
		}
		if r.ContentLength > MaxRequestBytes {
			writeError(w, Errorf(ErrTooLarge, "request body of %d bytes is over the limit of %d bytes", r.ContentLength, MaxRequestBytes))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBytes)
		next.ServeHTTP(w, r)
	})
}

func (s *Server) routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/pipelines", s.read(func(*http.Request) (any, error) { return s.b.Pipelines(), nil }))
	mux.HandleFunc("POST /v1/pipelines", s.action("pipeline load", func(r *http.Request, p Peer) (any, []any, error) {
		select {
		case s.loading <- struct{}{}:
			defer func() { <-s.loading }()
		case <-r.Context().Done():
			return nil, nil, Errorf(ErrBadRequest, "client went away while another load was in progress")
		}
		var req LoadRequest
		if err := decode(r, &req, MaxRequestBytes); err != nil {
			return nil, nil, err
		}
		if err := req.Validate(); err != nil {
			return nil, []any{"file", Clip(req.File)}, err
		}
		info, err := s.b.Load(p.String(), req)
		return info, []any{"file", Clip(req.File), "name", info.Name}, err
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
		if err := decodeEmpty(r); err != nil {
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
		if err := decode(r, &req, MaxSmallRequest); err != nil {
			return nil, nil, err
		}
		if err := req.Validate(); err != nil {
			return nil, nil, err
		}
		info, err := s.b.CaptureStart(req)
		return info, []any{"stage", Clip(req.Stage), "edge", Clip(req.Edge), "file", info.File, "count", req.Count}, err
	}))
	mux.HandleFunc("DELETE /v1/capture", s.action("capture stop", func(r *http.Request, _ Peer) (any, []any, error) {
		if err := decodeEmpty(r); err != nil {
			return nil, nil, err
		}
		info, err := s.b.CaptureStop()
		return info, []any{"written", info.Written, "missed", info.Missed}, err
	}))
	s.conntrackRoutes(mux) // conntrack.go
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, Errorf(ErrNotFound, "no endpoint %s %s", Clip(r.Method), Clip(r.URL.Path)))
	})
}

// read serves a read-only request (not logged: top polls every second).
// It takes no body.
func (s *Server) read(fn func(*http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := decodeEmpty(r); err != nil {
			writeError(w, AsError(err))
			return
		}
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
			l := bounded(e, maxLogMessage, maxLogProblems, maxLogProblem)
			args = append(args, "result", e.Code, "err", l.Message)
			if len(e.Problems) > 0 {
				args = append(args, "problems", l.Problems, "problems_total", len(e.Problems))
			}
			s.log.Warn("control action failed", args...)
			writeError(w, e)
			return
		}
		s.log.Info("control action", append(args, "result", "ok")...)
		writeJSON(w, http.StatusOK, v)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// writeError replies with e, its message and problems bounded (they may
// quote a client's input).
func writeError(w http.ResponseWriter, e *Error) {
	writeJSON(w, status(e.Code), ErrorReply{Error: bounded(e, maxReplyMessage, maxReplyProblems, maxReplyProblem)})
}
