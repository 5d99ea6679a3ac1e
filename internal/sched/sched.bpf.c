//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * wolf sched: which tasks the scheduler moves between CPUs, how often, who
 * moves them, whether they bounce straight back, and how long woken tasks
 * wait for a CPU.
 *
 *  - tp_btf/sched_migrate_task fires in set_task_cpu() on the CPU doing the
 *    move (the "[002]" of the write-up's trace). The initiator is read off the
 *    moment, in this order: the task's new affinity no longer allows its old
 *    CPU (an affinity or cpuset change); the task is TASK_WAKING (the wake-up
 *    path, running on the waker's CPU); the current task is the migration
 *    stopper (migration/N: active balancing, NUMA swaps); the CPU is serving
 *    a softirq or is ksoftirqd (the periodic load balancer, SCHED_SOFTIRQ,
 *    possibly on behalf of another idle CPU); else a CPU about to go idle
 *    pulling work (the newidle balance). RT/DL push-pull and hard-irq
 *    contexts count as "other".
 *  - A bounce is a move A->B followed by B->A within bounce_window_ns.
 *  - tp_btf/sched_wakeup(_new) and sched_switch time the run-queue wait:
 *    from becoming runnable (woken, or preempted) to getting the CPU. A
 *    wait that began with the task switched out throttled by its cgroup's
 *    CPU quota (CFS bandwidth control) is counted apart, as throttled
 *    time: the task waited for its quota, not for a CPU.
 *  - Each task's CPU time is its own se.sum_exec_runtime, read by the
 *    iterator (no work on the hot path): the CPU's consumers per thread,
 *    process and cgroup. The iterator gives a running task that has no
 *    state yet (it never slept or was preempted while wolf watched) its
 *    state, so the next window counts it; a task that exits unreported
 *    adds its CPU time to its cgroup's and name's, in a bounded hash.
 *  - What a move costs the task: sched_switch notes where and when it last
 *    left a CPU; a run that begins on another CPU is a move that took
 *    effect, "hot" when it begins within hot_ns (the kernel's
 *    migration_cost_ns, the window task_hot() calls a task cache-hot) of
 *    leaving the last one: its caches were warm and are lost. The run-queue
 *    wait before runs on a new CPU is summed; and runs from a wake-up to the
 *    next sleep, uninterrupted, that begin hot, are timed apart for hot
 *    moves and hot stays: what a cold start costs, where a task does about
 *    the same work each time it wakes.
 *
 * Per-task state lives in task-local storage (bounded by the number of
 * tasks, freed with them); a task iterator dumps it on demand. Everything
 * is cumulative: user space ends a window by subtracting its previous
 * reading (maxima per window: struct wolf_max, wolf.h). When a task exits
 * that migrated, or that the iterator has reported, its record moves to a
 * bounded hash (user space takes the rest of it from there); the run-queue
 * histogram of a task never reported is folded into its cgroup's. Every
 * refusal is counted.
 *
 * The latest timeline_len migrations of each task are kept, with their
 * time, CPUs and initiator, in an LRU hash keyed by task and slot (a ring
 * per task), from a task's fourth move on: the migration timeline of the
 * tasks a report names. Tasks that stop moving are evicted first when the
 * map is full; user space counts what was not kept from each task's total.
 */
#include "wolf.h"

char LICENSE[] SEC("license") = "GPL";

#define MAX_CPUS \
	1024 /* per-CPU arrays below (a power of two: wolf_bound); larger CPU ids are not classified as finely */
#define MAX_LEVELS 8 /* scheduling-domain levels read per CPU */
#define SPAN_WORDS 4 /* CPUs 0-255 of a domain's span */

/*
 * A wait this long (2^23 ns, the floor of a log2 histogram slot) that ends
 * with the CPU switching from its idle task was not run-queue contention:
 * the CPU had nothing else to run, and a woken task on an idle CPU runs
 * within microseconds, unless the CPU itself was not executing (a vCPU
 * descheduled or emulated). One that ends switching from wolf itself
 * waited behind wolf (loading and verifying its programs is CPU work, a
 * lot of it on a slow machine): not the host's contention either.
 */
#define IDLE_LONG_NS (1ULL << 23)

#define TASK_WAKING 0x00000200
#define SOFTIRQ_OFFSET 0x100
#define HARDIRQ_MASK 0x000f0000
#define NMI_MASK 0x00f00000
#define SCHED_FIFO 1
#define SCHED_RR 2
#define SCHED_DEADLINE 6

#define RUN_HOT_MOVED 1	 /* began on a new CPU, within hot_ns of leaving the last one */
#define RUN_HOT_STAYED 2 /* began on the same CPU, within hot_ns */
#define RUN_RESUMES 4	 /* preempted: its next run goes on with the same work */

enum kind {
	KIND_WAKEUP = 0,   /* wake-up placement (select_task_rq) on the waker's CPU */
	KIND_BALANCE = 1,  /* periodic load balancer: SCHED_SOFTIRQ or ksoftirqd */
	KIND_NEWIDLE = 2,  /* a CPU going idle pulled it (newidle balance) */
	KIND_STOPPER = 3,  /* migration/N: active balance, NUMA, exec */
	KIND_AFFINITY = 4, /* its allowed CPUs (affinity, cpuset) excluded the old CPU */
	KIND_OTHER = 5,	   /* hard irq, RT/DL push-pull, hotplug */
	NKINDS = 6,
};

enum stat_index {
	STAT_MIGRATIONS = 0,  /* migrations counted (source != destination) */
	STAT_SAME_CPU = 1,    /* set_task_cpu() to the same CPU: not a migration */
	STAT_NO_STORAGE = 2,  /* task storage could not be created: events lost */
	STAT_EXITED_FULL = 3, /* exited-task map full: a record lost */
	STAT_EXITED_SAVED = 4,
	STAT_CGROUP_FULL = 5, /* cgroup histogram map full: exited waits unattributed */
	STAT_SETAFFINITY = 6, /* sched_setaffinity calls seen */
	STAT_SETAFF_FULL = 7, /* setaffinity map full */
	STAT_RECORDS = 8,     /* records written by the iterator */
	STAT_RUNQ_SAMPLES = 9,
	STAT_BIG_CPU = 10, /* events on CPUs >= MAX_CPUS (classified coarsely) */
	STAT_IDLE_LONG =
		11, /* per CPU: waits >= IDLE_LONG_NS that ended on it while idle, or behind wolf */
	STAT_TICKS = 12,	/* per CPU: clock samples that landed (on_tick) */
	STAT_THROTTLED = 13,	/* run-queue waits that began throttled by a CPU quota */
	STAT_EXITCPU_FULL = 14, /* exited tasks' CPU time map full: their CPU time unattributed */
	STAT_ADOPTED = 15,	/* running tasks the iterator gave state to */
	STAT_MAX = 16,
};

/* Set by user space before load. */
const volatile __u64 bounce_window_ns = 50000000ULL;
/* A task that ran this recently is cache-hot (the kernel's migration_cost_ns). */
const volatile __u64 hot_ns = 500000ULL;
const volatile __u32 target_tgid = 0;	 /* 0: every process */
const volatile __u32 self_tgid = 0;	 /* wolf itself, ignored unless targeted */
const volatile __u32 timeline_len = 128; /* migrations kept per task for its timeline; 0: none */
/*
 * A task's first moves are not written to its ring: most tasks move a few
 * times a window and no report names them, and the ring update is the
 * most expensive thing this program does.
 */
const volatile __u32 timeline_after = 3;
/* Offsets of per-CPU variables in .data..percpu, from the kernel's BTF. */
const volatile __u64 off_runqueues = 0;
const volatile __u64 off_preempt_count = 0; /* 0: not a per-CPU variable here */
const volatile __u64 off_sd_llc_size = 0;
const volatile __u64 off_sd_llc_id = 0;

/*
 * Filled by read_cpu (the topology program, run once per CPU before the
 * tracepoints attach): each CPU's per-CPU area, and its LLC size as the
 * scheduler sees it (what wake_wide() uses as its factor).
 */
__u64 percpu_base[MAX_CPUS];
__s32 llc_size[MAX_CPUS];

/*
 * A task's state, in its task-local storage, laid out by who touches it:
 * sched_switch runs for every switch (prev's and next's storage both, the
 * hottest path wolf has), and on a storm those lines were last written on
 * the other CPU (by the wake-up, or the task's last run there). The storage
 * element puts the value 8 or 16 bytes into a cache line (8 past a
 * cache-aligned header; 16 where the kernel's BPF allocator adds its own 8),
 * so the first 48 bytes, every switch's and wake-up's, share one line with
 * the header the lookup reads anyway; then a run's end and the moved waits;
 * then the migration's fields; and runq is placed so that its count, sum
 * and max (every timed wait adds to them) share one line (see the assertion
 * below). The fields' order was the order they were added in: a switch
 * touched five or six lines of next's storage and three of prev's.
 */
struct tstat {
	/* Every switch and wake-up: 48 bytes. */
	__u64 enq_ts;	     /* became runnable (woken or preempted); 0: not waiting */
	__u64 first_ts;	     /* when wolf first saw the task */
	__u64 off_ts;	     /* when it left its CPU (that run queue's clock) */
	__u64 on_ts;	     /* when its current run began after a wake-up; 0: none timed */
	__u32 off_cpu;	     /* the CPU it last left, + 1; 0: not seen leaving one */
	__u32 run_flags;     /* its current run: RUN_HOT_MOVED, RUN_HOT_STAYED; RUN_RESUMES */
	__u32 enq_throttled; /* the wait that enq_ts began started throttled */
	__u32 moved_runs;    /* runs begun on another CPU than its last one */
	/* A switch that moved it, or ended a hot run. */
	__u32 hot_moves;   /* of those, begun within hot_ns of leaving the last CPU */
	__u32 moved_waits; /* of those, runs whose run-queue wait was timed */
	__u64 moved_wait_ns;
	/* Runs from wake-up to sleep that began hot: after a move, on the same CPU. */
	__u64 hot_moved_ns;
	__u64 hot_stayed_ns;
	__u64 hot_moved_sq_us; /* their squares, us^2: the spread of the two means */
	__u64 hot_stayed_sq_us;
	__u32 hot_moved_units;
	__u32 hot_stayed_units;
	__u32 idle_long; /* waits >= IDLE_LONG_NS that ended on an idle CPU, or behind wolf */
	__u32 throttled_waits;
	__u64 throttled_ns; /* run-queue waits that began throttled by the cgroup's quota */
	/* sched_migrate_task. */
	__u64 last_mig_ts;
	__u64 wakee_flips_sum; /* the task's wakee_flips at its wake-up moves */
	__u32 migrations;
	__u32 last_from;
	__u32 last_to;
	__u32 last_kind;
	__u32 remote;	   /* moved by a CPU that is neither source nor destination */
	__u32 wake_affine; /* wake-up moves onto the waker's own CPU */
	__u32 wake_wide;   /* wake-up moves where wake_wide() held */
	__u32 by_kind[NKINDS];
	__u32 bounces;
	__u32 bounce_a; /* CPUs of the last bounce */
	__u32 bounce_b;
	__u32 bounce_out[NKINDS];  /* kind of the move away */
	__u32 bounce_back[NKINDS]; /* kind of the move back */
	struct wolf_max waker_flips_max;
	__u64 runtime0;	       /* se.sum_exec_runtime when wolf first saw the task */
	__u32 dumped;	       /* the iterator has reported it: see on_exit */
	__u32 runq_align[5];   /* zero: places runq's count, sum and max on one line */
	struct wolf_hist runq; /* run-queue wait, ns */
};

/*
 * runq's count, sum and max (48 bytes) on one cache line whether the value
 * starts 8 or 16 bytes into one: count at offset 0 mod 64 of the value.
 */
#define TSTAT_RUNQ_COUNT \
	(__builtin_offsetof(struct tstat, runq) + __builtin_offsetof(struct wolf_hist, count))
_Static_assert(TSTAT_RUNQ_COUNT % 64 == 0, "tstat.runq: count, sum and max must share a line");

struct mig_key {
	__u32 tid;
	__u32 slot; /* migrations % timeline_len */
};

struct mig_event {
	__u64 ts; /* bpf_ktime_get_ns() */
	__u32 from;
	__u32 to;
	__u32 kind;
	__u32 _pad;
};

struct task_rec {
	__u32 tid;
	__u32 tgid;
	char comm[WOLF_COMM_LEN];
	__u64 cgroup_id;
	__u64 now_ts;
	__u64 start_ts;	     /* when the task was created (same clock) */
	__u64 runtime_now;   /* se.sum_exec_runtime */
	__u64 nr_migrations; /* the kernel's own se.nr_migrations, for reference */
	__u32 nr_cpus_allowed;
	__u32 cpu;
	__u32 policy;
	__s32 prio;
	__u32 exited;
	__u32 _pad;
	struct tstat st;
};

struct aff_rec {
	__u32 self_calls;  /* the task changed its own affinity */
	__u32 other_calls; /* another task changed it */
	__u32 last_caller_tid;
	__u32 last_caller_tgid;
	char last_caller_comm[WOLF_COMM_LEN];
};

struct dom_rec {
	__u32 level;
	__s32 flags;
	__u32 span_weight;
	__u32 _pad;
	__u64 span[SPAN_WORDS];
	char name[WOLF_COMM_LEN];
};

struct cpu_topo {
	__u32 cpu;	/* the CPU read_cpu ran on */
	__u32 rq_cpu;	/* rq->cpu of the run queue found: must equal cpu */
	__s32 llc_size; /* per_cpu(sd_llc_size): -1 when unreadable */
	__s32 llc_id;	/* per_cpu(sd_llc_id) */
	__u32 ndomains;
	__u32 _pad;
	struct dom_rec dom[MAX_LEVELS];
};

struct topo_args {
	__u64 cpu; /* a raw tracepoint's argument: 64 bits */
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct tstat);
} tstore SEC(".maps");

/*
 * Kernels without task-local storage (before 5.11): the same state in a
 * hash by thread id, bounded (user space sets max_entries), its entries
 * deleted when their task exits. A task that finds it full is not followed
 * (STAT_NO_STORAGE). User space turns use_task_storage off and replaces
 * tstore by a tiny hash map, which the pruned branches still name.
 */
const volatile bool use_task_storage = true;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1); /* user space sizes it when it is used */
	__type(key, __u32);
	__type(value, struct tstat);
} tstore_hash SEC(".maps");

