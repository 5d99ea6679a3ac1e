//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * The hot-uprobe lab's probes: a uprobe and a uretprobe on libc's write(),
 * filtered (by the attach's pid) to one process that calls write() in a
 * tight loop. The programs do almost nothing; the cost the lab shows is the
 * breakpoint trap every call takes, which the kernel's BPF run statistics
 * never see. Each program counts its own runs, so tests can compare what
 * wolf bpf measured with what the probes saw.
 */
#include "wolf.h"

char LICENSE[] SEC("license") = "GPL";

/* Slot 0: entries, slot 1: returns. Per-CPU: the loop may migrate. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} hits SEC(".maps");

static __always_inline void count(u32 slot)
{
	u64 *v = bpf_map_lookup_elem(&hits, &slot);

	if (v)
		(*v)++;
}

SEC("uprobe")
int hot_entry(struct pt_regs *ctx)
{
	count(0);
	return 0;
}

SEC("uretprobe")
int hot_return(struct pt_regs *ctx)
{
	count(1);
	return 0;
}
