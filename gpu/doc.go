// Package gpu is Warpflow's CUDA backend: the worker pool on the GPU. A
// persistent kernel (kernel.cu, its PTX committed as kernel.ptx and
// regenerated with scripts/gen-ptx) runs the whole pipeline on each
// packet where the input port put it, and hands back one verdict word per
// packet; the host's I/O loop acts on the verdicts in receive order and
// does nothing else per packet.
//
// # What the kernel runs
//
// pipelines.CompileDevice lays the compiled graph out for the device: every
// node with its edge table and options, each filter's own classifier (the
// FilterBlob the CPU classifier serialises to) and where each counter is.
// The kernel walks it per packet from the entry node to a terminal: the
// parse stage for the common case (Ethernet, up to two VLAN tags, IPv4
// without options or fragmentation, IPv6 without extension headers,
// lengths consistent; TCP, UDP, SCTP, ICMP, ICMPv6, IP in IP when tunnels
// are off, or an undecoded protocol; every header in the window), the
// filter, rewrite (MACs, VLAN push and pop, TTL and hop limit with the drop
// at expiry, IPv4 SNAT and DNAT with incremental checksums), balance (the
// same symmetric hash and edge), count (by the stage's keys), sample (it
// marks candidates) and the terminals. A graph with a stage the device
// cannot run (a parse stage that is not first, more than 64 nodes, more
// than 4 samplers or 4 tag pushes) is refused at load with the stage
// named, or runs on CPU workers with a one-line notice, as the user chose
// (ExecutorOptions.Unsupported). A packet outside the parse stage's common
// case, or cut by the capture, or any packet while a tap is set, is handed
// back (its verdict word WF_FALLBACK) before anything is counted or
// written, and the executor runs it through the pipeline's own runners on
// CPU workers, in order.
//
// # One source
//
// The kernel's per-packet code (wf_window, wf_parse, the classifier, the
// stages, wf_walk) is plain C++ that also builds for the host: host/shim.h
// defines what it needs of CUDA and host/main.cc serves it over a pipe.
// BuildHostKernel compiles it with g++ from the source embedded in this
// package, and Options.Emulate runs it: the emulation plays the slot
// protocol in Go and sends each slot's packets (with the frame bytes around
// them) to that program, so CI runs kernel.cu's own code over every test
// capture and compares outputs and counters with the CPU path
// (TestEqualityEmulated; TestEqualityCUDA on a GPU). The constants and
// layouts Go and CUDA share are generated into wf_layout.h from layout.go
// and pipelines.DeviceConstants (TestLayoutHeader fails when it drifts).
//
// # No cgo
//
// The CUDA driver API is loaded from libcuda.so.1 with purego, so the
// package builds with CGO_ENABLED=0 and a machine without a GPU builds
// and runs everything else; Available and Open then return an
// ErrUnavailable error whose message is one line, "cuda backend
// unavailable: <reason>". Every driver call runs on one goroutine locked
// to its OS thread; the hot path makes no driver call at all.
//
// # Memory
//
// Frame memory (the engine's arena, a UMEM) is registered with the device
// (cuMemHostRegister, device-mapped) and stays registered until the kernel
// closes. The slot rings, the ring table and the counter buffer are pinned
// host memory (cuMemHostAlloc, device-mapped); programs and their counters
// live in device memory. While the kernel runs no driver call touches
// device memory: a cuMemsetD8Async is a kernel of its own, which a
// persistent kernel holding every multiprocessor never lets run (the first
// H200 engine runs hung there). So programs loaded while it runs go to new
// device memory that the kernel's poller fills from host memory, and
// counters are copied by the poller into host memory on request
// (Kernel.Counters).
//
// Memory of unloaded programs is never freed while the kernel runs, only
// reused, so a daemon that swaps often holds a bounded number of program
// regions (about three for pipelines of one size: MemoryStats). A region
// is reused only once the kernel has provably stopped reading it: Unload
// (after the program's last slot completed) publishes a new retire epoch
// in the ring table; the poller mirrors it into device memory; each block,
// between two slots, sees it, issues a fence.acq_rel.gpu (so that its
// multiprocessor's L1, which the program's words were read through, keeps
// no line of them) and stores the epoch in its acknowledgement word; the
// poller publishes the epoch every block has reached. Load reuses a
// region once that epoch has come, writing the new words through the
// poller as for new memory; it waits for the acknowledgement at most 50
// ms, then allocates instead and counts it (MemoryStats.Unacknowledged).
//
// # Protocol
//
// One kernel serves up to 32 slot rings, one per I/O loop (executor). A
// slot is one flat record: an 80-byte head (status word, program, frame
// memory, frame mask and flags, each chunk with its sequence number), the
// kernel's summary (handed-back count, uniform verdict, bytes, candidate
// list lengths), the descriptors (rings.Desc), one verdict word per packet,
// a forced-fallback bitmap and one candidate list per sampler. The ring
// table in host memory holds each ring's doorbell (the count of slots its
// producer submitted) and the number of rings in use. The kernel's last
// block, the poller, copies the table into device memory over and over;
// the other blocks look there for a ring with a slot nobody took, claim it
// with an atomic on the ring's claim counter (device memory), and the
// winner reads the ring's doorbell in host memory once. (The first design
// had every idle block read host memory; hundreds of blocks reading one
// host address at once queued behind each other over PCIe: 0.5 Mpps.)
//
// Memory ordering. Host: plain stores of the slot's contents, then the
// atomic store of the doorbell (on x86 a locked instruction, ordered after
// them). GPU: the claiming lane reads the doorbell at system scope and
// issues one acquire fence at system scope (fence.acq_rel.sys); a warp
// barrier and the block barrier carry it to the lanes that read the head,
// the descriptors and the frames (ld.global.cv: the host rewrites them
// between laps). Each packet's window (up to 160 bytes, 16 in front of the
// packet when the program pushes tags) is loaded into shared memory by
// consecutive lanes, the walk runs on it, and the changed 16-byte chunks
// are written back in place. Counters are added per block in shared memory
// and flushed to the program's counters in device memory (a warp whose
// packets all hit one large-table counter, a filter's default, adds it
// once). After the barrier that follows the results, thread 0 stores done
// with st.release.sys, whose cumulativity covers the verdicts, the
// rewritten bytes and the flush. The consumer's atomic load of done
// precedes its plain reads of the results.
//
// Every warp-wide intrinsic with the full mask runs on all 32 lanes: a
// __ballot_sync under "if (lane == 0)" hung the first H200 runs
// (BENCHMARKS.md, "GPU backend"), and the emulation cannot catch that. A
// persistent kernel needs all its blocks resident at once, so Open caps
// Options.Blocks (and the poller) at the occupancy the driver reports.
//
// # Executor
//
// NewExecutor plugs the backend into the engine (dataplane.Options.
// NewExecutor, warpctl replay --backend cuda, settings.backend: cuda). Its
// batches' descriptors are views of the slots' own memory, so the input
// port receives straight into pinned memory and nothing is copied at
// submit; the packets' metadata is never written (the executor is a
// workers.MetaSettler that settles it only for the packets it hands to the
// CPU). Completed returns batches in order with their verdicts as words
// (workers.VerdictExecutor) and, when every packet got one verdict, the
// batch's Outcome, so the engine transmits the whole batch without a pass
// over it. The device's counters are added to a runner no worker uses
// (pipelines.Runner.AddDeviceCounts) at least every 100 ms under load,
// soon after the ring empties, and at Close, so stats, the report and the
// live counters are the CPU path's. Several executors (engines) share the
// process's kernel, one ring each.
//
// # Status
//
// On the H200 test machine the probe, the equality tests (81 captures
// through four pipelines, 0 mismatches) and the end-to-end benchmark pass;
// BENCHMARKS.md, "GPU backend", has the figures and what they do not say.
// The live tests (live_test.go, WARPFLOW_GPU_LIVE=1, run there by
// scripts/gpu-device-run with prebuilt binaries) check warpflowd with
// backend cuda against the offline replay on a lab and measure the
// N-queue table; TestSwapReusesMemoryCUDA checks program memory reused
// across swaps on a running kernel.
// WARPFLOW_GPU_TRACE=1 logs setup, allocations, the launch and the stop;
// WARPFLOW_PTX loads a freshly built PTX instead of the embedded one.
package gpu
