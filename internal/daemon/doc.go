// Package daemon is warpflowd: it reads the daemon's config, loads the
// pipeline, attaches the XDP program to every receiving interface, opens
// one AF_XDP queue (dataplane/afxdp) per served receive queue with an
// engine of its own, and runs them until its context is cancelled
// (SIGINT/SIGTERM in cmd/warpflowd). It then drains every engine, closes
// the sockets, detaches the programs and returns.
//
// It watches the interfaces it uses (a netlink link subscription, and each
// running queue's sockets' error, since poll never reports a deleted
// interface): a lost (deleted) interface is logged with its name, counted,
// and either stops the daemon (on_link_loss: exit, exit 1) or only the
// queues that used it (continue; when that leaves no queue, the daemon
// exits 1 too: nothing left to serve). A link that goes down and comes back
// is logged once each way and is not a loss: sends refused meanwhile
// (xdp.ErrLinkDown) are counted per port (link_down), frames wait on the
// TX ring or, once it is full, are dropped as tx_full. Log lines that can
// repeat are rate-limited with a count (repeats.go).
//
// The control side (control.go, capture.go) is the backend of the control
// API (internal/control): a store of compiled pipelines (the startup one,
// and what `warpctl pipeline load` added, each compiled with its kernel
// half when it is stored), a swap that takes every queue's engine and
// every XDP program's kernel rules to a stored pipeline live, parsing
// nothing: every queue's plan prepared and the rules staged in each
// program's idle slot before anything changes (a refusal leaves both
// halves as they were), then each queue's I/O loop flips its interface's
// rules at the batch boundary at which it takes its plan up (Daemon.Swap
// says what a frame in flight sees), stats read without pausing
// the data path (with every stage's own counters: rule hits, count keys,
// sample counts), the ports and what the kernel granted, and a capture tap
// (pipelines.Tap) drained to a pcap file by a goroutine of its own. The
// file is named by the client, never a path: it is made beneath the
// configured capture_dir (internal/trust.Room: openat2 beneath the room,
// O_EXCL|O_NOFOLLOW, mode 0640), so no name reaches outside it. A
// capture follows a swap to a pipeline that has its tap point
// (Tap.Follow, set on the new plans before they are published) and ends,
// with the reason, at a swap to one that has not. A tap the kernel rules
// would hide frames from (pipelines.Tap.SeesKernel) has the workers run
// those rules while it is on and gives them back to the XDP program when
// it ends (offload.go, "Captures and the kernel half"). Transmit sockets are
// opened at start, on every interface of the ports map and every
// transmit-only interface; a swap opens none, and a pipeline needing one
// a queue lacks is refused in one line. Loads, swaps, removes and
// captures are serialised by one mutex; reads take none on the data path.
//
// With watch: true (watch.go) it follows the pipeline file by watching
// its directory (a ConfigMap volume renames a ..data symlink), and swaps a
// changed, valid file in through the same load and Swap as warpctl; an
// invalid one is refused, logged and counted, the running pipeline kept.
// Health (health.go) answers /readyz from the queues' states.
//
// Setup failures come back as one error line that names the cause and the
// fix (a missing interface, a missing capability, a kernel without AF_XDP,
// a queue another process holds), with everything made so far undone.
package daemon
