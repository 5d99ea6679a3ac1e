//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * wolf softirq: how long each softirq vector runs and waits on each CPU,
 * every run longer than a threshold, and what NET_RX spent its time in.
 *
 *  - raw_tp/softirq_raise, softirq_entry, softirq_exit bracket every
 *    softirq handler: run time (for NET_RX that is net_rx_action's
 *    latency, Cloudflare's histogram, with no kprobe) and raise-to-entry
 *    wait, as log2 histograms per vector in per-CPU maps. Runs above
 *    threshold_ns cross a ring buffer with their CPU, vector, duration
 *    and start time.
 *  - raw_tp/napi_poll adds up work against budget per NAPI instance and
 *    per NET_RX run.
 *  - perf_event (CPU clock, every CPU) keeps a kernel stack only while its
 *    CPU is inside NET_RX; stacks sampled in a run that turns out to be a
 *    stall are counted again, apart, when the run ends.
 *  - raw_tp/kfree_skb counts drops by reason, inside NET_RX or not.
 *  - uprobe/uretprobe (or kprobe/kretprobe where the kernel has them)
 *    time one function, like Cloudflare's histogram-kernel.stp.
 *
 * The hot path (softirq entry/exit/raise) touches one per-CPU map value
 * and one per-CPU histogram: no locks, no shared cache lines, and no
 * locked instructions (wolf_hist_add_local: softirq context does not nest
 * on a CPU).
 * Every map is bounded and every loss is counted. Everything is
 * cumulative: user space ends a window by subtracting its previous
 * reading, and maxima are kept per window (struct wolf_max, wolf.h).
 */
#include "wolf.h"

char LICENSE[] SEC("license") = "GPL";

#define NR_VEC 10 /* NR_SOFTIRQS: HI TIMER NET_TX NET_RX BLOCK IRQ_POLL TASKLET SCHED HRTIMER RCU */
#define VEC_NET_RX 3
#define MAX_PENDING 64 /* stacks remembered per NET_RX run */
#define MAX_STACK 32
#define NR_REASONS 512 /* enum skb_drop_reason, with room to grow */
#define IFNAMSIZ 16

/* Set by user space before load. */
const volatile __u64 threshold_ns = 5000000;
const volatile __u32 func_tgid = 0; /* function latency: only this process (0: all) */

struct napi_stat {
	__u64 polls;
	__u64 work;
	__u64 full;		  /* polls with work >= budget */
	__u64 budget;		  /* last budget seen */
	struct wolf_max max_work; /* most packets in one poll, per window */
	__u32 ifindex;
	__u32 cpu; /* last CPU that polled it */
	char dev[IFNAMSIZ];
};

/*
 * Softirq time per task it ran on top of (the task that was current on
 * the CPU: softirq work runs before that task resumes, in its context),
 * per vector, cumulative: the time those tasks lost to it. ksoftirqd
 * counts too (user space tells it apart); the idle task does not.
 */
struct task_softirq {
	__u64 ns[NR_VEC];
	__u64 runs;
	__u32 tgid;
	__u32 _pad;
	char comm[WOLF_COMM_LEN];
};

/*
 * Per-CPU state. A CPU runs one softirq handler at a time (handlers never
 * nest on a CPU), so one entry stamp per CPU suffices. What every entry
 * and exit touches comes first, in one cache line: under a memory-heavy
 * network load these lines are cold, and each miss costs more than the
 * program's instructions.
 */
struct cpu_state {
	/* hot: every entry and exit */
	__u64 entry_ns; /* current handler's entry, 0 outside */
	__u32 vec;	/* current handler's vector */
	__u32 npending; /* stacks sampled in the current NET_RX run */
	__u64 rx_work;	/* packets polled in the current NET_RX run */
	__u32 rx_polls;
	__u32 rx_full; /* polls that used their whole budget */
	__u64 entries;
	__u64 exits;
	__u64 raises;
	__u64 napi_polls;
	/* raises, samples */
	__u64 raise_ns[NR_VEC]; /* first raise not yet run, per vector */
	__u32 run_samples;	/* perf samples in the current run, any vector */
	__u32 _pad0;
	/*
	 * NAPI polls add up here while the CPU keeps polling the same
	 * instance (the usual case: a queue's interrupt stays on one CPU),
	 * and go to napi_stats only when it changes; user space adds what is
	 * still pending. One hash operation per change, not per poll.
	 */
	__u64 napi_key; /* napi_struct accumulated in napi_acc, 0 none */
	struct napi_stat napi_acc;
	/*
	 * Softirq time on top of one task adds up here while the same task
	 * is current at successive exits, and goes to task_softirq only when
	 * it changes (as napi_acc does): one hash operation per change.
	 */
	__u64 victim_id; /* bpf_get_current_pid_tgid of victim_acc, 0 none */
	struct task_softirq victim_acc;
	/* rare: stalls, samples, drops, function latency */
	__u64 unpaired_exits; /* exit without an entry: wolf attached mid-run */
	__u64 stalls;
	__u64 stall_drops;  /* ring buffer full */
	__u64 samples;	    /* perf samples taken while in NET_RX */
	__u64 samples_idle; /* perf samples outside NET_RX (discarded) */
	__u64 stack_errors; /* bpf_get_stackid failed (bucket taken, no stack) */
	__u64 pending_full; /* stall stacks beyond MAX_PENDING in one run */
	__u64 map_full;	    /* a bounded hash refused a new key */
	__u64 drops;	    /* kfree_skb */
	__u64 func_calls;
	__u64 func_lost; /* return without a recorded entry */
	__s32 pending[MAX_PENDING];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_state);
} cpu_states SEC(".maps");

