package gen

import (
	"errors"
	"fmt"
	"time"

	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/xdp"
)

const (
	afxdpFrameSize = 2048
	afxdpTXRing    = 2048
	afxdpMinSlots  = 4096 // enough frames in flight to keep the TX ring full
	afxdpMaxSlots  = 1 << 16
)

// afxdpSender is the AF_XDP engine. The frames are written into the UMEM
// once, in slots 0..slots-1 (the capture, or the flows, repeated until
// there are at least afxdpMinSlots); the run sends slot after slot, in
// order, and a slot is reused only after its completion came back, so
// nothing is allocated or copied per frame.
type afxdpSender struct {
	umem     *xdp.UMEM
	sock     *xdp.Socket
	lens     []uint32 // per slot
	distinct int
	slots    uint64
	count    uint64
	sub      uint64 // descriptors submitted
	done     uint64 // completions consumed
	descs    []rings.Desc
	comp     []uint64
	prefix   []uint64 // prefix[i]: bytes of slots [0, i)
	budget   bool     // the TX budget was raised to the ring size
}

func newAFXDP(o Options, frames [][]byte) (*afxdpSender, error) {
	if o.Capture == "" && o.Flows > 1 {
		frames = Flows(frames[0], o.Flows)
	}
	if len(frames) > afxdpMaxSlots {
		return nil, fmt.Errorf("gen afxdp: %d distinct frames: at most %d", len(frames), afxdpMaxSlots)
	}
	reps := max(1, (afxdpMinSlots+len(frames)-1)/len(frames))
	slots := min(len(frames)*reps, afxdpMaxSlots/len(frames)*len(frames))
	u, err := xdp.NewUMEM(xdp.UMEMOptions{Frames: slots, FrameSize: afxdpFrameSize})
	if err != nil {
		return nil, fmt.Errorf("gen afxdp: %w", err)
	}
	a := &afxdpSender{umem: u, distinct: len(frames), slots: uint64(slots), count: o.Count,
		lens: make([]uint32, slots), descs: make([]rings.Desc, afxdpTXRing), comp: make([]uint64, afxdpTXRing),
		prefix: make([]uint64, slots+1)}
	mem := u.Mem()
	for i := range slots {
		f := frames[i%len(frames)]
		copy(mem[i*afxdpFrameSize:], f)
		a.lens[i] = uint32(len(f))
		a.prefix[i+1] = a.prefix[i] + uint64(len(f))
	}
	so := xdp.DefaultSocketOptions(o.Interface, o.Queue)
	so.RXSize = 0
	so.TXSize = afxdpTXRing
	so.CompletionSize = afxdpTXRing
	so.FillSize = 64 // unused: the socket never receives
	// The kernel frees a closed socket's buffer pool from a workqueue, so
	// a queue closed a moment ago (our own previous run) can still read as
	// bound: retry a busy queue briefly before calling it taken.
	s, err := xdp.NewSocket(u, so)
	for t0 := time.Now(); errors.Is(err, xdp.ErrBusy) && time.Since(t0) < time.Second; {
		time.Sleep(20 * time.Millisecond)
		s, err = xdp.NewSocket(u, so)
	}
	if err != nil {
		u.Close()
		return nil, fmt.Errorf("gen afxdp: %w", err)
	}
	a.sock = s
	// One sendto per TX ring rather than per 32 frames where the kernel
	// allows it (6.17+); where it does not, the default stands.
	a.budget = xdp.SetTXBudget(s, afxdpTXRing) == nil
	return a, nil
}

// reap consumes completions; they come back in submission order.
func (a *afxdpSender) reap() {
	for {
		n := a.sock.Completion().ConsumeAddrs(a.comp)
		a.done += uint64(n)
		if n < len(a.comp) {
			return
		}
	}
}

func (a *afxdpSender) burst(n int) error {
	a.reap()
	free := a.slots - (a.sub - a.done)
	want := min(uint64(n), a.count-a.sub, free, uint64(len(a.descs)))
	for i := range want {
		slot := (a.sub + i) % a.slots
		a.descs[i] = rings.Desc{Addr: slot * afxdpFrameSize, Len: a.lens[slot]}
	}
	put := a.sock.TX().Produce(a.descs[:want])
	a.sub += uint64(put)
	if err := a.sock.KickTX(); err != nil {
		return fmt.Errorf("gen afxdp: kick tx: %w", err)
	}
	if err := a.sock.Err(); err != nil {
		return fmt.Errorf("gen afxdp: %w", err)
	}
	return nil
}

func (a *afxdpSender) submitted() uint64 { return a.sub }

func (a *afxdpSender) sent() (uint64, error) {
	a.reap()
	return a.done, nil
}

func (a *afxdpSender) drain(deadline time.Time) error {
	for {
		a.reap()
		if a.done == a.sub {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gen afxdp: %d of %d: %w", a.sub-a.done, a.sub, ErrUnconfirmed)
		}
		if err := a.sock.KickTX(); err != nil {
			return fmt.Errorf("gen afxdp: kick tx: %w", err)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// bytes of the first sent frames in slot order.
func (a *afxdpSender) bytes(sent uint64) uint64 {
	full, rem := sent/a.slots, sent%a.slots
	return full*a.prefix[a.slots] + a.prefix[rem]
}

func (a *afxdpSender) close() error {
	return errors.Join(a.sock.Close(), a.umem.Close())
}