/* Tasks that migrated and then exited while wolf watched. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct task_rec);
} exited SEC(".maps");

/* The timeline rings: 128 tasks' worth of slots at the default length. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct mig_key);
	__type(value, struct mig_event);
} migs SEC(".maps");

/* Run-queue waits of exited tasks, by cgroup (v2 id); live tasks are merged in user space. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct wolf_hist);
} cgroup_runq SEC(".maps");

/*
 * CPU time of tasks that exited before the iterator ever reported them,
 * by cgroup and name (a build's compilers, a shell loop's commands):
 * cumulative, user space subtracts.
 */
struct exit_key {
	__u64 cgroup_id;
	char comm[WOLF_COMM_LEN];
};

struct exit_cpu_val {
	__u64 runtime_ns;
	__u32 tasks;
	__u32 last_tgid;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct exit_key);
	__type(value, struct exit_cpu_val);
} exit_cpu SEC(".maps");

/* Each CPU's own histogram of the waits that ended on it. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wolf_hist);
} cpu_runq SEC(".maps");

/* Migrations host-wide by initiator, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NKINDS);
	__type(key, __u32);
	__type(value, __u64);
} kinds SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct aff_rec);
} setaff SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* user space sets the number of possible CPUs */
	__type(key, __u32);
	__type(value, struct cpu_topo);
} topo SEC(".maps");

