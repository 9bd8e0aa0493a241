// Package doctor is `warpctl doctor`: it looks at the network interfaces
// warpflowd would serve and at the kernel and process it would run on,
// and says, one finding per line, what will work, what will work less
// well and what will not, each with the fix.
//
// Per interface: the link; the driver; the XDP modes it advertises
// (netdev netlink, Linux >= 6.3); whether an AF_XDP zero-copy bind is
// granted, tried on one queue and not guessed, and if it is refused, why
// and whether a copy-mode bind is; queues and channels; the RSS hash
// (whether the key is symmetric, so both directions of a flow reach one
// queue, and whether a key can be set, tried by writing the current key
// back); the MTU against the frame size (warpflowd does not use AF_XDP
// multi-buffer); XDP programs already attached (by whom: a bpf_link, a
// leftover legacy attach, a libxdp dispatcher); NAPI mode and the
// busy-poll and IRQ-deferral settings (gro_flush_timeout,
// napi_defer_hard_irqs); ring sizes. For the system: the kernel, AF_XDP,
// the features the daemon uses (XDP through bpf_link, shared UMEM,
// preferred busy poll, tried), the busy-poll sysctls and the capabilities
// this process holds against the ones the daemon needs.
//
// What it tries: a zero-copy and a copy AF_XDP bind on one queue (no XDP
// program is attached; the sockets are closed at once) and writing an
// interface's RSS key back unchanged. On a NIC that is serving traffic a
// zero-copy bind reconfigures that queue in some drivers (a short pause
// of that queue); Options.Try false skips both and says so.
//
// Everything runs in the calling thread's network namespace, as warpflowd
// would; sysfs is read only where it shows this namespace (it shows the
// namespace of whoever mounted it: `ip netns exec` remounts it).
package doctor
