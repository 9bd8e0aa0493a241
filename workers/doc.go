// Package workers runs pools of persistent worker goroutines: the CPU
// stand-in for a GPU persistent kernel in the style of NVIDIA DOCA
// GPUNetIO. Workers never exit between batches; they poll a ring of slots,
// run their Kernel on each batch in place, and back off (spin, yield, park)
// when there is nothing to do. The package knows nothing about pipelines:
// a Kernel is anything with Process(*rings.Batch).
//
// # Slots and status words
//
// A Pool owns Slots slots (a power of two), each a batch plus an atomic
// status word, the GPUNetIO semaphore. Slot i serves sequence numbers
// i, i+Slots, i+2*Slots, ...; every party walks the sequence in order:
//
//	state  written by          store publishes                  next
//	free   consumer (Release)  consumer no longer reads batch   producer Acquire/Submit
//	ready  producer (Submit)   the batch's descriptors/meta     one worker claims it
//	busy   claiming worker     nothing (informational)          worker runs its Kernel
//	done   that worker         the kernel's writes to the batch consumer Completed/Release
//
// The producer keeps a private sequence number pseq: Acquire succeeds when
// slot pseq is free, Submit stores ready and advances pseq. The consumer
// keeps cseq: Completed succeeds when slot cseq is done, Release stores free
// and advances cseq. Workers share one claim counter: a worker loads claim
// c, checks that slot c is ready, and advances claim from c to c+1 with a
// CAS; the winner alone owns sequence c until it stores done. Because the
// producer fills and the consumer drains in sequence order, the consumer
// sees batches in submission order even when several workers finish out of
// order; a slow batch holds up the ones behind it (head-of-line), which is
// the price of ordered output.
//
// Hazard, and why the status word carries a lap: the worker that won claim
// c-Slots may be preempted between its CAS and its store of busy, leaving
// slot c's word at ready. A worker that then loads claim c must not take
// that stale ready for sequence c's. So the word is lap<<2 | state, with
// lap = seq/Slots, and a worker claims only "ready in c's lap". The
// producer and consumer, alone on their side, compare only the state bits.
// A stale word can only be one lap old, since a slot cannot move on while
// its claimer holds it, so the 30-bit lap never aliases.
//
// Go's sync/atomic operations are sequentially consistent, and every
// handoff is a Store by the owner followed by a Load by the next owner, so
// plain reads and writes of the batch itself need no further fencing.
//
// # Pinned pools
//
// With Options.Pinned the claim counter is not used: sequence s belongs
// to worker s % Workers, and each worker walks its own sequences (w,
// w+Workers, ...) with a private cursor, so nothing is contended and
// everything one worker runs is in submission order. The engine uses it
// to steer flows (a round of Workers slots, one per worker, per received
// batch). Parking is per worker: a worker announces itself on its own
// sleeping flag and re-checks its own next slot; Submit stores ready and
// then loads the flag of the sequence's worker (the same Dekker pairing
// as below, one worker at a time), waking it on its own channel. Close's
// drain runs each left-over slot with its own worker's kernel.
//
// # The Executor contract
//
// Executor is the interface the engine drives; Pool is its CPU
// implementation and a GPU backend is another. Any implementation keeps the
// protocol above, whatever its slots are made of (a Pool slot holds a Go
// pointer to a batch; a GPU slot is one flat pinned record of status word,
// count, descriptors and verdicts, into which the backend copies the
// batch's descriptors at Submit and from which it copies verdicts back
// before Completed reports done):
//
//   - Slots are used in sequence order with a lap in the status word:
//     free -> ready (Submit) -> busy (claimed) -> done (processed) -> free
//     (Release). Completed returns batches strictly in submission order.
//   - Between Acquire and Submit the batch, and the frames its descriptors
//     name, belong to the producer; between Submit and the Completed that
//     returns it they belong to the executor, which may read and write
//     frame bytes and Meta in place but must not keep any of it after
//     marking the slot done; between Completed and Release they belong to
//     the consumer, which hands the frames on (transmit, drop, pass) before
//     Release. Release returns only the slot: the frames left with the
//     consumer.
//   - The executor never allocates, frees or recycles frames, and never
//     drops a batch: every submitted batch completes exactly once, also
//     across Close.
//   - Verdicts are what the Kernel would have written: an executor that
//     cannot handle a packet (a GPU's parser outside its common case) runs
//     the CPU Kernel on it, so results do not depend on the executor.
//
// Package executortest checks these rules for any implementation.
//
// # Idle back-off and wake-ups
//
// A worker that finds no ready slot polls IdlePolicy.Spins times, then
// Yields times with runtime.Gosched between polls, then parks. To park it
// increments sleepers, re-checks for work, and blocks on the wake channel,
// the quit channel or its MaxPark timer. Submit stores ready and then loads
// sleepers, sending a token on wake (capacity Workers, non-blocking) only
// when sleepers is not zero. These two store-then-load pairs are Dekker's
// handshake: at least one side sees the other, so a wake-up is never lost,
// and a busy pool, whose workers are spinning, pays one atomic load per
// Submit and never touches a channel. An idle pool costs a timer wake-up
// per worker per MaxPark.
//
// # Close
//
// Close sets closed, closes quit (waking every parked worker) and waits.
// A worker exits when it sees closed and the next slot is not ready, so
// everything submitted before Close is processed. Submit stores ready and
// then loads closed; if it sees closed it takes the close lock and, if the
// workers are gone, runs the remaining ready slots itself with worker 0's
// kernel (Close does the same after its wait). So every submitted batch
// completes exactly once, and the consumer can drain Completed after Close.
//
// # Misuse
//
// Acquire/Submit belong to one goroutine and Completed/Release to one
// goroutine (possibly the same). Submit without Acquire and Release without
// Completed panic: they are programming errors that would otherwise corrupt
// frame ownership. A panicking Kernel takes the process down, as a crashed
// persistent kernel would.
package workers
