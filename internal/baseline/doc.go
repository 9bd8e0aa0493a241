// Package baseline measures the two reference figures the bench command
// prints next to Warpflow's own: the obvious hand-written gopacket program
// (GopacketParse, GopacketParseReader) and DPDK's dpdk-testpmd replaying a
// capture from memory (Testpmd).
//
// Both are in-run baselines: they run on the same machine, in the same
// invocation and over the same capture as the Warpflow figure, so the
// comparison does not depend on numbers copied from another host. Neither
// is a hot-path package; they allocate freely outside their timed regions.
//
// Hazards: Testpmd starts an external process that busy-polls one core
// for the whole run, so on a small shared machine it competes with
// everything else; run it alone. It needs root (DPDK EAL) and Debian's
// dpdk-dev package (which ships dpdk-testpmd) plus the pcap and null
// poll-mode drivers.
package baseline
