// The host build of kernel.cu: a small server that runs the kernel's own
// per-packet code (wf_window, wf_walk and everything under it) for the Go
// emulation (gpu/emu.go), over stdin and stdout. Build:
//
//   g++ -O2 -std=c++17 -I.. -o wfkernel main.cc
//
// Protocol, little-endian, one request at a time; every reply starts
// with a u32 status (0: ok; else an error message follows as u32 length
// and bytes, and the server exits):
//
//   1 LOAD     u32 id, u32 n, u64 words[n]       a device program
//   2 SLOT     u32 id, u32 count, u64 mask, u64 arenaLen, u32 flags,
//              then per packet: u64 addr, u32 len, u32 forced,
//              u64 regionStart, u32 regionLen, the region's bytes (a
//              superset of the window the kernel would load)
//              reply per packet: u32 word, u64 addr, u32 len, u32 sample,
//              u64 dirtyStart, u32 dirtyLen, the bytes to write back
//   3 COUNTERS u32 id                             reply: u32 pairs, u64 words[2*pairs]
//   4 FREE     u32 id
#include "shim.h"
#include "../kernel.cu"

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

struct Prog {
  std::vector<uint64_t> words;
  std::vector<unsigned long long> cnt;
};

std::map<uint32_t, Prog> progs;

void readn(void* p, size_t n) {
  if (n && fread(p, 1, n, stdin) != n) exit(0); // the emulator went away
}
template <class T> T rd() {
  T v;
  readn(&v, sizeof v);
  return v;
}
void writen(const void* p, size_t n) {
  if (n && fwrite(p, 1, n, stdout) != n) exit(1);
}
template <class T> void wr(T v) { writen(&v, sizeof v); }

[[noreturn]] void fail(const std::string& msg) {
  wr<uint32_t>(1);
  wr<uint32_t>(uint32_t(msg.size()));
  writen(msg.data(), msg.size());
  fflush(stdout);
  exit(2);
}

Prog& prog(uint32_t id) {
  auto it = progs.find(id);
  if (it == progs.end()) fail("no program " + std::to_string(id));
  return it->second;
}

void slot() {
  const uint32_t id = rd<uint32_t>(), count = rd<uint32_t>();
  const uint64_t mask = rd<uint64_t>(), arenaLen = rd<uint64_t>();
  const uint32_t flags = rd<uint32_t>();
  Prog& p = prog(id);
  const bool head = (p.words[WF_PH_FLAGS] & WF_PF_HEADROOM) != 0;
  std::vector<uint8_t> region;
  std::vector<uint8_t> out;
  wr<uint32_t>(0);
  for (uint32_t i = 0; i < count; i++) {
    const uint64_t addr = rd<uint64_t>();
    const uint32_t len = rd<uint32_t>(), forced = rd<uint32_t>();
    const uint64_t rstart = rd<uint64_t>();
    const uint32_t rlen = rd<uint32_t>();
    region.resize(rlen);
    readn(region.data(), rlen);
    uint32_t word = uint32_t(WF_FALLBACK), sample = 0;
    uint64_t naddr = addr;
    uint32_t nlen = len;
    uint64_t dstart = 0;
    uint32_t dlen = 0;
    const bool ok = len > 0 && addr < arenaLen && len <= arenaLen - addr;
    alignas(16) uint8_t win[WF_WIN];
    if (ok && !forced && !(flags & WF_SF_ALL_FORCED)) {
      uint64_t ws;
      uint32_t wlen;
      wf_window(addr, len, mask, arenaLen, head, &ws, &wlen);
      if (ws < rstart || ws + wlen > rstart + rlen) fail("packet " + std::to_string(i) + ": region does not hold the window");
      memcpy(win, region.data() + (ws - rstart), wlen);
      WfPkt pk;
      pk.w = win;
      pk.start = int(addr - ws);
      pk.len = int(len);
      pk.wlen = int(wlen);
      pk.addr = addr;
      pk.mask = mask;
      pk.dlo = WF_WIN;
      pk.dhi = 0;
      WfMeta m = {};
      WfCtx c = {};
      c.prog = p.words.data();
      c.cnt = p.cnt.data();
      if (wlen > 0) word = wf_walk(c, pk, m);
      if (word != uint32_t(WF_FALLBACK)) {
        naddr = pk.addr;
        nlen = uint32_t(pk.len);
        sample = m.sample;
        if (pk.dhi > pk.dlo) {
          const uint32_t lo = uint32_t(pk.dlo) & ~15u;
          uint32_t hi = (uint32_t(pk.dhi) + 15) & ~15u;
          if (hi > wlen) hi = wlen;
          dstart = ws + lo;
          dlen = hi - lo;
          out.assign(win + lo, win + hi);
        }
      }
    }
    wr<uint32_t>(word);
    wr<uint64_t>(naddr);
    wr<uint32_t>(nlen);
    wr<uint32_t>(sample);
    wr<uint64_t>(dstart);
    wr<uint32_t>(dlen);
    if (dlen) writen(out.data(), dlen);
  }
}

} // namespace

int main() {
  for (;;) {
    uint32_t op;
    if (fread(&op, 1, 4, stdin) != 4) return 0;
    switch (op) {
    case 1: {
      const uint32_t id = rd<uint32_t>(), n = rd<uint32_t>();
      Prog p;
      p.words.resize(n);
      readn(p.words.data(), 8ull * n);
      if (n < WF_PH_HEADER_WORDS || p.words[WF_PH_MAGIC] != WF_PROG_MAGIC || p.words[WF_PH_WORDS] != n)
        fail("not a device program");
      p.cnt.assign(2 * p.words[WF_PH_COUNTERS], 0);
      progs[id] = std::move(p);
      wr<uint32_t>(0);
      break;
    }
    case 2:
      slot();
      break;
    case 3: {
      Prog& p = prog(rd<uint32_t>());
      wr<uint32_t>(0);
      wr<uint32_t>(uint32_t(p.cnt.size() / 2));
      writen(p.cnt.data(), 8 * p.cnt.size());
      break;
    }
    case 4:
      progs.erase(rd<uint32_t>());
      wr<uint32_t>(0);
      break;
    default:
      fail("unknown request " + std::to_string(op));
    }
    fflush(stdout);
  }
}
