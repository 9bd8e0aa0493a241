package workers

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/warpflow/warpflow/rings"
)

// ErrInvalidOptions is wrapped by every error NewPool returns for a bad
// Options value; the message names the field and the value.
var ErrInvalidOptions = errors.New("invalid worker pool options")

// MaxSlots is the largest number of slots a pool may have.
const MaxSlots = 1 << 16

// Options configures a Pool.
type Options struct {
	// Workers is the number of worker goroutines, at least 1.
	Workers int
	// Slots is the number of batch slots: a power of two, at least Workers,
	// at most MaxSlots. Zero means 4*Workers rounded up to a power of two.
	// It caps the batches in flight (submitted and not yet released).
	Slots int
	// NewBatch makes each slot's batch; NewPool calls it Slots times and
	// never again. Required.
	NewBatch func() *rings.Batch
	// Idle is how a worker with nothing to do backs off.
	Idle IdlePolicy
	// LockOSThread locks each worker goroutine to its own OS thread.
	LockOSThread bool
	// CPUs, when not empty, pins worker i to CPU CPUs[i%len(CPUs)] with
	// sched_setaffinity (Linux only). Pinning implies LockOSThread. Every
	// CPU must be in the process's affinity set.
	CPUs []int
	// Pinned assigns sequence numbers to workers instead of letting any
	// worker claim the next ready slot: sequence s is run by worker
	// s % Workers, each worker walking its own sequences in order. A
	// producer that fills Workers slots per round can then send each
	// worker its own share (flow steering), and everything one worker
	// runs is ordered. A slow worker holds up the round (as any slow
	// batch holds up completion).
	Pinned bool
}

// IdlePolicy is a worker's back-off when it finds no ready slot: it polls
// Spins times, then polls with runtime.Gosched between polls Yields times,
// then parks until the producer wakes it or MaxPark passes.
type IdlePolicy struct {
	Spins  int // busy polls before yielding; >= 0
	Yields int // polls separated by runtime.Gosched before parking; >= 0
	// MaxPark caps one park: a parked worker re-checks for work at least
	// this often even without a wake-up. Zero parks until woken. >= 0.
	MaxPark time.Duration
}

// DefaultIdlePolicy spins for a few microseconds, yields about a hundred
// times, and then parks for up to 50ms at a time: a busy pool never sleeps,
// an idle one wakes 20 times a second per worker.
func DefaultIdlePolicy() IdlePolicy {
	return IdlePolicy{Spins: 256, Yields: 64, MaxPark: 50 * time.Millisecond}
}

// DefaultOptions returns one worker per available CPU but one (left for the
// I/O loop that feeds the pool), at least one, with the default slot count
// and idle policy. NewBatch must still be set.
func DefaultOptions() Options {
	return Options{
		Workers: max(1, runtime.GOMAXPROCS(0)-1),
		Idle:    DefaultIdlePolicy(),
	}
}

// optionError reports one bad option value.
type optionError struct{ msg string }

func (e *optionError) Error() string { return "worker pool options: " + e.msg }
func (e *optionError) Unwrap() error { return ErrInvalidOptions }

func badOption(format string, args ...any) error {
	return &optionError{msg: fmt.Sprintf(format, args...)}
}

// validate checks o against the kernels and returns the slot count to use.
func (o *Options) validate(kernels []Kernel) (slots int, err error) {
	if o.Workers < 1 {
		return 0, badOption("workers %d: must be at least 1", o.Workers)
	}
	if len(kernels) != o.Workers {
		return 0, badOption("kernels: got %d, want one per worker (%d)", len(kernels), o.Workers)
	}
	for i, k := range kernels {
		if k == nil {
			return 0, badOption("kernels[%d]: nil", i)
		}
	}
	slots = o.Slots
	if slots == 0 {
		slots = ceilPow2(4 * o.Workers)
	}
	if slots < 0 || slots&(slots-1) != 0 || slots < o.Workers || slots > MaxSlots {
		return 0, badOption("slots %d: must be a power of two in [workers (%d), %d]", o.Slots, o.Workers, MaxSlots)
	}
	if o.NewBatch == nil {
		return 0, badOption("new batch: nil function")
	}
	if o.Idle.Spins < 0 {
		return 0, badOption("idle spins %d: must not be negative", o.Idle.Spins)
	}
	if o.Idle.Yields < 0 {
		return 0, badOption("idle yields %d: must not be negative", o.Idle.Yields)
	}
	if o.Idle.MaxPark < 0 {
		return 0, badOption("idle max park %v: must not be negative", o.Idle.MaxPark)
	}
	if len(o.CPUs) > 0 {
		if err := validCPUs(o.CPUs); err != nil {
			return 0, err
		}
	}
	return slots, nil
}

// ceilPow2 returns the smallest power of two >= n (n >= 1).
func ceilPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}
