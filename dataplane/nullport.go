package dataplane

import (
	"net"
	"sync/atomic"

	"github.com/warpflow/warpflow/rings"
)

// NullPort is a transmit-only Port that accepts every packet and only counts
// it, like DPDK's net_null: a sink for benchmarks that measures the pipeline
// and not the output. It never touches packet bytes.
type NullPort struct {
	name    string
	closed  atomic.Bool
	packets atomic.Uint64
	bytes   atomic.Uint64
}

// NewNullPort returns a null port named name.
func NewNullPort(name string) *NullPort { return &NullPort{name: name} }

// Name returns the port's name.
func (p *NullPort) Name() string { return p.name }

// Receive returns ErrNotReceiver: the null port only transmits.
func (p *NullPort) Receive(*rings.Batch) (int, error) {
	if p.closed.Load() {
		return 0, net.ErrClosed
	}
	return 0, ErrNotReceiver
}

// Transmit accepts all of descs.
func (p *NullPort) Transmit(_ *rings.Arena, descs []rings.Desc) (int, error) {
	if p.closed.Load() {
		return 0, net.ErrClosed
	}
	p.packets.Add(uint64(len(descs)))
	p.bytes.Add(sumLen(descs))
	return len(descs), nil
}

// Recycle does nothing: the null port never hands out frames.
func (p *NullPort) Recycle([]rings.Desc) {}

// Close closes the port. Calls after Close return net.ErrClosed.
func (p *NullPort) Close() error {
	if p.closed.Swap(true) {
		return net.ErrClosed
	}
	return nil
}

// NullStats counts what a NullPort accepted.
type NullStats struct {
	Packets uint64
	Bytes   uint64
}

// Stats returns the port's counters; safe from any goroutine.
func (p *NullPort) Stats() NullStats {
	return NullStats{Packets: p.packets.Load(), Bytes: p.bytes.Load()}
}

var _ Port = (*NullPort)(nil)
