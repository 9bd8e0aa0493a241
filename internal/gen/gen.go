package gen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/warpflow/warpflow/internal/lab"
	"github.com/warpflow/warpflow/xdp"
)

// Engine chooses how frames are sent.
type Engine int

const (
	// EngineLive runs an XDP program returning XDP_TX with BPF_PROG_RUN in
	// live-frame mode (xdp-trafficgen's method): the fastest.
	EngineLive Engine = iota
	// EngineAFXDP transmits from an AF_XDP socket's TX ring, frames
	// prebuilt in its UMEM once and recycled from the completion ring.
	EngineAFXDP
)

func (e Engine) String() string {
	switch e {
	case EngineLive:
		return "live"
	case EngineAFXDP:
		return "afxdp"
	}
	return fmt.Sprintf("Engine(%d)", int(e))
}

// ParseEngine parses "live" or "afxdp".
func ParseEngine(s string) (Engine, error) {
	switch s {
	case "live":
		return EngineLive, nil
	case "afxdp":
		return EngineAFXDP, nil
	}
	return 0, fmt.Errorf("engine %q: want live or afxdp", s)
}

// Options configure Run. Count and Duration both bound every run.
type Options struct {
	Netns     string // network namespace to send from; "" for the caller's
	Interface string // interface to send out of
	Queue     int    // its queue (live: the rx queue the context claims; afxdp: the tx queue bound)
	Engine    Engine

	// Capture, when set, is a pcap or pcapng file whose Ethernet frames are
	// sent in order, looped; the synthetic frame fields below are ignored.
	Capture string
	// Synthetic IPv4/UDP frames: Size bytes (Ethernet header included, FCS
	// excluded), Flows distinct UDP source ports SrcPort.. SrcPort+Flows-1.
	Size             int
	Flows            int
	SrcMAC, DstMAC   net.HardwareAddr
	SrcIP, DstIP     netip.Addr
	SrcPort, DstPort uint16

	// Batch is the live engine's kernel batch (BPF_PROG_RUN batch_size:
	// frames per page-pool refill and transmit flush), 1 to 256; 0 for the
	// kernel's 64.
	Batch int

	Rate     float64       // frames per second; 0 sends as fast as the engine can
	Count    uint64        // stop after this many frames (required: > 0)
	Duration time.Duration // and after this long (required: > 0)

	// Burst, with Rate, asks for smooth pacing: at most Burst frames back
	// to back. The live engine (synthetic frames) then paces in its program
	// (xdp.LiveGenOptions.Rate: frames evenly spaced, Burst the most it
	// catches up after a gap between calls); the afxdp engine puts at most
	// Burst frames on the ring per call and spins through the waits, which
	// are shorter than a sleep can be. Either way the sender keeps its CPU
	// busy. 0: paced by the loop in calls of about 1 ms worth.
	Burst int

	// Progress, when set, is called about once a second from the sending
	// goroutine.
	Progress func(Progress)
}

// DefaultOptions sends 64-byte frames of one flow from the default lab's
// generator (gen0 in wf-gen) across the dataplane to the sink's address,
// as fast as possible, at most 1,000,000 frames or 10 seconds.
func DefaultOptions() Options {
	return Options{
		Netns:     lab.GenNS(lab.DefaultPrefix),
		Interface: lab.GenIface,
		Engine:    EngineLive,
		Size:      MinFrame,
		Flows:     1,
		SrcMAC:    lab.GenMAC,
		DstMAC:    lab.DP0MAC,
		SrcIP:     lab.GenAddr.Addr(),
		DstIP:     lab.SinkAddr.Addr(),
		SrcPort:   1024,
		DstPort:   9, // discard
		Count:     1_000_000,
		Duration:  10 * time.Second,
	}
}

