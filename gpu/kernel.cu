// Warpflow's persistent pipeline kernel (see doc.go for the protocol).
//
// One source for the device's logic: the functions down to wf_walk (the
// parser, the filter classifier, every stage, the graph walk) are plain
// C++ that also builds for the host (host/shim.h, host/main.cc), so the
// Go tests run this very code over every test capture and compare it with
// the CPU path. The kernel below them (polling, claiming, loading windows,
// counters, the done store) is CUDA only.
//
// The kernel is launched once. A block takes the next submitted slot of
// any ring (the ring table's doorbells say how many each ring's producer
// submitted; a block claims one with an atomic on the ring's claim
// counter in device memory), and for each packet of it loads a window of
// the frame's bytes (WF_WIN, 16-byte chunks) from host-mapped memory into
// shared memory, walks the device program (pipelines.CompileDevice: the
// graph's nodes, each filter's own classifier) on it, writes the bytes it
// changed back in place, the descriptor when a tag moved the packet, and
// one verdict word per packet; then the slot's summary and its samplers'
// candidate lists; then done. It exits when the host sets the stop word.
//
// Memory ordering. Host: writes the slot (head, descriptors) with plain
// stores, then the ring's doorbell with one atomic store (x86: ordered
// after them). GPU: lane 0 of warp 0 reads the doorbell at system scope
// (relaxed), claims a sequence number below it, and issues one acquire
// fence at system scope (fence.acq_rel.sys) before anything reads the
// slot or the frames; the block barrier carries that to every thread.
// Slot and frame loads bypass the caches (ld.global.cv): the host rewrites
// them between laps. After the block barrier that follows the results,
// thread 0 stores done with st.release.sys: one release whose
// cumulativity covers every thread's stores, so a host that loads done
// sees the verdicts, the rewritten bytes and the counters' flush.
//
// Warp-wide intrinsics (__shfl_sync, __ballot_sync, ...) with the full
// mask run on all 32 lanes, never under a lane test: the first H200 runs
// hung on a __ballot_sync under "if (lane == 0)" (BENCHMARKS.md).
//
// Regenerate kernel.ptx with scripts/gen-ptx (nvcc -ptx -arch=sm_90).

#include <stdint.h>
#include "wf_layout.h"

#ifdef WF_HOST
#define WF_LD(p) (*(p))
#else
#define WF_LD(p) __ldg(p)
#endif
#define WF_DEV __device__ __forceinline__

// ---------------------------------------------------------------------------
// Shared logic: also built for the host.

WF_DEV uint32_t be16(const uint8_t* p, int o) { return (uint32_t(p[o]) << 8) | p[o + 1]; }
WF_DEV uint32_t be32(const uint8_t* p, int o) {
  return (uint32_t(p[o]) << 24) | (uint32_t(p[o + 1]) << 16) | (uint32_t(p[o + 2]) << 8) | p[o + 3];
}
WF_DEV uint64_t be64(const uint8_t* p, int o) { return (uint64_t(be32(p, o)) << 32) | be32(p, o + 4); }
WF_DEV void put16(uint8_t* p, int o, uint32_t v) {
  p[o] = uint8_t(v >> 8);
  p[o + 1] = uint8_t(v);
}
WF_DEV void put32(uint8_t* p, int o, uint32_t v) {
  put16(p, o, v >> 16);
  put16(p, o + 2, v);
}

// WfMeta is the device's rings.Meta: what the parse stage records and the
// other stages read. Addresses are the filter key's: IPv4 as addr<<32 in
// the high word, IPv6 as two big-endian halves.
struct WfMeta {
  uint64_t srcHi, srcLo, dstHi, dstLo;
  uint32_t hash, sample;
  uint32_t flags, ethertype, l3off, l4off, sport, dport, vlan0, vlan1;
  uint32_t cls, nvlans, proto, ttl, tcpflags;
};

// WfPkt is one packet's window: the frame bytes [ws, ws+wlen) in w, the
// packet at w+start. Stages move start and len (tags), and mark the bytes
// they change (dlo, dhi) for the write-back.
struct WfPkt {
  uint8_t* w;
  int start, len, wlen;
  uint64_t addr, mask;
  int dlo, dhi;
};

WF_DEV int pkt_have(const WfPkt& k) {
  int room = k.wlen - k.start;
  return k.len < room ? k.len : room;
}
WF_DEV void pkt_dirty(WfPkt& k, int from, int to) { // packet offsets
  from += k.start;
  to += k.start;
  if (from < k.dlo) k.dlo = from;
  if (to > k.dhi) k.dhi = to;
}

// wf_window says which bytes the device loads for a packet at addr of len
// bytes: from the 16-byte boundary at or below it (WF_WIN_HEAD bytes
// further back when the program pushes tags, within the frame) up to its
// last byte's chunk, the frame's end, or WF_WIN bytes, whichever is first.
WF_DEV void wf_window(uint64_t addr, uint32_t len, uint64_t mask, uint64_t arenaLen, bool head, uint64_t* ws,
                      uint32_t* wlen) {
  const uint64_t fstart = addr & ~mask;
  uint64_t fend = fstart + mask + 1;
  if (fend > arenaLen) fend = arenaLen;
  uint64_t s = addr & ~15ull;
  if (head) s = s >= fstart + WF_WIN_HEAD ? s - WF_WIN_HEAD : fstart;
  uint64_t e = (addr + len + 15) & ~15ull;
  if (e > fend) e = fend;
  if (e > s + WF_WIN) e = s + WF_WIN;
  *ws = s;
  *wlen = e > s ? uint32_t(e - s) : 0;
}

WF_DEV bool tpid(uint32_t et) { return et == 0x8100 || et == 0x88a8 || et == 0x9100; }

