// Package rings is Warpflow's buffer vocabulary: the frame arena, the
// descriptor (laid out like the kernel's struct xdp_desc), the batch of
// descriptors with per-packet metadata, and the lock-free descriptor rings
// that move batches between goroutines.
//
// Ownership is the whole protocol: a frame belongs to exactly one place at a
// time (the arena's free stack, a port, a ring, a batch, a worker, an output).
// Whoever holds a descriptor owns its frame and may read and write its bytes;
// handing the descriptor on hands the frame on. Nothing here copies packet
// bytes.
//
// This package imports only the standard library; every other package may
// import it.
package rings
