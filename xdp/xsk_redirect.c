//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Warpflow's XDP program: steer each received frame to the AF_XDP socket
// registered for its receive queue, and pass it to the kernel's stack when
// there is none. Counters per queue, per CPU. With a rule set loaded
// (below), drop or pass a frame the pipeline's first rules decide first.
//
// Regenerate the Go bindings and the object with `go generate ./xdp/...`
// (needs clang, llvm and libbpf-dev for bpf/bpf_helpers.h).
//
// It loads with CAP_BPF and CAP_NET_ADMIN, without CAP_PERFMON (see
// "Reading the frame" below; TestProgramsLoadWithoutPerfmon holds it).

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// Set by the loader (ProgramOptions.Queues) before load: the size of the
// XSKMAP; frames of queues at or beyond it are passed and counted in the
// extra counters slot at index nqueues.
volatile const __u32 nqueues = 1;

// Set by the loader before load: 1 when the kernel has the helpers the
// kernel half of a split pipeline reads frames with (bpf_xdp_load_bytes
// and bpf_xdp_get_buff_len, Linux >= 5.18). At 0 the program only steers:
// offload() returns at once, the code that calls them is dead to the
// verifier, which then never looks at it, and the loader refuses rule sets
// (Program.LoadRules).
volatile const __u32 kernel_rules = 1;

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 1); // resized by the loader to nqueues
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

// Must match QueueCounters' raw layout in program.go.
struct queue_counters {
	__u64 packets;         // frames seen on this queue
	__u64 redirected;      // bpf_redirect_map returned XDP_REDIRECT
	__u64 no_socket;       // no socket registered: XDP_PASS
	__u64 redirect_failed; // socket seen by the lookup but the redirect passed (it left meanwhile)
	__u64 dropped;         // a kernel rule dropped it (XDP_DROP)
	__u64 passed;          // a kernel rule passed it to the stack (XDP_PASS)
	__u64 off_unparsed;    // rules loaded, frame not decided here: not parsed (steered on)
	__u64 off_nomatch;     // rules loaded, no kernel rule matched (steered on)
	__u64 off_raced;       // its rule slot was being rewritten (steered on)
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2); // resized by the loader to nqueues + 1
	__type(key, __u32);
	__type(value, struct queue_counters);
} counters SEC(".maps");

// ---- The kernel half of a split pipeline (offload.go, pipelines/offload*.go).
//
// Before steering, the program may decide a frame itself: the first rules
// of the pipeline's first filter, those that use only fields parsed here
// and end in drop or pass, are loaded as data into the off_* maps. Each
// match field is one table from the field's value to a bitmap of the rules
// (at most OFF_MAX_RULES) that value satisfies, so a lookup is one load per
// field, the AND of the bitmaps, and its lowest set bit: the first
// matching rule. Addresses go through LPM tries whose entries carry the
// bitmap of every rule with a prefix covering the entry's prefix.
//
// Two slots (generations) of every table: the loader writes the inactive
// one and then flips off_ctl[CTL_ACTIVE]. A frame reads the active slot
// once, and that slot's sequence number before and after its lookups (a
// seqlock; the loader makes it odd while writing): a frame that saw a
// write in progress is left to the workers, which run the whole pipeline,
// so every frame gets the old rule set's verdict or the new one's, never
// a mix of the two.
//
// The parser decides only frames the workers' parse stage classes OK and
// reads exactly the fields it does (pipelines/parse_decode.go); anything
// else (truncated, bad lengths or versions, IPv4 AH, IPv6 extension
// headers, more than 2 VLAN tags, non-IP) matches no rule here and is
// steered on, counted in off_unparsed.

#define OFF_MAX_RULES 64
#define OFF_L3N 2048	// family<<9 | protocol, family 1 = IPv4, 2 = IPv6
#define OFF_PORTN 65537 // port, or 65536 for a packet without ports
#define OFF_VLANN 4097	// outer VLAN id, or 4096 untagged
#define OFF_TCPN 257	// TCP flags byte, or 256 for a packet that is not TCP
#define OFF_LPM_MAX 4096 // entries per trie, both slots

