package gpu

import (
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/workers"
)

// The memory contract between the host and kernel.cu: the slot record,
// the ring table, the kernel's arguments and its limits. This file is its
// one definition; wf_layout.h, which kernel.cu includes, is generated from
// it (and from pipelines.DeviceConstants) by TestLayoutHeader, which fails
// when the committed header differs (go test ./gpu -run TestLayoutHeader
// -update rewrites it).

// Slot states, the low two bits of the status word (workers/ uses the same
// lap<<2 | state scheme). The GPU writes only done.
const (
	stFree  uint32 = 0
	stReady uint32 = 1
	stDone  uint32 = 3
	stMask  uint32 = 3
)

// Slot record, bytes from the slot's start. The head is written by the
// host before it rings the doorbell: five 16-byte chunks (value, sequence
// tag). The out fields are written by the kernel before it stores done.
const (
	shWord       = 0  // status (low 32 bits) | count<<32
	shSeq        = 8  // the slot's sequence number
	shProg       = 16 // the device program's device address (its counters follow it)
	shArena      = 32 // the frame memory's device address
	shArenaLen   = 48 // its length in bytes
	shMaskFlags  = 64 // frame size - 1 | slot flags<<32
	slotHeadSize = 80

	soFallbacks = 80  // u32: packets the kernel handed back
	soUniform   = 84  // u32: 1 when every packet got soWord and none is a sample candidate
	soWord      = 88  // u32: the smallest verdict word of the slot
	soBytes     = 96  // u64: the packets' lengths as they leave, summed
	soSampleN   = 104 // u16 per sampler: the length of its candidate list
	slotDescs   = 128 // the descriptors (rings.Desc, 16 bytes each), rewritten when a tag moved a packet
)

// Slot flags (shMaskFlags' high half).
const (
	sfForced    = 1 // the forced bitmap names packets the kernel must hand back (cut captures)
	sfAllForced = 2 // hand back every packet (a tap is set)
)

// fallbackWord is the verdict word of a packet the kernel handed back to
// the CPU path.
const fallbackWord = ^uint32(0)

// Kernel limits and geometry.
const (
	kernelThreads = 128 // threads per block
	maxRings      = 32  // slot rings one kernel serves (one per I/O loop)
	winBytes      = 160 // the header window loaded per packet, in 16-byte chunks
	winHead       = 16  // bytes of headroom the window takes in front of a packet when the program pushes tags
)

// The ring table, in pinned host memory: per ring, the count of slots
// submitted (low 32 bits; the doorbell), then how many rings are in use,
// then a counter snapshot request: the host asks the kernel's poller to
// copy a program's counters (device memory) into host memory, so that
// reading them while the kernel runs needs no driver call.
const (
	rtDoorbells = 0
	rtActive    = 4 * maxRings
	rtSnapSrc   = 192 // u64: device address of the counters to copy
	rtSnapDst   = 200 // u64: device address of the host memory to copy them to
	rtSnapWords = 208 // u64: how many words
	rtSnapReq   = 216 // u64: the request's number, stored last
	rtSnapDone  = 224 // u64: the number of the last request done (the kernel's)
	rtSnapOp    = 232 // u64: what to do, a snap* op
	// The retire epoch: the host bumps rtRetire (low 32 bits) when it
	// gives back a program's memory while the kernel runs; the poller
	// stores in rtQuiesced the latest epoch that every block acknowledged
	// (dvAcks) after a fence, taken between slots. Memory retired at epoch
	// e is reused once rtQuiesced has reached e (Kernel.Load).
	rtRetire   = 240 // u64, the host's
	rtQuiesced = 248 // u64, the kernel's
	rtBytes    = 256
)

// Snapshot request ops: the kernel's poller copies words between device
// and host memory, or zeroes device memory, so that nothing on the device
// is read or written through the driver while the kernel runs (a memset
// is a kernel of its own, which a persistent kernel holding every
// multiprocessor never lets run: the H200 run hung there).
const (
	snapToHost   = 1 // device words to host memory (counters)
	snapToDevice = 2 // host words to device memory (a program)
	snapZero     = 3 // zero device words (a program's counters)
)

// acksMark is what the kernel's poller stores in word 2 of the stop page
// when it starts: the kernel acknowledges retire epochs (a kernel.ptx
// older than that protocol does not, and Load then does not wait for it).
const acksMark = 0xAC4E0001

// snapWords is the host memory the kernel copies counters into, in words:
// a larger program's counters are copied in pieces.
const snapWords = 1 << 18

// The kernel's own memory on the device (kernelArgs.Claims): per ring the
// next sequence number to take, then a mirror of the ring table that the
// kernel's poller block keeps copying from host memory, so the blocks
// look for work in device memory instead of each reading host memory over
// PCIe.
const (
	dvClaims       = 0                     // u64 per ring
	dvMirror       = 8 * maxRings          // u32 per ring: doorbells as last read
	dvMirrorActive = dvMirror + 4*maxRings // u32: rings in use as last read
	dvMirrorStop   = dvMirrorActive + 8    // u32: the stop word as last read
	dvStats        = dvMirrorStop + 8      // u64 each: claims, lost claims, mirror refreshes, naps
	dvRetire       = dvStats + 32          // u32: the retire epoch as last read (rtRetire)
	dvAcks         = 512                   // u32 per block: the retire epoch it acknowledged
	dvBytes        = dvAcks                // then 4 bytes per block (dvSize)
)

// dvSize is the kernel's own device memory for blocks blocks.
func dvSize(blocks int) int { return dvAcks + 4*blocks }

// slotLayout is where a slot of capacity n keeps its arrays.
type slotLayout struct {
	cap                                      int
	descs, verdicts, forced, samples, stride int
}

func newSlotLayout(n int) slotLayout {
	l := slotLayout{cap: n, descs: slotDescs}
	l.verdicts = l.descs + 16*n
	l.forced = l.verdicts + 4*n
	l.samples = l.forced + ((n+7)/8+15)&^15
	// Rounded so that no two slots share a cache line or a PCIe read.
	l.stride = (l.samples + 2*n*maxSamplers + 127) &^ 127
	return l
}

// maxSamplers is the candidate lists a slot has room for.
const maxSamplers = pipelines.DeviceMaxSamplers

// kernelArgs is the kernel's one parameter; the header's struct WfArgs is
// generated from it, field for field.
type kernelArgs struct {
	Slots     uint64 // device address of ring 0's slot 0; ring r's slots follow at r*RingBytes
	RingBytes uint64
	Table     uint64 // device address of the ring table (host memory)
	Claims    uint64 // device memory: the next sequence number to take, per ring
	Stop      uint64 // device address of the stop page (host memory)
	Nslots    uint32 // slots per ring
	Stride    uint32
	Cap       uint32
	DescsOff  uint32
	VerdOff   uint32
	ForcedOff uint32
	SampOff   uint32
	PollNs    uint32
	RingsN    uint32 // rings allocated (the ring table's active count never exceeds it)
	Pad       uint32
}

// verdictShift is the seam's: a verdict word is verdict<<shift | target.
const verdictShift = workers.VerdictShift
