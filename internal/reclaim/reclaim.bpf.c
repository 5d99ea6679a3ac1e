//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * wolf reclaim: who reclaims memory, in which memory cgroup, for how long,
 * and how much each reclaim frees for what it scans.
 *
 * Every source is a vmscan tracepoint, attached as tp_btf: arguments and
 * task_struct are BTF-typed, so fields are plain (CO-RE relocated) loads
 * rather than a bpf_probe_read_kernel call each, which halves the cost per
 * event on this kernel (measured: 2.2 to 1.3 us per reclaim begin/end,
 * 490 to 330 ns per shrink batch). The sources:
 *  - memcg, direct, soft-limit and node reclaim begin/end bracket one
 *    reclaim call of the current task: its wall time, its time on CPU and
 *    its context switches (from task_struct at both ends), and, summed in
 *    between, the pages the call scanned and reclaimed;
 *  - lru_shrink_inactive gives, per batch, pages scanned and reclaimed and
 *    why the rest stayed (referenced and kept, activated, dirty, under
 *    writeback, failed to unmap): ClickHouse's nr_ref_keep and nr_activate;
 *  - lru_shrink_active: pages taken off the active lists, kept or
 *    deactivated;
 *  - kswapd_wake/sleep and wakeup_kswapd: background reclaim;
 *  - throttled: reclaimers put to sleep, and why;
 *  - a CPU-clock sample of every CPU (perf_event): whose memory cgroup's
 *    task was on the CPU, and whether its kernel stack was in reclaim or
 *    in the page-cache miss path (readahead, a folio added to the cache
 *    and charged, the read submitted), so that the CPU a cgroup's tasks
 *    spend because their pages are not in memory is measured, not
 *    guessed from their I/O.
 *
 * Everything is aggregated here, per memory cgroup of the reclaiming task
 * (its memory css's kernfs id, the cgroup directory's inode number, on v1
 * and v2 alike) and per task; nothing crosses to user space per event.
 * Counters and histograms are per-CPU (plain adds; user space sums the
 * CPUs). Every map is bounded and every refused insert is counted.
 */
#include "wolf.h"

char LICENSE[] SEC("license") = "GPL";

#define MAX_NODES 64
#define WOLF_PF_KSWAPD 0x00020000

/* Set by user space: false on kernels without the memory controller,
 * where tasks are keyed by their default-hierarchy cgroup instead. */
const volatile bool use_memcg = true;
/*
 * Set by user space where bpf_get_current_task_btf exists (5.11+): the
 * current task's fields are then plain loads, where a plain task pointer
 * pays a probe-read helper call for each (a memcg's id is five of them).
 * Where it is false the verifier never reaches the helper's call.
 */
const volatile bool task_btf = false;

/*
 * The session's start: user space sets gate[0] once every program is
 * attached, so that what wolf counts starts at one moment (attaching
 * fourteen programs takes long enough, under memory pressure, to skew a
 * count by more than 10%). It stays open until the programs detach:
 * windows are cut in user space, from readings of the cumulative maps
 * (maxima per window: struct wolf_max, wolf.h).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} gate SEC(".maps");

static __always_inline bool counting(void)
{
	__u32 zero = 0;
	__u32 *on = bpf_map_lookup_elem(&gate, &zero);

	return on && *on;
}

enum kind {
	KIND_MEMCG = 0,	    /* a cgroup at its limit: try_to_free_mem_cgroup_pages */
	KIND_DIRECT = 1,    /* the host short of memory: try_to_free_pages */
	KIND_SOFTLIMIT = 2, /* v1 soft limit, from kswapd */
	KIND_NODE = 3,	    /* node reclaim (vm.zone_reclaim_mode) */
	KIND_MAX = 4,
};

/* The longest call of each window (two slots, as in struct wolf_max). */
struct worst_call {
	struct wolf_max ns; /* tag: the thread */
	__u64 scanned[2];
	__u64 reclaimed[2];
	__u32 kind[2];
};

struct cg_stats {
	__u64 calls[KIND_MAX];	/* reclaim calls seen from begin to end */
	__u64 ns[KIND_MAX];	/* their wall time */
	__u64 cpu_ns[KIND_MAX]; /* their time on CPU */
	struct wolf_max max_ns[KIND_MAX];
	__u64 csw;		 /* context switches inside reclaim calls */
	__u64 end_reclaimed;	 /* nr_reclaimed the calls' end events report */
	__u64 unmatched_ends;	 /* memcg/softlimit ends whose begin came before wolf */
	__u64 unmatched_last_ns; /* ktime of the latest such end */
	/* lru_shrink_inactive */
	__u64 batches;
	__u64 scanned;
	__u64 reclaimed;
	__u64 ref_keep;
	__u64 activate_anon;
	__u64 activate_file;
	__u64 dirty;
	__u64 writeback;
	__u64 congested;
	__u64 immediate;
	__u64 unmap_fail;
	__u64 file_scanned; /* of scanned, from file lists */
	/* lru_shrink_active */
	__u64 active_taken;
	__u64 active_kept;
	__u64 deactivated;
	__u64 active_referenced;
	/* throttled, by reason bit (writeback, isolated, noprogress, congested) */
	__u64 throttled[4];
	__u64 throttled_us;
	/* the longest call (this CPU's view; user space takes the max) */
	struct worst_call worst;
	struct wolf_max max_call_scanned;
};