func (o Options) validate() error {
	if o.Interface == "" {
		return errors.New("gen: no interface")
	}
	if o.Queue < 0 {
		return fmt.Errorf("gen queue %d: must not be negative", o.Queue)
	}
	if o.Engine != EngineLive && o.Engine != EngineAFXDP {
		return fmt.Errorf("gen engine %d: unknown", int(o.Engine))
	}
	if o.Count == 0 {
		return errors.New("gen count 0: must be positive (every run is bounded)")
	}
	if o.Duration <= 0 {
		return fmt.Errorf("gen duration %s: must be positive (every run is bounded)", o.Duration)
	}
	if o.Rate < 0 {
		return fmt.Errorf("gen rate %g: must not be negative", o.Rate)
	}
	if o.Burst < 0 {
		return fmt.Errorf("gen burst %d: must not be negative", o.Burst)
	}
	if o.Capture == "" {
		if o.Flows < 1 || o.Flows > xdp.MaxGenFlows {
			return fmt.Errorf("gen flows %d: want 1 to %d", o.Flows, xdp.MaxGenFlows)
		}
		if int(o.SrcPort)+o.Flows-1 > 0xffff {
			return fmt.Errorf("gen source port %d + %d flows: ports past 65535", o.SrcPort, o.Flows)
		}
	}
	return nil
}

// Progress is a once-a-second report.
type Progress struct {
	Elapsed time.Duration
	Sent    uint64  // frames sent so far
	PPS     float64 // over the last interval
}

// Result says what was actually sent: counted by the kernel side (program
// runs that returned XDP_TX; AF_XDP completions), never the request.
type Result struct {
	Engine    string        `json:"engine"`
	Mode      string        `json:"mode"` // "xdp live frames", or the AF_XDP bind mode granted ("copy", "zerocopy")
	Netns     string        `json:"netns"`
	Interface string        `json:"interface"`
	Ifindex   int           `json:"ifindex"`
	Queue     int           `json:"queue"`
	Frames    int           `json:"frames"`      // distinct frames looped (capture frames, or afxdp's flows)
	FrameLen  float64       `json:"frame_bytes"` // mean frame length sent
	Flows     int           `json:"flows"`
	Rate      float64       `json:"offered_rate_pps"` // requested; 0: as fast as possible
	Count     uint64        `json:"count"`            // requested bound
	Sent      uint64        `json:"sent"`             // frames the kernel took (see above)
	Bytes     uint64        `json:"bytes"`
	Elapsed   time.Duration `json:"elapsed_ns"`
	PPS       float64       `json:"pps"`
	Stopped   string        `json:"stopped"` // "count", "duration", "canceled", "error"

	// Live engine: runs past the limit (a restarted syscall's extras),
	// dropped, never sent.
	Over uint64 `json:"over,omitempty"`
	// Live engine: frames sent without the flow rewrite (not IPv4/UDP).
	Unrewritten uint64 `json:"unrewritten,omitempty"`
	// AF_XDP: descriptors put on the TX ring, those not completed when the
	// run ended, and the kernel's invalid-descriptor count.
	Submitted   uint64 `json:"submitted,omitempty"`
	Unconfirmed uint64 `json:"unconfirmed,omitempty"`
	TXInvalid   uint64 `json:"tx_invalid,omitempty"`
	// AF_XDP: frames one copy-mode sendto may send (XDP_MAX_TX_SKB_BUDGET,
	// raised to the TX ring size where the kernel has it; 0: the kernel's
	// default of 32).
	TXBudget int `json:"tx_budget,omitempty"`

	// The interface's own counters over the run (netlink link statistics):
	// on a veth, frames that XDP_TX or AF_XDP hand over and the peer cannot
	// take show as TXDropped here.
	IfaceTXPackets uint64 `json:"iface_tx_packets"`
	IfaceTXDropped uint64 `json:"iface_tx_dropped"`

	// Warnings name frames the interface's counters say did not go out.
	Warnings []string `json:"warnings,omitempty"`
}

// programPaced reports whether the live program paces the run itself: a
// synthetic run with a Burst (one frame, repeated); a capture's frames go
// one call each and are paced by the loop.
func programPaced(o Options) bool {
	return o.Rate > 0 && o.Burst > 0 && o.Engine == EngineLive && o.Capture == ""
}

// sender is one engine. Both counts are cumulative.
type sender interface {
	// burst sends up to n more frames, never past the run's count.
	burst(n int) error
	// submitted is what was handed over; sent is what the kernel confirmed.
	submitted() uint64
	sent() (uint64, error)
	// drain waits (bounded) for submitted frames to be confirmed.
	drain(deadline time.Time) error
	bytes(sent uint64) uint64
	close() error
}