#define OFF_NO_PORT 65536
#define OFF_NO_VLAN 4096
#define OFF_NO_TCP 256

// off_ctl slots.
#define CTL_ACTIVE 0 // active slot, 0 or 1
#define CTL_SEQ0 1   // slot 0's sequence (odd while it is written), then slot 1's
#define CTL_NRULES0 3 // slot 0's rule count (0: nothing to decide), then slot 1's
#define CTL_N 5

// Rule actions (off_action).
#define OFF_DROP 1
#define OFF_PASS 2

#define ARRAY_U64(name, n)                          \
	struct {                                    \
		__uint(type, BPF_MAP_TYPE_ARRAY);   \
		__uint(max_entries, (n));           \
		__type(key, __u32);                 \
		__type(value, __u64);               \
	} name SEC(".maps")

ARRAY_U64(off_ctl, CTL_N);
ARRAY_U64(off_l3, 2 * OFF_L3N);
ARRAY_U64(off_sport, 2 * OFF_PORTN);
ARRAY_U64(off_dport, 2 * OFF_PORTN);
ARRAY_U64(off_vlan, 2 * OFF_VLANN);
ARRAY_U64(off_tcp, 2 * OFF_TCPN);
ARRAY_U64(off_frag, 2 * 2);
ARRAY_U64(off_action, 2 * OFF_MAX_RULES);

// The slot is the first 32 bits of the trie's data, so every entry
// (prefixlen = 32 + the address prefix length) and every lookup stays
// within one slot.
struct off_lpm4 {
	__u32 prefixlen;
	__u32 slot;
	__u8 addr[4];
};

struct off_lpm6 {
	__u32 prefixlen;
	__u32 slot;
	__u8 addr[16];
};

#define LPM(name, keyt)                                  \
	struct {                                         \
		__uint(type, BPF_MAP_TYPE_LPM_TRIE);     \
		__uint(max_entries, OFF_LPM_MAX);        \
		__uint(map_flags, BPF_F_NO_PREALLOC);    \
		__type(key, keyt);                       \
		__type(value, __u64);                    \
	} name SEC(".maps")

LPM(off_src4, struct off_lpm4);
LPM(off_dst4, struct off_lpm4);
LPM(off_src6, struct off_lpm6);
LPM(off_dst6, struct off_lpm6);

// Must match offloadHit in offload.go.
struct off_hit {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2 * OFF_MAX_RULES);
	__type(key, __u32);
	__type(value, struct off_hit);
} off_hits SEC(".maps");

static __always_inline __u64 atomic_read(__u64 *p)
{
	// A fetching atomic is fully ordered: the loads of the lookups stay
	// between the two reads of the sequence.
	return __sync_fetch_and_add(p, 0);
}

static __always_inline __u64 lookup_u64(void *map, __u32 key)
{
	__u64 *v = bpf_map_lookup_elem(map, &key);
	return v ? *v : 0;
}

// The parsed key of a frame, as pipelines.filterKey computes it.
struct off_key {
	__u32 l3; // family<<9 | protocol
	__u32 sport, dport, vlan, tcp, frag;
	__u8 src[16], dst[16];
};

static __always_inline __u16 rd16(void *p)
{
	return bpf_ntohs(*(__u16 *)p);
}

// Reading the frame. Without CAP_PERFMON (the systemd unit does not give
// it) the verifier refuses a packet pointer plus a register, even one that
// holds a constant, and pointer - pointer: a packet pointer may only move
// by a constant. So the Ethernet header and its VLAN tags, at offsets the
// unrolled loop makes constant, are read in place, and what lies at a
// variable offset (the IP header after 0 to 2 tags, the L4 header after
// IPv4 options) is copied onto the stack with bpf_xdp_load_bytes, which
// checks the bounds itself. One copy takes the IP header and the first
// L4_BYTES of what follows, which is all a filter reads of a packet
// without IPv4 options; a second copy is made only for the L4 header of a
// packet with options or of a frame too short for the first. Lengths are
// compared with the frame's length from bpf_xdp_get_buff_len (offload()
// reads it once). The program does not declare multi-buffer support, so a
// frame is one linear buffer and that length is data_end - data.

