// Package gpu is Warpflow's CUDA backend: a persistent kernel
// (kernel.cu, its PTX committed as kernel.ptx and regenerated with
// scripts/gen-ptx) that classifies packets with the pipeline's own
// compiled filter classifier, serialised by pipelines.FilterBlob, reading
// the frames where the input port put them.
//
// # No cgo
//
// The CUDA driver API is loaded from libcuda.so.1 with purego, so the
// package builds with CGO_ENABLED=0 and a machine without a GPU builds
// and runs everything else; Available and Open then return an
// ErrUnavailable error whose message is one line, "cuda backend
// unavailable: <reason>". Every driver call runs on one goroutine locked
// to its OS thread (runtime.LockOSThread), where the context is current;
// the hot path makes no driver call at all.
//
// # Memory
//
// The frame arena is pinned host memory mapped into the device: allocated
// (cuMemHostAlloc with CU_MEMHOSTALLOC_DEVICEMAP) or, for the engine's
// own arena or a UMEM, registered (cuMemHostRegister, DEVICEMAP). The
// slots are one pinned ring; a slot is one flat record: a 48-byte head
// (status word = lap<<2|state with the count above it, sequence number,
// blob handle, a copy of descriptor 0), then the descriptors (rings.Desc,
// 16 bytes each), then one uint32 result per packet (the rule index, the
// rule count for the default, or Fallback). The blob and, right after it,
// the per-rule counters (packets then bytes) live in device memory.
//
// # Protocol
//
// Slots go free -> ready -> done -> free, in sequence order, with the lap
// in the status word, as in workers/: the producer (Acquire, Submit)
// fills a free slot's descriptors and publishes ready|count with one
// atomic 64-bit store; kernel block b serves sequence numbers b, b+G,
// b+2G, ... (G blocks; slot = seq mod Slots, lap = seq / Slots), so every
// slot has one block; the block writes the results and stores done; the
// consumer (Completed, Release) reads them and stores free. The GPU never
// writes busy (a PCIe write saved; nothing reads it).
//
// Memory ordering. Host: plain stores of the slot's contents, then the
// atomic store of the status word (sync/atomic: on x86 a locked
// instruction, after the earlier stores in TSO order); the consumer's
// atomic load of done precedes its plain reads of the results. GPU: warp
// 0 polls the slot's 48-byte head (three lanes, one 16-byte relaxed
// system-scope load each: one PCIe read), so the blob handle and
// descriptor 0 arrive with the status word (their sequence tags say
// whether they are this slot's; a stale blob handle is read again); on
// ready, one acquire fence at system scope (fence.acq_rel.sys) before
// reading descriptors and frames (ld.global.cv, 16 bytes a load: the host
// rewrites them between laps; each packet's 128-byte header window is
// loaded by 8 lanes at once, one PCIe read per packet); a block barrier
// carries the acquire to every thread; after the results and a second
// barrier, thread 0 stores done with st.release.sys, whose cumulativity
// covers the whole block's result stores.
//
// Every warp-wide intrinsic with the full mask runs on all 32 lanes: a
// __ballot_sync under "if (lane == 0)" hung the first H200 runs
// (BENCHMARKS.md, "GPU backend"), and the emulation cannot catch that.
//
// A persistent kernel needs all its blocks resident at once (a block held
// back waits for one that never exits), so Open caps Options.Blocks at
// the occupancy the driver reports.
//
// # Fallback
//
// The kernel's parser takes the common case (Ethernet, up to two VLAN
// tags, IPv4 without options or fragmentation, IPv6 without extension
// headers, lengths consistent; TCP, UDP, ICMP, ICMPv6 or an undecoded
// protocol). Every other packet gets Fallback and the host classifies it
// on the CPU path (pipelines.FilterKeyOfPacket and FilterBlob.Lookup, the
// same blob), so classes and verdicts are the CPU's. parse.go is the
// parser's Go twin; TestParseCommonAgrees holds it to the parse stage.
//
// # Executor
//
// NewExecutor plugs the backend into the engine (dataplane.Options.
// NewExecutor, warpctl replay --backend cuda, settings.backend: cuda):
// the kernel classifies, then the pipeline's CPU runner finishes the batch
// with the kernel's rule per packet handed to the filter stage
// (pipelines.SetFilterHints), so every verdict and counter is the CPU
// path's by construction.
//
// # Emulation
//
// Options.Emulate plays the kernel in Go (emu.go) over the same slot
// records, with the same sequence arithmetic, parser and blob walk, so
// the host side of the protocol runs in CI, where there is no GPU.
//
// # Status
//
// On the H200 test machine the equality, executor and swap tests pass on
// the GPU, and TestGPUBench measures 357 - 424 Mpps classified from one
// host core at 1 000 - 100 000 rules, against 26 - 87 Mpps for CPU
// workers on 16 cores; the slot handshake is 12 us at batch 1, above the
// issue's 5 us (BENCHMARKS.md, "GPU backend", says where it goes).
// WARPFLOW_GPU_TRACE=1 logs setup, allocations, the launch and the stop;
// WARPFLOW_PTX loads a freshly built PTX instead of the embedded one.
package gpu
