package afxdp

import (
	"sync/atomic"

	"github.com/warpflow/warpflow/counters"
)

// portCounterDecls are a port's own counters, declared once: what `warpctl
// ports` and `stats` show for each socket and /metrics exports
// (warpflow_socket_<name>...), each with where the port keeps it.
var portCounterDecls = [...]struct {
	counters.Decl
	of func(*portCounters) *atomic.Uint64
}{
	{counters.Decl{Name: "rx", Unit: "packets", Help: "Packets the port took from its RX ring."}, func(c *portCounters) *atomic.Uint64 { return &c.rxPackets }},
	{counters.Decl{Name: "tx", Unit: "packets", Help: "Packets the port put on its TX ring."}, func(c *portCounters) *atomic.Uint64 { return &c.txPackets }},
	{counters.Decl{Name: "completions", Help: "Frames the port took back from its completion ring."}, func(c *portCounters) *atomic.Uint64 { return &c.completions }},
	{counters.Decl{Name: "fill_starved", Help: "Receives that found the fill ring below a quarter full and no free frame to top it up (frames held elsewhere: the back-pressure the kernel shows as rx_fill_ring_empty)."}, func(c *portCounters) *atomic.Uint64 { return &c.fillStarved }},
	{counters.Decl{Name: "tx_ring_full", Help: "Transmits that found less room on the TX ring than they had packets (the engine counts the refused ones as tx_full drops)."}, func(c *portCounters) *atomic.Uint64 { return &c.txRingFull }},
	{counters.Decl{Name: "tx_abandoned", Unit: "packets", Help: "Packets the port put on its TX ring (so in tx, and the engine's transmitted) that had not completed when it stopped, after a last bounded flush: they never left (the link down, the device refusing them, a full completion ring)."}, func(c *portCounters) *atomic.Uint64 { return &c.txAbandoned }},
	{counters.Decl{Name: "kicks", Help: "TX wake-up syscalls the kernel asked for (need_wakeup)."}, func(c *portCounters) *atomic.Uint64 { return &c.kicks }},
	{counters.Decl{Name: "wakeups", Help: "RX wake-up syscalls the kernel asked for (need_wakeup on the fill ring)."}, func(c *portCounters) *atomic.Uint64 { return &c.wakeups }},
	{counters.Decl{Name: "kick_errors", Help: "TX wake-ups the kernel refused, the interface being up."}, func(c *portCounters) *atomic.Uint64 { return &c.kickErrors }},
	{counters.Decl{Name: "link_down", Help: "Kicks and wake-ups refused while the interface was down (what waited on the TX ring went when it came back)."}, func(c *portCounters) *atomic.Uint64 { return &c.linkDown }},
	{counters.Decl{Name: "polls", Help: "Idle waits that gave the CPU up in poll(2)."}, func(c *portCounters) *atomic.Uint64 { return &c.polls }},
	{counters.Decl{Name: "poll_errors", Help: "Idle waits whose poll(2) failed."}, func(c *portCounters) *atomic.Uint64 { return &c.pollErrors }},
}

// portLayout is every port's counter layout.
var portLayout = func() *counters.Layout {
	fams := make([]counters.Family, len(portCounterDecls))
	for i, d := range portCounterDecls {
		fams[i] = counters.Single(d.Decl)
	}
	return counters.NewLayout(fams...)
}()

// CounterLayout is a port's counters' layout (Port.ReadCounters).
func CounterLayout() *counters.Layout { return portLayout }

// ReadCounters adds the port's counters into dst (CounterLayout's
// length); safe from any goroutine.
func (p *Port) ReadCounters(dst []counters.Value) {
	for i, d := range portCounterDecls {
		dst[i].Value += d.of(&p.stats).Load()
	}
}

// Counter returns the port's counter name (a declared one's name), 0 for
// a name it does not count.
func (p *Port) Counter(name string) uint64 {
	for _, d := range portCounterDecls {
		if d.Name == name {
			return d.of(&p.stats).Load()
		}
	}
	return 0
}