/*
 * A call in flight. Its lru_shrink_inactive batches are summed here and
 * added to its cgroup's counters once, at its end, rather than each into
 * the cgroup's entry (a hash lookup a batch: a memcg storm runs tens of
 * thousands of batches a second); user space adds the calls still in
 * flight to their cgroups' readings.
 */
struct inflight {
	__u64 start_ns;
	__u64 start_runtime;
	__u64 start_csw;
	__u64 cgid;
	__u64 scanned;
	__u64 reclaimed;
	__u64 ref_keep;
	__u64 activated;
	__u32 kind;
	__u32 tgid;
	/* The rest of its batches' sums, as struct cg_stats names them. */
	__u64 batches;
	__u64 file_scanned;
	__u64 activate_anon;
	__u64 activate_file;
	__u64 dirty;
	__u64 writeback;
	__u64 congested;
	__u64 immediate;
	__u64 unmap_fail;
};

struct hist_key {
	__u64 cgid;
	__u32 kind;
	__u32 _pad;
};

enum stat_index {
	STAT_EVENTS = 0,
	STAT_CG_FULL = 1, /* cg_stats refused a new cgroup */
	STAT_TASK_FULL = 2,
	STAT_INFLIGHT_FULL = 3,
	STAT_HIST_FULL = 4,
	STAT_KSWAPD_WAKES = 5,
	STAT_KSWAPD_SLEEPS = 6,
	STAT_WAKEUP_KSWAPD = 7, /* allocators asking kswapd to run */
	STAT_KSWAPD_SCANNED = 8,
	STAT_KSWAPD_RECLAIMED = 9,
	STAT_KSWAPD_NS = 10,	     /* kswapd awake time, wake to sleep */
	STAT_NESTED_BEGIN = 11,	     /* a begin while the task was in reclaim already */
	STAT_SAMPLES = 12,	     /* CPU samples of a task (not the idle task) */
	STAT_SAMPLES_FULL = 13,	     /* samples whose cgroup the samples map refused */
	STAT_STACK_ERRORS = 14,	     /* samples whose kernel stack could not be read */
	STAT_EVICT_SAMPLED = 15,     /* sampled pages reclaim evicted, remembered */
	STAT_EVICT_OVERWRITTEN = 16, /* remembered pages whose slot another took first */
	STAT_REREADS_FULL = 17,	     /* re-reads whose cgroup the rereads map refused */
	STAT_MAX = 18,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024); /* user space lowers it on hosts with many CPUs */
	__type(key, __u64);
	__type(value, struct cg_stats);
} cgroups SEC(".maps");

/*
 * The call each thread is in, by tid; start_ns 0 when it is in none. An
 * entry stays when its call ends and is written in place by the thread's
 * next call: an insert and a delete per call cost more than the rest of
 * begin and end together. LRU: threads that exit give their entries back.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct inflight);
} inflights SEC(".maps");

/* Per thread: struct wolf_reclaim_task (wolf.h), a map locks may share. */
WOLF_RECLAIM_TASKS()

/*
 * A call's two histograms, its duration and the pages it scanned, in one
 * value: its end looks them up once (user space sums the scanned ones
 * over the kinds).
 */
struct call_hists {
	struct wolf_hist ns;
	struct wolf_hist scanned;
};

/*
 * Per CPU, as the cgroups' counters: every reclaim call's end adds to two
 * histograms of its cgroup, and on a storm every CPU ends calls of the
 * same cgroup; shared, each add was a locked instruction on a cache line
 * the CPUs took from one another (user space sums the CPUs).
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024); /* user space lowers it on hosts with many CPUs */
	__type(key, struct hist_key);
	__type(value, struct call_hists);
} hists SEC(".maps");

/* kswapd: when each node's kswapd woke, and how long it stays awake. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_NODES);
	__type(key, __u32);
	__type(value, __u64);
} kswapd_woke SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wolf_hist);
} kswapd_hist SEC(".maps");

WOLF_STATS()

/*
 * lru_shrink_inactive batches are a memcg storm's second commonest event
 * (tens of thousands a second, each a lookup of its thread's call). When
 * the budget is spent with the gates at their longest, about one batch in
 * wolf_storm_every per CPU is summed, standing for itself and the batches
 * its CPU skipped before it (wolf.h): the pages scanned, reclaimed,
 * activated and kept become estimates, which the report says; calls, their
 * time and CPU stay exact.
 */
WOLF_STORM()

