package xdp

// This file and gen.c are the traffic generator's XDP program (owner: the
// lab/gen helper; the rest of package xdp is the dataplane's).

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -no-global-types -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu" -strip llvm-strip gen gen.c

import (
	"errors"
	"fmt"
	"net"

	"github.com/cilium/ebpf"
)

// testXDPLiveFrames is BPF_F_TEST_XDP_LIVE_FRAMES from linux/bpf.h (5.18+):
// BPF_PROG_RUN transmits or redirects the frames its XDP program returns
// XDP_TX or XDP_REDIRECT for, instead of only reporting the verdict.
const testXDPLiveFrames = 1 << 1

// MaxGenFlows bounds LiveGenOptions.Flows (distinct UDP source ports).
const MaxGenFlows = 1 << 16

// LiveGenOptions configure a LiveGen.
type LiveGenOptions struct {
	// Flows is how many distinct UDP source ports the program writes,
	// BasePort + seq%Flows, into an IPv4/UDP frame (checksum set to 0).
	// 1 sends the frame unchanged.
	Flows int
	// BasePort is the first source port; BasePort+Flows-1 must fit in 16
	// bits.
	BasePort uint16
	// Rate, when positive, paces the program itself: at most Rate frames
	// per second, evenly spaced (each run checks the clock; early ones
	// send nothing and are not counted), so a paced load needs no sleeps
	// and no small syscalls (each BPF_PROG_RUN call has a fixed cost of
	// milliseconds here). After a gap the program sends at most Burst
	// frames at once to catch up (0: 64).
	Rate  float64
	Burst int
	// BatchSize is the kernel's live-frame batch (frames per page-pool
	// refill and per transmit flush): 1 to 256, 0 for the kernel's 64.
	BatchSize int
}

// genState mirrors struct gen_state in gen.c.
type genState struct {
	Limit, Seq, Over, Unchanged uint64
	Interval, Burst, Next       uint64
}

// LiveGenCounts are the program's counters since the LiveGen was made.
type LiveGenCounts struct {
	Sent      uint64 // runs that returned XDP_TX: frames handed to the driver
	Over      uint64 // runs past the limit, dropped (a restarted syscall's extra repeats)
	Unchanged uint64 // runs whose frame could not take the flow rewrite (not IPv4/UDP), sent as they were
}

// LiveGen transmits frames out of an interface with BPF_PROG_RUN in XDP
// live-frame mode, running a program that returns XDP_TX. One goroutine
// uses a LiveGen at a time.
//
// The frames leave through the driver's XDP transmit path (ndo_xdp_xmit),
// not the stack: on a veth they reach the peer only if the peer has an XDP
// program or GRO, otherwise the kernel drops them, and a full peer ring
// drops them too; the program counts frames handed to the driver, so read
// delivered frames from the peer's counters.
type LiveGen struct {
	objs   genObjects
	bs     uint32
	closed bool
}

// NewLiveGen loads the generator program.
func NewLiveGen(o LiveGenOptions) (*LiveGen, error) {
	if o.Flows < 1 || o.Flows > MaxGenFlows {
		return nil, fmt.Errorf("live gen flows %d: want 1 to %d", o.Flows, MaxGenFlows)
	}
	if int(o.BasePort)+o.Flows-1 > 0xffff {
		return nil, fmt.Errorf("live gen base port %d + %d flows: ports past 65535", o.BasePort, o.Flows)
	}
	if o.Rate < 0 || o.Rate > 1e9 || o.Burst < 0 {
		return nil, fmt.Errorf("live gen rate %g, burst %d: want a rate in [0, 1e9] and a burst >= 0", o.Rate, o.Burst)
	}
	if o.BatchSize < 0 || o.BatchSize > 256 {
		return nil, fmt.Errorf("live gen batch size %d: want 0 to 256", o.BatchSize)
	}
	spec, err := loadGen()
	if err != nil {
		return nil, fmt.Errorf("load generator spec: %w", err)
	}
	for name, v := range map[string]any{"flows": uint32(o.Flows), "base_port": o.BasePort} {
		sv, ok := spec.Variables[name]
		if !ok {
			return nil, fmt.Errorf("generator spec lacks variable %s", name)
		}
		if err := sv.Set(v); err != nil {
			return nil, fmt.Errorf("set generator %s: %w", name, err)
		}
	}
	g := &LiveGen{bs: uint32(o.BatchSize)}
	if err := spec.LoadAndAssign(&g.objs, nil); err != nil {
		return nil, fmt.Errorf("load generator program: %w", err)
	}
	if o.Rate > 0 {
		st := genState{Interval: max(1, uint64(1e9/o.Rate)), Burst: uint64(o.Burst)}
		if st.Burst == 0 {
			st.Burst = 64
		}
		if err := g.objs.GenState.Update(uint32(0), &st, ebpf.UpdateExist); err != nil {
			g.objs.Close()
			return nil, fmt.Errorf("set generator pace: %w", err)
		}
	}
	return g, nil
}

func (g *LiveGen) state() (genState, error) {
	var s genState
	if g.closed {
		return s, net.ErrClosed
	}
	if err := g.objs.GenState.Lookup(uint32(0), &s); err != nil {
		return s, fmt.Errorf("read generator state: %w", err)
	}
	return s, nil
}

// SetLimit lets the program transmit up to n frames in all since the
// LiveGen was made; runs beyond it drop their frame and count in Over.
// Call it between Runs.
func (g *LiveGen) SetLimit(n uint64) error {
	s, err := g.state()
	if err != nil {
		return err
	}
	s.Limit = n
	if err := g.objs.GenState.Update(uint32(0), &s, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("set generator limit: %w", err)
	}
	return nil
}

// Counts reads the program's counters.
func (g *LiveGen) Counts() (LiveGenCounts, error) {
	s, err := g.state()
	if err != nil {
		return LiveGenCounts{}, err
	}
	sent := s.Seq - s.Over
	return LiveGenCounts{Sent: sent, Over: s.Over, Unchanged: s.Unchanged}, nil
}

// xdpMD is struct xdp_md, the context BPF_PROG_RUN takes for XDP.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// Run runs the program repeat times on frame as if it had arrived on
// interface ifindex, queue queue, so each XDP_TX leaves through that
// interface. The kernel resolves ifindex in the network namespace of the
// calling thread: call Run on a thread locked into the interface's
// namespace. Errors wrap ErrNotSupported where the kernel lacks live-frame
// mode.
func (g *LiveGen) Run(ifindex, queue int, frame []byte, repeat uint32) error {
	if g.closed {
		return net.ErrClosed
	}
	if repeat == 0 {
		return nil
	}
	_, err := g.objs.GenTx.Run(&ebpf.RunOptions{
		Data:      frame,
		Context:   xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(ifindex), RxQueueIndex: uint32(queue)},
		Repeat:    repeat,
		Flags:     testXDPLiveFrames,
		BatchSize: g.bs,
	})
	if err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			return fmt.Errorf("xdp live frames: %w", ErrNotSupported)
		}
		return fmt.Errorf("xdp live frames on ifindex %d: %w", ifindex, err)
	}
	return nil
}

// Close unloads the program; net.ErrClosed on a second call.
func (g *LiveGen) Close() error {
	if g.closed {
		return net.ErrClosed
	}
	g.closed = true
	return g.objs.Close()
}
