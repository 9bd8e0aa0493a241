// Package xdp is Warpflow's one gateway to the kernel: AF_XDP sockets,
// the UMEM they share, the fill, completion, RX and TX rings, the XDP
// program that steers frames into the sockets, and feature probes. It is
// the only package that uses unsafe and golang.org/x/sys/unix; the replay
// path (dataplane, pipelines, rings) does not import it.
//
// # Objects
//
//   - UMEM: memory this package maps itself (anonymous, page aligned,
//     pre-faulted), Frames frames of FrameSize (2048 or 4096) bytes. The
//     first socket on it registers it with the kernel (XDP_UMEM_REG);
//     rings.NewArenaOn(u.Mem(), ...) with Headroom u.RXHeadroom() puts the
//     engine's frame allocator on it. Close refuses while sockets are open.
//   - Socket: one AF_XDP socket bound to one queue of one interface, with
//     its four rings mapped (from the offsets getsockopt(XDP_MMAP_OFFSETS)
//     returns). A later socket on the same UMEM shares it
//     (XDP_SHARED_UMEM): on the same interface and queue it shares the
//     fill and completion rings too; on another queue or interface it has
//     its own (kernel >= 5.10). The engine forwards between two interfaces
//     without copying this way: a frame received on A's socket is put, at
//     the same address, on B's TX ring, and comes back on B's completion
//     ring. Frames are the UMEM's, not a socket's: any socket on it may
//     fill, transmit or complete any frame.
//   - Program: xsk_redirect.c, loaded with cilium/ebpf and attached with
//     link.AttachXDP (a bpf_link, so a killed process leaves nothing
//     attached). It redirects each frame to the XSKMAP entry of its
//     ctx->rx_queue_index and returns XDP_PASS when there is none, counting
//     per queue and CPU (Counters).
//   - The kernel half of a split pipeline (offload.go): the same program,
//     before steering, decides the frames the pipeline's first filter
//     rules decide when those rules read only what it parses and end in
//     drop or pass (pipelines.Graph.Offload finds them). Rules are data:
//     per field, a table from the field's value to the bitmap of rules it
//     satisfies (arrays for protocol, ports, VLAN, TCP flags, fragment;
//     LPM tries for addresses), AND-ed, lowest bit first. LoadRules
//     writes a new set without reloading or re-verifying the program, into
//     the inactive of two slots under a per-slot sequence number, then
//     flips the active slot (StageRules and StagedRules.Activate do the
//     two apart, so a swap flips the kernel at the workers' batch
//     boundary, one map write): a frame reads one slot and checks its
//     sequence before and after, so it sees one set whole, or (while a slot
//     is rewritten under it) none and goes to the workers, who run the
//     whole pipeline. The parser decides only frames the workers' parse
//     stage classes OK, with the same fields; any other goes on.
//     Per-rule hits per CPU (RuleCounters, by generation); per queue,
//     Dropped and Passed join the steering counters, and OffUnparsed,
//     OffNoMatch and OffRaced say why a frame was not decided.
//
// # The ring protocol
//
// Each ring is a power-of-two array of slots plus a producer and a
// consumer index (free-running u32, masked on use) and a flags word, in
// memory shared with the kernel. Each index has one writer:
//
//	ring        carries   producer written by   consumer written by
//	fill        u64 addr  us                    kernel
//	RX          xdp_desc  kernel                us
//	TX          xdp_desc  us                    kernel
//	completion  u64 addr  kernel                us
//
// A producer writes slots, then stores its index: that store publishes
// the slots to the other side. A consumer reads slots, then stores its
// index: that store hands the slots back for overwriting. The kernel
// pairs these with smp_load_acquire/smp_store_release; we use sync/atomic
// (sequentially consistent, so stronger), never plain loads or stores.
// flags is the kernel's alone (XDP_RING_NEED_WAKEUP).
//
// The vocabulary is libxdp's (xsk.h): a producer calls Reserve(n), Set
// each slot, Submit(n); a consumer calls Peek(n), Get each slot,
// Release(n). Both sides cache the other's index and load it only when
// the cached view is too full or too empty for the request, so a batch
// costs one atomic load (at most) and one atomic store. ProduceAddrs,
// FillFrom, ConsumeAddrs, Produce and Consume wrap the steps for slices;
// they copy 16-byte descriptors or 8-byte addresses, never packet bytes.
// rings.Desc has the layout of struct xdp_desc (asserted in a test), so
// descriptors move between these rings and the engine's unchanged.
//
// # Frame ownership
//
// A frame has one owner at a time:
//
//	free (ours) -> fill ring -> kernel -> RX ring -> ours (worker)
//	ours -> TX ring -> kernel -> completion ring -> ours (free)
//
// A frame submitted on the fill ring is the kernel's until it comes back
// in an RX descriptor (at frame + XDP_PACKET_HEADROOM (256) + Headroom in
// copy mode). A frame submitted on the TX ring is the kernel's until its
// address comes back on the completion ring, even though Submit returned
// and even though the wire may already have it: writing it, refilling it
// or transmitting it again before then is the duplicated-frame bug.
// Closing a socket returns every frame on its rings to the caller.
//
// # Hazards
//
//   - One goroutine per ring side: the cached indices are not shared.
//     Fill and completion rings shared by two sockets on one queue are
//     still one ring each.
//   - A slot from Reserve or Peek is valid until the matching Submit or
//     Release; copy the descriptor out if you keep it. Ring slices are
//     valid until the socket closes.
//   - UMEM.Mem stays mapped until UMEM.Close, which refuses while a socket
//     is open; the kernel may write any frame it owns at any moment.
//   - poll never reports a deleted interface: only Socket.Err (SO_ERROR,
//     ENETDOWN) tells, so an I/O loop checks it when idle.
//   - Socket.Close unmaps the rings: stop the goroutines that drive them
//     first. Closing a socket removes it from any XSKMAP (the kernel does).
//   - The kernel releases a closed socket's queue in deferred work, so a
//     bind right after a Close can see EBUSY for a few milliseconds;
//     NewSocket retries EBUSY for up to 500ms before reporting it.
//   - A socket created on a UMEM that an open socket registered shares it
//     (XDP_SHARED_UMEM) even without SocketOptions.SharedWith.
//
// # Wakeups and busy poll
//
// With SocketOptions.NeedWakeup (XDP_USE_NEED_WAKEUP) the kernel sets the
// flag on the TX ring when it needs a sendto to start sending and on the
// fill ring when the driver stopped receiving for want of frames; KickTX
// and WakeRX make the syscall only then. Without it KickTX always makes
// one and WakeRX none. BusyPollOptions set SO_PREFER_BUSY_POLL,
// SO_BUSY_POLL and SO_BUSY_POLL_BUDGET; a kernel without one fails with an
// error wrapping ErrNotSupported.
//
// # Modes
//
// Bind: BindAuto asks for zero-copy and takes copy where the driver lacks
// it (the kernel's own fallback); BindZeroCopy fails with ErrNotSupported
// there; BindCopy forces copy. Socket.Bound says what was granted, never
// Auto. A socket sharing a UMEM inherits the mode and need-wakeup setting
// of the socket it shares with (the kernel forbids bind flags on it).
// Attach: AttachAuto tries native (driver) XDP, then generic (skb) on
// EOPNOTSUPP; Program.Attached says which. An interface that already has
// an XDP program is refused (ErrBusy) with its name and how to free it,
// never replaced.
//
// # Kernel facts (6.18, the development machine)
//
//   - veth has no AF_XDP zero-copy (a zero-copy bind fails with
//     EOPNOTSUPP); copy mode works with native and generic XDP.
//   - Frames transmitted or redirected into a veth vanish unless the peer
//     has an XDP program attached or GRO enabled.
//   - After `ip link del`, poll reports nothing; SO_ERROR is ENETDOWN.
//   - RLIMIT_MEMLOCK cannot be raised here and is not needed (memcg
//     accounting since 5.11): MemlockWarning returns the failure.
//   - A second socket bound to a queue that has one fails with EBUSY.
//
// # Regenerating the program
//
// xsk_redirect.c, its bpf2go output (xskredirect_bpfel.go) and object
// (xskredirect_bpfel.o) are committed, so a build needs no clang. After
// editing the C source run `go generate ./xdp/...`, which needs clang,
// llvm (llvm-strip) and libbpf-dev (bpf/bpf_helpers.h); on Debian:
// apt-get install clang llvm libbpf-dev. Files named gen* belong to the
// lab's traffic generator program.
package xdp
