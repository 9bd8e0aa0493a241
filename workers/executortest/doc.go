// Package executortest checks that a workers.Executor keeps the protocol
// that package workers documents: slots handed out in order, the same
// batch until Submit or Release, completions in submission order and each
// exactly once, back-pressure (Acquire refused) when every slot is in
// flight, InFlight exact on the driving goroutine, and a Close that still
// completes everything submitted before it. Any backend (the CPU Pool, a
// GPU executor or its emulation) runs the same checks.
//
// Run drives the executor from the calling goroutine, as the engine's I/O
// loop does (producer and consumer both), through three phases: an
// ordered phase that interleaves Acquire/Submit and Completed/Release at
// random, a back-pressure phase that fills every slot, and a close phase
// that closes with batches in flight and drains them. Fill and Check are
// the caller's, so a backend whose kernel reads frame bytes (a GPU
// classifier) feeds real frames and checks its own verdicts.
package executortest
