package dataplane

import "github.com/warpflow/warpflow/rings"

// Port is a source and/or sink of packets, driven in batches by the engine's
// I/O loop (one goroutine; ports need not be safe for concurrent use).
//
// Frame ownership: Receive takes frames (from the arena the port was built
// with, or from frames the port keeps, such as a preloaded capture or a fill
// ring) and hands them to the engine inside b. Every frame a port hands out
// comes back to that same port through Recycle once the engine is done with
// it: at once when it was dropped, passed, refused by an output, or
// transmitted on a port that only borrows frames; after its transmission
// completed when it was accepted by a Completer.
//
// Transmit either borrows or takes the frames it accepts:
//   - A plain port (pcap writer, null port) only borrows them: it is done
//     with the bytes when Transmit returns, and the engine recycles the
//     frames right after.
//   - A Completer (AF_XDP TX) takes them: each frame it accepted is its own
//     (or the kernel's) until Complete hands it back; the engine must not
//     recycle it earlier (that is the duplicated-frame bug: a frame on the
//     TX ring refilled and received again).
//
// Frames it refused (the suffix past n) stay with the engine either way.
type Port interface {
	// Name is the port's name in pipelines (tx: port) and reports.
	Name() string
	// Receive appends up to b.Cap()-b.Len() packets to b: descriptors, and
	// Meta with Seq and InPort set and everything else zero. It returns how
	// many it appended. A finite source (a capture) returns io.EOF once it
	// has nothing more to give (with n == 0). A live port never returns
	// io.EOF; with nothing to give right now it returns 0, nil (the engine
	// runs until its context is done). Ports that only transmit return
	// ErrNotReceiver. Appending with b.Append or b.AppendRun does all of
	// that; in worker mode the engine defers the metadata to the worker
	// (rings.Batch.DeferMeta), so a Receive that reads or writes b.Meta
	// itself calls b.SettleMeta first.
	Receive(b *rings.Batch) (n int, err error)
	// Transmit sends the packets named by descs, whose bytes lie in arena a.
	// It returns how many it accepted (a prefix of descs); the rest were
	// refused (a full ring), and the engine counts them as dropped with
	// reason "tx_full" ("tx_error" when err != nil) and recycles them.
	// Ports that only receive return ErrNotTransmitter.
	Transmit(a *rings.Arena, descs []rings.Desc) (n int, err error)
	// Recycle takes back frames this port handed out in Receive. It must
	// not keep the descs slice (the engine reuses it), only the frames.
	Recycle(descs []rings.Desc)
	// Close releases the port. Calls after Close return net.ErrClosed.
	Close() error
}

// Completer is an output port that owns the frames it accepted in Transmit
// until their transmission completes (AF_XDP: until the kernel puts them on
// the completion ring). The engine polls Complete every turn of its loop
// and recycles what comes back to the input port the frames came from; at
// the end of a run it waits up to Options.DrainTimeout for the rest and
// counts what never came back as lost (Stats.FramesLost,
// FrameAccount.Lost, ErrFramesLost), never silently.
//
// Both methods are called by the engine's I/O loop only. A Completer may
// not be a sample sink: a sampled frame also goes on to its verdict, so a
// sink that kept it would give it two owners.
type Completer interface {
	Port
	// Complete appends to dst, up to cap(dst), the descriptors of frames
	// whose transmission completed since the last call (each frame it
	// accepted exactly once, in any order) and returns dst. Those frames
	// are the engine's again.
	Complete(dst []rings.Desc) []rings.Desc
	// Outstanding is how many accepted frames the port still holds (not yet
	// returned by Complete). The engine stops waiting for a port that
	// reports zero.
	Outstanding() int
}