/* Run time and raise-to-entry wait per vector, ns. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NR_VEC);
	__type(key, __u32);
	__type(value, struct wolf_hist);
} run_hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NR_VEC);
	__type(key, __u32);
	__type(value, struct wolf_hist);
} wait_hist SEC(".maps");

struct stall {
	__u64 start_ns; /* bpf_ktime_get_ns at entry */
	__u64 duration_ns;
	__u64 rx_work; /* NET_RX: packets polled during the run */
	__u32 rx_polls;
	__u32 rx_full;
	__u32 cpu;
	__u32 vec;
	__u32 pid; /* the task it ran on top of (or ksoftirqd) */
	__u32 tgid;
	__u32 samples;	   /* NET_RX stacks kept from the run */
	__u32 cpu_samples; /* perf samples that landed during the run: few
			     * means the CPU was not running (hypervisor) or
			     * had interrupts off */
	char comm[WOLF_COMM_LEN];
};

/* Keeps struct stall in BTF so bpf2go can generate its Go twin. */
const struct stall *unused_stall __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} stalls SEC(".maps");

/*
 * Kernel stacks sampled in NET_RX, by stack id. A stack whose hash bucket
 * holds another stack is lost (counted in stack_errors): the map is sized
 * so that a few hundred distinct stacks rarely collide.
 */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MAX_STACK * sizeof(__u64));
} stacks SEC(".maps");

/* Samples per stack: every NET_RX sample, and those in stall runs. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} rx_stack_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} stall_stack_counts SEC(".maps");

const struct napi_stat *unused_napi_stat __attribute__((unused));

/*
 * Keyed by the napi_struct: NAPI_STATE_SCHED lets one CPU poll an
 * instance at a time, so plain updates do not race.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct napi_stat);
} napi_stats SEC(".maps");

const struct task_softirq *unused_task_softirq __attribute__((unused));

/*
 * Keyed by tid. LRU: a long-running watch meets many short-lived tasks;
 * an evicted entry is an exited task's (its last window was read).
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct task_softirq);
} task_softirqs SEC(".maps");

/* kfree_skb by reason; index + NR_REASONS when inside NET_RX. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2 * NR_REASONS);
	__type(key, __u32);
	__type(value, __u64);
} drop_reasons SEC(".maps");

/* Function latency: outermost call per thread. */
struct func_call {
	__u64 start_ns;
	__u64 depth;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct func_call);
} func_calls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wolf_hist);
} func_hist SEC(".maps");

