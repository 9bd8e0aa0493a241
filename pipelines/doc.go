// Package pipelines is the pipeline graph model: a Spec parsed from a YAML
// config, validated without a kernel or goroutines, and compiled into an
// immutable Graph of stages joined by numbered edges, with one instance of
// every stage per worker.
//
// A stage is a graph node that processes a vector of packets and writes one
// outgoing edge per packet (DPDK rte_graph, FD.io VPP). The graph scatters
// the packets to the next nodes, with a fast path when all take the same
// edge. Terminal nodes (tx, drop, pass) write the packet's verdict into its
// metadata; the engine acts on verdicts once the whole batch is done.
package pipelines
