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
// The socket is created mode 0600 (or 0660 with a configured group) in a
// directory that must not be writable by others, and the server refuses
// to start when the path is unsafe (a world-writable directory without
// the sticky bit, a socket or directory owned by another user, a
// non-socket file in the way). Each connection's peer is read with
// SO_PEERCRED; only root, the daemon's own uid and, when configured,
// members of the socket's group (by the peer's gid) are served, and every
// control action is logged with the peer's uid and pid, what was asked
// and the result. Request bodies are limited (MaxRequestBytes) and
// decoded strictly (unknown fields, trailing data and wrong types are
// errors); a slow or vanished client is cut off by the server's read and
// write timeouts, and a request that disconnects mid-body leaves nothing
// behind (nothing is applied before the body is whole and valid). TCP is
// off unless configured, and then listens on loopback unless an address
// is given explicitly.
package control