/*
 * CPU samples. Set by user space from the kernel's symbols: the address
 * ranges of the functions that make a sample's class (a frame inside one
 * of them puts the sample there; reclaim wins over the miss path it is
 * called from), sorted by their start and apart (functions do not
 * overlap), nr_ranges of them; 0 ranges: samples are counted but not
 * classified. Sorted, a frame's range is a binary search, where every
 * frame of a 32-frame stack was compared with every range.
 */
#define MAX_RANGES 32
#define STACK_DEPTH 32
#define CLASS_MISS 1	/* the page-cache miss path: readahead, add, charge, submit */
#define CLASS_RECLAIM 2 /* memory reclaim (memcg or direct) */
#define CLASS_WAIT 3	/* waiting for a folio (its read): a miss if a page-cache lookup waits */
#define CLASS_LOOKUP 4	/* a page-cache lookup (read or fault): context for CLASS_WAIT */
const volatile __u32 nr_ranges = 0;
const volatile __u64 range_lo[MAX_RANGES] = {};
const volatile __u64 range_hi[MAX_RANGES] = {};
const volatile __u32 range_class[MAX_RANGES] = {};

/* Per memory cgroup of the sampled task, summed over CPUs by user space. */
struct cpu_samples {
	__u64 busy;    /* samples of its tasks on a CPU */
	__u64 kernel;  /* of which in the kernel (a kernel stack) */
	__u64 miss;    /* in the page-cache miss path, not in reclaim */
	__u64 reclaim; /* in reclaim */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024); /* user space lowers it on hosts with many CPUs */
	__type(key, __u64);
	__type(value, struct cpu_samples);
} samples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64[STACK_DEPTH]);
} stack_buf SEC(".maps");

/* Zero values for inserts (maps copy them). */
static const struct cg_stats zero_cg;
static const struct wolf_reclaim_task zero_task;
static const struct call_hists zero_hists;

/*
 * The current task's fields, read through a BTF pointer (btf: plain
 * loads) or a plain one (probe reads). Callers pass a constant, so that
 * each program is compiled for both and the verifier, told task_btf,
 * walks only one.
 */

/* The id of the memory cgroup the task is charged to: its memory css's
 * cgroup's kernfs id. */
static __always_inline __u64 task_memcg(struct task_struct *t, const bool btf)
{
	struct cgroup_subsys_state *css;
	struct css_set *cgs;
	int id;

	if (!use_memcg || !bpf_core_enum_value_exists(enum cgroup_subsys_id, memory_cgrp_id))
		return bpf_get_current_cgroup_id();
	id = bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id);
	if (id < 0 || id >= 64)
		return 0;
	if (btf) {
		cgs = t->cgroups;
		if (!cgs)
			return 0;
		css = cgs->subsys[id];
		if (!css)
			return 0;
		return css->cgroup->kn->id;
	}
	cgs = BPF_CORE_READ(t, cgroups);
	if (!cgs)
		return 0;
	css = BPF_CORE_READ(cgs, subsys[id]);
	if (!css)
		return 0;
	return BPF_CORE_READ(css, cgroup, kn, id);
}

static __always_inline __u64 task_csw(struct task_struct *t, const bool btf)
{
	if (btf)
		return t->nvcsw + t->nivcsw;
	return BPF_CORE_READ(t, nvcsw) + BPF_CORE_READ(t, nivcsw);
}

static __always_inline __u64 task_runtime(struct task_struct *t, const bool btf)
{
	if (btf)
		return t->se.sum_exec_runtime;
	return BPF_CORE_READ(t, se.sum_exec_runtime);
}

static __always_inline bool task_kswapd(struct task_struct *t, const bool btf)
{
	if (btf)
		return (t->flags & WOLF_PF_KSWAPD) != 0;
	return (BPF_CORE_READ(t, flags) & WOLF_PF_KSWAPD) != 0;
}

/* The current task as the pointer btf asks for. */
static __always_inline struct task_struct *current_task(const bool btf)
{
	if (btf)
		return bpf_get_current_task_btf();
	return wolf_current();
}

/* A call's batches into its cgroup's counters. */
static __always_inline void batches_add(struct cg_stats *s, const struct inflight *f)
{
	s->batches += f->batches;
	s->scanned += f->scanned;
	s->reclaimed += f->reclaimed;
	s->file_scanned += f->file_scanned;
	s->ref_keep += f->ref_keep;
	s->activate_anon += f->activate_anon;
	s->activate_file += f->activate_file;
	s->dirty += f->dirty;
	s->writeback += f->writeback;
	s->congested += f->congested;
	s->immediate += f->immediate;
	s->unmap_fail += f->unmap_fail;
}

static __always_inline struct cg_stats *cg_get(__u64 cgid)
{
	struct cg_stats *s = bpf_map_lookup_elem(&cgroups, &cgid);

	if (s)
		return s;
	if (bpf_map_update_elem(&cgroups, &cgid, &zero_cg, BPF_NOEXIST) &&
	    !bpf_map_lookup_elem(&cgroups, &cgid)) {
		stat_add(STAT_CG_FULL, 1);
		return NULL;
	}
	return bpf_map_lookup_elem(&cgroups, &cgid);
}