WOLF_STATS()

/* Records are too big for the 512-byte BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct task_rec);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_topo);
} topo_scratch SEC(".maps");

/* Keep the record types in BTF so bpf2go generates their Go twins. */
const struct task_rec *unused_task_rec __attribute__((unused));
const struct topo_args *unused_topo_args __attribute__((unused));
const struct mig_key *unused_mig_key __attribute__((unused));
const struct mig_event *unused_mig_event __attribute__((unused));
const struct exit_key *unused_exit_key __attribute__((unused));
const struct exit_cpu_val *unused_exit_cpu __attribute__((unused));

/* All-zero values to create entries from. */
const struct wolf_hist zero_hist = {};
const struct tstat zero_tstat = {};

/* Kernels where the CPU number lives in task_struct (no THREAD_INFO_IN_TASK cpu). */
struct task_struct___cpu {
	unsigned int cpu;
} __attribute__((preserve_access_index));

/* Architectures that keep preempt_count in thread_info (arm64, …). */
struct thread_info___pc {
	int preempt_count;
} __attribute__((preserve_access_index));

struct task_struct___ti {
	struct thread_info___pc thread_info;
} __attribute__((preserve_access_index));

/* Since 6.18 a task is throttled on its way back to user space. */
struct task_struct___618 {
	bool throttled;
} __attribute__((preserve_access_index));

