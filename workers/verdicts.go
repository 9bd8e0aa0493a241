package workers

import "github.com/warpflow/warpflow/rings"

// VerdictExecutor is an Executor whose completed batches carry their
// verdicts in one compact word per packet (Verdicts) instead of in each
// packet's Meta: a processor that runs the whole pipeline elsewhere (a GPU
// persistent kernel) writes 4 bytes per packet where the host reads them
// in order, and the packets' Meta is never written at all. The consumer
// acts on Verdicts for the batch Completed returned; b.Outcome, when
// Valid, still summarises a batch whose packets all took one verdict and
// target with no sample candidate, and b.Descs are the packets as they
// leave the pipeline (a pushed or popped tag moves Addr and Len).
type VerdictExecutor interface {
	Executor
	// Verdicts returns the verdicts of the batch Completed returned last.
	// Its slices are views of the executor's memory, valid until Release.
	Verdicts() Verdicts
}

// Verdicts are a completed batch's verdicts, in packet order.
type Verdicts struct {
	// Words holds packet i's verdict and target (PackVerdict): every
	// packet has one, VerdictNone never.
	Words []uint32
	// Samples[k] lists, in packet order, the packets sample stage k (the
	// pipeline's sampler k, Graph.Samplers) marked as candidates.
	Samples [][]uint16
}

// VerdictShift is where a verdict word keeps the rings.Verdict: the target
// (a port or reason index) is the low 16 bits.
const VerdictShift = 16

// PackVerdict returns the verdict word of verdict v with target t.
func PackVerdict(v rings.Verdict, t uint16) uint32 { return uint32(v)<<VerdictShift | uint32(t) }

// UnpackVerdict is PackVerdict's inverse.
func UnpackVerdict(w uint32) (rings.Verdict, uint16) {
	return rings.Verdict(w >> VerdictShift), uint16(w)
}
