//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * How long the kernel takes to free a map. Closing the last reference
 * queues bpf_map_free_deferred on a workqueue, which calls the map's
 * map_free (trie_free walks and frees every node of an LPM trie; Cloudflare's
 * soft lockup). The workqueue tracepoints bracket that work item; the
 * kernel's selftest uses fentry/fexit instead, which this kernel refuses.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

/* Address of bpf_map_free_deferred, from /proc/kallsyms. */
const volatile __u64 free_fn = 0;

struct free_stat {
	__u64 count;
	__u64 ns;
	__u64 max_ns;
};

/* Work items in flight: a handful at most (maps freed at once). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u64);
	__type(value, __u64);
} started SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct free_stat);
} stats SEC(".maps");

SEC("tracepoint/workqueue/workqueue_execute_start")
int free_begin(struct trace_event_raw_workqueue_execute_start *ctx)
{
	__u64 work, t;

	if ((__u64)ctx->function != free_fn)
		return 0;
	work = (__u64)ctx->work;
	t = bpf_ktime_get_ns();
	bpf_map_update_elem(&started, &work, &t, BPF_ANY);
	return 0;
}

SEC("tracepoint/workqueue/workqueue_execute_end")
int free_done(struct trace_event_raw_workqueue_execute_end *ctx)
{
	struct free_stat *st;
	__u64 work, *t0, d;
	__u32 zero = 0;

	if ((__u64)ctx->function != free_fn)
		return 0;
	/* The work item was inside the freed map: use its address, not it. */
	work = (__u64)ctx->work;
	t0 = bpf_map_lookup_elem(&started, &work);
	st = bpf_map_lookup_elem(&stats, &zero);
	if (!t0 || !st)
		return 0;
	d = bpf_ktime_get_ns() - *t0;
	bpf_map_delete_elem(&started, &work);
	__sync_fetch_and_add(&st->count, 1);
	__sync_fetch_and_add(&st->ns, d);
	if (d > st->max_ns)
		st->max_ns = d;
	return 0;
}
