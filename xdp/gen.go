package xdp

// This file and gen.c are the traffic generator's XDP program (owner: the
// lab/gen helper; the rest of package xdp is the dataplane's).

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -no-global-types -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu" -strip llvm-strip gen gen.c

import (
	"errors"
	"fmt"
	"net"
	"runtime"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
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
	// BatchSize is the kernel's live-frame batch (frames per page-pool
	// refill and per transmit flush): 1 to 256, 0 for the kernel's 64.
	BatchSize int
	// Rate, when positive, paces the program itself: at most Rate frames
	// a second, evenly spaced (every run reads the clock; an early one
	// sends nothing and is not counted), so a paced load needs neither
	// sleeps nor small calls. After a gap between calls it sends at most
	// Burst frames back to back to catch up (0: 64).
	Rate  float64
	Burst int
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
//
// The dispatcher pin: for a Repeat above 1, BPF_PROG_RUN installs the
// program in the kernel's XDP dispatcher and removes it afterwards, and each
// change waits for an RCU grace period (synchronize_rcu): about 24 ms per
// call measured on 6.18 in this VM, which would make every call cost as much
// as ~100,000 frames. A program that is already in the dispatcher (attached
// somewhere as XDP) skips both changes. So NewLiveGen attaches the program
// in generic mode to the loopback device of a private, anonymous network
// namespace that nothing else can reach, where lo stays down and the
// program never sees a frame; the namespace (and with it the attachment)
// lives as long as the LiveGen holds its file descriptor, and goes away
// with the process even after kill -9. Calls then cost tens of
// microseconds, which is what lets the caller pace in 1-ms steps. Pinned
// reports whether this worked; without it everything still works, slower.
type LiveGen struct {
	objs    genObjects
	bs      uint32
	pinNS   int // anonymous namespace fd, -1 when unpinned
	pinLink link.Link
	pinErr  error
	closed  bool
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
	g := &LiveGen{bs: uint32(o.BatchSize), pinNS: -1}
	if err := spec.LoadAndAssign(&g.objs, nil); err != nil {
		return nil, fmt.Errorf("load generator program: %w", err)
	}
	g.pinErr = g.pin()
	if o.Rate > 0 {
		st := genState{Interval: max(1, uint64(1e9/o.Rate)), Burst: uint64(o.Burst)}
		if st.Burst == 0 {
			st.Burst = 64
		}
		if err := g.objs.GenState.Update(uint32(0), &st, ebpf.UpdateExist); err != nil {
			g.Close()
			return nil, fmt.Errorf("set generator pace: %w", err)
		}
	}
	return g, nil
}

// pin keeps the program in the XDP dispatcher (see LiveGen).
func (g *LiveGen) pin() error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open current netns: %w", err)
			return
		}
		defer unix.Close(orig)
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("unshare netns: %w", err)
			return
		}
		ns, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			l, lerr := link.AttachXDP(link.XDPOptions{Program: g.objs.GenTx, Interface: 1, Flags: link.XDPGenericMode}) // lo
			if lerr != nil {
				unix.Close(ns)
				err = fmt.Errorf("attach to private lo: %w", lerr)
			} else {
				g.pinNS, g.pinLink = ns, l
			}
		}
		if serr := unix.Setns(orig, unix.CLONE_NEWNET); serr != nil {
			errc <- errors.Join(err, fmt.Errorf("return to netns: %w", serr)) // thread stays locked and dies
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("pin generator in the xdp dispatcher: %w", err)
	}
	return nil
}

// Pinned returns nil when the program is held in the XDP dispatcher (cheap
// calls), or why it is not (each Run with Repeat > 1 then costs two RCU
// grace periods).
func (g *LiveGen) Pinned() error { return g.pinErr }

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
	var errs []error
	if g.pinLink != nil {
		errs = append(errs, g.pinLink.Close())
	}
	if g.pinNS >= 0 {
		errs = append(errs, unix.Close(g.pinNS))
	}
	errs = append(errs, g.objs.Close())
	return errors.Join(errs...)
}