// wf_parse is the parse stage for the device's common case: Ethernet, up
// to 2 VLAN tags, IPv4 without options or fragmentation, or IPv6 without
// extension headers, whose lengths agree with the frame; TCP, UDP (no
// tunnel port when tunnels are decoded), SCTP, ICMP, ICMPv6, IP in IP
// when tunnels are not decoded, or a protocol the parse stage does not
// decode; every header inside the window. It fills m as the CPU parse
// stage would and returns true, or returns false for any other packet,
// which the CPU path then takes whole.
WF_DEV bool wf_parse(const WfPkt& pk, bool tunnels, WfMeta& m) {
  const uint8_t* p = pk.w + pk.start;
  const int n = pk.len;
  const int lim = pkt_have(pk); // bytes both in the packet and loaded
  if (lim < 14) return false;
  uint32_t et = be16(p, 12);
  int off = 14;
  uint32_t nv = 0, v0 = 0, v1 = 0;
  while (tpid(et)) {
    if (nv == 2 || off + 4 > lim) return false;
    if (nv == 0) v0 = be16(p, off) & 0xfff;
    else v1 = be16(p, off) & 0xfff;
    nv++;
    et = be16(p, off + 2);
    off += 4;
  }
  int l4, end;
  uint32_t proto;
  if (et == 0x0800) {
    if (off + 20 > lim) return false;
    const uint8_t* h = p + off;
    const int tot = int(be16(h, 2));
    if (h[0] != 0x45 || (be16(h, 6) & 0x3fff) != 0 || tot < 20 || off + tot > n) return false;
    proto = h[9];
    if (proto == 51) return false; // AH
    m.flags = uint32_t(WF_FLAG_IPV4);
    m.ttl = h[8];
    m.srcHi = uint64_t(be32(h, 12)) << 32;
    m.dstHi = uint64_t(be32(h, 16)) << 32;
    m.srcLo = m.dstLo = 0;
    l4 = off + 20;
    end = off + tot;
  } else if (et == 0x86dd) {
    if (off + 40 > lim) return false;
    const uint8_t* h = p + off;
    end = off + 40 + int(be16(h, 4));
    proto = h[6];
    if ((h[0] >> 4) != 6 || end > n) return false;
    if (proto == 0 || proto == 43 || proto == 44 || proto == 51 || proto == 60) return false;
    m.flags = uint32_t(WF_FLAG_IPV6);
    m.ttl = h[7];
    m.srcHi = be64(h, 8);
    m.srcLo = be64(h, 16);
    m.dstHi = be64(h, 24);
    m.dstLo = be64(h, 32);
    l4 = off + 40;
  } else {
    return false; // ARP, MPLS, PPPoE, anything else: the CPU's general decoder
  }
  m.cls = uint32_t(WF_CLASS_OK);
  m.ethertype = et;
  m.nvlans = nv;
  m.vlan0 = v0;
  m.vlan1 = v1;
  m.proto = proto;
  m.tcpflags = 0;
  m.l3off = uint32_t(off);
  m.l4off = 0;
  m.sport = m.dport = 0;
  switch (proto) {
  case 6: { // TCP
    if (l4 + 20 > end || l4 + 20 > lim) return false;
    const int doff = (p[l4 + 12] >> 4) * 4;
    if (doff < 20 || l4 + doff > end) return false;
    m.sport = be16(p, l4);
    m.dport = be16(p, l4 + 2);
    m.tcpflags = p[l4 + 13];
    break;
  }
  case 17: // UDP
    if (l4 + 8 > end || l4 + 8 > lim) return false;
    m.sport = be16(p, l4);
    m.dport = be16(p, l4 + 2);
    if (tunnels && (m.dport == 4789 || m.dport == 6081)) return false; // VXLAN, GENEVE
    break;
  case 132: // SCTP
    if (l4 + 12 > end || l4 + 4 > lim) return false;
    m.sport = be16(p, l4);
    m.dport = be16(p, l4 + 2);
    break;
  case 1: // ICMP: type<<8|code, and the echo identifier
    if (l4 + 8 > end || l4 + 6 > lim) return false;
    m.sport = be16(p, l4);
    if (p[l4] == 0 || p[l4] == 8) m.dport = be16(p, l4 + 4);
    break;
  case 58: // ICMPv6
    if (l4 + 4 > end || l4 + 2 > lim) return false;
    m.sport = be16(p, l4);
    if (p[l4] == 128 || p[l4] == 129) {
      if (l4 + 8 > end || l4 + 6 > lim) return false;
      m.dport = be16(p, l4 + 4);
    }
    break;
  case 47: // GRE: the CPU decodes it (and its tunnel)
    return false;
  case 4:
  case 41: // IP in IP: no L4 header of its own
    if (tunnels) return false;
    return true;
  default: // not decoded by the parse stage: no L4, class ok
    return true;
  }
  m.l4off = uint32_t(l4);
  m.flags |= uint32_t(WF_FLAG_L4);
  return true;
}

// ---- the filter classifier over a FilterBlob (pipelines/filter_blob.go)

WF_DEV bool gates_pass(const uint64_t* __restrict__ w, uint64_t off, uint64_t n, const uint64_t* k, bool any) {
  if (any && n == 0) return true;
  const uint64_t bits = WF_LD(w + WF_BH_BITS_OFF);
  for (uint64_t i = 0; i < n; i++) {
    const uint64_t* g = w + off + 3 * i;
    const uint64_t base = WF_LD(g), x1 = WF_LD(g + 1), x2 = WF_LD(g + 2);
    const uint64_t nb = x1 & 0xffffffffu, boff = x1 >> 32, shift = x2 & 0xff, dim = (x2 >> 8) & 0xff;
    uint64_t x = (k[dim] - base) >> (shift & 63);
    x = x < nb ? x : nb;
    const bool hit = (WF_LD(w + bits + boff + (x >> 6)) >> (x & 63)) & 1;
    if (any && hit) return true;
    if (!any && !hit) return false;
  }
  return !any;
}

