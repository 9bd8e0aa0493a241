// Package xdp will be Warpflow's one gateway to the kernel: AF_XDP sockets,
// UMEM registration of the frame arena (rings.Arena), the fill, RX, TX and
// completion rings, the eBPF redirect program attached through a bpf_link,
// and feature probes that return errors wrapping ErrNotSupported.
//
// It holds no code yet: the in-process dataplane (rings, workers,
// pipelines, pcap replay) comes first. Its contract is already fixed by
// package rings: rings.Desc has the layout of struct xdp_desc, so
// descriptors will move between the kernel's rings and ours unchanged, and
// rings.Arena's frames are power-of-two sized with headroom, as a UMEM's
// chunks are.
package xdp
