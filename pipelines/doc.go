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
//
// # From config to packets
//
//	Parse(file, yaml) → *Spec        plain data, YAML nodes kept for positions
//	Compile(spec)     → *Graph       every problem at once (*ErrorList), or an
//	                                 immutable graph: dense node numbers, an
//	                                 edge table per node, implicit drop:<reason>
//	                                 terminals, a topological order
//	graph.NewRunner() → *Runner      one per worker: stage instances, one index
//	                                 vector per node, counters
//	runner.Process(b)                every packet of b gets a verdict
//
// Load does Parse and Compile together. CONFIG.md documents the format and
// the checks.
//
// # Hazards
//
//   - A Graph is shared; a Runner is not. Process, Stats and Counters of one
//     Runner must not overlap: read statistics only between batches or after
//     the worker has stopped.
//   - Ports() and Reasons() are the tables Meta.Target indexes for
//     VerdictTX and VerdictDrop. They belong to one Graph: after a hot swap,
//     interpret verdicts with the graph that produced them.
//   - A stage that writes an edge number it does not have is a bug, but it
//     must not crash the worker: such packets go to the drop terminal of
//     BadEdgeReason, which every graph has (and counts like any node).
//   - Stage Build functions run on untrusted configs: a panic in one is
//     recovered and reported as an error of that stage, and stages whose
//     options could not be decoded are not built.
//   - Stateful stages (conntrack, nat, reassemble: stateful.go) keep
//     tables per Runner, so the engine must give all packets of a flow,
//     both directions, to one Runner: Graph.Steering says where
//     (flowhash.go), and the engine steers by it before the first stateful
//     stage. Their time is the batch's (rings.Batch.Time, the packets'
//     capture time in replay), never the wall clock, so a replay is
//     deterministic. Runner.CarryState hands the tables to the runner of a
//     new graph on a swap where the stage's name and kind are unchanged.
//   - Process must not allocate, lock or call the clock per packet: the
//     Runner reads the clock once per node per batch, and only with
//     RunnerOptions.Timing.
package pipelines
