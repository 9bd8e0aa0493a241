package livebench

import (
	_ "embed"
	"errors"
	"fmt"
	"io"
	"time"
)

// The pipelines warpflowd runs.
var (
	//go:embed pipelines/rxdrop.yaml
	rxdropPipeline []byte
	//go:embed pipelines/macswap.yaml
	macswapPipeline []byte
)

// Mode is what the dataplane does with each frame.
type Mode int

const (
	RXOnly   Mode = iota // receive and drop
	MacSwap              // swap the MACs, transmit back out of dp0
	Stateful             // conntrack, ct filter, SNAT, out of dp1 to the sink (stateful.go)
)

func (m Mode) String() string {
	switch m {
	case RXOnly:
		return "rxonly"
	case MacSwap:
		return "macswap"
	case Stateful:
		return "stateful"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode parses "rxonly" or "macswap".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "rxonly":
		return RXOnly, nil
	case "macswap":
		return MacSwap, nil
	case "stateful":
		return Stateful, nil
	}
	return 0, fmt.Errorf("mode %q: want rxonly, macswap or stateful", s)
}

// Setup names.
const (
	SetupDefault  = "A" // veth's default NAPI: receive softirq on the sender's core
	SetupThreaded = "B" // threaded NAPI, its kernel thread pinned to the dataplane's core
)

// Loads.
const (
	LoadFlood      = "flood"      // the generator as fast as it goes (or FloodRate)
	LoadControlled = "controlled" // the generator paced at ControlledRate
)

// Peer names.
const (
	PeerWarpflow = "warpflow"
	PeerBefore   = "warpflow-before"
	PeerTestpmd  = "testpmd"
)

// Rings sizes warpflowd's UMEM and rings.
type Rings struct {
	Frames, RX, TX, Fill, Completion int
}

// Options configure Run.
type Options struct {
	// Prefix names the lab the run builds (and removes): PREFIX-gen,
	// PREFIX-dp, PREFIX-sink.
	Prefix string
	// Setups to measure, in order: SetupDefault, SetupThreaded.
	Setups []string
	// Modes to measure in every setup.
	Modes []Mode
	// Repeats is the number of measurements of every case (at least 1;
	// the figures want 5). Cases are interleaved: each repeat runs every
	// case of a setup once, in an order rotated by one each repeat.
	Repeats int
	// Warmup runs traffic before the window opens; Window is the measured
	// stretch.
	Warmup, Window time.Duration
	// GenCPU runs the generator (and this process); DPCPU the dataplane's
	// forwarding loop (warpflowd's cpus, testpmd's forwarding lcore) and,
	// in setup B, dp0's NAPI thread.
	GenCPU, DPCPU int
	// ControlledRate is setup B's paced load in frames per second, paced
	// by the generator's program (evenly spaced frames); ControlledBurst is
	// the most it sends back to back to catch up after a gap between
	// calls (veth's ring holds 256: a larger burst can overflow it
	// whatever the receiver does).
	ControlledRate  float64
	ControlledBurst int
	// FloodRate is the flood's pace, 0 for as fast as the generator goes.
	FloodRate float64
	// Flows is the number of UDP flows the generator cycles through.
	Flows int
	// Warpflowd is the daemon binary measured; Before, when set, a second
	// binary measured beside it in setup B (the same code before a change).
	Warpflowd, Before string
	// Testpmd is the dpdk-testpmd binary; empty leaves testpmd out.
	Testpmd string
	// Rings sizes warpflowd's UMEM and rings.
	Rings Rings
	// Log receives progress lines; nil for none.
	Log io.Writer
}

// DefaultOptions: lab "lb", both setups, both modes, 5 repeats of a
// 3-second window after 1 s of warm-up, generator on CPU 0, dataplane on
// CPU 1, controlled load 1 Mpps paced by the generator's program (at
// most 64 frames back to back), flood as fast as
// possible, 16 flows, testpmd from PATH.
func DefaultOptions() Options {
	return Options{
		Prefix:          "lb",
		Setups:          []string{SetupDefault, SetupThreaded},
		Modes:           []Mode{RXOnly, MacSwap},
		Repeats:         5,
		Warmup:          time.Second,
		Window:          3 * time.Second,
		GenCPU:          0,
		DPCPU:           1,
		ControlledRate:  1e6,
		ControlledBurst: 64,
		Flows:           16,
		Warpflowd:       "warpflowd",
		Testpmd:         "dpdk-testpmd",
		Rings:           Rings{Frames: 8192, RX: 2048, TX: 2048, Fill: 4096, Completion: 2048},
	}
}

func (o Options) validate() error {
	var errs []error
	if len(o.Setups) == 0 {
		errs = append(errs, errors.New("no setup"))
	}
	for _, s := range o.Setups {
		if s != SetupDefault && s != SetupThreaded {
			errs = append(errs, fmt.Errorf("setup %q: want A or B", s))
		}
	}
	if len(o.Modes) == 0 {
		errs = append(errs, errors.New("no mode"))
	}
	if o.Repeats < 1 || o.Repeats > 100 {
		errs = append(errs, fmt.Errorf("repeats %d: want 1 to 100", o.Repeats))
	}
	if o.Warmup < 0 || o.Window < 100*time.Millisecond || o.Warmup+o.Window > time.Minute {
		errs = append(errs, fmt.Errorf("warmup %s, window %s: want warmup >= 0, window >= 100ms, both within a minute", o.Warmup, o.Window))
	}
	if o.GenCPU < 0 || o.DPCPU < 0 || o.GenCPU == o.DPCPU {
		errs = append(errs, fmt.Errorf("cpus: generator %d, dataplane %d: want two distinct CPUs", o.GenCPU, o.DPCPU))
	}
	if o.ControlledRate <= 0 || o.ControlledBurst < 1 || o.FloodRate < 0 {
		errs = append(errs, fmt.Errorf("controlled rate %g (burst %d), flood rate %g: want a positive controlled rate and burst, flood >= 0", o.ControlledRate, o.ControlledBurst, o.FloodRate))
	}
	if o.Flows < 1 || o.Flows > 65536-1024 {
		// The flows are UDP source ports 1024 up (measure).
		errs = append(errs, fmt.Errorf("flows %d: want 1 to %d (UDP source ports 1024 up)", o.Flows, 65536-1024))
	}
	if o.Warpflowd == "" {
		errs = append(errs, errors.New("no warpflowd binary"))
	}
	r := o.Rings
	for _, v := range []int{r.RX, r.TX, r.Fill, r.Completion} {
		if v < 64 || v&(v-1) != 0 {
			errs = append(errs, fmt.Errorf("rings %+v: want powers of two >= 64", r))
			break
		}
	}
	if r.Frames < r.Fill+r.TX {
		errs = append(errs, fmt.Errorf("rings: %d frames for fill %d + tx %d", r.Frames, r.Fill, r.TX))
	}
	return errors.Join(errs...)
}