static __always_inline void hists_add(__u64 cgid, __u32 kind, __u64 ns, __u64 scanned)
{
	struct hist_key k = { .cgid = cgid, .kind = kind };
	struct call_hists *h = bpf_map_lookup_elem(&hists, &k);
	__u32 w;

	if (!h) {
		if (bpf_map_update_elem(&hists, &k, &zero_hists, BPF_NOEXIST) &&
		    !bpf_map_lookup_elem(&hists, &k)) {
			stat_add(STAT_HIST_FULL, 1);
			return;
		}
		h = bpf_map_lookup_elem(&hists, &k);
		if (!h)
			return;
	}
	/* this CPU's */
	w = wolf_window_now();
	wolf_hist_add_local_at(&h->ns, ns, w);
	wolf_hist_add_local_at(&h->scanned, scanned, w);
}

static __always_inline int reclaim_begin_as(__u32 kind, const bool btf)
{
	struct task_struct *t = current_task(btf);
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct inflight f = {};

	stat_add(STAT_EVENTS, 1);
	struct inflight *old = bpf_map_lookup_elem(&inflights, &tid);
	if (old && old->start_ns)
		stat_add(STAT_NESTED_BEGIN, 1);
	f.start_ns = bpf_ktime_get_ns();
	f.start_runtime = task_runtime(t, btf);
	f.start_csw = task_csw(t, btf);
	f.cgid = task_memcg(t, btf);
	f.kind = kind;
	f.tgid = id >> 32;
	if (old)
		*old = f;
	else if (bpf_map_update_elem(&inflights, &tid, &f, BPF_ANY))
		stat_add(STAT_INFLIGHT_FULL, 1);
	return 0;
}

static __always_inline int reclaim_begin(__u32 kind)
{
	if (!counting())
		return 0;
	if (task_btf)
		return reclaim_begin_as(kind, true);
	return reclaim_begin_as(kind, false);
}

static __always_inline void task_account(struct task_struct *t, __u32 tid, struct inflight *f,
					 __u64 ns, __u64 cpu, __u64 csw, const bool btf)
{
	struct wolf_reclaim_task *ts = bpf_map_lookup_elem(&reclaim_tasks, &tid);

	if (!ts) {
		if (bpf_map_update_elem(&reclaim_tasks, &tid, &zero_task, BPF_NOEXIST) &&
		    !bpf_map_lookup_elem(&reclaim_tasks, &tid)) {
			stat_add(STAT_TASK_FULL, 1);
			return;
		}
		ts = bpf_map_lookup_elem(&reclaim_tasks, &tid);
		if (!ts)
			return;
	}
	if (ts->tgid != f->tgid || !ts->comm[0]) {
		/* New, or its tid reused by another process since. */
		ts->tgid = f->tgid;
		ts->kswapd = task_kswapd(t, btf);
		bpf_get_current_comm(ts->comm, sizeof(ts->comm));
	}
	ts->cgid = f->cgid;
	ts->calls++;
	ts->ns += ns;
	ts->cpu_ns += cpu;
	ts->csw += csw;
	wolf_max_add(&ts->max_ns, ns);
	ts->scanned += f->scanned;
	ts->reclaimed += f->reclaimed;
	ts->ref_keep += f->ref_keep;
	ts->activated += f->activated;
}

static __always_inline void worst_add(struct worst_call *w, __u64 ns, __u32 tid, __u64 scanned,
				      __u64 reclaimed, __u32 kind)
{
	__u32 win = wolf_window_now();
	__u32 s = win & 1;

	if (w->ns.win[s] == win && ns <= w->ns.v[s])
		return;
	w->ns.win[s] = win;
	w->ns.v[s] = ns;
	w->ns.tag[s] = tid;
	w->scanned[s] = scanned;
	w->reclaimed[s] = reclaimed;
	w->kind[s] = kind;
}

static __always_inline int reclaim_end_as(__u32 kind, unsigned long nr_reclaimed, const bool btf)
{
	struct task_struct *t = current_task(btf);
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns();
	struct inflight *f;
	struct cg_stats *s;
	__u64 ns, cpu, csw;

	stat_add(STAT_EVENTS, 1);
	f = bpf_map_lookup_elem(&inflights, &tid);
	if (!f || !f->start_ns) {
		/* Began before wolf attached: the duration is unknown. Only
		 * cgroup-driven kinds count: those are what cgroups are judged on. */
		if (kind != KIND_MEMCG && kind != KIND_SOFTLIMIT)
			return 0;
		s = cg_get(task_memcg(t, btf));
		if (s) {
			s->unmatched_ends++;
			s->unmatched_last_ns = now;
			s->end_reclaimed += nr_reclaimed;
		}
		return 0;
	}
	if (kind >= KIND_MAX)
		kind = KIND_MEMCG;
	ns = now - f->start_ns;
	cpu = task_runtime(t, btf) - f->start_runtime;
	csw = task_csw(t, btf) - f->start_csw;
	s = cg_get(f->cgid);
	if (s) {
		batches_add(s, f);
		s->calls[kind]++;
		s->ns[kind] += ns;
		s->cpu_ns[kind] += cpu;
		wolf_max_add(&s->max_ns[kind], ns);
		s->csw += csw;
		s->end_reclaimed += nr_reclaimed;
		wolf_max_add(&s->max_call_scanned, f->scanned);
		worst_add(&s->worst, ns, tid, f->scanned, f->reclaimed, kind);
	}
	hists_add(f->cgid, kind, ns, f->scanned);
	task_account(t, tid, f, ns, cpu, csw, btf);
	f->start_ns = 0; /* over: the thread's next call writes it in place */
	return 0;
}