static __always_inline struct cpu_state *state(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&cpu_states, &zero);
}

static __always_inline void count_key(void *map, __u32 *key, __u64 *map_full)
{
	__u64 one = 1, *v = bpf_map_lookup_elem(map, key);

	if (v) {
		__sync_fetch_and_add(v, 1);
		return;
	}
	/* Another CPU may insert the key meanwhile: then add to its count. */
	if (bpf_map_update_elem(map, key, &one, BPF_NOEXIST)) {
		v = bpf_map_lookup_elem(map, key);
		if (v)
			__sync_fetch_and_add(v, 1);
		else
			(*map_full)++;
	}
}

SEC("raw_tp/softirq_raise")
int BPF_PROG(on_softirq_raise, unsigned int vec)
{
	struct cpu_state *s = state();

	if (!s || vec >= NR_VEC)
		return 0;
	s->raises++;
	/* The first raise counts: later ones find the vector already pending. */
	if (!s->raise_ns[vec])
		s->raise_ns[vec] = bpf_ktime_get_ns();
	return 0;
}

SEC("raw_tp/softirq_entry")
int BPF_PROG(on_softirq_entry, unsigned int vec)
{
	struct cpu_state *s = state();
	__u64 now = bpf_ktime_get_ns();

	if (!s || vec >= NR_VEC)
		return 0;
	s->entries++;
	s->vec = vec;
	s->entry_ns = now;
	s->rx_work = 0;
	s->rx_polls = 0;
	s->rx_full = 0;
	s->npending = 0;
	s->run_samples = 0;
	/* Index before vec is spilled as a map key: the verifier forgets its
	 * bounds across the spill. */
	__u64 *raised = &s->raise_ns[vec];
	if (*raised) {
		__u64 wait = now - *raised;

		*raised = 0;
		struct wolf_hist *h = bpf_map_lookup_elem(&wait_hist, &vec);
		if (h)
			wolf_hist_add_local(h, wait);
	}
	return 0;
}

/* Moves the CPU's softirq time on top of one task to task_softirq. */
static __always_inline void victim_flush(struct cpu_state *s)
{
	struct task_softirq *acc = &s->victim_acc;
	__u32 tid = (__u32)s->victim_id;

	if (!tid || !acc->runs)
		return;
	struct task_softirq *t = bpf_map_lookup_elem(&task_softirqs, &tid);
	if (!t) {
		struct task_softirq fresh = {};

		fresh.tgid = acc->tgid;
		__builtin_memcpy(fresh.comm, acc->comm, sizeof(fresh.comm));
		/* NOEXIST: another CPU's insert of the same tid is as good. */
		bpf_map_update_elem(&task_softirqs, &tid, &fresh, BPF_NOEXIST);
		t = bpf_map_lookup_elem(&task_softirqs, &tid);
		if (!t) {
			s->map_full++;
			return;
		}
	}
	for (int i = 0; i < NR_VEC; i++) {
		if (acc->ns[i])
			__sync_fetch_and_add(&t->ns[i], acc->ns[i]);
	}
	__sync_fetch_and_add(&t->runs, acc->runs);
}

/* Adds a run of d ns of vector vec to the task it ran on top of. */
static __always_inline void victim_add(struct cpu_state *s, __u64 id, __u32 vec, __u64 d)
{
	struct task_softirq *acc = &s->victim_acc;

	if (s->victim_id != id) {
		victim_flush(s);
		__builtin_memset(acc, 0, sizeof(*acc));
		s->victim_id = id;
		acc->tgid = id >> 32;
		bpf_get_current_comm(acc->comm, sizeof(acc->comm));
	}
	if (vec < NR_VEC)
		acc->ns[vec] += d;
	acc->runs++;
}

