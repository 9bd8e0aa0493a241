// Package dataplane is Warpflow's engine: ports that receive and transmit
// batches (pcap replay, pcap writer, null; AF_XDP to come), the Engine that
// drives one compiled pipeline over one input port through an executor
// (persistent CPU workers by default), the accounting of every packet, and replay with golden
// comparison.
//
// # The engine's loop
//
// One goroutine, the I/O loop, owns the ports and the arena's free stack.
// It receives a batch into the next free slot of the executor (a
// workers.Pool of CPU workers, or any workers.Executor that
// Options.NewExecutor makes, such as a GPU backend), submits it, and,
// strictly in slot order, takes back completed batches and acts on
// each packet's verdict: transmit (grouped per output port), drop (counted
// by reason), pass, and sample. Then it recycles every frame to the port it
// came from, except the frames a Completer output accepted. Workers only
// ever touch the batches they hold, so nothing on this path takes a lock,
// and because completions are handled in receive order, outputs and
// counters are the same for any worker count and batch size
// (TestDeterministicAcrossWorkers). With zero workers the pipeline runs
// inline in the I/O loop: the fastest mode on one core.
//
// Run goes to the end of a capture; RunContext also stops when its context
// is done (a live port never ends): it stops receiving, finishes the
// batches in flight, takes back what Completers hold (bounded by
// Options.DrainTimeout) and returns nil. While it runs, Stats (verdict
// counters) and Frames (frame places) are readable from any goroutine
// without a lock: the I/O loop, their only writer, publishes them between
// batches under a sequence count, at least every 1024 packets, whenever it
// idles, and every turn when an output is a Completer, so a snapshot always
// balances.
//
// # Swapping the pipeline
//
// Everything the engine derives from a compiled pipeline is one immutable
// plan (plan.go): the graph, one runner per worker, the resolved output
// ports and sample sinks, and where the graph's ports and reasons sit in
// the counter layout. Engine.Swap builds and checks a whole new plan on
// the caller's goroutine (refusing it, with everything left as it was, if
// a port has no output, a sampler is bad, or a Completer output was not
// registered at start: Outputs.Spare) and publishes it through one atomic
// pointer. The I/O loop loads that pointer once per batch, when it takes a
// fresh slot, and stamps the slot; the engine's own CPU pool runs, for
// each batch, the runner of the plan its slot is stamped with, and the
// completion acts on the verdicts against the same plan, so a batch is
// processed wholly by one plan. Completions come back in order: the first
// completed batch stamped with the new plan ends the old plan's grace
// period (it is retired: its runners are quiescent, and the control side
// folds their counters into the totals). Swap waits for the previous
// grace period first, so at most two plans are ever live.
//
// A plan that needs a different pool (another worker count or batch size,
// inline to workers and back, or any swap on an executor from
// Options.NewExecutor, which runs one plan for its life) is a clean pool
// change: Swap starts the new executor, the I/O loop stops taking slots,
// lets the old executor finish and closes it, then goes on with the new
// one. Nothing is received meanwhile, so nothing is lost; a live port's
// ring holds what arrives (some 100 µs).
//
// A swap comes in two steps when something outside the engine must
// change with it (swap.go): PrepareSwap does all the work that can fail
// or take time (the grace-period wait, the plan, a new executor) and
// changes nothing; PreparedSwap.Publish publishes, or Abort drops it. The
// I/O loop takes a published plan up at a batch boundary (no slot held,
// or one held with nothing in it; at a pool change, once the old executor
// is empty) and runs the swap's SwapOptions.AtTakeUp there, before it
// receives the plan's first frame: every frame received before the hook
// goes to the old plan, every one after it to the new. internal/daemon
// flips its XDP program's kernel rule set in that hook, so the two halves
// of a split pipeline change at one batch boundary. WaitTakenUp waits for
// it (an idle loop takes a plan up at its next turn, with no traffic);
// WaitActive waits for the first completed batch on the new plan.
//
// Verdict counters (received, per port, per reason) always carry on, by
// name: the counter layout only grows. Stage counters carry on where the
// new pipeline has a stage of the same name and kind (edge counters only
// where its edges lead to the same stages); SwapResult lists the stages
// reset, added and removed. Stage-specific counters (a filter's rule
// hits, a count stage's keys, a rewrite's exceptions) and sampler counts
// carry on where the stage is also configured the same
// (Graph.StageConfig); SwapResult.CountersReset lists the kept stages
// whose configuration changed. Runners publish their counters as
// single-writer atomics (Runner.LiveStats, Runner.LiveCounters) after
// every partial batch and at least every 1024 packets, and the I/O loop
// its sampler counts with its verdict counters, so Engine.Stages,
// Engine.StageCounters and Engine.Samples read them without a lock while
// the engine runs: each counter is exact as of its writer's last publish
// and never goes down; two counters are not one snapshot.
//
// # Stateful pipelines
//
// A pipeline with a stateful stage (conntrack, nat, reassemble) keeps
// its tables per runner, so a flow's packets, both directions, must all
// reach one runner (steer.go). With workers the pool is pinned
// (workers.Options.Pinned): worker w runs only slots it is given, and
// each received batch is cut by Graph.Steering's symmetric flow hash
// into one sub-batch per worker, processed in parallel; the completion
// merges the verdicts back into receive order, so outputs and counters
// stay those of the inline engine (TestSteeredMatchesOneWorker). Steering
// allocates nothing: the sub-batches are fixed slots of the pool. Across
// receive queues (engines side by side) the NIC's RSS decides which
// engine sees a packet, and a symmetric RSS key is needed for both
// directions to meet one table; the engine does not set it. The batch's
// time (rings.Batch.SetTime: the capture time in replay, one clock read
// per batch live) is what the tables' timeouts run on. Live (a port
// that leaves the time to the engine), a worker that gets no packet is
// told the time instead (pipelines.Ticker: an empty batch or round with
// its Epoch, every pipelines.IdleTickMS while idle), so an idle link's
// flows still expire; a replay, on its capture's clock, gets no ticks.
//
// A swap hands each runner's tables to the runner of the same worker in
// the new plan where the stage's name and kind are unchanged
// (Runner.CarryState), re-steering the entries when the worker count
// changes; SwapResult.StateKept and StateReset name the tables kept and
// reset.
//
// # Frame ownership and lifetimes
//
// A frame received from the input port is the engine's (in a batch, a
// slot, or being completed) until the engine hands it on:
//   - dropped, passed to a pass port that only borrows, refused by an
//     output, or transmitted on a port that only borrows (pcap writer, null
//     port): back to the input port through Recycle in the same loop turn
//     that completed its batch. A borrowing port is done with the bytes
//     when Transmit returns.
//   - accepted by a Completer (AF_XDP TX): the port's, and the kernel's,
//     until the port returns it from Complete. The engine polls Complete
//     every loop turn and recycles what comes back to the input port; at
//     the end of a run it waits up to Options.DrainTimeout and counts what
//     never came back as lost (ErrFramesLost), never silently.
//
// A sample sink only borrows (it copies the bytes): a sampled frame also
// goes on to its verdict, so a Completer cannot be a sink.
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
// Frames are accounted live as well: Engine.Stats, callable from any
// goroutine while the engine runs, says how many frames are in each place
// (FramePlaces: free, fill ring, kernel RX, RX ring, a port's own store,
// the engine, TX ring, kernel TX, completion ring, a Completer output,
// lost). The engine's places and its verdict counters are published
// together under one sequence count (at least every 1024 packets, every
// turn of an engine with a Completer); ports add theirs from the ring
// indices they published in the same publication, split at the kernel's
// (FrameReporter), so the places sum to the frame count in every Stats.
// Nothing walks the frames. The debug cross-check is
// Options.TrackFrames: a rings.Tracker with one owner per place, in which
// ports that implement FrameTracker record their own places, so a frame in
// two places fails the first move that meets it, naming the frame and both
// places.
//
// # Hazards
//
// A Completer that returns a frame twice, or one it never took, would put
// one frame in two places; the engine refuses to recycle more than a port
// holds and reports it, and the TrackFrames mode names the frame and both
// places at the first such move.
//
// Preloaded replay loops frames in place: a packet's second pass sees what
// the pipeline wrote on its first (a MAC swap swaps back, a TTL decrement
// keeps decrementing), which is why benchmarks use idempotent rewrites.
package dataplane