/*
 * Is a task switched out runnable held back by its cgroup's CPU quota?
 * Since 6.18 the task itself says so (task->throttled, set when it was
 * taken off the run queue on its way to user space); before, its group's
 * run queue (or an ancestor's) was throttled as a whole. prev is a BTF
 * pointer: a direct load on the current kernels.
 */
static __always_inline bool task_throttled(struct task_struct *t)
{
	if (bpf_core_field_exists(((struct task_struct___618 *)t)->throttled))
		return ((struct task_struct___618 *)t)->throttled;
	if (bpf_core_field_exists(t->se.cfs_rq))
		return BPF_CORE_READ(t, se.cfs_rq, throttle_count) > 0;
	return false;
}

/* Kernels without CONFIG_FAIR_GROUP_SCHED have no cfs_rq->rq. */
struct cfs_rq___grp {
	struct rq *rq;
} __attribute__((preserve_access_index));

static __always_inline bool wanted(struct task_struct *p)
{
	__u32 tgid = p->tgid;

	if (p->pid == 0)
		return false; /* the idle task */
	if (target_tgid)
		return tgid == target_tgid;
	return tgid != self_tgid;
}

/* p must be a BTF pointer: a direct load where the field is thread_info's. */
static __always_inline __u32 task_cpu(struct task_struct *p)
{
	if (bpf_core_field_exists(p->thread_info.cpu))
		return p->thread_info.cpu;
	return BPF_CORE_READ((struct task_struct___cpu *)p, cpu);
}

/*
 * The run queue's clock (sched_clock, ns), which the scheduler has just
 * updated at each of the events that read it here (wake-up, switch): a few
 * loads, where bpf_ktime_get_ns() costs ~80 ns on VMs whose TSC reads are
 * slow. Only run-queue waits are timed with it; everything compared with
 * user space's clock uses bpf_ktime_get_ns().
 */
static __always_inline __u64 rq_clock_of(struct task_struct *p)
{
	/* Direct (BTF) loads: no helper call. */
	if (bpf_core_field_exists(struct cfs_rq, rq))
		return p->se.cfs_rq->rq->clock;
	return bpf_ktime_get_ns();
}

/* The task's state, if it has any; p must be a BTF pointer. */
static __always_inline struct tstat *tstat_lookup(struct task_struct *p)
{
	__u32 tid;

	if (use_task_storage)
		return bpf_task_storage_get(&tstore, p, 0, 0);
	tid = BPF_CORE_READ(p, pid);
	return bpf_map_lookup_elem(&tstore_hash, &tid);
}

