package xdp

import (
	"errors"
	"fmt"
)

// ErrNotSupported is wrapped by every error that means "this kernel,
// driver or interface cannot do that": no AF_XDP, no XSKMAP, no zero-copy
// on this driver, no busy-poll socket option. Callers test it with
// errors.Is and fall back or skip.
var ErrNotSupported = errors.New("not supported")

// ErrBusy is wrapped when the kernel refuses because something else holds
// the resource: a queue already bound by another AF_XDP socket, an
// interface that already has an XDP program, a UMEM with open sockets.
var ErrBusy = errors.New("busy")

// ErrLinkDown is wrapped when the kernel refuses a socket's send or
// wake-up because its interface is down (IFF_UP clear: `ip link set IF
// down`). That is a state, which ends when the link comes back up, not a
// failure of the socket: what is on the TX ring stays there and goes with
// the first send after it. A deleted interface shows differently: the
// socket's Err is ENETDOWN and its sends fail with ENXIO.
var ErrLinkDown = errors.New("link down")

// linkDown wraps err so that it matches both ErrLinkDown and the errno.
type linkDown struct{ err error }

func (e linkDown) Error() string   { return e.err.Error() }
func (e linkDown) Unwrap() []error { return []error{ErrLinkDown, e.err} }

// notSupported wraps err so that it matches both ErrNotSupported and the
// original errno; its text is err's, which already names what is missing.
type notSupported struct{ err error }

func (e notSupported) Error() string { return e.err.Error() }
func (e notSupported) Unwrap() []error {
	return []error{ErrNotSupported, e.err}
}

func wrapNotSupported(format string, args ...any) error {
	return notSupported{fmt.Errorf(format, args...)}
}

// busy wraps err so that it matches both ErrBusy and the original errno.
type busy struct{ err error }

func (e busy) Error() string   { return e.err.Error() }
func (e busy) Unwrap() []error { return []error{ErrBusy, e.err} }