WF_DEV bool in_ivals(const uint64_t* __restrict__ w, uint64_t off, uint64_t n, uint64_t v) {
  uint64_t lo = 0, hi = n;
  while (lo < hi) {
    const uint64_t mid = (lo + hi) >> 1;
    if (WF_LD(w + off + 2 * mid + 1) < v) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && WF_LD(w + off + 2 * lo) <= v;
}

WF_DEV bool in_ivals128(const uint64_t* __restrict__ w, uint64_t xp, uint64_t ref, uint64_t h, uint64_t l) {
  for (uint64_t i = 0; i < (ref >> 32); i++) {
    const uint64_t* p = w + xp + (ref & 0xffffffffu) + 4 * i;
    const uint64_t a = WF_LD(p), b = WF_LD(p + 1), c = WF_LD(p + 2), d = WF_LD(p + 3);
    if ((h > a || (h == a && l >= b)) && (h < c || (h == c && l <= d))) return true;
  }
  return false;
}

WF_DEV bool blob_match(const uint64_t* __restrict__ w, uint64_t lr, const uint64_t* k) {
  const uint64_t off = WF_LD(w + lr) >> 32, x1 = WF_LD(w + lr + 1), n = x1 & 0xff;
  const uint64_t checks = WF_LD(w + WF_BH_CHECKS_OFF), pool = WF_LD(w + WF_BH_POOL_OFF);
  for (uint64_t j = off; j < off + n; j++) {
    const uint64_t* ch = w + checks + 3 * j;
    const uint64_t x = WF_LD(ch + 2);
    const uint64_t v = k[x >> 56];
    if (v < WF_LD(ch) || v > WF_LD(ch + 1)) return false;
    const uint64_t setN = (x >> 32) & 0xffffff;
    if (setN > 1 && !in_ivals(w, pool + 2 * (x & 0xffffffffu), setN, v)) return false;
  }
  const uint64_t ex = x1 >> 32;
  if (ex == 0xffffffffu) return true;
  const uint64_t e = WF_LD(w + WF_BH_EXACT_OFF) + 5 * ex;
  const uint64_t f = WF_LD(w + e);
  const bool src = f & 1, dst = f & 2;
  const uint64_t xp = WF_LD(w + WF_BH_XPOOL_OFF);
  switch (k[WF_D_L3] >> 9) {
  case WF_FAM_V4: {
    const uint64_t s4 = WF_LD(w + e + 1), d4 = WF_LD(w + e + 2);
    return (!src || in_ivals(w, xp + (s4 & 0xffffffffu), s4 >> 32, k[WF_D_SRC_HI])) &&
           (!dst || in_ivals(w, xp + (d4 & 0xffffffffu), d4 >> 32, k[WF_D_DST_HI]));
  }
  case WF_FAM_V6:
    return (!src || in_ivals128(w, xp, WF_LD(w + e + 3), k[WF_D_SRC_HI], k[WF_D_SRC_LO])) &&
           (!dst || in_ivals128(w, xp, WF_LD(w + e + 4), k[WF_D_DST_HI], k[WF_D_DST_LO]));
  }
  return !src && !dst;
}

// blob_lookup is FilterBlob.Lookup: the first matching rule, or the rule
// count.
WF_DEV uint32_t blob_lookup(const uint64_t* __restrict__ w, const uint64_t* k) {
  const uint32_t n = uint32_t(WF_LD(w + WF_BH_RULES));
  if (!gates_pass(w, WF_LD(w + WF_BH_PRE_OFF), WF_LD(w + WF_BH_PRE_N), k, true)) return n;
  uint32_t best = n;
  const uint64_t trees = WF_LD(w + WF_BH_TREES_OFF), nodes = WF_LD(w + WF_BH_NODES_OFF), ntrees = WF_LD(w + WF_BH_TREES);
  const uint64_t leaves = WF_LD(w + WF_BH_LEAVES_OFF), gatesOff = WF_LD(w + WF_BH_GATES_OFF);
  for (uint64_t ti = 0; ti < ntrees; ti++) {
    const uint64_t t0 = WF_LD(w + trees + 4 * ti), t1 = WF_LD(w + trees + 4 * ti + 1);
    const uint32_t minRule = uint32_t(t0 >> 32);
    if (minRule >= best) break;
    if (!gates_pass(w, gatesOff + 3 * (t1 & 0xffffffffu), t1 >> 32, k, false)) continue;
    uint64_t nd = nodes + 2 * (t0 & 0xffffffffu);
    uint64_t x = WF_LD(w + nd + 1);
    while ((x & 0xff) != WF_LEAF_DIM) {
      const uint64_t a = (x >> 32) + (k[x & 0xff] >= WF_LD(w + nd) ? 1 : 0);
      nd = nodes + 2 * a;
      x = WF_LD(w + nd + 1);
    }
    const uint64_t first = x >> 32, cnt = (x >> 8) & 0xffffff;
    for (uint64_t i = first; i < first + cnt; i++) {
      const uint64_t lr = leaves + 2 * i;
      const uint32_t rule = uint32_t(WF_LD(w + lr));
      if (rule >= best) break;
      if (blob_match(w, lr, k)) {
        best = rule;
        break;
      }
    }
  }
  return best;
}

WF_DEV bool ported(uint32_t p) { return p == 6 || p == 17 || p == 132 || p == 33 || p == 136; }

// filter_key is pipelines' filterKey over the device's meta.
WF_DEV void filter_key(const WfMeta& m, uint64_t* k) {
  uint64_t fam = uint64_t(WF_FAM_NONE);
  if (m.flags & uint32_t(WF_FLAG_IPV4)) fam = WF_FAM_V4;
  else if (m.flags & uint32_t(WF_FLAG_IPV6)) fam = WF_FAM_V6;
  const bool ip = fam == WF_FAM_V4 || fam == WF_FAM_V6;
  k[WF_D_L3] = fam << 9 | (ip ? uint64_t(m.proto) : uint64_t(WF_NO_PROTO));
  if (ip) {
    k[WF_D_SRC_HI] = m.srcHi;
    k[WF_D_SRC_LO] = m.srcLo;
    k[WF_D_DST_HI] = m.dstHi;
    k[WF_D_DST_LO] = m.dstLo;
  } else {
    k[WF_D_SRC_HI] = k[WF_D_SRC_LO] = k[WF_D_DST_HI] = k[WF_D_DST_LO] = 0;
  }
  const bool l4 = ip && (m.flags & uint32_t(WF_FLAG_L4));
  k[WF_D_SPORT] = k[WF_D_DPORT] = WF_NO_PORT;
  if (l4 && ported(m.proto)) {
    k[WF_D_SPORT] = m.sport;
    k[WF_D_DPORT] = m.dport;
  }
  k[WF_D_VLAN] = m.nvlans > 0 ? uint64_t(m.vlan0 & 0xfff) : uint64_t(WF_NO_VLAN);
  k[WF_D_CLASS] = m.cls;
  k[WF_D_TCP] = l4 && m.proto == 6 ? uint64_t(m.tcpflags) : uint64_t(WF_NO_TCP);
  k[WF_D_FRAG] = (m.flags & uint32_t(WF_FLAG_FRAGMENT)) ? 1 : 0;
}

// ---- counters

// WfCtx is what a walk counts into: on the device, the block's staging
// table (the program's first nsmall pairs, 32-bit, added up per slot) and
// the program's counters in device memory (64-bit pairs); on the host, the
// counters alone.
struct WfCtx {
  const uint64_t* prog;
  uint32_t* stage;
  uint64_t nsmall;
  unsigned long long* cnt;
  // Deferred: up to WF_DEFER counts of large tables, added warp by warp
  // after the walk (a warp whose packets all hit one filter rule adds it
  // once).
  uint64_t* defIdx;
  uint32_t* defBytes;
  int* ndef;
};
#define WF_DEFER 2

WF_DEV void wf_count(const WfCtx& c, uint64_t idx, uint32_t bytes) {
#ifdef WF_HOST
  c.cnt[2 * idx] += 1;
  c.cnt[2 * idx + 1] += bytes;
#else
  if (idx < c.nsmall) {
    atomicAdd(&c.stage[2 * idx], 1u);
    atomicAdd(&c.stage[2 * idx + 1], bytes);
  } else if (*c.ndef < WF_DEFER) {
    c.defIdx[*c.ndef] = idx;
    c.defBytes[*c.ndef] = bytes;
    (*c.ndef)++;
  } else {
    atomicAdd(&c.cnt[2 * idx], 1ull);
    atomicAdd(&c.cnt[2 * idx + 1], (unsigned long long)bytes);
  }
#endif
}

// ---- the rewrite stage (pipelines/rewrite_process.go's one)

WF_DEV uint32_t csum_word(uint32_t acc, uint32_t old, uint32_t nw) { return acc + (~old & 0xffff) + (nw & 0xffff); }
WF_DEV uint32_t csum_addr_delta(uint32_t old, uint32_t newSum) {
  return (~(old >> 16) & 0xffff) + (~old & 0xffff) + newSum;
}
WF_DEV uint32_t csum_apply(uint32_t hc, uint32_t acc) {
  uint32_t s = (~hc & 0xffff) + acc;
  s = (s & 0xffff) + (s >> 16);
  s = (s & 0xffff) + (s >> 16);
  return ~s & 0xffff;
}

WF_DEV bool rw_ttl_expired(const uint8_t* p, int len, int have, const WfMeta& m) {
  const int l3 = int(m.l3off);
  if (l3 == 0) return false;
  if ((m.flags & uint32_t(WF_FLAG_IPV4)) && l3 + 20 <= len && l3 + 20 <= have && (p[l3] >> 4) == 4) return p[l3 + 8] <= 1;
  if ((m.flags & uint32_t(WF_FLAG_IPV6)) && l3 + 40 <= len && l3 + 40 <= have && (p[l3] >> 4) == 6) return p[l3 + 7] <= 1;
  return false;
}

WF_DEV void rw_shift(WfMeta& m, int d) {
  if (m.l3off != 0 && int(m.l3off) + d >= 0) m.l3off = uint32_t(int(m.l3off) + d);
  if (m.l4off != 0 && int(m.l4off) + d >= 0) m.l4off = uint32_t(int(m.l4off) + d);
}

WF_DEV void rw_move12(uint8_t* dst, const uint8_t* src) { // overlapping, like Go's copy
  uint8_t t[12];
  for (int i = 0; i < 12; i++) t[i] = src[i];
  for (int i = 0; i < 12; i++) dst[i] = t[i];
}

WF_DEV void rw_macs(uint8_t* p, const uint64_t* par, uint32_t ops) {
  if (ops & uint32_t(WF_RW_SRC_MAC))
    for (int i = 0; i < 6; i++) p[6 + i] = uint8_t(par[1] >> (40 - 8 * i));
  if (ops & uint32_t(WF_RW_DST_MAC))
    for (int i = 0; i < 6; i++) p[i] = uint8_t(par[2] >> (40 - 8 * i));
  if (ops & uint32_t(WF_RW_SWAP_MACS))
    for (int i = 0; i < 6; i++) {
      const uint8_t t = p[i];
      p[i] = p[6 + i];
      p[6 + i] = t;
    }
}

// rw_nat4 is nat4: addresses and ports of the IPv4 packet whose header is
// h and whose L4 part is l (llen bytes to the packet's end); it updates
// *ipAcc and returns whether the L4 checksum lay past the packet's end.
WF_DEV bool rw_nat4(uint8_t* h, uint8_t* l, int llen, const uint64_t* par, uint32_t ops, WfMeta& m, uint32_t* ipAcc) {
  const uint32_t proto = h[9];
  int csumOff = -1;
  if ((be16(h, 6) & 0x1fff) == 0) {
    if (proto == 6) csumOff = 16;
    else if (proto == 17) csumOff = 6;
  }
  const bool hasL4 = csumOff >= 0;
  uint32_t l4Acc = 0;
  if (ops & uint32_t(WF_RW_SNAT)) {
    const uint32_t addr = uint32_t(par[3]), port = uint32_t(par[3] >> 32) & 0xffff;
    const uint32_t d = csum_addr_delta(be32(h, 12), uint32_t(par[4]));
    *ipAcc += d;
    l4Acc += d;
    put32(h, 12, addr);
    m.srcHi = uint64_t(addr) << 32 | (m.srcHi & 0xffffffffu);
    if ((par[3] >> 48) & 1 && hasL4 && llen >= 2) {
      l4Acc = csum_word(l4Acc, be16(l, 0), port);
      put16(l, 0, port);
      m.sport = port;
    }
  }
  if (ops & uint32_t(WF_RW_DNAT)) {
    const uint32_t addr = uint32_t(par[5]), port = uint32_t(par[5] >> 32) & 0xffff;
    const uint32_t d = csum_addr_delta(be32(h, 16), uint32_t(par[6]));
    *ipAcc += d;
    l4Acc += d;
    put32(h, 16, addr);
    m.dstHi = uint64_t(addr) << 32 | (m.dstHi & 0xffffffffu);
    if ((par[5] >> 48) & 1 && hasL4 && llen >= 4) {
      l4Acc = csum_word(l4Acc, be16(l, 2), port);
      put16(l, 2, port);
      m.dport = port;
    }
  }
  if (hasL4) {
    if (csumOff + 2 > llen) return true;
    const uint32_t hc = be16(l, csumOff);
    if (proto == 17 && hc == 0) return false; // UDP without a checksum stays without one
    uint32_t n = csum_apply(hc, l4Acc);
    if (proto == 17 && n == 0) n = 0xffff; // RFC 768
    put16(l, csumOff, n);
  }
  return false;
}

// rw_one is the rewrite stage on one packet; it returns the edge.
WF_DEV uint32_t rw_one(const WfCtx& c, const uint64_t* par, WfPkt& pk, WfMeta& m) {
  const uint32_t ops = uint32_t(par[0] & 0xffff), ptpid = uint32_t(par[0] >> 16) & 0xffff,
                 ptci = uint32_t(par[0] >> 32) & 0xffff, ttlEdge = uint32_t(par[0] >> 48) & 0xff,
                 hrEdge = uint32_t(par[0] >> 56) & 0xff;
  const uint64_t base = par[7];
  const uint32_t popPush = uint32_t(WF_RW_POP_VLAN | WF_RW_PUSH_VLAN);
  const uint32_t l2ops = uint32_t(WF_RW_POP_VLAN | WF_RW_PUSH_VLAN | WF_RW_SRC_MAC | WF_RW_DST_MAC | WF_RW_SWAP_MACS);
  const uint32_t macops = uint32_t(WF_RW_SRC_MAC | WF_RW_DST_MAC | WF_RW_SWAP_MACS);
  const uint32_t natops = uint32_t(WF_RW_SNAT | WF_RW_DNAT);
  const uint32_t l3ops = uint32_t(WF_RW_TTL) | natops;
  uint8_t* p = pk.w + pk.start;
  if (pk.len < 14) {
    wf_count(c, base + 2, uint32_t(pk.len)); // runt
    return 0;
  }
  if ((ops & uint32_t(WF_RW_TTL)) && rw_ttl_expired(p, pk.len, pkt_have(pk), m)) return ttlEdge;
  const bool tagged = (ops & popPush) && pk.len >= 18 && tpid(be16(p, 12));
  const int headroom = int(pk.addr & pk.mask);
  if ((ops & uint32_t(WF_RW_PUSH_VLAN)) && headroom < 4 && (!(ops & uint32_t(WF_RW_POP_VLAN)) || !tagged)) return hrEdge;
  if (ops & l2ops) {
    if ((ops & uint32_t(WF_RW_POP_VLAN)) && tagged) {
      rw_move12(p + 4, p);
      pkt_dirty(pk, 4, 16);
      pk.start += 4;
      pk.len -= 4;
      pk.addr += 4;
      p = pk.w + pk.start;
      rw_shift(m, -4);
      if (m.nvlans > 0) {
        m.vlan0 = m.vlan1;
        m.vlan1 = 0;
        m.nvlans--;
      }
    }
    if (ops & uint32_t(WF_RW_PUSH_VLAN)) {
      if (int(pk.addr & pk.mask) < 4 || pk.start < 4) return hrEdge; // the window holds the frame's headroom: start >= 4 when it has 4
      pk.start -= 4;
      pk.len += 4;
      pk.addr -= 4;
      p = pk.w + pk.start;
      rw_move12(p, p + 4);
      put16(p, 12, ptpid);
      put16(p, 14, ptci);
      pkt_dirty(pk, 0, 16);
      rw_shift(m, 4);
      m.vlan1 = m.vlan0;
      m.vlan0 = ptci & 0xfff;
      if (m.nvlans < 2) m.nvlans++;
    }
    if (ops & macops) {
      rw_macs(p, par, ops);
      pkt_dirty(pk, 0, 12);
    }
  }
  if (!(ops & l3ops)) return 0;
  const int l3 = int(m.l3off), len = pk.len, have = pkt_have(pk);
  if ((m.flags & uint32_t(WF_FLAG_IPV4)) && l3 != 0 && l3 + 20 <= len && l3 + 20 <= have && (p[l3] >> 4) == 4) {
    uint8_t* h = p + l3;
    uint32_t ipAcc = 0;
    if (ops & uint32_t(WF_RW_TTL)) {
      const uint32_t old = be16(h, 8);
      h[8]--; // > 1: checked by rw_ttl_expired
      ipAcc = csum_word(ipAcc, old, (old - 0x100) & 0xffff);
      m.ttl = h[8];
    }
    if (ops & natops) {
      const int ihl = (h[0] & 0xf) * 4;
      if (ihl < 20 || l3 + ihl > len) {
        wf_count(c, base + 1, uint32_t(len)); // truncated
      } else if (rw_nat4(h, p + l3 + ihl, len - l3 - ihl, par, ops, m, &ipAcc)) {
        wf_count(c, base + 1, uint32_t(len));
      }
    }
    put16(h, 10, csum_apply(be16(h, 10), ipAcc));
    // Every byte the rewrite may write: the IPv4 header and the L4 ports
    // and checksum (bounded by the window and the packet).
    int to = l3 + 20 + 18;
    if (to > have) to = have;
    pkt_dirty(pk, l3, to);
    return 0;
  }
  if ((m.flags & uint32_t(WF_FLAG_IPV6)) && l3 != 0 && l3 + 40 <= len && l3 + 40 <= have && (p[l3] >> 4) == 6) {
    if (ops & uint32_t(WF_RW_TTL)) {
      p[l3 + 7]--; // > 1: checked by rw_ttl_expired
      m.ttl = p[l3 + 7];
      pkt_dirty(pk, l3 + 7, l3 + 8);
    }
  } else if (m.flags & uint32_t(WF_FLAG_IPV4)) {
    if (ops & natops) wf_count(c, base + 1, uint32_t(len)); // flagged IPv4, header cut
    return 0;
  }
  if (ops & natops) wf_count(c, base + 0, uint32_t(len)); // skipped: not IPv4
  return 0;
}

// ---- balance (pipelines/balance.go)

WF_DEV uint64_t bal_mix(uint64_t h, uint64_t w) {
  h ^= w * 0xc2b2ae3d27d4eb4full;
  h = ((h << 31) | (h >> 33)) * 0x9e3779b97f4a7c15ull;
  return h;
}
WF_DEV uint32_t bal_final(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return uint32_t(h) ^ uint32_t(h >> 32);
}

WF_DEV uint32_t bal_hash(const WfMeta& m, const uint8_t* p, int len) {
  if (m.flags & uint32_t(WF_FLAG_IPV4 | WF_FLAG_IPV6)) {
    uint64_t a0 = m.srcHi, a1 = m.srcLo, b0 = m.dstHi, b1 = m.dstLo, pa = 0, pb = 0, extra = 0;
    if (!(m.flags & uint32_t(WF_FLAG_L4)) || (m.flags & uint32_t(WF_FLAG_FRAGMENT))) {
    } else if (m.proto == 1 || m.proto == 58) {
      extra = m.dport;
    } else {
      pa = m.sport;
      pb = m.dport;
    }
    if (a0 > b0 || (a0 == b0 && (a1 > b1 || (a1 == b1 && pa > pb)))) {
      uint64_t t;
      t = a0, a0 = b0, b0 = t;
      t = a1, a1 = b1, b1 = t;
      t = pa, pa = pb, pb = t;
    }
    uint64_t h = WF_BALANCE_SEED ^ uint64_t(m.proto) << 48 ^ extra << 16;
    h = bal_mix(h, a0);
    h = bal_mix(h, a1);
    h = bal_mix(h, b0);
    h = bal_mix(h, b1);
    h = bal_mix(h, pa << 16 | pb);
    return bal_final(h);
  }
  if (len >= 14) {
    uint64_t d = uint64_t(be32(p, 0)) << 16 | be16(p, 4);
    uint64_t s = uint64_t(be32(p, 6)) << 16 | be16(p, 10);
    if (d > s) {
      const uint64_t t = d;
      d = s;
      s = t;
    }
    uint64_t h = WF_BALANCE_SEED ^ uint64_t(be16(p, 12)) << 48;
    h = bal_mix(h, d);
    h = bal_mix(h, s);
    return bal_final(h);
  }
  uint64_t h = WF_BALANCE_SEED ^ uint64_t(len);
  for (int i = 0; i < len; i++) h = bal_mix(h, p[i]);
  return bal_final(h);
}

// ---- count (pipelines/count.go)

WF_DEV void count_one(const WfCtx& c, const uint64_t* par, const WfMeta& m, uint32_t len) {
  wf_count(c, par[1], len);
  if (par[0] & WF_CNT_PROTO) {
    const uint64_t p = (m.flags & uint32_t(WF_FLAG_IPV4 | WF_FLAG_IPV6)) ? uint64_t(m.proto) : uint64_t(WF_COUNT_PROTO_NONE);
    wf_count(c, par[2] + p, len);
  }
  if (par[0] & WF_CNT_VLAN) {
    const uint64_t v = m.nvlans > 0 ? uint64_t(m.vlan0 & 0xfff) : uint64_t(WF_COUNT_VLAN_NONE);
    wf_count(c, par[3] + v, len);
  }
  if ((par[0] & WF_CNT_CLASS) && m.cls < WF_NUM_CLASSES) wf_count(c, par[4] + m.cls, len);
}

// wf_walk runs the program on one packet from the entry node to a
// terminal and returns its verdict word, or WF_FALLBACK for a packet the
// entry parse stage hands to the CPU path (nothing counted, nothing
// written back: the caller discards the window).
WF_DEV uint32_t wf_walk(const WfCtx& c, WfPkt& pk, WfMeta& m) {
  const uint64_t* prog = c.prog;
  const uint64_t nn = WF_LD(prog + WF_PH_NODES), nodesOff = WF_LD(prog + WF_PH_NODES_OFF);
  uint64_t node = WF_LD(prog + WF_PH_ENTRY);
  for (uint64_t step = 0; step <= nn; step++) {
    const uint64_t* rec = prog + nodesOff + node * WF_PN_WORDS;
    const uint64_t k0 = WF_LD(rec + WF_PN_KIND);
    const uint32_t kind = uint32_t(k0 & 0xff), nedges = uint32_t(k0 >> 8) & 0xff;
    const uint64_t* par = rec + WF_PN_PARAM;
    const uint32_t lenIn = uint32_t(pk.len);
    uint32_t e = 0;
    switch (kind) {
    case WF_K_TX:
    case WF_K_DROP:
    case WF_K_PASS:
      wf_count(c, WF_LD(rec + WF_PN_COUNTER), lenIn);
      return uint32_t(WF_LD(par + 0)) << WF_VERDICT_SHIFT | uint32_t(WF_LD(par + 1));
    case WF_K_PARSE:
      if (!wf_parse(pk, WF_LD(par + 0) != 0, m)) return uint32_t(WF_FALLBACK);
      break;
    case WF_K_FILTER: {
      uint64_t k[WF_N_DIMS];
      filter_key(m, k);
      const uint32_t r = blob_lookup(prog + WF_LD(par + 0), k);
      e = uint32_t(WF_LD(prog + WF_LD(par + 2) + r / 8) >> (8 * (r % 8))) & 0xff;
      wf_count(c, WF_LD(par + 3) + r, lenIn);
      break;
    }
    case WF_K_REWRITE: {
      uint64_t pr[8];
      for (int i = 0; i < 8; i++) pr[i] = WF_LD(par + i);
      e = rw_one(c, pr, pk, m);
      break;
    }
    case WF_K_BALANCE: {
      const uint32_t h = bal_hash(m, pk.w + pk.start, pk.len);
      m.hash = h;
      e = uint32_t((uint64_t(h) * WF_LD(par + 0)) >> 32);
      break;
    }
    case WF_K_COUNT: {
      uint64_t pr[5];
      for (int i = 0; i < 5; i++) pr[i] = WF_LD(par + i);
      count_one(c, pr, m, lenIn);
      break;
    }
    case WF_K_SAMPLE:
      m.sample |= 1u << uint32_t(WF_LD(par + 0));
      break;
    default: // CompileDevice admits no other kind
      return uint32_t(WF_FALLBACK);
    }
    wf_count(c, WF_LD(rec + WF_PN_COUNTER), lenIn);
    if (e >= nedges) { // a stage's bad edge: the graph's bad-edge drop (no stage here writes one)
      node = WF_LD(prog + WF_PH_BAD_EDGE);
      continue;
    }
    wf_count(c, WF_LD(rec + WF_PN_EDGE_COUNTERS) + e, uint32_t(pk.len));
    node = WF_LD(prog + WF_LD(rec + WF_PN_EDGES_OFF) + e);
  }
  return uint32_t(WF_FALLBACK); // a DAG ends at a terminal within nn steps
}

// ---------------------------------------------------------------------------
// The kernel: CUDA only.

#ifndef WF_HOST

__device__ __forceinline__ uint32_t ld_sys32(const void* p) {
  uint32_t v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void st_release_sys64(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long ld_sys64(const void* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void fence_acquire_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

// ld_cv_v2 loads 16 aligned bytes the host may have rewritten since a
// previous lap (ld.global.cv), ordered by the fence.
__device__ __forceinline__ void ld_cv_v2(const void* p, uint64_t& a, uint64_t& b) {
  const ulonglong2 v = __ldcv((const ulonglong2*)p);
  a = v.x;
  b = v.y;
}

__device__ __forceinline__ unsigned long long ld_volatile64(const unsigned long long* p) {
  return *(volatile const unsigned long long*)p;
}
__device__ __forceinline__ uint32_t ld_volatile32(const uint32_t* p) { return *(volatile const uint32_t*)p; }
__device__ __forceinline__ void st_volatile32(uint32_t* p, uint32_t v) { *(volatile uint32_t*)p = v; }



#define WF_CHUNKS (WF_WIN / 16)

struct WfShared {
  uint64_t seq, prog, arena, arenaLen, mask;
  uint32_t count, flags, ring, quit;
  uint32_t fallbacks, wmin, wmax, cands;
  unsigned long long bytes;
  uint32_t sampN[WF_SLOT_SAMPLERS];
  uint32_t wtot[WF_SLOT_SAMPLERS][WF_THREADS / 32];
};

extern "C" __global__ void __launch_bounds__(WF_THREADS) wf_kernel(WfArgs a) {
  __shared__ __align__(16) uint64_t win[WF_THREADS][WF_WIN / 8];
  __shared__ uint32_t stage[2 * WF_MAX_SMALL];
  __shared__ WfShared sh;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned full = 0xffffffffu;
  uint32_t* stop = (uint32_t*)a.Stop;
  uint8_t* table = (uint8_t*)a.Table;
  uint8_t* dv = (uint8_t*)a.Claims;
  unsigned long long* claims = (unsigned long long*)(dv + WF_DV_CLAIMS);
  uint32_t* mirror = (uint32_t*)(dv + WF_DV_MIRROR);
  uint32_t* mirrorActive = (uint32_t*)(dv + WF_DV_MIRROR_ACTIVE);
  uint32_t* mirrorStop = (uint32_t*)(dv + WF_DV_MIRROR_STOP);
  unsigned long long* kstats = (unsigned long long*)(dv + WF_DV_STATS);
  uint32_t* retireMirror = (uint32_t*)(dv + WF_DV_RETIRE);
  uint32_t* acks = (uint32_t*)(dv + WF_DV_ACKS);
  if (blockIdx.x == gridDim.x - 1) {
    // The last block is the poller: its warp 0 copies the ring table from
    // host memory into the device's mirror, over and over (one PCIe read
    // of the rings in use, the count and the stop word a turn), so that
    // the other blocks look for work in device memory: many blocks reading
    // one host address at once queue up behind each other over PCIe.
    if (warp != 0) return;
    unsigned long long snapDone = ld_sys64(table + WF_RT_SNAP_DONE);
    // The retire epoch: what the poller mirrored last and what it last
    // published as acknowledged by every block (rtQuiesced).
    uint32_t retMirrored = 0, quiesced = 0;
    const uint32_t nblocks = gridDim.x - 1;
    if (lane == 0) st_release_sys(stop + 2, uint32_t(WF_ACKS_MARK)); // this kernel acknowledges epochs
    for (;;) {
      uint32_t dbv = 0, hn = 0, st = 0, ret = 0;
      unsigned long long req = 0;
      if (uint32_t(lane) < a.RingsN) dbv = ld_sys32(table + WF_RT_DOORBELLS + 4 * lane);
      if (lane == 0) {
        hn = ld_sys32(table + WF_RT_ACTIVE);
        st = ld_sys32(stop);
        req = ld_sys64(table + WF_RT_SNAP_REQ);
      }
      if (lane == 1) ret = ld_sys32(table + WF_RT_RETIRE); // the low half
      hn = __shfl_sync(full, hn, 0);
      st = __shfl_sync(full, st, 0);
      req = __shfl_sync(full, req, 0);
      ret = __shfl_sync(full, ret, 1);
      if (ret != retMirrored) {
        if (lane == 0) st_volatile32(retireMirror, ret);
        retMirrored = ret;
      }
      if (ret != quiesced) {
        // The epoch every block has acknowledged: the oldest of their
        // acknowledgements (wrap-safe, as distances behind ret).
        int32_t behind = 0;
        for (uint32_t b = lane; b < nblocks; b += 32) {
          const int32_t d = int32_t(ret - ld_volatile32(acks + b));
          if (d > behind) behind = d;
        }
        behind = __reduce_max_sync(full, behind);
        const uint32_t q = ret - uint32_t(behind);
        if (q != quiesced) {
          if (lane == 0) st_release_sys64((unsigned long long*)(table + WF_RT_QUIESCED), q);
          quiesced = q;
        }
      }
      if (req != snapDone) {
        // A counter snapshot: copy the words asked for from device memory
        // to the host's, then say done (the release covers the copies).
        uint64_t src = 0, dst = 0, n = 0, op = 0;
        if (lane == 0) {
          fence_acquire_sys();
          src = ld_sys64(table + WF_RT_SNAP_SRC);
          dst = ld_sys64(table + WF_RT_SNAP_DST);
          n = ld_sys64(table + WF_RT_SNAP_WORDS);
          op = ld_sys64(table + WF_RT_SNAP_OP);
        }
        src = __shfl_sync(full, src, 0);
        dst = __shfl_sync(full, dst, 0);
        n = __shfl_sync(full, n, 0);
        op = __shfl_sync(full, op, 0);
        unsigned long long* d = (unsigned long long*)dst;
        const unsigned long long* sp = (const unsigned long long*)src;
        if (op == WF_SNAP_TO_HOST) {
          for (uint64_t i = lane; i < n; i += 32) d[i] = ld_volatile64(sp + i);
        } else if (op == WF_SNAP_TO_DEVICE) {
          uint64_t i = lane;
          for (; i + 96 < n; i += 128) { // four loads in flight a lane
            const unsigned long long v0 = __ldcv(sp + i), v1 = __ldcv(sp + i + 32), v2 = __ldcv(sp + i + 64),
                                     v3 = __ldcv(sp + i + 96);
            d[i] = v0;
            d[i + 32] = v1;
            d[i + 64] = v2;
            d[i + 96] = v3;
          }
          for (; i < n; i += 32) d[i] = __ldcv(sp + i);
        } else if (op == WF_SNAP_ZERO) {
          for (uint64_t i = lane; i < n; i += 32) d[i] = 0;
        }
        __threadfence(); // device memory written before the host hears done
        __syncwarp();
        if (lane == 0) st_release_sys64((unsigned long long*)(table + WF_RT_SNAP_DONE), req);
        snapDone = req;
      }
      const uint32_t n = hn < a.RingsN ? hn : a.RingsN;
      if (uint32_t(lane) < n) st_volatile32(mirror + lane, dbv);
      __syncwarp();
      if (lane == 0) {
        __threadfence(); // the doorbells before the count that exposes them
        st_volatile32(mirrorActive, n);
        atomicAdd(kstats + 2, 1ull);
        if (st) {
          __threadfence();
          st_volatile32(mirrorStop, 1);
        }
      }
      if (st) return;
      __syncwarp();
    }
  }
  for (int k = tid; k < 2 * int(WF_MAX_SMALL); k += WF_THREADS) stage[k] = 0;
  if (tid == 0 && blockIdx.x == 0) st_release_sys(stop + 1, 0xC0DE0004u); // alive
  uint32_t rot = blockIdx.x;
  uint32_t acked = 0; // lane 0 of warp 0: the retire epoch this block acknowledged
  for (;;) {
    // Warp 0 finds a ring with a submitted slot nobody took and claims it,
    // in the mirror the poller keeps (device memory); the winner then reads
    // the ring's doorbell in host memory once, for the acquire.
    if (warp == 0) {
      uint32_t idle = 0, nap = 32;
      int got = 0, quit = 0;
      for (;;) {
        if (lane == 0) {
          // Between two slots: a program given back (a new retire epoch)
          // is read no more by this block; the fence leaves no line of it
          // in this multiprocessor's L1, and the acknowledgement says so.
          const uint32_t rv = ld_volatile32(retireMirror);
          if (rv != acked) {
            fence_acq_rel_gpu();
            st_volatile32(acks + blockIdx.x, rv);
            acked = rv;
          }
        }
        const uint32_t nr = __shfl_sync(full, lane == 0 ? ld_volatile32(mirrorActive) : 0u, 0);
        uint32_t db = 0, cl = 0;
        if (uint32_t(lane) < nr && nr <= a.RingsN) {
          db = ld_volatile32(mirror + lane);
          cl = uint32_t(ld_volatile64(claims + lane));
        }
        const uint32_t has = __ballot_sync(full, int32_t(db - cl) > 0);
        if (has) {
          const uint32_t sft = rot & 31;
          const uint32_t rotated = sft ? (has >> sft) | (has << (32 - sft)) : has;
          const uint32_t r = (uint32_t(__ffs(rotated)) - 1 + sft) & 31;
          rot++;
          if (lane == 0) {
            const unsigned long long c = ld_volatile64(claims + r);
            const uint32_t mdb = ld_volatile32(mirror + r);
            if (int32_t(mdb - uint32_t(c)) > 0 && atomicCAS(claims + r, c, c + 1) == c) {
              got = 1;
              sh.seq = c;
              sh.ring = r;
              // The host's doorbell, read by the thread that fences: the
              // acquire below orders only this thread's own loads. It
              // shows c+1 or more already (the poller read it).
              while (int32_t(ld_sys32(table + WF_RT_DOORBELLS + 4 * r) - uint32_t(c)) <= 0) {
              }
              atomicAdd(kstats + 0, 1ull);
            } else {
              atomicAdd(kstats + 1, 1ull);
            }
          }
          got = __shfl_sync(full, got, 0);
          if (got) break;
          continue;
        }
        if (__shfl_sync(full, lane == 0 ? ld_volatile32(mirrorStop) : 0u, 0)) {
          quit = 1;
          break;
        }
        idle++;
        if (a.PollNs && idle > 64) {
          __nanosleep(nap);
          if (nap < a.PollNs) nap *= 2;
          if (lane == 0 && (idle & 1023) == 0) atomicAdd(kstats + 3, 1ull);
        }
      }
      if (lane == 0 && !quit) fence_acquire_sys();
      __syncwarp(); // carries lane 0's acquire to the lanes reading the head
      uint64_t hx = 0, hy = 0;
      if (!quit && lane < 5) {
        const char* slot = (const char*)a.Slots + uint64_t(sh.ring) * a.RingBytes + (sh.seq % a.Nslots) * a.Stride;
        ld_cv_v2(slot + 16 * lane, hx, hy); // the head's five chunks, one PCIe read
      }
      const uint64_t h0 = __shfl_sync(full, hx, 0), h1 = __shfl_sync(full, hx, 1), h2 = __shfl_sync(full, hx, 2),
                     h3 = __shfl_sync(full, hx, 3), h4 = __shfl_sync(full, hx, 4);
      if (lane == 0) {
        sh.quit = quit;
        if (!quit) {
          sh.count = uint32_t(h0 >> 32);
          sh.prog = h1;
          sh.arena = h2;
          sh.arenaLen = h3;
          sh.mask = h4 & 0xffffffffu;
          sh.flags = uint32_t(h4 >> 32);
          sh.fallbacks = 0;
          sh.wmin = 0xffffffffu;
          sh.wmax = 0;
          sh.bytes = 0;
          sh.cands = 0;
          for (int k = 0; k < int(WF_SLOT_SAMPLERS); k++) sh.sampN[k] = 0;
        }
      }
      __syncwarp();
    }
    __syncthreads();
    if (sh.quit) return;

    char* slot = (char*)a.Slots + uint64_t(sh.ring) * a.RingBytes + (sh.seq % a.Nslots) * a.Stride;
    const uint32_t count = sh.count < a.Cap ? sh.count : a.Cap;
    const uint64_t* prog = (const uint64_t*)sh.prog;
    const uint8_t* arena = (const uint8_t*)sh.arena;
    const uint64_t arenaLen = sh.arenaLen, mask = sh.mask;
    const uint32_t flags = sh.flags;
    const bool head = (__ldg(prog + WF_PH_FLAGS) & WF_PF_HEADROOM) != 0;
    const uint32_t nsamp = uint32_t(__ldg(prog + WF_PH_SAMPLERS));
    unsigned long long* cnt = (unsigned long long*)(prog + __ldg(prog + WF_PH_WORDS));
    const uint64_t nsmall = __ldg(prog + WF_PH_SMALL);
    char* descs = slot + a.DescsOff;
    uint32_t* verd = (uint32_t*)(slot + a.VerdOff);
    const uint8_t* forcedMap = (const uint8_t*)(slot + a.ForcedOff);
    uint16_t* samp = (uint16_t*)(slot + a.SampOff);
    uint8_t* mywin = (uint8_t*)&win[tid][0];

    for (uint32_t chunk = 0; chunk < count; chunk += WF_THREADS) {
      const uint32_t i = chunk + tid;
      const bool valid = i < count;
      uint64_t addr = 0, dy = 0;
      if (valid) ld_cv_v2(descs + 16 * uint64_t(i), addr, dy);
      const uint32_t len = uint32_t(dy);
      bool forced = (flags & WF_SF_ALL_FORCED) != 0;
      if (valid && (flags & WF_SF_FORCED) && (forcedMap[i >> 3] >> (i & 7)) & 1) forced = true;
      const bool ok = valid && len > 0 && addr < arenaLen && len <= arenaLen - addr;
      uint64_t ws = 0;
      uint32_t wlen = 0;
      if (ok && !forced) wf_window(addr, len, mask, arenaLen, head, &ws, &wlen);
      // Frames: the warp loads its 32 packets' windows, consecutive lanes
      // on consecutive chunks of one packet; every load is issued before
      // the first is stored, so they overlap (one PCIe round trip, not ten).
      {
        uint64_t vx[WF_CHUNKS], vy[WF_CHUNKS];
        bool vok[WF_CHUNKS];
#pragma unroll
        for (int q = 0; q < int(WF_CHUNKS); q++) {
          const int j = lane + 32 * q, p = j / int(WF_CHUNKS), part = j % int(WF_CHUNKS);
          const uint64_t pws = __shfl_sync(full, ws, p);
          const uint32_t pwl = __shfl_sync(full, wlen, p);
          vok[q] = uint32_t(16 * part) < pwl;
          vx[q] = vy[q] = 0;
          if (vok[q]) ld_cv_v2(arena + pws + 16 * part, vx[q], vy[q]);
        }
#pragma unroll
        for (int q = 0; q < int(WF_CHUNKS); q++) {
          const int j = lane + 32 * q, p = j / int(WF_CHUNKS), part = j % int(WF_CHUNKS);
          if (vok[q]) {
            uint64_t* dst = &win[(tid & ~31) + p][2 * part];
            dst[0] = vx[q];
            dst[1] = vy[q];
          }
        }
      }
      __syncwarp();
      uint32_t word = uint32_t(WF_FALLBACK);
      uint64_t defIdx[WF_DEFER];
      uint32_t defBytes[WF_DEFER];
      int ndef = 0;
      WfPkt pk;
      pk.w = mywin;
      pk.start = int(addr - ws);
      pk.len = int(len);
      pk.wlen = int(wlen);
      pk.addr = addr;
      pk.mask = mask;
      pk.dlo = WF_WIN;
      pk.dhi = 0;
      WfMeta m = {};
      if (ok && !forced && wlen > 0) {
        WfCtx c;
        c.prog = prog;
        c.stage = stage;
        c.nsmall = nsmall;
        c.cnt = cnt;
        c.defIdx = defIdx;
        c.defBytes = defBytes;
        c.ndef = &ndef;
        word = wf_walk(c, pk, m);
      }
      const bool done = valid && word != uint32_t(WF_FALLBACK);
      if (!done) pk.dhi = 0; // a packet handed back leaves memory untouched
      __syncwarp();
      // Write-back: the chunks each packet changed, consecutive lanes on
      // consecutive chunks.
      const int clo = pk.dlo >> 4, chi = (pk.dhi + 15) >> 4;
      for (int j = lane; j < 32 * WF_CHUNKS; j += 32) {
        const int p = j / WF_CHUNKS, part = j % WF_CHUNKS;
        const uint64_t pws = __shfl_sync(full, ws, p);
        const int plo = __shfl_sync(full, clo, p), phi = __shfl_sync(full, chi, p);
        if (part >= plo && part < phi) {
          const uint64_t* src = &win[(tid & ~31) + p][2 * part];
          ulonglong2 v;
          v.x = src[0];
          v.y = src[1];
          *(ulonglong2*)(arena + pws + 16 * part) = v;
        }
      }
      if (valid) verd[i] = word;
      if (done && pk.addr != addr) {
        ulonglong2 d;
        d.x = pk.addr;
        d.y = (dy & 0xffffffff00000000ull) | uint32_t(pk.len);
        *(ulonglong2*)(descs + 16 * uint64_t(i)) = d;
      }
      // Deferred large counters: once per warp when every lane hit the
      // same one (a filter's default, say), else per packet.
      for (int d = 0; d < WF_DEFER; d++) {
        const bool has = d < ndef;
        const uint64_t idx = has ? defIdx[d] : ~0ull;
        const uint32_t by = has ? defBytes[d] : 0;
        const uint64_t idx0 = __shfl_sync(full, idx, 0);
        if (__all_sync(full, !has || idx == idx0) && idx0 != ~0ull) {
          const uint32_t bytes = __reduce_add_sync(full, by);
          const uint32_t pkts = __popc(__ballot_sync(full, has));
          if (lane == 0) {
            atomicAdd(cnt + 2 * idx0, (unsigned long long)pkts);
            atomicAdd(cnt + 2 * idx0 + 1, (unsigned long long)bytes);
          }
        } else if (has) {
          atomicAdd(cnt + 2 * idx, 1ull);
          atomicAdd(cnt + 2 * idx + 1, (unsigned long long)by);
        }
      }
      // The slot's summary.
      const uint32_t nfb = __popc(__ballot_sync(full, valid && !done));
      const uint32_t wbytes = __reduce_add_sync(full, done ? uint32_t(pk.len) : 0u);
      const uint32_t ncand = __popc(__ballot_sync(full, done && m.sample != 0));
      if (valid) {
        atomicMin(&sh.wmin, word);
        atomicMax(&sh.wmax, word);
      }
      if (lane == 0) {
        if (nfb) atomicAdd(&sh.fallbacks, nfb);
        if (ncand) atomicAdd(&sh.cands, ncand);
        atomicAdd(&sh.bytes, (unsigned long long)wbytes);
      }
      // Samplers: each one's candidates, compacted in packet order.
      for (uint32_t k = 0; k < nsamp; k++) {
        const uint32_t b = __ballot_sync(full, done && ((m.sample >> k) & 1));
        if (lane == 0) sh.wtot[k][warp] = __popc(b);
      }
      __syncthreads();
      for (uint32_t k = 0; k < nsamp; k++) {
        const uint32_t b = __ballot_sync(full, done && ((m.sample >> k) & 1));
        uint32_t at = sh.sampN[k];
        for (int w = 0; w < warp; w++) at += sh.wtot[k][w];
        at += __popc(b & ((1u << lane) - 1));
        if (done && ((m.sample >> k) & 1)) samp[uint64_t(k) * a.Cap + at] = uint16_t(i);
      }
      __syncthreads();
      if (tid == 0)
        for (uint32_t k = 0; k < nsamp; k++)
          for (int w = 0; w < WF_THREADS / 32; w++) sh.sampN[k] += sh.wtot[k][w];
      __syncthreads(); // the windows and sh are reused by the next chunk
    }

    // The staged counters, added to the program's.
    const uint64_t nn = __ldg(prog + WF_PH_NODES), nodesOff = __ldg(prog + WF_PH_NODES_OFF);
    for (uint64_t k = tid; k < nsmall; k += WF_THREADS) {
      const uint32_t p = stage[2 * k], b = stage[2 * k + 1];
      if (p) {
        atomicAdd(cnt + 2 * k, (unsigned long long)p);
        atomicAdd(cnt + 2 * k + 1, (unsigned long long)b);
        stage[2 * k] = 0;
        stage[2 * k + 1] = 0;
        if (k < nn) atomicAdd(cnt + 2 * __ldg(prog + nodesOff + k * WF_PN_WORDS + WF_PN_CALLS), 1ull);
      }
    }
    __syncthreads();
    if (tid == 0) {
      *(uint32_t*)(slot + WF_SO_FALLBACKS) = sh.fallbacks;
      *(uint32_t*)(slot + WF_SO_UNIFORM) = count > 0 && sh.wmin == sh.wmax && sh.fallbacks == 0 && sh.cands == 0;
      *(uint32_t*)(slot + WF_SO_WORD) = sh.wmin;
      *(unsigned long long*)(slot + WF_SO_BYTES) = sh.bytes;
      for (int k = 0; k < int(WF_SLOT_SAMPLERS); k++) ((uint16_t*)(slot + WF_SO_SAMPLE_N))[k] = uint16_t(sh.sampN[k]);
      st_release_sys((uint32_t*)(slot + WF_SH_WORD), uint32_t(sh.seq / a.Nslots) << 2 | uint32_t(WF_ST_DONE));
    }
  }
}

#endif // !WF_HOST