#define L4_BYTES 14 // ports, and TCP's data offset and flags bytes

// parse_l4 is decodeL4 for the fields a filter reads: it returns 0 when
// the workers would class the packet OK, -1 otherwise. l4 and end bound
// the L4 header (end: the IP packet's end, within the frame); h holds the
// frame's L4_BYTES from l4 when have is set, else parse_l4 copies what it
// needs there.
static __always_inline int parse_l4(struct off_key *k, struct xdp_md *ctx, __u32 l4, __u32 end, __u8 proto, __u8 *h, int have)
{
	switch (proto) {
	case 6: { // TCP
		if (l4 + 20 > end)
			return -1;
		if (!have && bpf_xdp_load_bytes(ctx, l4, h, L4_BYTES) < 0)
			return -1;
		__u32 doff = (h[12] >> 4) * 4;
		if (doff < 20 || l4 + doff > end)
			return -1;
		k->sport = rd16(h);
		k->dport = rd16(h + 2);
		k->tcp = h[13];
		return 0;
	}
	case 17: // UDP
		if (l4 + 8 > end || (!have && bpf_xdp_load_bytes(ctx, l4, h, 4) < 0))
			return -1;
		k->sport = rd16(h);
		k->dport = rd16(h + 2);
		return 0;
	case 132: // SCTP
		if (l4 + 12 > end || (!have && bpf_xdp_load_bytes(ctx, l4, h, 4) < 0))
			return -1;
		k->sport = rd16(h);
		k->dport = rd16(h + 2);
		return 0;
	case 1: // ICMP: type, code and echo id are not ports to a filter
		return l4 + 8 > end ? -1 : 0;
	case 58: // ICMPv6
		if (l4 + 4 > end || (!have && bpf_xdp_load_bytes(ctx, l4, h, 1) < 0))
			return -1;
		if ((h[0] == 128 || h[0] == 129) && l4 + 8 > end)
			return -1;
		return 0;
	case 47: // GRE: a tunnel never makes the outer packet malformed
		return l4 + 4 > end ? -1 : 0;
	}
	return 0;
}

// parse fills k from the frame, of n bytes, and returns 0, or -1 for a
// frame the workers would not class OK or that this parser does not
// decode.
static __always_inline int parse(struct xdp_md *ctx, __u32 n, struct off_key *k)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	if (data + 14 > data_end)
		return -1;
	__u16 et = rd16(data + 12);
	__u32 off = 14;
	k->vlan = OFF_NO_VLAN;
