// Warpflow's persistent classify kernel (see doc.go for the protocol).
//
// Launched once; each block owns the slots s with s % gridDim.x ==
// blockIdx.x and serves them in sequence order (seq = blockIdx.x +
// k*gridDim.x, slot = seq % nslots, lap = seq / nslots). For each ready
// slot it parses every packet's headers straight from host-mapped frame
// memory, walks the pipeline's serialised filter classifier (the blob of
// pipelines/filter_blob.go, in device memory), adds the packet to its
// rule's counters and writes the rule index, or WF_FALLBACK for a packet
// outside the parser's common case, which the host then classifies on the
// CPU path. It exits when the host sets the stop word.
//
// Memory ordering. Host: writes the descriptors, the blob handle and the
// copy of descriptor 0 with plain stores, then publishes status|count with
// one atomic 64-bit store (x86: a locked store, ordered after the earlier
// stores). GPU: warp 0 polls the slot's 48-byte head (lanes 0-2, one
// 16-byte relaxed system-scope load each, one PCIe read) and on seeing
// ready in its lap thread 0 issues one acquire fence at system scope
// (fence.acq_rel.sys) before anything reads descriptors or frames; the
// block barrier then carries that to every thread. The blob handle and
// descriptor 0 come from that same poll when their sequence tags say they
// are this slot's (else the blob handle is read again after the fence).
// Descriptor and frame loads (16 bytes each) bypass the caches
// (ld.global.cv) since the host rewrites them between laps. After the
// block barrier that follows the results, thread 0 stores done with
// st.release.sys: one release whose cumulativity covers every thread's
// result stores (they happen before it through the barrier), so a host
// that loads done sees all the verdicts.
//
// Warp-wide intrinsics (__shfl_sync, __ballot_sync, ...) with the full
// mask run on all 32 lanes, never under a lane test: the first H200 runs
// hung because a __ballot_sync under "if (lane == 0)" waited forever for
// the other 31 lanes (BENCHMARKS.md, "GPU backend"). WF_BUG_BALLOT
// rebuilds that mistake and WF_TRACE records block 0's progress in the
// stop page (development only).
//
// Regenerate kernel.ptx with scripts/gen-ptx (nvcc -ptx -arch=sm_90).

#include <stdint.h>

#define WF_READY 1u
#define WF_DONE 3u
#define WF_FALLBACK 0xffffffffu
#define WF_THREADS 128
#define WF_WIN 128 // header bytes loaded per packet: up to 8 aligned 16-byte chunks

// Blob header fields (pipelines/filter_blob.go).
enum {
  bhMagic, bhRules, bhTrees, bhTreesOff, bhNodesOff, bhLeavesOff, bhChecksOff,
  bhPoolOff, bhExactOff, bhGatesOff, bhPreOff, bhPreN, bhBitsOff, bhXpoolOff, bhWords
};
// Key dimensions (pipelines/filter_classify.go).
enum { dL3, dSrcHi, dSrcLo, dDstHi, dDstLo, dSport, dDport, dVLAN, dClass, dTCP, dFrag, nDims };
#define LEAF_DIM 255
#define NO_PROTO 256ull
#define NO_PORT 65536ull
#define NO_VLAN 4096ull
#define NO_TCP 256ull

struct WfArgs {
  uint64_t slots;     // device pointer of slot 0 (host-mapped)
  uint64_t arena;     // device pointer of the frame arena (host-mapped)
  uint64_t arenaLen;  // bytes
  uint64_t stop;      // device pointer of the stop word (host-mapped u32)
  uint64_t frameMask; // frame size - 1
  uint32_t nslots;    // a multiple of gridDim.x
  uint32_t stride;    // bytes per slot
  uint32_t cap;       // descriptors per slot
  uint32_t pollNs;    // nanosleep between idle polls (0: spin)
};

