// Package nic reads (and, for the RSS key and the offloads, writes) what
// a network interface's driver reports, in-process and without the
// ethtool tool: the driver's name and version, channels, ring sizes, the
// RSS hash key and the offload features through the SIOCETHTOOL ioctl,
// and the XDP features the driver advertises through the kernel's
// "netdev" generic netlink family (Linux >= 6.3). warpctl doctor and
// internal/lab are its users.
//
// Every call works in the network namespace of the calling thread (the
// ioctl's socket and the netlink socket are made there), so a caller that
// entered a namespace on a locked thread (internal/lab.Do) reads that
// namespace's interfaces.
//
// A query the driver does not implement (veth and lo have no RSS key,
// lo no channels) returns an error wrapping ErrNotSupported, which is an
// answer and not a failure: the driver has nothing to say.
//
// # Why unsafe and x/sys/unix here
//
// The design keeps them at the kernel boundary: this is one. The
// ethtool ioctl takes a struct ifreq whose ifr_data points at the
// command's own struct, which only a raw ioctl with unsafe pointers can
// pass (x/sys/unix wraps ETHTOOL_GDRVINFO alone). The structs are laid
// out here as linux/ethtool.h lays them out, with a test of their sizes.
//
// The offload features ethtool -K sets by short name (tx, tso, gso, gro)
// are read and set here too (GetOffload, SetOffload, the legacy
// one-feature commands), for internal/lab: the repository's one ethtool
// implementation, so nothing needs the ethtool tool.
package nic