/* A NET_RX run that was a stall: count its sampled stacks apart. */
static __always_inline void keep_stall_stacks(struct cpu_state *s)
{
	__u32 n = s->npending;

	for (__u32 i = 0; i < MAX_PENDING; i++) {
		if (i >= n)
			break;
		__u32 id = (__u32)s->pending[i];
		count_key(&stall_stack_counts, &id, &s->map_full);
	}
}

SEC("raw_tp/softirq_exit")
int BPF_PROG(on_softirq_exit, unsigned int vec)
{
	struct cpu_state *s = state();
	__u64 now = bpf_ktime_get_ns();

	if (!s || vec >= NR_VEC)
		return 0;
	s->exits++;
	if (!s->entry_ns || s->vec != vec) {
		s->unpaired_exits++;
		s->entry_ns = 0;
		return 0;
	}
	__u64 d = now - s->entry_ns;
	__u64 start = s->entry_ns;

	s->entry_ns = 0;
	struct wolf_hist *h = bpf_map_lookup_elem(&run_hist, &vec);
	if (h)
		wolf_hist_add_local(h, d);
	__u64 id = bpf_get_current_pid_tgid();
	if ((__u32)id)
		victim_add(s, id, vec, d);
	if (d < threshold_ns) {
		s->npending = 0;
		return 0;
	}

	s->stalls++;
	if (vec == VEC_NET_RX)
		keep_stall_stacks(s);
	struct stall *e = bpf_ringbuf_reserve(&stalls, sizeof(*e), 0);
	if (!e) {
		s->stall_drops++;
		s->npending = 0;
		return 0;
	}
	e->start_ns = start;
	e->duration_ns = d;
	e->rx_work = s->rx_work;
	e->rx_polls = s->rx_polls;
	e->rx_full = s->rx_full;
	e->cpu = bpf_get_smp_processor_id();
	e->vec = vec;
	e->pid = (__u32)id;
	e->tgid = id >> 32;
	e->samples = s->npending;
	e->cpu_samples = s->run_samples;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
	s->npending = 0;
	return 0;
}

SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx)
{
	struct cpu_state *s = state();

	if (!s)
		return 0;
	if (s->entry_ns)
		s->run_samples++;
	if (!s->entry_ns || s->vec != VEC_NET_RX) {
		s->samples_idle++;
		return 0;
	}
	s->samples++;
	long id = bpf_get_stackid(ctx, &stacks, 0);
	if (id < 0) {
		s->stack_errors++;
		return 0;
	}
	__u32 key = (__u32)id;
	count_key(&rx_stack_counts, &key, &s->map_full);
	__u32 n = s->npending;
	if (n < MAX_PENDING) {
		s->pending[n] = (__s32)id;
		s->npending = n + 1;
	} else {
		s->pending_full++;
	}
	return 0;
}

/* Moves the CPU's accumulated polls of one NAPI instance to napi_stats. */
static __always_inline void napi_flush(struct cpu_state *s)
{
	struct napi_stat *acc = &s->napi_acc;
	__u64 key = s->napi_key;

	if (!key || !acc->polls)
		return;
	struct napi_stat *st = bpf_map_lookup_elem(&napi_stats, &key);
	if (!st) {
		/* NOEXIST: a racing insert of the same key is as good as ours. */
		struct napi_stat fresh = *acc;

		fresh.polls = fresh.work = fresh.full = 0;
		__builtin_memset(&fresh.max_work, 0, sizeof(fresh.max_work));
		bpf_map_update_elem(&napi_stats, &key, &fresh, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&napi_stats, &key);
		if (!st) {
			s->map_full++;
			return;
		}
	}
	/* Atomic: an instance can move to another CPU that flushes too. */
	__sync_fetch_and_add(&st->polls, acc->polls);
	__sync_fetch_and_add(&st->work, acc->work);
	__sync_fetch_and_add(&st->full, acc->full);
	wolf_max_merge(&st->max_work, &acc->max_work);
	st->budget = acc->budget;
	st->cpu = acc->cpu;
}

