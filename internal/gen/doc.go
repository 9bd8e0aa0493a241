// Package gen is Warpflow's traffic generator (warpctl gen): it sends
// synthetic IPv4/UDP frames or a capture's frames, looped, out of one
// interface from inside a network namespace, at a given rate or as fast as
// it can, always bounded by a count and a duration, and reports what the
// kernel actually took, never what was asked.
//
// Two engines:
//
//   - EngineLive: XDP live-frame mode, xdp-tools' xdp-trafficgen method.
//     BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES runs a small XDP program
//     (xdp/gen.c) Repeat times on one frame, as if received on the
//     interface, and the program returns XDP_TX, so the kernel transmits
//     the frame out of that interface through the driver's XDP path. The
//     program takes a sequence number per run, writes the flow's UDP source
//     port (Flows > 1; UDP checksum set to 0) and refuses runs past the
//     count, so the count is exact even when the kernel restarts a call
//     after a signal. The thread making the call must be in the
//     interface's namespace (the kernel resolves the ifindex there), which
//     is why Run does all its work inside lab.Do. Pacing runs the program
//     in chunks (about 1 ms of frames) and sleeps between them; that is
//     cheap only because xdp.LiveGen keeps its program in the kernel's XDP
//     dispatcher (see there: otherwise each call costs two RCU grace
//     periods, ~24 ms here). A capture is sent one frame per call, far
//     slower: use afxdp for captures at speed.
//   - EngineAFXDP: an AF_XDP socket's TX ring (copy mode on veth). The
//     frames (the capture, or one per flow with its own checksum) are
//     written into the UMEM once, repeated to at least 4096 slots; the run
//     puts descriptors for slot after slot on the TX ring and reuses a
//     slot only after its completion came back, with need-wakeup kicks.
//     Nothing is allocated or copied per frame (TestAFXDPBurstAllocs). The
//     count is the completions.
//
// veth facts measured on this kernel (6.18), with tests that record them:
// the live engine's XDP_TX frames reach the peer only if the peer has an
// XDP program or GRO (otherwise they vanish: no counter moves, and Run
// warns because the interface's tx_packets fell short of what was sent;
// TestPeerWithoutXDP); AF_XDP copy-mode frames take the skb transmit path
// and arrive either way. A peer that cannot keep up shows as tx_dropped on
// the sending interface. veth counts rx bytes of XDP frames whole and of
// skbs without the Ethernet header.
//
// Flows vary the UDP source port only (SrcPort .. SrcPort+Flows-1); the
// source address stays fixed.
package gen
