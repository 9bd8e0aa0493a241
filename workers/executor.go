package workers

import "github.com/warpflow/warpflow/rings"

// Executor runs a Kernel (or its equivalent: a GPU persistent kernel) on
// batches handed to it through slots, and hands them back in submission
// order. It is the seam between the engine's I/O loop and whatever does the
// per-packet work: the CPU Pool is one Executor, a GPU backend another. The
// engine knows only this interface; see the package documentation for the
// slot protocol and who owns a batch when.
//
// Acquire and Submit belong to one goroutine (the producer), Completed and
// Release to one goroutine (the consumer; the engine's I/O loop is both).
// InFlight and Close may be called from any goroutine.
type Executor interface {
	// Acquire returns the next free slot's batch, cleared, without
	// blocking; ok is false while that slot is still in flight
	// (back-pressure: drain Completed first) or after Close. The batch
	// belongs to the producer until Submit; calling Acquire again before
	// Submit returns the same batch.
	Acquire() (b *rings.Batch, ok bool)
	// Submit hands the acquired batch to the executor (free -> ready). The
	// producer must not touch it again until Completed returns it.
	Submit()
	// Completed returns the oldest submitted batch once its processing is
	// done, without blocking; batches come back in submission order. The
	// batch, with the verdicts written into its Meta (and Outcome), belongs
	// to the consumer until Release; calling Completed again before Release
	// returns the same batch.
	Completed() (b *rings.Batch, ok bool)
	// Release gives the batch from Completed back to its slot (done -> free).
	Release()
	// InFlight is the number of batches submitted and not yet released.
	InFlight() int
	// Close stops the executor. Every batch submitted before Close is
	// still processed and stays readable through Completed and Release,
	// so the consumer can drain them; later Acquires report ok=false.
	Close() error
}

var _ Executor = (*Pool)(nil)

// MetaSettler is an Executor that settles a batch's deferred metadata
// (rings.Batch.SettleMeta) before anything reads it, on the goroutine that
// processes the batch. A producer may then fill its acquired batches with
// the metadata deferred (rings.Batch.DeferMeta), so that the packets' Meta,
// which the kernel writes anyway, is first written there and not cleared
// on the producer's core and moved across.
type MetaSettler interface {
	Executor
	SettlesMeta() bool
}

var _ MetaSettler = (*Pool)(nil)