// Slot head: 48 bytes at the slot's start, then cap descriptors of 16
// bytes (rings.Desc: addr u64, len u32, options u32), then cap u32 results:
//
//	word, seq            status (low 32: lap<<2|state) | count<<32; seq
//	blob, seq            the blob's device pointer (its counters follow it)
//	addr0, len0|seq<<32  a copy of descriptor 0
//
// The host writes them all before word (with one atomic store). Warp 0
// polls the whole head at once; the seq tags tell whether the blob handle
// and descriptor 0 it read with the word are this slot's.
struct SlotHead {
  uint64_t word;
  uint64_t seq;
  uint64_t blob;
  uint64_t seq2;
  uint64_t addr0;
  uint64_t len0; // len | uint32_t(seq) << 32
};

// ld_sys32 (and the poll's ld_poll_v2) load host memory at system scope:
// relaxed, so they are served by the host's memory every time (not a
// cached copy) but order nothing; the fence after a successful poll does.
#ifdef WF_VOLATILE
#define WF_LD "ld.volatile.global"
#else
#define WF_LD "ld.relaxed.sys.global"
#endif
__device__ __forceinline__ uint32_t ld_sys32(const void* p) {
  uint32_t v;
  asm volatile(WF_LD ".u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// ld_cv64 loads 8 bytes of host memory the host may have rewritten since a
// previous lap: not from a cache (ld.global.cv), ordered by the fence.
__device__ __forceinline__ uint64_t ld_cv64(const void* p) { return __ldcv((const unsigned long long*)p); }

__device__ __forceinline__ void st_sys32(void* p, uint32_t v) {
  asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void st_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void fence_acquire_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }

__device__ __forceinline__ uint32_t be16(const uint8_t* p, int o) { return (uint32_t(p[o]) << 8) | p[o + 1]; }
__device__ __forceinline__ uint32_t be32(const uint8_t* p, int o) {
  return (uint32_t(p[o]) << 24) | (uint32_t(p[o + 1]) << 16) | (uint32_t(p[o + 2]) << 8) | p[o + 3];
}
__device__ __forceinline__ uint64_t be64(const uint8_t* p, int o) {
  return (uint64_t(be32(p, o)) << 32) | be32(p, o + 4);
}

// parse computes the classifier key of packet p (len bytes, of which the
// first have bytes are in p) for the common case: Ethernet, up to 2 VLAN
// tags, IPv4 without options or fragmentation, or IPv6 without extension
// headers, whose length agrees with the frame; TCP, UDP, ICMP, ICMPv6 or
// a protocol the parse stage does not decode. It returns false for every
// other packet (the CPU path classifies it). gpu/parse.go is its Go twin.
__device__ bool parse(const uint8_t* p, int n, int have, uint64_t* k) {
  const int lim = n < have ? n : have; // bytes both in the packet and loaded
  if (lim < 14) return false;
  uint32_t et = be16(p, 12);
  int off = 14, nv = 0;
  uint64_t vlan = NO_VLAN;
  while (et == 0x8100 || et == 0x88a8 || et == 0x9100) {
    if (nv == 2 || off + 4 > lim) return false;
    if (nv == 0) vlan = be16(p, off) & 0xfff;
    nv++;
    et = be16(p, off + 2);
    off += 4;
  }
  int l4, end;
  uint32_t proto;
  uint64_t fam;
  if (et == 0x0800) {
    if (off + 20 > lim) return false;
    const uint8_t* h = p + off;
    int tot = be16(h, 2);
    if (h[0] != 0x45 || (be16(h, 6) & 0x3fff) != 0 || tot < 20 || off + tot > n) return false;
    proto = h[9];
    if (proto == 51) return false; // AH
    fam = 1;
    k[dSrcHi] = uint64_t(be32(h, 12)) << 32;
    k[dDstHi] = uint64_t(be32(h, 16)) << 32;
    k[dSrcLo] = 0;
    k[dDstLo] = 0;
    l4 = off + 20;
    end = off + tot;
  } else if (et == 0x86dd) {
    if (off + 40 > lim) return false;
    const uint8_t* h = p + off;
    end = off + 40 + int(be16(h, 4));
    proto = h[6];
    if ((h[0] >> 4) != 6 || end > n) return false;
    if (proto == 0 || proto == 43 || proto == 44 || proto == 51 || proto == 60) return false;
    fam = 2;
    k[dSrcHi] = be64(h, 8);
    k[dSrcLo] = be64(h, 16);
    k[dDstHi] = be64(h, 24);
    k[dDstLo] = be64(h, 32);
    l4 = off + 40;
  } else {
    return false;
  }
  k[dL3] = fam << 9 | proto;
  k[dSport] = NO_PORT;
  k[dDport] = NO_PORT;
  k[dTCP] = NO_TCP;
  k[dVLAN] = vlan;
  k[dClass] = 1; // rings.ClassOK
  k[dFrag] = 0;
  switch (proto) {
  case 6: { // TCP
    if (l4 + 20 > end || l4 + 20 > lim) return false;
    int doff = (p[l4 + 12] >> 4) * 4;
    if (doff < 20 || l4 + doff > end) return false;
    k[dSport] = be16(p, l4);
    k[dDport] = be16(p, l4 + 2);
    k[dTCP] = p[l4 + 13];
    break;
  }
  case 17: // UDP (tunnels never change the outer key or class)
    if (l4 + 8 > end || l4 + 4 > lim) return false;
    k[dSport] = be16(p, l4);
    k[dDport] = be16(p, l4 + 2);
    break;
  case 1: // ICMP: not ported
    if (l4 + 8 > end) return false;
    break;
  case 58: // ICMPv6
    if (l4 + 4 > end || l4 + 1 > lim) return false;
    if ((p[l4] == 128 || p[l4] == 129) && l4 + 8 > end) return false;
    break;
  case 132: // SCTP, GRE: decoded (and maybe malformed) on the CPU path
  case 47:
    return false;
  default: // not decoded by the parse stage: no L4, class ok
    break;
  }
  return true;
}

__device__ __forceinline__ bool gates_pass(const uint64_t* __restrict__ w, uint64_t off, uint64_t n,
                                           const uint64_t* k, bool any) {
  if (any && n == 0) return true;
  uint64_t bits = __ldg(w + bhBitsOff);
  for (uint64_t i = 0; i < n; i++) {
    const uint64_t* g = w + off + 3 * i;
    uint64_t base = __ldg(g), x1 = __ldg(g + 1), x2 = __ldg(g + 2);
    uint64_t nb = x1 & 0xffffffffu, boff = x1 >> 32, shift = x2 & 0xff, dim = (x2 >> 8) & 0xff;
    uint64_t x = (k[dim] - base) >> (shift & 63);
    x = x < nb ? x : nb;
    bool hit = (__ldg(w + bits + boff + (x >> 6)) >> (x & 63)) & 1;
    if (any && hit) return true;
    if (!any && !hit) return false;
  }
  return !any;
}

__device__ __forceinline__ bool in_ivals(const uint64_t* __restrict__ w, uint64_t off, uint64_t n, uint64_t v) {
  uint64_t lo = 0, hi = n;
  while (lo < hi) {
    uint64_t mid = (lo + hi) >> 1;
    if (__ldg(w + off + 2 * mid + 1) < v) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && __ldg(w + off + 2 * lo) <= v;
}

__device__ bool in_ivals128(const uint64_t* __restrict__ w, uint64_t xp, uint64_t ref, uint64_t h, uint64_t l) {
  for (uint64_t i = 0; i < (ref >> 32); i++) {
    const uint64_t* p = w + xp + (ref & 0xffffffffu) + 4 * i;
    uint64_t a = __ldg(p), b = __ldg(p + 1), c = __ldg(p + 2), d = __ldg(p + 3);
    if ((h > a || (h == a && l >= b)) && (h < c || (h == c && l <= d))) return true;
  }
  return false;
}

__device__ bool match(const uint64_t* __restrict__ w, uint64_t lr, const uint64_t* k) {
  uint64_t off = __ldg(w + lr) >> 32, x1 = __ldg(w + lr + 1), n = x1 & 0xff;
  uint64_t checks = __ldg(w + bhChecksOff), pool = __ldg(w + bhPoolOff);
  for (uint64_t j = off; j < off + n; j++) {
    const uint64_t* ch = w + checks + 3 * j;
    uint64_t x = __ldg(ch + 2);
    uint64_t v = k[x >> 56];
    if (v < __ldg(ch) || v > __ldg(ch + 1)) return false;
    uint64_t setN = (x >> 32) & 0xffffff;
    if (setN > 1 && !in_ivals(w, pool + 2 * (x & 0xffffffffu), setN, v)) return false;
  }
  uint64_t ex = x1 >> 32;
  if (ex == 0xffffffffu) return true;
  const uint64_t e = __ldg(w + bhExactOff) + 5 * ex;
  uint64_t f = __ldg(w + e);
  bool src = f & 1, dst = f & 2;
  uint64_t xp = __ldg(w + bhXpoolOff);
  switch (k[dL3] >> 9) {
  case 1: {
    uint64_t s4 = __ldg(w + e + 1), d4 = __ldg(w + e + 2);
    return (!src || in_ivals(w, xp + (s4 & 0xffffffffu), s4 >> 32, k[dSrcHi])) &&
           (!dst || in_ivals(w, xp + (d4 & 0xffffffffu), d4 >> 32, k[dDstHi]));
  }
  case 2:
    return (!src || in_ivals128(w, xp, __ldg(w + e + 3), k[dSrcHi], k[dSrcLo])) &&
           (!dst || in_ivals128(w, xp, __ldg(w + e + 4), k[dDstHi], k[dDstLo]));
  }
  return !src && !dst;
}

// lookup is FilterBlob.Lookup: the first matching rule, or the rule count.
__device__ uint32_t lookup(const uint64_t* __restrict__ w, const uint64_t* k) {
  uint32_t n = uint32_t(__ldg(w + bhRules));
  if (!gates_pass(w, __ldg(w + bhPreOff), __ldg(w + bhPreN), k, true)) return n;
  uint32_t best = n;
  uint64_t trees = __ldg(w + bhTreesOff), nodes = __ldg(w + bhNodesOff), ntrees = __ldg(w + bhTrees);
  uint64_t leaves = __ldg(w + bhLeavesOff), gatesOff = __ldg(w + bhGatesOff);
  for (uint64_t ti = 0; ti < ntrees; ti++) {
    uint64_t t0 = __ldg(w + trees + 4 * ti), t1 = __ldg(w + trees + 4 * ti + 1);
    uint32_t minRule = uint32_t(t0 >> 32);
    if (minRule >= best) break;
    if (!gates_pass(w, gatesOff + 3 * (t1 & 0xffffffffu), t1 >> 32, k, false)) continue;
    uint64_t nd = nodes + 2 * (t0 & 0xffffffffu);
    uint64_t x = __ldg(w + nd + 1);
    while ((x & 0xff) != LEAF_DIM) {
      uint64_t a = (x >> 32) + (k[x & 0xff] >= __ldg(w + nd) ? 1 : 0);
      nd = nodes + 2 * a;
      x = __ldg(w + nd + 1);
    }
    uint64_t first = x >> 32, cnt = (x >> 8) & 0xffffff;
    for (uint64_t i = first; i < first + cnt; i++) {
      uint64_t lr = leaves + 2 * i;
      uint32_t rule = uint32_t(__ldg(w + lr));
      if (rule >= best) break;
      if (match(w, lr, k)) {
        best = rule;
        break;
      }
    }
  }
  return best;
}

// WF_POLL_ACQUIRE 1 makes the poll's loads acquires at system scope,
// instead of relaxed loads followed by one fence.acq_rel.sys on a hit.
#ifndef WF_POLL_ACQUIRE
#define WF_POLL_ACQUIRE 0
#endif
#if WF_POLL_ACQUIRE
#define WF_POLL_LD "ld.acquire.sys.global"
#else
#define WF_POLL_LD WF_LD
#endif

// ld_poll_v2 loads 16 aligned bytes of host memory at system scope: the
// poll reads a slot's whole head in one warp instruction, one PCIe read.
__device__ __forceinline__ void ld_poll_v2(const void* p, uint64_t& a, uint64_t& b) {
  asm volatile(WF_POLL_LD ".v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}

// ld_cv_v2 loads 16 aligned bytes the host may have rewritten since a
// previous lap (ld.global.cv), ordered by the fence.
__device__ __forceinline__ void ld_cv_v2(const void* p, uint64_t& a, uint64_t& b) {
  ulonglong2 v = __ldcv((const ulonglong2*)p);
  a = v.x;
  b = v.y;
}

// WF_TRACE (development): block 0's thread 0 records how far it got in
// stop page word 2 (phase | seq<<8), so a hung kernel says where.
#ifdef WF_TRACE
#define TRACE(ph, seq)                                                             \
  do {                                                                             \
    if (tid == 0 && blockIdx.x == 0) st_sys32(stop + 2, uint32_t(ph) | uint32_t(seq) << 8); \
  } while (0)
#else
#define TRACE(ph, seq) \
  do {                 \
  } while (0)
#endif

extern "C" __global__ void __launch_bounds__(WF_THREADS) wf_classify(WfArgs a) {
  __shared__ uint64_t head[4]; // count, blob, addr0, len0 (tag checked)
  __shared__ int quit;
  __shared__ __align__(16) uint64_t win[WF_THREADS][WF_WIN / 8];
  const int tid = threadIdx.x, lane = tid & 31;
  const unsigned full = 0xffffffffu;
  // The stop page: word 0 is the stop flag; block 0 stores an alive marker
  // in word 1 at start, for debugging.
  uint32_t* stop = (uint32_t*)a.stop;
  const uint8_t* arena = (const uint8_t*)a.arena;
  if (tid == 0) quit = 0;
  if (tid == 0 && blockIdx.x == 0) st_sys32(stop + 1, 0xC0DE0003u);
  for (uint64_t seq = blockIdx.x;; seq += gridDim.x) {
    SlotHead* h = (SlotHead*)((char*)a.slots + (seq % a.nslots) * a.stride);
    const uint32_t want = uint32_t(seq / a.nslots) << 2 | WF_READY;
    TRACE(1, seq);
    // Warp 0 polls as a whole: lanes 0-2 load the head's three 16-byte
    // chunks in one instruction (one PCIe read of 48 bytes), and every
    // lane takes lane 0's answer, so the warp stays converged.
    if (tid < 32) {
      uint64_t v0 = 0, v1 = 0;
      for (uint32_t spins = 0;; spins++) {
        if (lane < 3) ld_poll_v2((const uint64_t*)h + 2 * lane, v0, v1);
        if (__shfl_sync(full, uint32_t(v0), 0) == want) break;
        if ((spins & 63) == 63 && __shfl_sync(full, ld_sys32(stop), 0)) {
          if (tid == 0) quit = 1;
          break;
        }
        if (a.pollNs) __nanosleep(a.pollNs);
      }
      const uint64_t w = __shfl_sync(full, v0, 0);
      const uint64_t blob = __shfl_sync(full, v0, 1), bseq = __shfl_sync(full, v1, 1);
      const uint64_t addr0 = __shfl_sync(full, v0, 2), len0 = __shfl_sync(full, v1, 2);
      if (tid == 0 && !quit) {
        // The acquire: everything the host stored before the ready word
        // is visible to the loads after this fence. The head's chunks
        // were read in the poll itself; their sequence tags say whether
        // they were already this slot's (x86 stores them before the
        // word); one that was not is read again, now ordered.
#if !WF_POLL_ACQUIRE
        fence_acquire_sys();
#endif
        head[0] = w >> 32;
        head[1] = bseq == seq ? blob : ld_cv64(&h->blob);
        head[2] = addr0;
        head[3] = uint32_t(len0 >> 32) == uint32_t(seq) ? uint64_t(uint32_t(len0)) | 1ull << 32 : 0;
      }
      __syncwarp();
    }
    __syncthreads();
    if (quit) return;
    TRACE(2, seq);
    const uint32_t count = uint32_t(head[0]) < a.cap ? uint32_t(head[0]) : a.cap;
    const uint64_t* blob = (const uint64_t*)head[1];
    const uint32_t rules = uint32_t(__ldg(blob + bhRules));
    unsigned long long* cnt = (unsigned long long*)(blob + __ldg(blob + bhWords));
    const char* descs = (const char*)h + sizeof(SlotHead);
    uint32_t* res = (uint32_t*)(descs + 16 * uint64_t(a.cap));
    uint64_t* mywin = &win[tid][0];
    for (uint32_t base = tid & ~31u; base < count; base += WF_THREADS) {
      const uint32_t i = base + lane;
      uint32_t r = WF_FALLBACK;
      uint32_t len = 0;
      uint64_t addr = 0;
      // Descriptors: one 16-byte load per lane, 512 contiguous bytes per
      // warp (coalesced). Descriptor 0 comes from the head when tagged.
      if (i < count) {
        uint64_t x, y;
        if (i == 0 && (head[3] >> 32)) {
          x = head[2];
          y = uint32_t(head[3]);
        } else {
          ld_cv_v2(descs + 16 * uint64_t(i), x, y);
        }
        addr = x;
        len = uint32_t(y);
      }
      const bool ok = i < count && len > 0 && addr < a.arenaLen && len <= a.arenaLen - addr;
      const uint64_t start = addr & ~15ull;
      uint64_t fend = (addr | a.frameMask) + 1;
      if (fend > a.arenaLen) fend = a.arenaLen;
      const uint64_t lend = addr + len < fend ? addr + len : fend; // no chunk past the packet's last
      // Bytes of this packet's window to load (16-byte chunks from start).
      uint32_t nb = ok ? uint32_t(lend - start < WF_WIN ? lend - start : WF_WIN) : 0;
      // Frames: the warp loads 4 packets' windows per instruction, 8 lanes
      // x 16 bytes each, so each packet's header is one PCIe read rather
      // than one per 8 bytes per lane.
#pragma unroll
      for (int q = 0; q < 8; q++) {
        const int p = q * 4 + (lane >> 3), part = lane & 7;
        const uint64_t ps = __shfl_sync(full, start, p);
        const uint32_t pn = __shfl_sync(full, nb, p);
        if (uint32_t(16 * part) < pn) {
          uint64_t x, y;
          ld_cv_v2(arena + ps + 16 * part, x, y);
          uint64_t* dst = &win[(tid & ~31) + p][2 * part];
          dst[0] = x;
          dst[1] = y;
        }
      }
      __syncwarp();
      if (ok) {
        const int skew = int(addr - start);
        const int have = int(fend - start < WF_WIN ? fend - start : WF_WIN) - skew;
        uint64_t k[nDims];
        if (parse((const uint8_t*)mywin + skew, int(len), have, k)) r = lookup(blob, k);
      }
      if (i < count) res[i] = r;
      __syncwarp(); // the window is reused by the next chunk
      // Counters: one atomic pair per warp when the whole warp took one rule
      // (the common default), else one per packet. Every warp-wide
      // intrinsic here runs on all 32 lanes: a full-mask __ballot_sync
      // under "if (lane == 0)" waits forever for the other 31 (the hang
      // of the first H200 runs).
      const uint32_t r0 = __shfl_sync(full, r, 0); // lane 0 always has a packet
      if (__all_sync(full, i >= count || r == r0) && r0 != WF_FALLBACK) {
        const uint32_t bytes = __reduce_add_sync(full, len);
#ifdef WF_BUG_BALLOT
        TRACE(3, seq);
        if (lane == 0) {
          atomicAdd(cnt + r0, (unsigned long long)__popc(__ballot_sync(full, i < count)));
          atomicAdd(cnt + rules + 1 + r0, (unsigned long long)bytes);
        }
#else
        const uint32_t pkts = __popc(__ballot_sync(full, i < count));
        if (lane == 0) {
          atomicAdd(cnt + r0, (unsigned long long)pkts);
          atomicAdd(cnt + rules + 1 + r0, (unsigned long long)bytes);
        }
#endif
      } else if (i < count && r != WF_FALLBACK && r <= rules) {
        atomicAdd(cnt + r, 1ull);
        atomicAdd(cnt + rules + 1 + r, (unsigned long long)len);
      }
    }
    TRACE(4, seq);
    __syncthreads();
    TRACE(5, seq);
    if (tid == 0) st_release_sys((uint32_t*)&h->word, uint32_t(seq / a.nslots) << 2 | WF_DONE);
  }
}
