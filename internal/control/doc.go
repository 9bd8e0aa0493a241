// Package control is warpflowd's control API: the server the daemon runs
// on a unix socket, the request and reply types, the typed errors, and
// the Prometheus exposition of the same counters. The client that warpctl
// uses is in control/client.
//
// # Why HTTP/JSON and not gRPC
//
// The API is HTTP/1.1 with JSON bodies over a unix socket. gRPC would need
// protoc and its Go plugins to regenerate code (neither is installed
// here, and a build should not need them), brings HTTP/2 and a large
// dependency tree into a daemon whose job is the data path, and makes the
// socket opaque to an operator: with HTTP/JSON, `curl --unix-socket
// /run/warpflow/warpflowd.sock http://warpflowd/v1/stats` works, the error
// bodies are readable, and the standard library serves and parses it.
// The request rate is a few per second (a `top` refresh, a swap), so
// JSON's cost is irrelevant; the data path never sees any of it.
//
// # Endpoints
//
//	GET    /v1/pipelines              PipelineList
//	POST   /v1/pipelines              LoadRequest -> PipelineInfo
//	GET    /v1/pipelines/{name}       PipelineDetail (graph, source, DOT, the XDP/workers split)
//	DELETE /v1/pipelines/{name}       refused for the running one
//	POST   /v1/pipelines/{name}/swap  SwapReply
//	GET    /v1/stats                  Stats
//	GET    /v1/ports                  PortsReply
//	GET    /v1/capture                CaptureInfo
//	POST   /v1/capture                CaptureRequest -> CaptureInfo
//	DELETE /v1/capture                CaptureInfo (the capture stopped)
//
// Every error is a JSON body {"error": {"code", "message", "problems"}}
// with an HTTP status that fits; the client turns it back into an *Error,
// which errors.Is matches against the sentinel codes (ErrNotFound, ...).
//
// # Safety
//
// The trust model is internal/trust's: every name a client gives lands in
// a room. The socket is created mode 0600 (or 0660 root:GROUP with a
// configured group, in a directory the server makes root:GROUP 0750 and
// checks the group can reach), and the server refuses to start unless
// every component of the socket's path, from / down, is a real directory
// (no symlink), owned by root or the daemon's user, and writable by
// nobody else unless it is a sticky directory owned by root or us; the
// socket's own directory may not be writable by others at all. The
// client (control/client) checks the same chain before it connects, and
// after connecting that the serving process is root, the client's user
// or the user a root-only directory was handed to (a DynamicUser's
// RuntimeDirectory), so another user cannot repoint it to their own.
//
// Each connection's peer is read with SO_PEERCRED and SO_PEERGROUPS (the
// groups the kernel recorded at connect time, which a reused pid cannot
// change); only root, the daemon's own uid and, when configured, members
// of the socket's group by their primary or any supplementary group are
// served, and every control action is logged with the peer's uid and
// pid, what was asked and the result.
//
// TCP is off unless configured, and then listens on loopback unless an
// address is given explicitly. It has no peer credential, so every
// request whose method is not GET or HEAD (load, swap, rm, capture start
// and stop, and any verb added later) needs "Authorization: Bearer
// TOKEN" with the token in the daemon's token file (made 0600 at the
// first start, compared in constant time); reads need it too unless they
// come from loopback: they expose counters and pipeline definitions, the
// same as /metrics on loopback, and change nothing; the conntrack listing
// shows flows' addresses and needs it from loopback too. A wrong token is
// refused even for a read (401).
//
// Request bodies are capped per endpoint (a load's source at
// MaxRequestBytes, everything else at MaxSmallRequest) and answered 413
// over the cap, whether the length was announced or the body chunked;
// they are decoded strictly: the keys are checked case-sensitively
// before encoding/json (which would match "SOURCE" to source) sees them,
// a key given twice, unknown fields, trailing data and wrong types are
// errors. Errors and log lines echo at most a short prefix of what the
// client sent (Clip), and a reply's problem list is bounded. A slow or
// vanished client is cut off by the server's read and write timeouts,
// and a request that disconnects mid-body leaves nothing behind (nothing
// is applied before the body is whole and valid). A capture request
// names a file, never a path: the daemon makes it in its capture_dir
// (trust.Room).
package control