// ErrUnconfirmed: some AF_XDP frames were submitted but never completed.
var ErrUnconfirmed = errors.New("frames submitted but not completed")

// Run sends frames as o says, from inside o.Netns, and returns what was
// sent. It stops at o.Count frames, after o.Duration, or when ctx ends
// (Stopped "canceled", not an error).
func Run(ctx context.Context, o Options) (Result, error) {
	if err := o.validate(); err != nil {
		return Result{}, err
	}
	frames, err := framesFor(o)
	if err != nil {
		return Result{}, err
	}
	var res Result
	do := func(fn func() error) error { return fn() }
	if o.Netns != "" {
		if _, err := os.Stat(filepath.Join(lab.NamespaceDir, o.Netns)); err != nil {
			return Result{}, fmt.Errorf("network namespace %s not found (is the lab up? warpctl lab up): %w", o.Netns, err)
		}
		do = func(fn func() error) error { return lab.Do(o.Netns, fn) }
	}
	err = do(func() error {
		var e error
		res, e = run(ctx, o, frames)
		return e
	})
	return res, err
}

func framesFor(o Options) ([][]byte, error) {
	if o.Capture != "" {
		f, _, err := ReadCapture(o.Capture)
		return f, err
	}
	f, err := BuildUDP(UDPTemplate{SrcMAC: o.SrcMAC, DstMAC: o.DstMAC, SrcIP: o.SrcIP, DstIP: o.DstIP, SrcPort: o.SrcPort, DstPort: o.DstPort, Size: o.Size})
	if err != nil {
		return nil, err
	}
	return [][]byte{f}, nil
}

func run(ctx context.Context, o Options, frames [][]byte) (Result, error) {
	res := Result{Engine: o.Engine.String(), Netns: o.Netns, Interface: o.Interface, Queue: o.Queue,
		Flows: o.Flows, Rate: o.Rate, Count: o.Count, Frames: len(frames)}
	if o.Capture != "" {
		res.Flows = 0
	}
	link, err := netlink.LinkByName(o.Interface)
	if err != nil {
		return res, fmt.Errorf("gen: interface %s not found in namespace %q: %w", o.Interface, o.Netns, err)
	}
	res.Ifindex = link.Attrs().Index
	if q := link.Attrs().NumRxQueues; q > 0 && o.Queue >= q {
		return res, fmt.Errorf("gen: queue %d out of range: %s has %d queue(s)", o.Queue, o.Interface, q)
	}
	before := link.Attrs().Statistics

	var s sender
	switch o.Engine {
	case EngineLive:
		l, err := newLive(o, res.Ifindex, frames)
		if err != nil {
			return res, err
		}
		res.Mode = "xdp live frames"
		if err := l.g.Pinned(); err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("%v: every kernel call costs two RCU grace periods, so rates and pacing suffer", err))
		}
		s = l
	case EngineAFXDP:
		a, err := newAFXDP(o, frames)
		if err != nil {
			return res, err
		}
		res.Mode = a.sock.Bound().String()
		res.Frames = a.distinct
		s = a
	}
	defer s.close()

	// Chunks: as fast as possible, big ones (one syscall sends many frames
	// in live mode); paced, about 1 ms worth each.
	chunk := 1 << 16
	if o.Engine == EngineAFXDP {
		chunk = 1 << 11
	}
	paced := o.Rate > 0 && !programPaced(o)
	if programPaced(o) {
		// The program spaces the frames (most runs send nothing): long
		// calls, and the loop below runs as if unpaced.
		chunk = 1 << 20
	}
	if paced {
		chunk = max(1, min(chunk, int(o.Rate/1000)))
		if o.Burst > 0 {
			chunk = min(o.Burst, chunk)
		}
	}
	start := time.Now()
	lastT, lastN := start, uint64(0)
	res.Stopped = "count"
	var runErr error
