// Package bench measures Warpflow's replay throughput next to baselines
// measured in the same run on the same pinned core: the idiomatic gopacket
// program and dpdk-testpmd (macswap and io forwarding). The machines we run
// on are shared and noisy, so the figures that mean something are the
// ratios between rows of one run, not any single absolute rate.
//
// RunScaling (scaling.go) measures how the default shape scales with
// cores: N pinned workers behind one I/O loop, and N engines side by side,
// each inline on its own core over its own preloaded capture, with the
// efficiency of each N against the smallest (linear = 1.0) and the rate
// one I/O loop can hand out at all (a transmit-only pipeline). Every
// point's packets are checked against what its replay ports handed out,
// and its allocations are counted over the timed region: the hot path
// allocates nothing per packet, so a run costs a handful whatever its
// length.
//
// Hazards: a measurement pins goroutines to CPUs (their threads die with
// them); the workers shape needs its I/O CPU outside the workers' CPUs;
// the charts are drawn by separate programs (chart, scalingchart) so that
// warpctl carries no plotting modules.
package bench