static __always_inline int reclaim_end(__u32 kind, unsigned long nr_reclaimed)
{
	if (!counting())
		return 0;
	if (task_btf)
		return reclaim_end_as(kind, nr_reclaimed, true);
	return reclaim_end_as(kind, nr_reclaimed, false);
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_begin")
int BPF_PROG(on_memcg_begin, int order, gfp_t gfp_flags)
{
	return reclaim_begin(KIND_MEMCG);
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_end")
int BPF_PROG(on_memcg_end, unsigned long nr_reclaimed)
{
	return reclaim_end(KIND_MEMCG, nr_reclaimed);
}

SEC("tp_btf/mm_vmscan_direct_reclaim_begin")
int BPF_PROG(on_direct_begin, int order, gfp_t gfp_flags)
{
	return reclaim_begin(KIND_DIRECT);
}

SEC("tp_btf/mm_vmscan_direct_reclaim_end")
int BPF_PROG(on_direct_end, unsigned long nr_reclaimed)
{
	return reclaim_end(KIND_DIRECT, nr_reclaimed);
}

SEC("tp_btf/mm_vmscan_memcg_softlimit_reclaim_begin")
int BPF_PROG(on_softlimit_begin, int order, gfp_t gfp_flags)
{
	return reclaim_begin(KIND_SOFTLIMIT);
}

SEC("tp_btf/mm_vmscan_memcg_softlimit_reclaim_end")
int BPF_PROG(on_softlimit_end, unsigned long nr_reclaimed)
{
	return reclaim_end(KIND_SOFTLIMIT, nr_reclaimed);
}

SEC("tp_btf/mm_vmscan_node_reclaim_begin")
int BPF_PROG(on_node_begin, int nid, int order, gfp_t gfp_flags)
{
	return reclaim_begin(KIND_NODE);
}

SEC("tp_btf/mm_vmscan_node_reclaim_end")
int BPF_PROG(on_node_end, unsigned long nr_reclaimed)
{
	return reclaim_end(KIND_NODE, nr_reclaimed);
}

/*
 * A batch of a call in flight is summed into the call (see struct
 * inflight); one outside any call (kswapd's) into its cgroup's counters.
 */
static __always_inline int shrink_inactive(unsigned long nr_scanned, unsigned long nr_reclaimed,
					   struct reclaim_stat *stat, int file, const bool btf)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	unsigned int act_anon, act_file, keep;
	struct task_struct *t;
	struct inflight *f;
	struct cg_stats *s;
	__u32 n;

	stat_add(STAT_EVENTS, 1);
	n = wolf_storm_take(); /* the batches it stands for; 0: skipped */
	if (!n)
		return 0;
	act_anon = stat->nr_activate[0];
	act_file = stat->nr_activate[1];
	keep = stat->nr_ref_keep;
	f = bpf_map_lookup_elem(&inflights, &tid);
	if (f && f->start_ns) {
		f->batches += n;
		f->scanned += nr_scanned * n;
		f->reclaimed += nr_reclaimed * n;
		if (file)
			f->file_scanned += nr_scanned * n;
		f->ref_keep += keep * n;
		f->activated += (act_anon + act_file) * n;
		f->activate_anon += act_anon * n;
		f->activate_file += act_file * n;
		f->dirty += stat->nr_dirty * n;
		f->writeback += stat->nr_writeback * n;
		f->congested += stat->nr_congested * n;
		f->immediate += stat->nr_immediate * n;
		f->unmap_fail += stat->nr_unmap_fail * n;
		/*
		 * kswapd reclaims outside any call but the soft limit's: a
		 * batch of a memcg or direct call is not kswapd's, and its
		 * flags need not be looked at, on the storm's hottest event.
		 */
		if (f->kind != KIND_SOFTLIMIT)
			return 0;
		t = current_task(btf);
		if (task_kswapd(t, btf)) {
			stat_add(STAT_KSWAPD_SCANNED, nr_scanned * n);
			stat_add(STAT_KSWAPD_RECLAIMED, nr_reclaimed * n);
		}
		return 0;
	}
	t = current_task(btf);
	if (task_kswapd(t, btf)) {
		stat_add(STAT_KSWAPD_SCANNED, nr_scanned * n);
		stat_add(STAT_KSWAPD_RECLAIMED, nr_reclaimed * n);
	}
	s = cg_get(task_memcg(t, btf));
	if (!s)
		return 0;
	s->batches += n;
	s->scanned += nr_scanned * n;
	s->reclaimed += nr_reclaimed * n;
	if (file)
		s->file_scanned += nr_scanned * n;
	s->ref_keep += keep * n;
	s->activate_anon += act_anon * n;
	s->activate_file += act_file * n;
	s->dirty += stat->nr_dirty * n;
	s->writeback += stat->nr_writeback * n;
	s->congested += stat->nr_congested * n;
	s->immediate += stat->nr_immediate * n;
	s->unmap_fail += stat->nr_unmap_fail * n;
	return 0;
}

SEC("tp_btf/mm_vmscan_lru_shrink_inactive")
int BPF_PROG(on_shrink_inactive, int nid, unsigned long nr_scanned, unsigned long nr_reclaimed,
	     struct reclaim_stat *stat, int priority, int file)
{
	if (!counting())
		return 0;
	if (task_btf)
		return shrink_inactive(nr_scanned, nr_reclaimed, stat, file, true);
	return shrink_inactive(nr_scanned, nr_reclaimed, stat, file, false);
}

SEC("tp_btf/mm_vmscan_lru_shrink_active")
int BPF_PROG(on_shrink_active, int nid, unsigned long nr_taken, unsigned long nr_active,
	     unsigned long nr_deactivated, unsigned long nr_referenced, int priority, int file)
{
	if (!counting())
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct inflight *f;
	struct cg_stats *s;
	__u64 cgid;

	stat_add(STAT_EVENTS, 1);
	f = bpf_map_lookup_elem(&inflights, &tid);
	cgid = f && f->start_ns ? f->cgid : task_memcg(wolf_current(), false);
	s = cg_get(cgid);
	if (!s)
		return 0;
	s->active_taken += nr_taken;
	s->active_kept += nr_active;
	s->deactivated += nr_deactivated;
	s->active_referenced += nr_referenced;
	return 0;
}

SEC("tp_btf/mm_vmscan_throttled")
int BPF_PROG(on_throttled, int nid, int usec_timeout, int usec_delayed, int reason)
{
	struct cg_stats *s;

	stat_add(STAT_EVENTS, 1);
	s = cg_get(task_memcg(wolf_current(), false));
	if (!s)
		return 0;
	/* reason is 1 << VMSCAN_THROTTLE_{WRITEBACK,ISOLATED,NOPROGRESS,CONGESTED} */
	if (reason & 1)
		s->throttled[0]++;
	if (reason & 2)
		s->throttled[1]++;
	if (reason & 4)
		s->throttled[2]++;
	if (reason & 8)
		s->throttled[3]++;
	if (usec_delayed > 0)
		s->throttled_us += usec_delayed;
	return 0;
}

SEC("tp_btf/mm_vmscan_kswapd_wake")
int BPF_PROG(on_kswapd_wake, int nid, int zid, int order)
{
	__u32 n = nid;
	__u64 *w;

	stat_add(STAT_EVENTS, 1);
	stat_add(STAT_KSWAPD_WAKES, 1);
	w = bpf_map_lookup_elem(&kswapd_woke, &n);
	if (w && *w == 0)
		*w = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/mm_vmscan_kswapd_sleep")
int BPF_PROG(on_kswapd_sleep, int nid)
{
	__u32 n = nid, zero = 0;
	struct wolf_hist *h;
	__u64 *w, ns;

	stat_add(STAT_EVENTS, 1);
	stat_add(STAT_KSWAPD_SLEEPS, 1);
	w = bpf_map_lookup_elem(&kswapd_woke, &n);
	if (!w || *w == 0)
		return 0;
	ns = bpf_ktime_get_ns() - *w;
	*w = 0;
	stat_add(STAT_KSWAPD_NS, ns);
	h = bpf_map_lookup_elem(&kswapd_hist, &zero);
	if (h)
		wolf_hist_add(h, ns);
	return 0;
}

SEC("tp_btf/mm_vmscan_wakeup_kswapd")
int BPF_PROG(on_wakeup_kswapd, int nid, int zid, int order, gfp_t gfp_flags)
{
	stat_add(STAT_EVENTS, 1);
	stat_add(STAT_WAKEUP_KSWAPD, 1);
	return 0;
}

/*
 * The range ip is in (sorted: a binary search), -1: none. A global
 * function, verified once on its own: inlined into classify's walk of
 * 32 frames, its search made 6.1's verifier give up past a million
 * instructions and refuse on_sample.
 */
__noinline __s32 range_of(__u64 ip)
{
	__u32 lo = 0, hi = nr_ranges, last = nr_ranges - 1;

	/* Most frames are outside the ranges' span (they are all in mm/). */
	if (!nr_ranges || ip < range_lo[0] || ip >= range_hi[wolf_bound(last, MAX_RANGES - 1)])
		return -1;
	/* The last range starting at or below ip: 2^6 > MAX_RANGES. */
	for (int k = 0; k < 6; k++) {
		if (lo >= hi)
			break;
		__u32 mid = (lo + hi) / 2;

		if (range_lo[wolf_bound(mid, MAX_RANGES - 1)] <= ip)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return -1;
	lo = wolf_bound(lo - 1, MAX_RANGES - 1);
	return ip < range_hi[lo] ? (__s32)lo : -1;
}

/*
 * The class of a kernel stack of n frames, innermost first: that of the
 * innermost frame inside a classified function (reclaim, called from the
 * miss path, is deeper than it, so it wins). A wait for a folio (the
 * task asleep until a read completes, the sample landing as it switches
 * back in) is the miss path when a page-cache lookup is what waits, and
 * nothing otherwise. Returning at the first decided frame keeps the
 * verifier's paths linear in the frames and ranges.
 */
static __always_inline __u32 classify(const __u64 *ips, int n)
{
	bool waiting = false;

	for (int i = 0; i < STACK_DEPTH; i++) {
		if (i >= n)
			break;
		__s32 j = range_of(ips[i]);

		if (j < 0)
			continue;
		__u32 c = range_class[wolf_bound((__u32)j, MAX_RANGES - 1)];

		if (c == CLASS_WAIT) {
			waiting = true;
			continue;
		}
		if (c == CLASS_LOOKUP)
			return waiting ? CLASS_MISS : 0;
		return c;
	}
	return 0;
}

/*
 * A CPU-clock sample: the task on the CPU, by memory cgroup, and where
 * its kernel stack was. Runs Hz times a second per CPU (probe.go); a
 * sample that walks its stack costs 4-6 us on a storm (~0.1% of one CPU
 * on two busy CPUs), so a thread in a reclaim call does not walk it.
 */
SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx)
{
	__u32 zero = 0, pid = (__u32)bpf_get_current_pid_tgid();
	struct cpu_samples *cs;
	__u64 cgid, *ips;
	long n;

	if (!counting() || pid == 0)
		return 0; /* the idle task */
	stat_add(STAT_SAMPLES, 1);
	cgid = task_memcg(wolf_current(), false);
	cs = bpf_map_lookup_elem(&samples, &cgid);
	if (!cs) {
		struct cpu_samples z = {};

		if (bpf_map_update_elem(&samples, &cgid, &z, BPF_NOEXIST) &&
		    !bpf_map_lookup_elem(&samples, &cgid)) {
			stat_add(STAT_SAMPLES_FULL, 1);
			return 0;
		}
		cs = bpf_map_lookup_elem(&samples, &cgid);
		if (!cs)
			return 0;
	}
	cs->busy++;
	/*
	 * A thread inside a memcg or direct reclaim call (its begin seen, its
	 * end not yet) is in reclaim, in the kernel: its stack would say so
	 * (the call's function is a reclaim range, and nothing a reclaim
	 * call runs is in a range of another class) after a walk of up to 32
	 * frames, most of a sample's cost (a storm's threads spend much of it there).
	 */
	struct inflight *f = bpf_map_lookup_elem(&inflights, &pid);

	if (f && f->start_ns && (f->kind == KIND_MEMCG || f->kind == KIND_DIRECT)) {
		cs->kernel++;
		cs->reclaim++;
		return 0;
	}
	ips = bpf_map_lookup_elem(&stack_buf, &zero);
	if (!ips)
		return 0;
	/* The kernel stack; none (0 bytes) when the sample hit user mode. */
	n = bpf_get_stack(ctx, ips, STACK_DEPTH * sizeof(__u64), 0);
	if (n < 0) {
		stat_add(STAT_STACK_ERRORS, 1);
		return 0;
	}
	if (n == 0)
		return 0;
	cs->kernel++;
	__u32 cls = classify(ips, n / sizeof(__u64));

	if (cls == CLASS_RECLAIM)
		cs->reclaim++;
	else if (cls == CLASS_MISS)
		cs->miss++;
	return 0;
}

/*
 * Re-reads of evicted pages, measured beside the kernel's own count
 * (workingset_refault_file), which sees a re-read only through the shadow
 * entry eviction left in the page cache: the shadow-node shrinker drops
 * those, and then a page the limit evicted reads back as a cold one. A
 * 1 in 2^evict_shift sample of file pages (by a hash of the file's device,
 * inode and the page's index, so the eviction and the re-read pick the
 * same pages) is remembered when reclaim evicts it (a page-cache delete
 * while the current task reclaims: PF_MEMALLOC, kswapd too; a truncation
 * is not an eviction), in a direct-mapped table of tags; a page added
 * back whose tag is there is a re-read, counted for the memory cgroup of
 * the task that reads it. Every other event is a hash and a return.
 */
#define EVICT_SLOTS (1 << 18)
#define WOLF_PF_MEMALLOC 0x00000800
const volatile __u32 evict_shift = 3;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, EVICT_SLOTS);
	__type(key, __u32);
	__type(value, __u32); /* the page's tag; 0: empty */
} evicted SEC(".maps");