loop:
	for {
		now := time.Now()
		el := now.Sub(start)
		if sub := s.submitted(); sub >= o.Count {
			break
		}
		if el >= o.Duration {
			res.Stopped = "duration"
			break
		}
		select {
		case <-ctx.Done():
			res.Stopped = "canceled"
			break loop
		default:
		}
		if now.Sub(lastT) >= time.Second {
			n, err := s.sent()
			if err != nil {
				runErr = err
				break
			}
			if o.Progress != nil {
				o.Progress(Progress{Elapsed: el, Sent: n, PPS: float64(n-lastN) / now.Sub(lastT).Seconds()})
			}
			lastT, lastN = now, n
		}
		n := chunk
		if paced {
			due := int64(o.Rate*el.Seconds()) + 1 - int64(s.submitted())
			if due <= 0 {
				wait := time.Duration(float64(-due+1) / o.Rate * float64(time.Second))
				if o.Burst > 0 && wait < time.Millisecond {
					// A sleep here lasts a millisecond at least
					// (the runtime's timer resolution): spin.
					for t := time.Now(); time.Since(t) < wait; {
					}
					continue
				}
				time.Sleep(min(wait, time.Millisecond))
				continue
			}
			n = int(min(due, int64(chunk)))
		}
		if err := s.burst(n); err != nil {
			runErr = err
			break
		}
	}
	derr := s.drain(time.Now().Add(time.Second))
	res.Elapsed = time.Since(start)
	n, err := s.sent()
	if err != nil {
		runErr = errors.Join(runErr, err)
	}
	res.Sent = n
	res.Bytes = s.bytes(n)
	if n > 0 {
		res.FrameLen = float64(res.Bytes) / float64(n)
	}
	if res.Elapsed > 0 {
		res.PPS = float64(n) / res.Elapsed.Seconds()
	}
	switch v := s.(type) {
	case *live:
		c, err := v.g.Counts()
		if err == nil {
			res.Over, res.Unrewritten = c.Over, c.Unchanged
		}
	case *afxdpSender:
		res.Submitted = v.sub
		res.Unconfirmed = v.sub - v.done
		if v.budget {
			res.TXBudget = afxdpTXRing
		}
		if st, err := v.sock.Stats(); err == nil {
			res.TXInvalid = st.TXInvalidDescs
		}
	}
	l, err := netlink.LinkByIndex(res.Ifindex)
	switch {
	case err != nil || l.Attrs().Name != o.Interface:
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s is gone: its counters could not be read after the run", o.Interface))
	case before != nil && l.Attrs().Statistics != nil:
		a := l.Attrs().Statistics
		res.IfaceTXPackets = a.TxPackets - before.TxPackets
		res.IfaceTXDropped = a.TxDropped - before.TxDropped
		res.Warnings = append(res.Warnings, warnings(res)...)
	}
	if runErr != nil {
		res.Stopped = "error"
		return res, runErr
	}
	return res, derr
}

// warnings compares what the engine handed over with the interface's own
// counters. On a veth the live engine's frames that the peer cannot take
// (no XDP program, no GRO) are freed without touching any counter: that
// shows as tx_packets + tx_dropped short of Sent.
func warnings(r Result) []string {
	var w []string
	if r.Sent == 0 {
		return nil
	}
	if r.Engine == EngineLive.String() && r.IfaceTXPackets+r.IfaceTXDropped < r.Sent {
		w = append(w, fmt.Sprintf("%s counted %d of %d frames as transmitted or dropped: the rest vanished (on a veth the peer needs an XDP program or GRO to receive XDP_TX frames: warpctl lab xdp-pass, or run the dataplane)",
			r.Interface, r.IfaceTXPackets+r.IfaceTXDropped, r.Sent))
	}
	if r.Rate > 0 && r.Stopped == "duration" && r.PPS < 0.95*r.Rate {
		w = append(w, fmt.Sprintf("achieved %.0f frames/s of the %.0f asked: the %s engine cannot go faster here", r.PPS, r.Rate, r.Engine))
	}
	if r.IfaceTXDropped > 0 {
		w = append(w, fmt.Sprintf("%s dropped %d of %d frames on transmit (on a veth: the peer's ring was full; its receiver is slower than the offered rate)",
			r.Interface, r.IfaceTXDropped, r.Sent))
	}
	return w
}
