package dataplane

import "github.com/warpflow/warpflow/rings"

// Port is a source and/or sink of packets, driven in batches by the engine's
// I/O loop (one goroutine; ports need not be safe for concurrent use).
//
// Frame ownership: Receive takes frames (from the arena the port was built
// with, or from frames the port keeps, such as a preloaded capture) and hands
// them to the engine inside b. Every frame a port hands out comes back to
// that same port through Recycle once the engine is done with it (dropped,
// passed, or transmitted on any port). Transmit only borrows the frames: a
// port is done with the bytes when Transmit returns.
type Port interface {
	// Name is the port's name in pipelines (tx: port) and reports.
	Name() string
	// Receive appends up to b.Cap()-b.Len() packets to b: descriptors, and
	// Meta with Seq and InPort set and everything else zero. It returns how
	// many it appended. A finite source (a capture) returns io.EOF once it
	// has nothing more to give (with n == 0). A port with nothing to give
	// right now returns 0, nil. Ports that only transmit return
	// ErrNotReceiver.
	Receive(b *rings.Batch) (n int, err error)
	// Transmit sends the packets named by descs, whose bytes lie in arena a.
	// It returns how many it sent (a prefix of descs); the rest were refused
	// (a full ring), and the engine counts them as dropped with reason
	// "tx_full". Ports that only receive return ErrNotTransmitter.
	Transmit(a *rings.Arena, descs []rings.Desc) (n int, err error)
	// Recycle takes back frames this port handed out in Receive.
	Recycle(descs []rings.Desc)
	// Close releases the port. Calls after Close return net.ErrClosed.
	Close() error
}
