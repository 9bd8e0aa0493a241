// Package bench measures Warpflow's replay throughput next to baselines
// measured in the same run on the same pinned core: the idiomatic gopacket
// program and dpdk-testpmd. The machines we run on are shared and noisy, so
// the figures that mean something are the ratios between rows of one run,
// not any single absolute rate.
package bench