/* Sampled re-reads of evicted pages, per memory cgroup of the reader. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024); /* user space lowers it on hosts with many CPUs */
	__type(key, __u64);
	__type(value, __u64);
} rereads SEC(".maps");

/* A page before struct folio (5.16): the same words as a folio's. */
struct page___wolf {
	struct address_space *mapping;
	unsigned long index;
} __attribute__((preserve_access_index));

/*
 * The sampled page's hash, 0 when it is not in the sample. The
 * tracepoints' argument is a struct folio on kernels that have one, a
 * struct page before; a folio's mapping and index are its head page's.
 */
static __always_inline __u64 page_hash(void *arg)
{
	struct address_space *m;
	unsigned long idx;
	__u64 h;

	if (bpf_core_type_exists(struct folio)) {
		struct folio *f = arg;

		m = f->mapping;
		idx = f->index;
	} else {
		struct page___wolf *pg = arg;

		m = pg->mapping;
		idx = pg->index;
	}
	if (!m)
		return 0;
	h = (__u64)m->host->i_ino * 0x9e3779b97f4a7c15ULL;
	h ^= ((__u64)m->host->i_sb->s_dev << 40) ^ idx;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	if (h >> (64 - evict_shift))
		return 0;
	return h;
}

/* A folio before 6.3 kept its order in its first tail page's byte. */
struct folio___old {
	unsigned char _folio_order;
} __attribute__((preserve_access_index));

