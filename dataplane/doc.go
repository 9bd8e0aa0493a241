// Package dataplane is Warpflow's engine: ports that receive and transmit
// batches (pcap replay, pcap writer, null; AF_XDP to come), the Engine that
// drives one compiled pipeline over one input port on a pool of persistent
// workers, the accounting of every packet, and replay with golden
// comparison.
//
// # The engine's loop
//
// One goroutine, the I/O loop, owns the ports and the arena's free stack.
// It receives a batch into the next free slot of the executor (a
// workers.Pool of CPU workers, or any workers.Executor that
// Options.NewExecutor makes, such as a GPU backend), submits
// it, and, strictly in slot order, takes back completed batches and acts on
// each packet's verdict: transmit (grouped per output port), drop (counted
// by reason), pass, and sample. Then it recycles every frame to the port it
// came from. Workers only ever touch the batches they hold, so nothing on
// this path takes a lock, and because completions are handled in receive
// order, outputs and counters are the same for any worker count and batch
// size (TestDeterministicAcrossWorkers). With zero workers the pipeline runs
// inline in the I/O loop: the fastest mode on one core.
//
// # Accounting
//
// Every packet received ends as exactly one of transmitted, dropped (with a
// named reason: the pipeline's own, or tx_full, tx_error, pass_full, pass_error,
// internal_no_verdict, internal_bad_edge) or passed; Report.Balanced checks
// it, and replay also checks that every capture record was received or
// counted as an input drop (oversize, short_link_header), and that every
// frame came back to the arena.
//
// # Hazards
//
// Transmit borrows frames only until it returns; a port that must hold them
// longer (AF_XDP TX until completion) will need a completion path before it
// can be an output. Preloaded replay loops frames in place: a packet's
// second pass sees what the pipeline wrote on its first (a MAC swap swaps
// back, a TTL decrement keeps decrementing), which is why benchmarks use
// idempotent rewrites.
package dataplane