static __always_inline struct tstat *tstat_create(struct task_struct *p)
{
	__u32 tid;

	if (use_task_storage)
		return bpf_task_storage_get(&tstore, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	tid = BPF_CORE_READ(p, pid);
	bpf_map_update_elem(&tstore_hash, &tid, &zero_tstat, BPF_NOEXIST);
	return bpf_map_lookup_elem(&tstore_hash, &tid);
}

static __always_inline struct tstat *tstat_of(struct task_struct *p, bool create)
{
	struct tstat *st;

	/* A plain lookup first: the creating variant takes a slower path. */
	st = tstat_lookup(p);
	if (!st && create)
		st = tstat_create(p);
	if (!st) {
		if (create)
			stat_inc(STAT_NO_STORAGE);
		return 0;
	}
	if (!st->first_ts) {
		st->first_ts = bpf_ktime_get_ns();
		st->runtime0 = BPF_CORE_READ(p, se.sum_exec_runtime);
	}
	return st;
}

static __always_inline int enqueued(struct task_struct *p)
{
	struct tstat *st;

	if (!wanted(p))
		return 0;
	st = tstat_of(p, true);
	if (st) {
		st->enq_ts = rq_clock_of(p);
		st->enq_throttled = 0;
	}
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(on_wakeup, struct task_struct *p)
{
	return enqueued(p);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(on_wakeup_new, struct task_struct *p)
{
	return enqueued(p);
}

/*
 * prev's state, read off the task: sched_switch has carried it as an
 * argument only since 5.18. By the time the tracepoint fires, a task that
 * meant to sleep but had a signal pending is TASK_RUNNING again (it stays
 * runnable), which the argument would not say. A direct load (prev is a
 * BTF pointer): this is the hottest event wolf watches.
 */
static __always_inline unsigned int switch_state(struct task_struct *prev)
{
	if (bpf_core_field_exists(prev->__state))
		return prev->__state;
	return ((struct task_struct___pre514 *)prev)->state;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	/* This CPU's run queue, through a task on it that is not the idle task. */
	__u64 now = rq_clock_of(next->pid ? next : prev);
	__u32 cpu = bpf_get_smp_processor_id() + 1;
	struct wolf_hist *h;
	struct tstat *st;
	__u32 zero = 0, flags = 0, resumes;
	bool moved = false;
	__u64 d, us;

	if (wanted(prev)) {
		/*
		 * Preempted (or yielding): still runnable, its wait starts now,
		 * for a CPU or, throttled, for its quota.
		 */
		bool runnable = preempt || switch_state(prev) == WOLF_TASK_RUNNING;

		st = tstat_of(prev, runnable);
		if (st) {
			flags = 0;
			if (runnable) {
				st->enq_ts = now;
				st->enq_throttled = task_throttled(prev);
				flags = RUN_RESUMES;
			} else if (st->on_ts && now > st->on_ts && st->run_flags) {
				/* A run from wake-up to sleep, begun hot: time it. */
				d = now - st->on_ts;
				us = d / 1000;
				if (st->run_flags == RUN_HOT_MOVED) {
					st->hot_moved_units++;
					st->hot_moved_ns += d;
					st->hot_moved_sq_us += us * us;
				} else {
					st->hot_stayed_units++;
					st->hot_stayed_ns += d;
					st->hot_stayed_sq_us += us * us;
				}
			}
			st->on_ts = 0;
			st->run_flags = flags;
			st->off_ts = now;
			st->off_cpu = cpu;
		}
	}
	if (!wanted(next))
		return 0;
	st = tstat_of(next, false);
	if (!st)
		return 0;
	resumes = st->run_flags & RUN_RESUMES;
	flags = 0;
	if (st->off_cpu) {
		bool hot = now < st->off_ts + hot_ns;

		if (st->off_cpu != cpu) {
			moved = true;
			st->moved_runs++;
			if (hot) {
				st->hot_moves++;
				flags = RUN_HOT_MOVED;
			}
		} else if (hot) {
			flags = RUN_HOT_STAYED;
		}
	}
	if (!st->enq_ts)
		return 0;
	d = now > st->enq_ts ? now - st->enq_ts : 0;
	st->enq_ts = 0;
	/* Only runs after a wake-up are units of work; a preempted one resumes. */
	st->on_ts = resumes ? 0 : now;
	st->run_flags = resumes ? 0 : flags;
	if (st->enq_throttled) {
		st->enq_throttled = 0;
		st->throttled_ns += d;
		st->throttled_waits++;
		stat_inc(STAT_THROTTLED);
		return 0;
	}
	wolf_hist_add_local(&st->runq, d);
	if (moved) {
		st->moved_waits++;
		st->moved_wait_ns += d;
	}
	if (d >= IDLE_LONG_NS && (prev->pid == 0 || (self_tgid && prev->tgid == self_tgid))) {
		st->idle_long++;
		stat_inc(STAT_IDLE_LONG);
	}
	h = bpf_map_lookup_elem(&cpu_runq, &zero);
	if (h)
		wolf_hist_add_local(h, d);
	return 0;
}

/* The current CPU's preempt count, or -1 when this kernel does not let wolf read it. */
static __always_inline int preempt_count(__u32 cpu)
{
	int pc = -1;
	__u64 base;

	if (off_preempt_count && cpu < MAX_CPUS) {
		base = percpu_base[wolf_bound(cpu, MAX_CPUS - 1)];
		if (base) {
			if (bpf_probe_read_kernel(&pc, sizeof(pc),
						  (void *)(base + off_preempt_count)))
				return -1;
			return pc;
		}
	}
	if (bpf_core_field_exists(((struct task_struct___ti *)0)->thread_info.preempt_count)) {
		struct task_struct___ti *cur = (void *)bpf_get_current_task();
		return BPF_CORE_READ(cur, thread_info.preempt_count);
	}
	return -1;
}

/* Is the old CPU still in the task's allowed mask? */
static __always_inline bool cpu_allowed(struct task_struct *p, __u32 cpu)
{
	const struct cpumask *mask = p->cpus_ptr; /* a BTF pointer: a plain load */
	unsigned long word = 0;

	if (!mask)
		return true;
	/* The first 64 CPUs' word by a plain load: the verifier wants a constant offset. */
	if (cpu < 64)
		return (mask->bits[0] >> cpu) & 1;
	if (bpf_probe_read_kernel(&word, sizeof(word), (void *)mask + (cpu / 64) * sizeof(word)))
		return true;
	return (word >> (cpu % 64)) & 1;
}

static __always_inline bool is_stopper(struct task_struct *t)
{
	char c[WOLF_COMM_LEN] = {};

	bpf_probe_read_kernel(c, sizeof(c), t->comm);
	return c[0] == 'm' && c[1] == 'i' && c[2] == 'g' && c[3] == 'r' && c[4] == 'a' &&
	       c[5] == 't' && c[6] == 'i' && c[7] == 'o' && c[8] == 'n' && c[9] == '/';
}

static __always_inline bool is_ksoftirqd(struct task_struct *t)
{
	char c[WOLF_COMM_LEN] = {};

	bpf_probe_read_kernel(c, sizeof(c), t->comm);
	return c[0] == 'k' && c[1] == 's' && c[2] == 'o' && c[3] == 'f' && c[4] == 't' &&
	       c[5] == 'i' && c[6] == 'r' && c[7] == 'q' && c[8] == 'd' && c[9] == '/';
}

static __always_inline __u32 classify(struct task_struct *p, struct task_struct *cur, __u32 orig,
				      __u32 this_cpu)
{
	unsigned int policy, kthread;
	int pc;

	if (!cpu_allowed(p, orig))
		return KIND_AFFINITY;
	if (switch_state(p) & TASK_WAKING)
		return KIND_WAKEUP;
	/*
	 * The stopper and ksoftirqd are kernel threads: one load of the
	 * flags spares a user thread's move (a storm's) two reads of its name.
	 */
	kthread = BPF_CORE_READ(cur, flags) & WOLF_PF_KTHREAD;
	if (kthread && is_stopper(cur))
		return KIND_STOPPER;
	pc = preempt_count(this_cpu);
	if (pc >= 0) {
		if (pc & (HARDIRQ_MASK | NMI_MASK))
			return KIND_OTHER;
		if (pc & SOFTIRQ_OFFSET)
			return KIND_BALANCE;
	}
	if (kthread && is_ksoftirqd(cur))
		return KIND_BALANCE;
	policy = p->policy;
	if (policy == SCHED_FIFO || policy == SCHED_RR || policy == SCHED_DEADLINE)
		return KIND_OTHER;
	/*
	 * Without the preempt count: a newidle balance runs in schedule() of a
	 * task going to sleep (or of the idle task); a periodic one interrupts a
	 * running task.
	 */
	if (pc < 0 && BPF_CORE_READ(cur, pid) != 0 && wolf_task_state(cur) == WOLF_TASK_RUNNING)
		return KIND_BALANCE;
	return KIND_NEWIDLE;
}

SEC("tp_btf/sched_migrate_task")
int BPF_PROG(on_migrate, struct task_struct *p, int dest_cpu)
{
	struct task_struct *cur = wolf_current(); /* a plain pointer: fields through CO-RE reads */
	__u32 orig = task_cpu(p), dest = dest_cpu;
	__u32 this_cpu = bpf_get_smp_processor_id();
	struct tstat *st;
	__u32 kind;
	__u64 *n, now;

	if (orig == dest) {
		stat_inc(STAT_SAME_CPU);
		return 0;
	}
	if (!wanted(p))
		return 0;
	now = bpf_ktime_get_ns(); /* ~80 ns where TSC reads trap: not for the moves above */
	stat_inc(STAT_MIGRATIONS);
	if (this_cpu >= MAX_CPUS)
		stat_inc(STAT_BIG_CPU);
	kind = classify(p, cur, orig, this_cpu);
	n = bpf_map_lookup_elem(&kinds, &kind);
	if (n)
		(*n)++;
	st = tstat_of(p, true);
	if (!st)
		return 0;
	st->migrations++;
	if (kind < NKINDS)
		st->by_kind[kind]++;
	if (this_cpu != orig && this_cpu != dest)
		st->remote++;
	if (kind == KIND_WAKEUP) {
		__u32 master = BPF_CORE_READ(cur, wakee_flips), slave = p->wakee_flips, tmp;
		__s32 factor =
			this_cpu < MAX_CPUS ? llc_size[wolf_bound(this_cpu, MAX_CPUS - 1)] : 0;

		if (dest == this_cpu)
			st->wake_affine++;
		st->wakee_flips_sum += slave;
		wolf_max_add(&st->waker_flips_max, master);
		if (master < slave) {
			tmp = master;
			master = slave;
			slave = tmp;
		}
		/* wake_wide(): 0 if slave < factor || master < slave * factor. */
		if (factor > 0 && !(slave < (__u32)factor || master < slave * (__u32)factor))
			st->wake_wide++;
	}
	if (st->last_mig_ts && now - st->last_mig_ts <= bounce_window_ns && orig == st->last_to &&
	    dest == st->last_from) {
		__u32 lk = st->last_kind;

		st->bounces++;
		if (lk < NKINDS)
			st->bounce_out[lk]++;
		if (kind < NKINDS)
			st->bounce_back[kind]++;
		st->bounce_a = dest;
		st->bounce_b = orig;
	}
	st->last_mig_ts = now;
	st->last_from = orig;
	st->last_to = dest;
	st->last_kind = kind;
	if (timeline_len && st->migrations > timeline_after) {
		struct mig_key k = { .tid = p->pid, .slot = st->migrations % timeline_len };
		struct mig_event e = { .ts = now, .from = orig, .to = dest, .kind = kind };
		struct mig_event *old = bpf_map_lookup_elem(&migs, &k);

		/*
		 * A ring that has gone round once is written in place: an
		 * update of an LRU hash takes a node off a free list and puts
		 * the old one back, where a lookup only marks the node used.
		 */
		if (old)
			*old = e;
		else
			bpf_map_update_elem(&migs, &k, &e, BPF_ANY);
	}
	return 0;
}

/*
 * The cgroup the scheduler groups the task by: its cpu controller's
 * (v1 or v2), else its cgroup v2 one.
 */
static __always_inline __u64 cgroup_id_of(struct task_struct *t)
{
	if (bpf_core_enum_value_exists(enum cgroup_subsys_id, cpu_cgrp_id)) {
		int id = bpf_core_enum_value(enum cgroup_subsys_id, cpu_cgrp_id);
		struct cgroup_subsys_state *css;

		if (id >= 0 && id < CGROUP_SUBSYS_COUNT) {
			css = BPF_CORE_READ(t, cgroups, subsys[id]);
			if (css)
				return BPF_CORE_READ(css, cgroup, kn, id);
		}
	}
	return BPF_CORE_READ(t, cgroups, dfl_cgrp, kn, id);
}

static __always_inline void fill_rec(struct task_rec *r, struct task_struct *t, struct tstat *st)
{
	r->tid = t->pid;
	r->tgid = t->tgid;
	bpf_probe_read_kernel_str(r->comm, sizeof(r->comm), t->comm);
	r->cgroup_id = cgroup_id_of(t);
	r->now_ts = bpf_ktime_get_ns();
	r->start_ts = BPF_CORE_READ(t, start_time);
	r->runtime_now = BPF_CORE_READ(t, se.sum_exec_runtime);
	r->nr_migrations = BPF_CORE_READ(t, se.nr_migrations);
	r->nr_cpus_allowed = BPF_CORE_READ(t, nr_cpus_allowed);
	r->cpu = task_cpu(t);
	r->policy = BPF_CORE_READ(t, policy);
	r->prio = BPF_CORE_READ(t, prio);
	bpf_probe_read_kernel(&r->st, sizeof(r->st), st);
}

/* An exiting task's CPU time that no record will carry. */
static __always_inline void exit_cpu_add(struct task_struct *p, struct tstat *st)
{
	__u64 rt = BPF_CORE_READ(p, se.sum_exec_runtime);
	struct exit_key k = {};
	struct exit_cpu_val *v, zero = {};

	if (rt <= st->runtime0)
		return;
	k.cgroup_id = cgroup_id_of(p);
	bpf_probe_read_kernel_str(k.comm, sizeof(k.comm), p->comm);
	v = bpf_map_lookup_elem(&exit_cpu, &k);
	if (!v) {
		if (bpf_map_update_elem(&exit_cpu, &k, &zero, BPF_NOEXIST) == -7 /* E2BIG */)
			stat_inc(STAT_EXITCPU_FULL);
		v = bpf_map_lookup_elem(&exit_cpu, &k);
		if (!v)
			return;
	}
	__sync_fetch_and_add(&v->runtime_ns, rt - st->runtime0);
	__sync_fetch_and_add(&v->tasks, 1);
	v->last_tgid = p->tgid;
}

/* A task that migrated is exiting: keep its record, fold its waits into its cgroup's. */
static __always_inline void save_exited(struct task_struct *p)
{
	struct tstat *st = tstat_lookup(p);
	struct wolf_hist *h;
	struct task_rec *r;
	__u32 zero = 0, tid;
	__u64 cg;

	if (!st)
		return;
	/*
	 * Its run-queue waits go to its cgroup's histogram only if user space
	 * never read them: a task the iterator reported has an exit record
	 * instead, from which user space takes what it has not read yet.
	 */
	if (st->runq.count && !st->dumped) {
		cg = cgroup_id_of(p);
		h = bpf_map_lookup_elem(&cgroup_runq, &cg);
		if (!h) {
			if (bpf_map_update_elem(&cgroup_runq, &cg, &zero_hist, BPF_NOEXIST) ==
			    -7 /* E2BIG */)
				stat_inc(STAT_CGROUP_FULL);
			h = bpf_map_lookup_elem(&cgroup_runq, &cg);
		}
		if (h) {
			for (int i = 0; i < WOLF_HIST_SLOTS; i++)
				if (st->runq.slots[i])
					__sync_fetch_and_add(&h->slots[i], st->runq.slots[i]);
			__sync_fetch_and_add(&h->count, st->runq.count);
			__sync_fetch_and_add(&h->sum, st->runq.sum);
			wolf_max_merge(&h->max, &st->runq.max);
		}
	}
	/*
	 * Only tasks that moved at least twice could have bounced; the CPU
	 * time of the others, never reported, goes to their cgroup and name.
	 */
	if (st->migrations < 2 && !st->dumped) {
		exit_cpu_add(p, st);
		return;
	}
	r = bpf_map_lookup_elem(&scratch, &zero);
	if (!r)
		return;
	fill_rec(r, p, st);
	r->exited = 1;
	tid = r->tid;
	if (bpf_map_update_elem(&exited, &tid, r, BPF_ANY))
		stat_inc(STAT_EXITED_FULL);
	else
		stat_inc(STAT_EXITED_SAVED);
	return;
}

/* Task storage frees itself with its task; the hash that stands in for it does not. */
static __always_inline void tstat_forget(struct task_struct *p)
{
	__u32 tid;

	if (use_task_storage)
		return;
	tid = BPF_CORE_READ(p, pid);
	bpf_map_delete_elem(&tstore_hash, &tid);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	save_exited(p);
	tstat_forget(p);
	return 0;
}

SEC("iter/task")
int dump_tasks(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;
	struct task_rec *r;
	struct tstat *st;
	__u32 zero = 0;

	if (!t)
		return 0;
	st = tstat_lookup(t);
	if (!st) {
		/*
		 * A task running (or runnable) since before wolf watched, that
		 * has not switched since: from now on its CPU time is counted.
		 */
		if (wolf_task_state(t) == WOLF_TASK_RUNNING && wanted(t) && tstat_of(t, true))
			stat_inc(STAT_ADOPTED);
		return 0;
	}
	r = bpf_map_lookup_elem(&scratch, &zero);
	if (!r)
		return 0;
	fill_rec(r, t, st);
	r->exited = 0;
	st->dumped = 1;
	bpf_seq_write(ctx->meta->seq, r, sizeof(*r));
	stat_inc(STAT_RECORDS);
	return 0;
}

/*
 * sys_enter_sched_setaffinity: who changes whose affinity. pid 0 means the
 * caller itself.
 */
struct setaffinity_args {
	__u64 _common;
	__s32 syscall_nr;
	__u32 _pad;
	__u64 pid;
	__u64 len;
	__u64 user_mask_ptr;
};

SEC("tracepoint/syscalls/sys_enter_sched_setaffinity")
int on_setaffinity(struct setaffinity_args *args)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 caller = (__u32)id, target = (__u32)args->pid;
	struct aff_rec *a, fresh = {};

	if (target == 0)
		target = caller;
	stat_inc(STAT_SETAFFINITY);
	a = bpf_map_lookup_elem(&setaff, &target);
	if (!a) {
		if (bpf_map_update_elem(&setaff, &target, &fresh, BPF_NOEXIST) == -7 /* E2BIG */)
			stat_inc(STAT_SETAFF_FULL);
		a = bpf_map_lookup_elem(&setaff, &target);
		if (!a)
			return 0;
	}
	if (target == caller)
		__sync_fetch_and_add(&a->self_calls, 1);
	else
		__sync_fetch_and_add(&a->other_calls, 1);
	a->last_caller_tid = caller;
	a->last_caller_tgid = id >> 32;
	bpf_get_current_comm(a->last_caller_comm, sizeof(a->last_caller_comm));
	return 0;
}

/*
 * A CPU-clock sample on every CPU at a low rate: a CPU that executes takes
 * all of them, busy or idle; one that does not (a vCPU descheduled by its
 * hypervisor, or waiting its turn in an emulator) takes few. User space
 * compares the count with the rate: waits for a CPU on a CPU that was not
 * executing are not contention among the host's tasks.
 */
SEC("perf_event")
int on_tick(void *ctx)
{
	stat_inc(STAT_TICKS);
	return 0;
}

/*
 * read_cpu runs (BPF_PROG_TEST_RUN) on each CPU in turn, with wolf's thread
 * pinned there: the thread's CFS run queue leads to the CPU's struct rq,
 * whose address locates the CPU's per-CPU area; from it, the scheduler's
 * own sd_llc_size and sd_llc_id, and the domain hierarchy rq->sd. A raw
 * tracepoint program never attached: those run under BPF_PROG_TEST_RUN, in
 * the caller's context, since 5.10 (syscall programs only since 5.14). Its
 * context is the arguments array: args[0] is struct topo_args.
 */
SEC("raw_tp")
int read_cpu(struct bpf_raw_tracepoint_args *ctx)
{
	struct topo_args *args = (void *)ctx->args;
	struct task_struct *cur = (void *)bpf_get_current_task();
	__u32 cpu = bpf_get_smp_processor_id(), zero = 0;
	struct sched_domain *sd;
	struct cpu_topo *t;
	struct rq *rq;
	void *cfs;
	__u64 base;

	if (cpu != args->cpu)
		return 1; /* not where user space pinned us */
	t = bpf_map_lookup_elem(&topo_scratch, &zero);
	if (!t)
		return 2;
	__builtin_memset(t, 0, sizeof(*t));
	t->cpu = cpu;
	t->llc_size = -1;
	t->llc_id = -1;
	cfs = BPF_CORE_READ(cur, se.cfs_rq);
	if (bpf_core_field_exists(((struct cfs_rq___grp *)0)->rq))
		rq = BPF_CORE_READ((struct cfs_rq___grp *)cfs, rq);
	else
		rq = cfs - bpf_core_field_offset(struct rq, cfs);
	if (!rq)
		return 3;
	t->rq_cpu = BPF_CORE_READ(rq, cpu);
	if (t->rq_cpu == cpu && off_runqueues) {
		base = (__u64)rq - off_runqueues;
		if (cpu < MAX_CPUS)
			percpu_base[wolf_bound(cpu, MAX_CPUS - 1)] = base;
		if (off_sd_llc_size)
			bpf_probe_read_kernel(&t->llc_size, sizeof(t->llc_size),
					      (void *)(base + off_sd_llc_size));
		if (off_sd_llc_id)
			bpf_probe_read_kernel(&t->llc_id, sizeof(t->llc_id),
					      (void *)(base + off_sd_llc_id));
		if (cpu < MAX_CPUS)
			llc_size[wolf_bound(cpu, MAX_CPUS - 1)] = t->llc_size;
	}
	sd = BPF_CORE_READ(rq, sd);
	/*
	 * The span is a flexible array at the end of struct sched_domain, which
	 * BTF leaves out: it starts at the struct's size.
	 */
	for (int i = 0; i < MAX_LEVELS && sd; i++) {
		struct dom_rec *d = &t->dom[i];

		d->level = BPF_CORE_READ(sd, level);
		d->flags = BPF_CORE_READ(sd, flags);
		d->span_weight = BPF_CORE_READ(sd, span_weight);
		bpf_probe_read_kernel(d->span, sizeof(d->span),
				      (void *)sd + bpf_core_type_size(struct sched_domain));
		if (bpf_core_field_exists(sd->name))
			bpf_probe_read_kernel_str(d->name, sizeof(d->name),
						  BPF_CORE_READ(sd, name));
		t->ndomains = i + 1;
		sd = BPF_CORE_READ(sd, parent);
	}
	if (bpf_map_update_elem(&topo, &cpu, t, BPF_ANY))
		return 4;
	return 0;
}
