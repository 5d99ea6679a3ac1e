//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * Runs wolf_lpm.h's lookups over addresses user space supplies and stores
 * the answers, so that tests can hold the C lookup to a reference and
 * watch it while the table changes underneath. It is also the smallest
 * example of a program using the header.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "wolf_lpm.h"

char LICENSE[] SEC("license") = "GPL";

WOLF_LPM_TABLE(t4);
WOLF_LPM_TABLE(t6);

/* An address in network order; IPv4 uses the first 4 bytes. Aligned as
 * struct in6_addr is. */
struct lpm_probe {
	__u8 addr[16];
} __attribute__((aligned(4)));

struct lpm_req {
	__u32 family; /* 4 or 6 */
	__u32 count;  /* probes to look up, from index 0 */
	__u32 index;  /* the one probe lookup_probe looks up */
};

/* Sized by user space before load; placeholders here. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lpm_probe);
} probes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} answers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lpm_req);
} reqs SEC(".maps");

static long lookup_one(__u32 i, void *ctx)
{
	struct lpm_req *rq = ctx;
	struct lpm_probe *p;
	__u32 *a;
	__be32 d;

	p = bpf_map_lookup_elem(&probes, &i);
	a = bpf_map_lookup_elem(&answers, &i);
	if (!p || !a)
		return 1;
	if (rq->family == 4) {
		__builtin_memcpy(&d, p->addr, sizeof(d));
		*a = wolf_lpm_lookup4(t4, d);
	} else {
		*a = wolf_lpm_lookup6(t6, p->addr);
	}
	return 0;
}

SEC("xdp")
int lookup_probes(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct lpm_req *rq, r;

	rq = bpf_map_lookup_elem(&reqs, &zero);
	if (!rq)
		return XDP_ABORTED;
	r = *rq;
	bpf_loop(r.count, lookup_one, &r, 0);
	return XDP_PASS;
}

/*
 * One probe per run, no bpf_loop (5.17+): the header needs only bounded
 * loops (5.3+), and this is how tests check it on older kernels (5.10).
 * Load it alone: a kernel without bpf_loop rejects lookup_probes.
 */
SEC("xdp")
int lookup_probe(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct lpm_req *rq, r;

	rq = bpf_map_lookup_elem(&reqs, &zero);
	if (!rq)
		return XDP_ABORTED;
	r = *rq;
	return lookup_one(r.index, &r) ? XDP_ABORTED : XDP_PASS;
}