/*
 * The pages in a folio: 1 unless it is a large one (its head flag set),
 * then 2^order. Read only for a sampled re-read, so a probe read or two
 * cost nothing that matters.
 */
static __always_inline __u64 folio_pages(void *arg)
{
	unsigned long flags = 0;
	__u32 order = 0;

	if (!bpf_core_type_exists(struct folio) ||
	    !bpf_core_enum_value_exists(enum pageflags, PG_head))
		return 1;
	bpf_probe_read_kernel(&flags, sizeof(flags),
			      arg); /* page->flags is the first word on every kernel */
	if (!(flags & (1UL << (bpf_core_enum_value(enum pageflags, PG_head) & 63))))
		return 1;
	if (bpf_core_field_exists(((struct folio *)0)->_flags_1)) {
		unsigned long f1 = BPF_CORE_READ((struct folio *)arg, _flags_1);

		order = f1 & 0xff;
	} else if (bpf_core_field_exists(((struct folio___old *)0)->_folio_order)) {
		order = BPF_CORE_READ((struct folio___old *)arg, _folio_order);
	}
	return 1ULL << (order & 31);
}

static __always_inline __u32 page_slot(__u64 h)
{
	return (__u32)h & (EVICT_SLOTS - 1);
}

static __always_inline __u32 page_tag(__u64 h)
{
	return (__u32)(h >> 20) | 1;
}

