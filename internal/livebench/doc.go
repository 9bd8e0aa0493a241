// Package livebench is the live dataplane benchmark behind `warpctl bench
// live` (and scripts/bench-live): Warpflow's warpflowd beside dpdk-testpmd
// with its net_af_xdp driver, on the same veth of a lab built for the run,
// measured in the same run, interleaved, from the kernel's own counters.
//
// # What a measurement is
//
// One case is one peer (warpflowd, a second warpflowd binary for a
// before/after comparison, or testpmd), one mode (rxonly: receive and drop;
// macswap: swap the MACs and transmit back out of dp0), one load
// (flood: the generator as fast as it goes; controlled: paced) and one
// NAPI setup. For each case the harness starts the peer inside the lab's
// dataplane namespace (nsenter --net), waits until it is ready, starts the
// generator (internal/gen's XDP live-frame engine, in the generator
// namespace, on the generator's CPU; the controlled load paced by its
// program, which spaces the frames evenly), lets it warm up, and reads the
// counters at the start and the end of a fixed window:
//
//   - received: dp0's rx_queue_0_xdp_redirect (frames the XDP program put
//     on the AF_XDP socket's RX ring; a redirect the socket refused, RX ring
//     full or fill ring empty, counts in rx_queue_0_drops instead);
//   - forwarded (macswap): what came back to gen0 (its rx_queue_0_xdp_packets:
//     gen0's XDP_PASS program sees every frame) and dp0's tx_packets;
//   - offered: what the generator handed to veth (gen0's tx_queue_0_xdp_xmit
//     plus tx_queue_0_xdp_xmit_errors, the frames dp0's ring refused) and
//     what reached dp0's XDP program (rx_queue_0_xdp_packets).
//
// The stateful mode (stateful.go) puts warpflowd, running parse,
// conntrack, a ct filter and SNAT out of dp1, beside the kernel as an
// nftables router doing the same (peer nftables), from internal/gen's
// AF_XDP engine; its figure is what reached sink0 (sink0's XDP drop
// program's rx_queue_0_xdp_packets), with the router namespace's IP
// InReceives and ForwDatagrams beside it.
//
// The tools' own reports are kept for the record (warpflowd's final stats
// line, testpmd's forward statistics) but never used as a rate: testpmd's
// TX counters on veth are wrong, and a tool counting itself is not a
// measurement.
//
// # Setups
//
// Setup A is veth's default NAPI: the receive softirq runs on the core of
// the sender (the generator's), so the dataplane has its core to itself.
// Setup B is threaded NAPI (lab --napi threaded) with the NAPI kernel thread
// of dp0 (napi/dp0-ID, made anew each time a program attaches) pinned to the
// dataplane's core: the kernel's receive work and the dataplane share one
// core, where a receiver that spins starves the kernel thread that feeds it
// (receive livelock).
//
// # Hazards
//
// The harness pins all its threads to the generator's CPU before it starts
// anything, so that its own goroutines, ethtool and the peers' helper
// threads keep off the dataplane's core; the peers pin their forwarding
// loop themselves (warpflowd's cpus, testpmd's -l). Everything it makes is
// in the lab of its prefix, torn down at the end; every run is bounded by
// count and time.
package livebench
