// Package rings is Warpflow's buffer vocabulary: the frame arena, the
// descriptor (laid out like the kernel's struct xdp_desc), the batch of
// descriptors with per-packet metadata, and the lock-free descriptor rings
// that move batches between goroutines.
//
// Ownership is the whole protocol: a frame belongs to exactly one place at a
// time (the arena's free stack, a port, a ring, a batch, a worker, an output).
// Whoever holds a descriptor owns its frame and may read and write its bytes;
// handing the descriptor on hands the frame on. Nothing here copies packet
// bytes. The Tracker is the accounting mode that checks this in tests and
// debug builds: it records every frame's owner, rejects a hand-off from
// anyone but the holder (a double free included), and audits the arena for
// frames lost or held twice. Each place is its own owner, registered by
// name by whoever manages it (a port its rings, the engine its own), and a
// frame entering a place while another holds it is reported with both
// places named (Tracker.Enter).
//
// # Rings
//
// SPSC follows the AF_XDP ring protocol (libxdp xsk.h). The producer calls
// Reserve(n) for free slots, writes descriptors through At or Slots, and
// Submit(n) publishes them; the consumer calls Peek(n), reads, and
// Release(n) hands the slots back. Each side caches the other's index and
// loads it only when the ring looks full or empty for the request, and
// publishes its own with one atomic store per Submit or Release, so a batch
// of 64 costs two shared-memory operations, not 128. Enqueue and Dequeue
// wrap the same steps for callers that keep descriptors in their own slice.
//
// MPMC is a bounded ring for many producers and consumers (a worker pool's
// shared input, a free-frame return path) after Vyukov: per-slot sequence
// numbers, and one compare-and-swap claims a whole batch. It costs an
// atomic store per descriptor on each side, so one-to-one links use SPSC.
//
// # Hazards
//
//   - A slot returned by Reserve or Peek, and a pointer or slice from At or
//     Slots, is valid only until the matching Submit or Release; after it the
//     other side may overwrite or read it at any moment. Copy out the 16-byte
//     descriptor if you keep it.
//   - SPSC methods are split by side: exactly one goroutine produces and one
//     consumes at a time. Two producers corrupt the ring silently; use MPMC.
//   - Nothing blocks or sleeps. An empty or full ring returns 0 and the
//     caller chooses how to back off (spin, runtime.Gosched, park). A
//     goroutine spinning on an empty ring with GOMAXPROCS=1 starves its peer.
//   - The Arena's free stack is not safe for concurrent use: one goroutine
//     allocates and frees, and frames come back to it through a ring.
//
// This package imports only the standard library; every other package may
// import it.
package rings