static __always_inline int page_delete_as(void *folio, const bool btf)
{
	struct task_struct *t = current_task(btf);
	__u32 flags = btf ? t->flags : BPF_CORE_READ(t, flags);
	__u32 slot, *v;
	__u64 h;

	if (!(flags & (WOLF_PF_MEMALLOC | WOLF_PF_KSWAPD)))
		return 0;
	h = page_hash(folio);
	if (!h)
		return 0;
	slot = page_slot(h);
	v = bpf_map_lookup_elem(&evicted, &slot);
	if (!v)
		return 0;
	if (*v && *v != page_tag(h))
		stat_add(STAT_EVICT_OVERWRITTEN, 1);
	*v = page_tag(h);
	stat_add(STAT_EVICT_SAMPLED, 1);
	return 0;
}

SEC("tp_btf/mm_filemap_delete_from_page_cache")
int BPF_PROG(on_page_delete, void *folio)
{
	if (task_btf)
		return page_delete_as(folio, true);
	return page_delete_as(folio, false);
}

static __always_inline int page_add_as(void *folio, const bool btf)
{
	__u32 slot, *v;
	__u64 h, cgid, *n, pages;

	h = page_hash(folio);
	if (!h)
		return 0;
	slot = page_slot(h);
	v = bpf_map_lookup_elem(&evicted, &slot);
	if (!v || *v != page_tag(h))
		return 0;
	*v = 0;
	if (!counting())
		return 0;
	cgid = task_memcg(current_task(btf), btf);
	pages = folio_pages(folio);
	n = bpf_map_lookup_elem(&rereads, &cgid);
	if (n) {
		*n += pages;
		return 0;
	}
	if (bpf_map_update_elem(&rereads, &cgid, &pages, BPF_NOEXIST) &&
	    !bpf_map_lookup_elem(&rereads, &cgid))
		stat_add(STAT_REREADS_FULL, 1);
	return 0;
}

SEC("tp_btf/mm_filemap_add_to_page_cache")
int BPF_PROG(on_page_add, void *folio)
{
	if (task_btf)
		return page_add_as(folio, true);
	return page_add_as(folio, false);
}