#pragma unroll
	for (int i = 0; i < 3; i++) {
		if (et != 0x8100 && et != 0x88a8 && et != 0x9100)
			break;
		if (i == 2)
			return -1; // a third tag: ClassTooDeep
		if (data + 14 + 4 * i + 4 > data_end)
			return -1;
		if (i == 0)
			k->vlan = rd16(data + 14) & 0x0fff;
		et = rd16(data + 14 + 4 * i + 2);
		off += 4;
	}
	k->sport = k->dport = OFF_NO_PORT;
	k->tcp = OFF_NO_TCP;
	k->frag = 0;
	if (et == 0x0800) {
		// The header without options, then L4's first bytes. Zeroed: the
		// verifier cannot tie the second test of whole (clang computes it
		// again) to the first, and refuses a read of stack it thinks
		// unwritten without CAP_PERFMON.
		__u8 ip[20 + L4_BYTES] = {};
		int whole = off + sizeof(ip) <= n;
		if (whole) {
			if (bpf_xdp_load_bytes(ctx, off, ip, sizeof(ip)) < 0)
				return -1;
		} else if (bpf_xdp_load_bytes(ctx, off, ip, 20) < 0) {
			return -1;
		}
		if (ip[0] >> 4 != 4)
			return -1;
		__u32 ihl = (ip[0] & 0x0f) * 4;
		if (ihl < 20 || off + ihl > n)
			return -1;
		__u32 tot = rd16(ip + 2);
		if (tot < ihl || off + tot > n)
			return -1; // ClassBadTotalLen
		__builtin_memcpy(k->src, ip + 12, 4);
		__builtin_memcpy(k->dst, ip + 16, 4);
		__u8 proto = ip[9];
		k->l3 = 1 << 9 | proto;
		__u16 frag = rd16(ip + 6);
		if (frag & 0x1fff) {
			k->frag = 1; // a later fragment: no L4 header
			return 0;
		}
		if (frag & 0x2000)
			k->frag = 1;
		if (proto == 51)
			return -1; // IPsec AH: left to the workers
		return parse_l4(k, ctx, off + ihl, off + tot, proto, ip + 20, whole && ihl == 20);
	}
	if (et == 0x86dd) {
		__u8 ip[40 + L4_BYTES] = {}; // zeroed: see IPv4
		int whole = off + sizeof(ip) <= n;
		if (whole) {
			if (bpf_xdp_load_bytes(ctx, off, ip, sizeof(ip)) < 0)
				return -1;
		} else if (bpf_xdp_load_bytes(ctx, off, ip, 40) < 0) {
			return -1;
		}
		if (ip[0] >> 4 != 6)
			return -1;
		__u32 end = off + 40 + rd16(ip + 4);
		if (end > n)
			return -1; // ClassBadTotalLen
		__u8 nh = ip[6];
		if (nh == 0 || nh == 43 || nh == 44 || nh == 51 || nh == 60)
			return -1; // extension headers: left to the workers
		__builtin_memcpy(k->src, ip + 8, 16);
		__builtin_memcpy(k->dst, ip + 24, 16);
		k->l3 = 2 << 9 | nh;
		return parse_l4(k, ctx, off + 40, end, nh, ip + 40, whole);
	}
	return -1;
}

static __always_inline __u32 lowest_bit(__u64 b)
{
	b &= -b;
	__u32 r = 0;
	if (b & 0xffffffff00000000ULL)
		r += 32;
	if (b & 0xffff0000ffff0000ULL)
		r += 16;
	if (b & 0xff00ff00ff00ff00ULL)
		r += 8;
	if (b & 0xf0f0f0f0f0f0f0f0ULL)
		r += 4;
	if (b & 0xccccccccccccccccULL)
		r += 2;
	if (b & 0xaaaaaaaaaaaaaaaaULL)
		r += 1;
	return r;
}

// Results of offload.
#define OFF_NONE 0     // no rules loaded
#define OFF_UNPARSED 1 // frame left to the workers: not parsed here
#define OFF_NOMATCH 2  // no kernel rule matched
#define OFF_RACED 3    // the slot was rewritten during the lookup
#define OFF_DROPPED 4
#define OFF_PASSED 5