SEC("raw_tp/napi_poll")
int BPF_PROG(on_napi_poll, struct napi_struct *napi, int work, int budget)
{
	struct cpu_state *s = state();
	__u64 key = (__u64)napi;
	__u32 full = budget > 0 && work >= budget;

	if (!s)
		return 0;
	s->napi_polls++;
	if (s->entry_ns && s->vec == VEC_NET_RX) {
		s->rx_work += work > 0 ? work : 0;
		s->rx_polls++;
		s->rx_full += full;
	}
	struct napi_stat *acc = &s->napi_acc;
	if (s->napi_key != key) {
		napi_flush(s);
		struct net_device *dev = BPF_CORE_READ(napi, dev);

		s->napi_key = key;
		__builtin_memset(acc, 0, sizeof(*acc));
		if (dev) {
			BPF_CORE_READ_STR_INTO(&acc->dev, dev, name);
			acc->ifindex = BPF_CORE_READ(dev, ifindex);
		}
		acc->cpu = bpf_get_smp_processor_id();
	}
	acc->polls++;
	if (work > 0) {
		acc->work += work;
		wolf_max_add(&acc->max_work, work);
	}
	acc->full += full;
	acc->budget = budget;
	return 0;
}

/*
 * Since 5.17 the tracepoint carries the drop reason as its third argument;
 * on older kernels attaching this program fails (it reads past the
 * arguments) and wolf goes on without drop reasons.
 */
SEC("raw_tp/kfree_skb")
int BPF_PROG(on_kfree_skb, struct sk_buff *skb, void *location, unsigned int reason)
{
	struct cpu_state *s = state();

	if (!s)
		return 0;
	s->drops++;
	__u32 idx = reason < NR_REASONS ? reason : NR_REASONS - 1;
	if (s->entry_ns && s->vec == VEC_NET_RX)
		idx += NR_REASONS;
	__u64 *v = bpf_map_lookup_elem(&drop_reasons, &idx);
	if (v)
		(*v)++;
	return 0;
}

/*
 * Function latency. Kprobe-type programs: the same pair attaches as
 * uprobe/uretprobe to a user-space symbol or as kprobe/kretprobe to a
 * kernel function. Recursive calls are folded into the outermost one.
 */
SEC("uprobe")
int func_entry(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();

	if (func_tgid && (id >> 32) != func_tgid)
		return 0;
	struct func_call *c = bpf_map_lookup_elem(&func_calls, &id);
	if (c) {
		c->depth++;
		return 0;
	}
	struct func_call fresh = { .start_ns = bpf_ktime_get_ns() };
	bpf_map_update_elem(&func_calls, &id, &fresh, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int func_return(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 id = bpf_get_current_pid_tgid();

	if (func_tgid && (id >> 32) != func_tgid)
		return 0;
	struct cpu_state *s = state();
	struct func_call *c = bpf_map_lookup_elem(&func_calls, &id);
	if (!c) {
		if (s)
			s->func_lost++;
		return 0;
	}
	if (c->depth) {
		c->depth--;
		return 0;
	}
	__u64 d = now - c->start_ns;
	bpf_map_delete_elem(&func_calls, &id);
	__u32 zero = 0;
	struct wolf_hist *h = bpf_map_lookup_elem(&func_hist, &zero);
	/* Atomic: uprobe programs can be preempted by another on this CPU. */
	if (h)
		wolf_hist_add(h, d);
	if (s)
		s->func_calls++;
	return 0;
}
