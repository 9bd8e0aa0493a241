// Package lab builds, inspects and removes Warpflow's test topology: three
// network namespaces joined by two veth pairs, set up so that packet counts
// on them are exact.
//
//	<prefix>-gen            <prefix>-dp                     <prefix>-sink
//	gen0 198.18.0.1/24 <--> dp0 198.18.0.2/24
//	02:77:66:00:00:01       02:77:66:00:00:02
//	                        dp1 198.19.0.2/24 <--> sink0 198.19.0.1/24
//	                        02:77:66:00:00:03      02:77:66:00:00:04
//
// The dataplane (warpflowd) runs inside <prefix>-dp with dp0 as its input and
// dp1 as its output. Addresses come from the RFC 2544 benchmark range
// (198.18.0.0/15) only. The generator namespace routes 198.19.0.0/24 via
// 198.18.0.2 and the sink namespace routes 198.18.0.0/24 via 198.19.0.2;
// every neighbour a namespace needs is a permanent entry with the fixed MACs
// above (GenMAC, DP0MAC, DP1MAC, SinkMAC), so pipelines can write them.
//
// What makes counts exact:
//   - IPv6 is disabled (conf/all, conf/default and each veth, through
//     /proc/sys/net/ipv6/conf inside the namespace) before any link goes up,
//     so there is no neighbour discovery, DAD or router solicitation.
//   - ARP and multicast are off on all four veths (the static neighbours make
//     ARP unneeded); IPv4 sends no IGMP reports without joined groups. After
//     Up the four links stay silent: the tests check their counters.
//   - Checksum offload, TSO and GSO are off on all four veths (what
//     ethtool -K IF tx off tso off gso off does), so a frame the kernel
//     sends is complete on the wire and a dataplane reading it raw sees a
//     valid checksum. GRO stays off. Netlink (rtnetlink) cannot set these
//     features, so Up sets them in-process with the SIOCETHTOOL ioctl
//     (internal/nic's SetOffload, on a thread inside the namespace) and
//     reads each back; everything else is netlink
//     (github.com/vishvananda/netlink and netns). The lab runs no external
//     tool (no ip(8), no ethtool) except for threaded NAPI, below.
//
// veth fact: a frame transmitted into a veth by XDP_TX, a redirect or an
// AF_XDP socket reaches the peer only if the peer has an XDP program attached
// or GRO enabled (either gives the peer a NAPI instance); otherwise it
// vanishes with no error counter. So Up attaches a trivial XDP_PASS program
// (built with cilium/ebpf's asm, in native mode) to gen0 and sink0, the peers
// of the dataplane's interfaces, through the legacy netlink attach so that it
// stays after the process exits; deleting the veth removes it. dp0 and dp1
// are left bare for the dataplane's own program (AttachPass attaches the same
// XDP_PASS program elsewhere, e.g. on dp0 when a test has no dataplane).
//
// NAPI: with Options.NAPI = NAPIThreaded, dp0 and dp1 get threaded NAPI
// (/sys/class/net/IF/threaded = 1, kernel threads named napi/dpN-ID that can
// be pinned). The kernel accepts the write only while NAPI exists, so Up
// turns GRO on, writes it and turns GRO off again; the setting is kept and
// applies to the NAPI the dataplane's XDP program creates later. sysfs shows
// the namespace of the process that mounted it, so that write runs in a child
// (unshare --mount, mount -t sysfs) inside the dp namespace.
//
// Down removes the three namespaces of one prefix and the four veths in them
// and nothing else. A process still inside a namespace (a daemon) keeps it
// alive after its name is gone; the veths are deleted explicitly first so they
// disappear at once either way.
//
// Everything here needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN for the namespace
// mounts, CAP_BPF for the XDP program).
package lab