static __always_inline int offload(struct xdp_md *ctx)
{
	if (!kernel_rules)
		return OFF_NONE;
	__u32 key = CTL_ACTIVE;
	__u64 *act = bpf_map_lookup_elem(&off_ctl, &key);
	if (!act)
		return OFF_NONE;
	__u32 slot = atomic_read(act) & 1;
	key = CTL_SEQ0 + slot;
	__u64 *seqp = bpf_map_lookup_elem(&off_ctl, &key);
	if (!seqp)
		return OFF_NONE;
	__u64 seq = atomic_read(seqp);
	if (seq & 1)
		return OFF_RACED;
	if (lookup_u64(&off_ctl, CTL_NRULES0 + slot) == 0)
		return OFF_NONE;

	struct off_key k = {};
	__u32 len = bpf_xdp_get_buff_len(ctx);
	if (parse(ctx, len, &k) < 0)
		return OFF_UNPARSED;

	__u64 bm = lookup_u64(&off_l3, slot * OFF_L3N + k.l3);
	bm &= lookup_u64(&off_sport, slot * OFF_PORTN + k.sport);
	bm &= lookup_u64(&off_dport, slot * OFF_PORTN + k.dport);
	bm &= lookup_u64(&off_vlan, slot * OFF_VLANN + k.vlan);
	bm &= lookup_u64(&off_tcp, slot * OFF_TCPN + k.tcp);
	bm &= lookup_u64(&off_frag, slot * 2 + k.frag);
	if (bm && (k.l3 >> 9) == 1) {
		struct off_lpm4 a = {.prefixlen = 64, .slot = slot};
		__builtin_memcpy(a.addr, k.src, 4);
		__u64 *v = bpf_map_lookup_elem(&off_src4, &a);
		bm &= v ? *v : 0;
		__builtin_memcpy(a.addr, k.dst, 4);
		v = bpf_map_lookup_elem(&off_dst4, &a);
		bm &= v ? *v : 0;
	} else if (bm) {
		struct off_lpm6 a = {.prefixlen = 160, .slot = slot};
		__builtin_memcpy(a.addr, k.src, 16);
		__u64 *v = bpf_map_lookup_elem(&off_src6, &a);
		bm &= v ? *v : 0;
		__builtin_memcpy(a.addr, k.dst, 16);
		v = bpf_map_lookup_elem(&off_dst6, &a);
		bm &= v ? *v : 0;
	}
	__u32 r = slot * OFF_MAX_RULES + lowest_bit(bm);
	__u64 a = bm ? lookup_u64(&off_action, r) : 0;
	if (atomic_read(seqp) != seq)
		return OFF_RACED;
	if (!bm)
		return OFF_NOMATCH;
	struct off_hit *h = bpf_map_lookup_elem(&off_hits, &r);
	if (h) {
		h->packets++;
		h->bytes += len;
	}
	if (a == OFF_DROP)
		return OFF_DROPPED;
	if (a == OFF_PASS)
		return OFF_PASSED;
	return OFF_NOMATCH; // cannot happen: the loader writes an action per rule
}

SEC("xdp")
int xsk_redirect(struct xdp_md *ctx)
{
	__u32 q = ctx->rx_queue_index;
	__u32 slot = q < nqueues ? q : nqueues;
	struct queue_counters *c = bpf_map_lookup_elem(&counters, &slot);

	if (!c)
		return XDP_PASS; // cannot happen: the map has nqueues + 1 slots
	c->packets++;
	switch (offload(ctx)) {
	case OFF_DROPPED:
		c->dropped++;
		return XDP_DROP;
	case OFF_PASSED:
		c->passed++;
		return XDP_PASS;
	case OFF_UNPARSED:
		c->off_unparsed++;
		break;
	case OFF_NOMATCH:
		c->off_nomatch++;
		break;
	case OFF_RACED:
		c->off_raced++;
		break;
	}
	if (q >= nqueues || !bpf_map_lookup_elem(&xsks, &q)) {
		c->no_socket++;
		return XDP_PASS;
	}
	// XDP_PASS as the flags' low bits is the action when the map slot is
	// empty (a socket unregistered between the lookup and here).
	long act = bpf_redirect_map(&xsks, q, XDP_PASS);
	if (act == XDP_REDIRECT) {
		c->redirected++;
		// Keeps the two increments apart: merged, clang adds a 8 or
		// 24 chosen by act to c, a pointer plus a register that the
		// verifier refuses without CAP_PERFMON.
		asm volatile("" ::: "memory");
	} else {
		c->redirect_failed++;
	}
	return act;
}

char _license[] SEC("license") = "Dual BSD/GPL";
