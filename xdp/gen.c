//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Warpflow's traffic generator program for XDP live-frame mode
// (BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES, as xdp-tools'
// xdp-trafficgen does it): every run transmits the frame out of the
// context's ingress interface with XDP_TX.
//
// Each run takes a sequence number from one counter. Runs past the
// limit the loader sets return XDP_DROP (the kernel recycles the frame and
// sends nothing), so a syscall the kernel restarted after a signal never
// sends more than asked, and the counter is the exact number of frames
// handed to the driver. With flows > 1 and an IPv4/UDP frame, the UDP
// source port becomes base_port + seq % flows and the UDP checksum 0 (no
// checksum, allowed for IPv4): the kernel reuses the page's data from run
// to run, so the field is written on every run whatever the page held.
//
// Regenerate with `go generate ./xdp/...` (clang, llvm, libbpf-dev).

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// Set by the loader before load.
volatile const __u32 flows = 1;      // distinct UDP source ports
volatile const __u16 base_port = 0;  // first source port

// Must match genState in gen.go.
struct gen_state {
	__u64 limit;   // runs allowed to transmit (written between runs)
	__u64 seq;     // runs started
	__u64 over;    // runs past limit, dropped
	__u64 rewrite; // runs whose frame was not IPv4/UDP with flows > 1 (sent unchanged)
	__u64 interval; // pacing: ns between frames, 0 for none (written between runs)
	__u64 burst;    // pacing: frames the send time may lag the clock by
	__u64 next;     // pacing: the next send time (ktime ns)
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gen_state);
} gen_state SEC(".maps");

SEC("xdp")
int gen_tx(struct xdp_md *ctx)
{
	__u32 key = 0;
	struct gen_state *st = bpf_map_lookup_elem(&gen_state, &key);
	if (!st)
		return XDP_ABORTED;
	// Plain increments, not atomics (an atomic costs more than the rest of
	// the program here): BPF_PROG_RUN runs the program on one CPU with
	// migration disabled, and LiveGen makes one such call at a time, so no
	// two runs ever race; the syscall boundary orders them across CPUs.
	// Paced: a run before the next send time sends nothing and takes no
	// sequence number, so frames leave evenly spaced at 1/interval however
	// fast the kernel loops; after a gap (between two calls) the send time
	// catches up by at most burst frames.
	if (st->interval) {
		__u64 now = bpf_ktime_get_ns();
		if (now < st->next)
			return XDP_DROP;
		__u64 lag = st->burst * st->interval;
		if (st->next + lag < now)
			st->next = now - lag;
		st->next += st->interval;
	}
	__u64 seq = st->seq++;
	if (seq >= st->limit) {
		st->over++;
		return XDP_DROP;
	}
	if (flows <= 1)
		return XDP_TX;

	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		goto unchanged;
	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end || ip->protocol != IPPROTO_UDP || ip->ihl < 5)
		goto unchanged;
	struct udphdr *udp = (void *)ip + ip->ihl * 4;
	if ((void *)(udp + 1) > end)
		goto unchanged;
	udp->source = bpf_htons((__u16)(base_port + (__u32)(seq % flows)));
	udp->check = 0;
	return XDP_TX;
unchanged:
	st->rewrite++;
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
