//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * A small object for probekit's own tests: programs that attach, one
 * whose tracepoint no kernel has, and counters declared with WOLF_STATS.
 */
#include "wolf.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by the tests: only count switches of this process. */
const volatile __u32 target_tgid = 0;

enum stat_index {
	STAT_SWITCHES = 0, /* sched_switch runs seen */
	STAT_MINE = 1,	   /* of those, switches out of target_tgid */
	STAT_DETAILED = 2, /* switches the detail gate let through */
	STAT_TIMED = 3,	   /* switches the storm sampling kept */
	STAT_ESTIMATE = 4, /* what those kept stand for (their weights) */
	STAT_MAX = 5,
};

WOLF_STATS()
WOLF_BUDGET(1)
WOLF_STORM()

/* Every switch asks the detail gate, as an investigator's costly part would. */
SEC("raw_tp/sched_switch")
int on_switch_gated(void *ctx)
{
	stat_inc(STAT_SWITCHES);
	if (wolf_detail_take(0, bpf_ktime_get_ns()))
		stat_inc(STAT_DETAILED);
	__u32 weight = wolf_storm_take();
	if (weight) {
		stat_inc(STAT_TIMED);
		stat_add(STAT_ESTIMATE, weight);
	}
	return 0;
}

SEC("raw_tp/sched_switch")
int on_switch(void *ctx)
{
	stat_inc(STAT_SWITCHES);
	if (target_tgid && (bpf_get_current_pid_tgid() >> 32) == target_tgid)
		stat_inc(STAT_MINE);
	return 0;
}

/* The same job through a BTF tracepoint. */
SEC("tp_btf/sched_switch")
int btf_on_switch(u64 *ctx)
{
	stat_inc(STAT_SWITCHES);
	if (target_tgid && (bpf_get_current_pid_tgid() >> 32) == target_tgid)
		stat_inc(STAT_MINE);
	return 0;
}

/* No kernel has this tracepoint: loading the program fails. */
SEC("tp_btf/wolf_no_such_tracepoint")
int on_missing(u64 *ctx)
{
	return 0;
}
