//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Warpflow's XDP program: steer each received frame to the AF_XDP socket
// registered for its receive queue, and pass it to the kernel's stack when
// there is none. Counters per queue, per CPU.
//
// Regenerate the Go bindings and the object with `go generate ./xdp/...`
// (needs clang, llvm and libbpf-dev for bpf/bpf_helpers.h).

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

// Set by the loader (ProgramOptions.Queues) before load: the size of the
// XSKMAP; frames of queues at or beyond it are passed and counted in the
// extra counters slot at index nqueues.
volatile const __u32 nqueues = 1;

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
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2); // resized by the loader to nqueues + 1
	__type(key, __u32);
	__type(value, struct queue_counters);
} counters SEC(".maps");

SEC("xdp")
int xsk_redirect(struct xdp_md *ctx)
{
	__u32 q = ctx->rx_queue_index;
	__u32 slot = q < nqueues ? q : nqueues;
	struct queue_counters *c = bpf_map_lookup_elem(&counters, &slot);

	if (!c)
		return XDP_PASS; // cannot happen: the map has nqueues + 1 slots
	c->packets++;
	if (q >= nqueues || !bpf_map_lookup_elem(&xsks, &q)) {
		c->no_socket++;
		return XDP_PASS;
	}
	// XDP_PASS as the flags' low bits is the action when the map slot is
	// empty (a socket unregistered between the lookup and here).
	long act = bpf_redirect_map(&xsks, q, XDP_PASS);
	if (act == XDP_REDIRECT)
		c->redirected++;
	else
		c->redirect_failed++;
	return act;
}

char _license[] SEC("license") = "Dual BSD/GPL";
