/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Pieces every wolf BPF program shares: task-state and lock constants that
 * vmlinux.h (types only, no macros) cannot carry, and CO-RE readers that
 * work on kernels before and after the fields they read were renamed.
 */
#ifndef WOLF_H
#define WOLF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

/* include/linux/sched.h: TASK_COMM_LEN, the size of a task's name. */
#define WOLF_COMM_LEN 16

/*
 * Every investigator counts its events and drops in one per-CPU array,
 * "stats", indexed by its own enum stat_index, whose last entry is
 * STAT_MAX. WOLF_STATS() declares the array, stat_inc and stat_add, and
 * keeps the enum in the object's BTF, where user space (probekit) reads
 * each counter's name from its enumerator: adding a counter is adding an
 * enumerator, nothing in Go is kept in step by hand. (The array's own key
 * must stay a __u32: the kernel refuses other key types for arrays.)
 */
#define WOLF_STATS()                                                                               \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);                                           \
		__uint(max_entries, STAT_MAX);                                                     \
		__type(key, __u32);                                                                \
		__type(value, __u64);                                                              \
	} stats SEC(".maps");                                                                      \
	const enum stat_index *wolf_stat_index_btf __attribute__((unused));                        \
	static __always_inline __attribute__((unused)) void stat_add(enum stat_index idx, __u64 n) \
	{                                                                                          \
		__u32 key = idx;                                                                   \
		__u64 *v = bpf_map_lookup_elem(&stats, &key);                                      \
		if (v)                                                                             \
			*v += n;                                                                   \
	}                                                                                          \
	static __always_inline __attribute__((unused)) void stat_inc(enum stat_index idx)          \
	{                                                                                          \
		stat_add(idx, 1);                                                                  \
	}

/*
 * Detail under a budget. An event's cheap part (its counts, sums and
 * histograms) is always kept; its expensive part (a stack walk, a record
 * through a ring buffer, a task decoded) only when the CPU's detail budget
 * allows. User space (probekit's budget) sets wolf_detail_ns, the least
 * time between two detailed events on one CPU at the steady rate, from
 * the share of wolf's CPU budget (--max-cpu) the object may spend; 0 takes
 * every one. The gate is a per-CPU GCRA (generic cell rate algorithm): up
 * to WOLF_DETAIL_BURST detailed events at once, then one per
 * wolf_detail_ns, so that a quiet host loses nothing and a storm's detail
 * is a sample spread evenly over time. What it took and what it skipped,
 * per CPU, tells user space the rate it sampled at (the report says it).
 *
 * WOLF_BUDGET(n) declares the per-CPU state of n gates and
 * wolf_detail_take(gate, now), now being bpf_ktime_get_ns() or any clock
 * that only goes forward on a CPU. Gates share the interval and each
 * keeps its own pace, so that one kind of detail asked for often (the
 * stacks of many sleeping threads) cannot starve another (a spin lock's
 * one stack a while). wolf_detail_ns has a section of its own, as
 * wolf_window, so that user space can change it while the programs run.
 */
#define WOLF_DETAIL_BURST 16

struct wolf_detail {
	__u64 next_ns; /* when the gate's next detail is due at the steady rate */
	__u64 taken;   /* events that got their detail */
	__u64 skipped; /* events whose detail the budget left out */
};

static __u64 wolf_detail_ns __attribute__((section(".data.wolf_budget")));

#define WOLF_BUDGET(n)                                                                   \
	struct {                                                                         \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);                                 \
		__uint(max_entries, n);                                                  \
		__type(key, __u32);                                                      \
		__type(value, struct wolf_detail);                                       \
	} wolf_detail SEC(".maps");                                                      \
	static __always_inline __attribute__((unused)) bool wolf_detail_take(__u32 gate, \
									     __u64 now)  \
	{                                                                                \
		__u64 every = *(volatile __u64 *)&wolf_detail_ns;                        \
		struct wolf_detail *d = bpf_map_lookup_elem(&wolf_detail, &gate);        \
                                                                                         \
		if (!d)                                                                  \
			return true;                                                     \
		if (every && d->next_ns > now + WOLF_DETAIL_BURST * every) {             \
			d->skipped++;                                                    \
			return false;                                                    \
		}                                                                        \
		d->next_ns = (d->next_ns > now ? d->next_ns : now) + every;              \
		d->taken++;                                                              \
		return true;                                                             \
	}

/* include/linux/sched.h: task states. */
#define WOLF_TASK_RUNNING 0x00000000
#define WOLF_TASK_INTERRUPTIBLE 0x00000001
#define WOLF_TASK_UNINTERRUPTIBLE 0x00000002
#define WOLF_TASK_WAKEKILL 0x00000100
#define WOLF_TASK_NOLOAD 0x00000400

/* include/linux/sched.h: task flags. */
#define WOLF_PF_EXITING 0x00000004
#define WOLF_PF_POSTCOREDUMP 0x00000008
#define WOLF_PF_WQ_WORKER 0x00000020
#define WOLF_PF_DUMPCORE 0x00000200
#define WOLF_PF_KTHREAD 0x00200000

/* include/trace/events/lock.h: contention_begin flags. */
#define WOLF_LCB_F_SPIN (1U << 0)
#define WOLF_LCB_F_READ (1U << 1)
#define WOLF_LCB_F_WRITE (1U << 2)
#define WOLF_LCB_F_RT (1U << 3)
#define WOLF_LCB_F_PERCPU (1U << 4)
#define WOLF_LCB_F_MUTEX (1U << 5)

/* kernel/locking/mutex.h and rwsem.c: flag bits in the owner words. */
#define WOLF_MUTEX_FLAGS 0x07UL
#define WOLF_RWSEM_READER_OWNED (1UL << 0)
#define WOLF_RWSEM_OWNER_FLAGS 0x07UL
#define WOLF_RWSEM_WRITER_LOCKED (1UL << 0)
#define WOLF_RWSEM_READER_SHIFT 8

/* include/linux/hung_task.h (6.16+): task->blocker = lock | type. */
#define WOLF_BLOCKER_TYPE_MASK 0x03UL
#define WOLF_BLOCKER_MUTEX 0x00UL
#define WOLF_BLOCKER_SEM 0x01UL
#define WOLF_BLOCKER_RWSEM_READER 0x02UL
#define WOLF_BLOCKER_RWSEM_WRITER 0x03UL

/*
 * The current task as a plain pointer: bpf_get_current_task() exists on
 * every kernel wolf supports, bpf_get_current_task_btf() only since 5.11.
 * Its fields are read with BPF_CORE_READ (a plain pointer cannot be
 * dereferenced directly, nor passed where a helper wants a BTF pointer).
 */
static __always_inline struct task_struct *wolf_current(void)
{
	return (struct task_struct *)bpf_get_current_task();
}

/*
 * A kprobe's first argument, on x86-64 or arm64, from one object: the
 * register file (the program's context) differs, and CO-RE picks the
 * field this kernel's struct pt_regs has. Read through a helper: a CO-RE
 * offset is added to the context pointer, and the verifier refuses loads
 * through a modified context pointer.
 */
struct pt_regs___x86 {
	unsigned long di;
} __attribute__((preserve_access_index));

struct pt_regs___arm64 {
	__u64 regs[31];
} __attribute__((preserve_access_index));

static __always_inline __u64 wolf_kprobe_arg0(void *ctx)
{
	if (bpf_core_field_exists(((struct pt_regs___x86 *)0)->di))
		return BPF_CORE_READ((struct pt_regs___x86 *)ctx, di);
	return BPF_CORE_READ((struct pt_regs___arm64 *)ctx, regs[0]);
}

/* Before 5.14 the state field was called "state" and was a long. */
struct task_struct___pre514 {
	long state;
} __attribute__((preserve_access_index));

static __always_inline unsigned int wolf_task_state(struct task_struct *t)
{
	if (bpf_core_field_exists(t->__state))
		return BPF_CORE_READ(t, __state);
	return (unsigned int)BPF_CORE_READ((struct task_struct___pre514 *)t, state);
}

/* A task is in D state the way khungtaskd and `ps` mean it. */
static __always_inline bool wolf_task_is_d(unsigned int state)
{
	return (state & WOLF_TASK_UNINTERRUPTIBLE) && !(state & WOLF_TASK_NOLOAD);
}

/*
 * Lock owners. Since 4.10 (mutex) and 5.3 (rwsem) the owner is an
 * atomic_long_t whose low bits are flags; before, a plain task pointer.
 * Both layouts are read through CO-RE flavours so one object runs on both.
 */
struct mutex___ptr_owner {
	struct task_struct *owner;
} __attribute__((preserve_access_index));

struct rw_semaphore___ptr_owner {
	struct task_struct *owner;
} __attribute__((preserve_access_index));

static __always_inline struct task_struct *wolf_mutex_owner(void *lock)
{
	struct mutex *m = lock;

	if (bpf_core_field_exists(m->owner.counter))
		return (struct task_struct *)(BPF_CORE_READ(m, owner.counter) & ~WOLF_MUTEX_FLAGS);
	return BPF_CORE_READ((struct mutex___ptr_owner *)lock, owner);
}

/* What an rw-semaphore's owner and count words say about its holders. */
struct wolf_rwsem_state {
	struct task_struct *task; /* the writer, or the latest reader */
	bool writer;		  /* write-locked: task is exact */
	bool readers;		  /* reader-owned: task is only the latest reader */
	__u32 nr_readers;	  /* readers holding it (current layout only) */
};

static __always_inline struct wolf_rwsem_state wolf_rwsem_owner(void *lock)
{
	struct wolf_rwsem_state st = {};
	struct rw_semaphore *s = lock;
	unsigned long owner;

	if (bpf_core_field_exists(s->owner.counter)) {
		long count = BPF_CORE_READ(s, count.counter);

		owner = BPF_CORE_READ(s, owner.counter);
		st.task = (struct task_struct *)(owner & ~WOLF_RWSEM_OWNER_FLAGS);
		if (count & WOLF_RWSEM_WRITER_LOCKED) {
			st.writer = true;
		} else if (owner & WOLF_RWSEM_READER_OWNED) {
			st.readers = true;
			st.nr_readers = (unsigned long)count >> WOLF_RWSEM_READER_SHIFT;
		} else {
			st.task = 0;
		}
		return st;
	}
	owner = (unsigned long)BPF_CORE_READ((struct rw_semaphore___ptr_owner *)lock, owner);
	st.task = (struct task_struct *)(owner & ~WOLF_RWSEM_OWNER_FLAGS);
	if (owner & WOLF_RWSEM_READER_OWNED)
		st.readers = true;
	else if (st.task)
		st.writer = true;
	return st;
}

/*
 * wolf_bound: v & mask, in a way the compiler cannot drop. After a bounds
 * check (i < N), clang may index the array with a copy of i the check did
 * not constrain, or drop a plain mask it proves redundant; older verifiers
 * (6.1's) then see an unbounded index ("R2 unbounded memory access") where
 * newer ones track the copy. Masking the very register used as the index
 * gives every verifier its bound. mask must be N - 1 with N a power of two.
 */
static __always_inline __u32 wolf_bound(__u32 v, __u32 mask)
{
	__u64 r = v;

	asm volatile("%[r] &= %[m]" : [r] "+r"(r) : [m] "i"(mask));
	return r;
}

/*
 * Windows. `wolf watch` keeps the programs attached for hours and ends a
 * window at every Collect. Counts and sums stay cumulative: user space
 * subtracts its previous reading. A maximum cannot be subtracted, so it is
 * kept per window, in one of two slots picked by the window's number:
 * user space increments wolf_window (probekit's EndWindow) and then reads
 * the slot of the window that just ended, which the programs no longer
 * write (a program that read the number just before the increment may
 * still finish its update: one event per CPU at the boundary, as with any
 * racy max). A slot stamped with an older window is reset at its first use.
 * The variable has a section of its own, so that user space can write it
 * without touching the object's other globals. It is static and not
 * marked used (SEC() would), so that objects that keep no maxima do not
 * get it, and it is read through a volatile access: the programs never
 * write it, and the compiler must not fold it to its initial 0.
 */
static __u32 wolf_window __attribute__((section(".data.wolf_window")));

struct wolf_max {
	__u64 v[2]; /* the largest value of window win[i] */
	__u32 win[2];
	__u32 tag[2]; /* what the caller noted with it (a tid) */
};

/* The window the programs keep maxima for now. */
static __always_inline __u32 wolf_window_now(void)
{
	return *(volatile __u32 *)&wolf_window;
}

/*
 * Notes v as a value of window w: the current one, or an earlier one for
 * an event timed when it happened but accounted later (a slot that holds
 * a newer window already ignores it: its window has been reported).
 */
static __always_inline void wolf_max_tag_at(struct wolf_max *m, __u64 v, __u32 tag, __u32 w)
{
	__u32 s = w & 1;

	if (m->win[s] == w) {
		if (v > m->v[s]) {
			m->v[s] = v;
			m->tag[s] = tag;
		}
	} else if (m->win[s] < w) {
		m->win[s] = w;
		m->v[s] = v;
		m->tag[s] = tag;
	}
}

static __always_inline void wolf_max_tag(struct wolf_max *m, __u64 v, __u32 tag)
{
	wolf_max_tag_at(m, v, tag, wolf_window_now());
}

static __always_inline void wolf_max_add(struct wolf_max *m, __u64 v)
{
	wolf_max_tag(m, v, 0);
}

/*
 * Folds src's slots into dst's: a per-CPU accumulator flushed into a
 * shared entry. A slot of a later window replaces one of an earlier.
 */
static __always_inline void wolf_max_merge(struct wolf_max *dst, const struct wolf_max *src)
{
	for (int s = 0; s < 2; s++) {
		if (src->win[s] == dst->win[s] && src->v[s] <= dst->v[s])
			continue;
		if (src->win[s] < dst->win[s])
			continue;
		dst->win[s] = src->win[s];
		dst->v[s] = src->v[s];
		dst->tag[s] = src->tag[s];
	}
}

/*
 * Log2 histograms: a value's slot is its bit length (0 for 0), so slot i
 * holds [2^(i-1), 2^i - 1]. Go's internal/hist turns the slots into
 * cumulative buckets with upper bound 2^i - 1. 65 slots cover every u64.
 */
#define WOLF_HIST_SLOTS 65

static __always_inline __u32 wolf_log2_slot(__u64 v)
{
	__u32 r = 0, shift;

	/* Branch-free binary search, bounded for the verifier. */
	shift = (v > 0xFFFFFFFFULL) << 5;
	v >>= shift;
	r |= shift;
	shift = (v > 0xFFFF) << 4;
	v >>= shift;
	r |= shift;
	shift = (v > 0xFF) << 3;
	v >>= shift;
	r |= shift;
	shift = (v > 0xF) << 2;
	v >>= shift;
	r |= shift;
	shift = (v > 0x3) << 1;
	v >>= shift;
	r |= shift;
	r |= (v >> 1);
	/* r = floor(log2(v)) for v > 0; the slot is the bit length. */
	return v ? r + 1 : 0;
}

/*
 * A log2 histogram kept in a map value; sum and the window's max ride
 * along (slots, count and sum are cumulative).
 */
struct wolf_hist {
	__u64 slots[WOLF_HIST_SLOTS];
	__u64 count;
	__u64 sum;
	struct wolf_max max;
};

static __always_inline void wolf_hist_add(struct wolf_hist *h, __u64 v)
{
	__u32 s = wolf_log2_slot(v);

	if (s < WOLF_HIST_SLOTS)
		__sync_fetch_and_add(&h->slots[s], 1);
	__sync_fetch_and_add(&h->count, 1);
	__sync_fetch_and_add(&h->sum, v);
	wolf_max_add(&h->max, v); /* racy by design: a lost max is within one event */
}

/*
 * The same, for histograms only one thread ever updates (keyed by tid) or
 * kept per CPU: plain adds, no locked instructions. _at notes the max in
 * window w (see wolf_max_tag_at).
 */
static __always_inline void wolf_hist_add_local_at(struct wolf_hist *h, __u64 v, __u32 w)
{
	__u32 s = wolf_log2_slot(v);

	if (s < WOLF_HIST_SLOTS)
		h->slots[s] += 1;
	h->count += 1;
	h->sum += v;
	wolf_max_tag_at(&h->max, v, 0, w);
}

static __always_inline void wolf_hist_add_local(struct wolf_hist *h, __u64 v)
{
	wolf_hist_add_local_at(h, v, wolf_window_now());
}

/*
 * Memory reclaim per thread, cumulative: what the reclaim investigator
 * counts of each thread's reclaim calls as they end. When locks runs in
 * the same process (wolf doctor), it shares the map (probekit's
 * Object.Share) rather than following every reclaim batch itself: the
 * reclaim an mmap_lock holder did during a hold is the difference of the
 * thread's entry between the lock's acquire and its release.
 */
struct wolf_reclaim_task {
	__u64 cgid;
	__u32 tgid;
	__u32 kswapd;
	__u64 calls;
	__u64 ns;
	__u64 cpu_ns;
	struct wolf_max max_ns;
	__u64 csw;
	__u64 scanned;
	__u64 reclaimed;
	char comm[WOLF_COMM_LEN];
	__u64 ref_keep;	 /* pages referenced and kept on the inactive list */
	__u64 activated; /* pages scanned and put back on the active list */
};

#define WOLF_RECLAIM_TASKS()                             \
	struct {                                         \
		__uint(type, BPF_MAP_TYPE_HASH);         \
		__uint(max_entries, 8192);               \
		__type(key, __u32); /* tid */            \
		__type(value, struct wolf_reclaim_task); \
	} reclaim_tasks SEC(".maps");

/* wolf_hist_add_local_at for a value that stands for n (a storm sample: wolf_storm_take). */
static __always_inline void wolf_hist_add_local_n(struct wolf_hist *h, __u64 v, __u64 n, __u32 w)
{
	__u32 s = wolf_log2_slot(v);

	if (s < WOLF_HIST_SLOTS)
		h->slots[s] += n;
	h->count += n;
	h->sum += v * n;
	wolf_max_tag_at(&h->max, v, 0, w);
}

/*
 * Storm sampling, the budget's last resort before it gives up: an event
 * wolf times exactly whatever the budget (a spin lock's wait, tens of
 * thousands a second under a storm) is, once the gates are at their
 * longest and the programs still spend over the budget, timed about one
 * in wolf_storm_every per CPU. The one timed stands for itself and the
 * events skipped since the CPU's previous one (its weight, what
 * wolf_storm_take returns; 0: skip this one), so that the counts add up
 * to the events but those skipped last, and the sums are estimates of
 * the whole from the sample. The gaps are random (uniform, averaging
 * every - 1 skipped) so that a sequence that repeats, a CPU waiting for
 * lock A then B over and over, is not always sampled on the same lock.
 * The budget (internal/probekit) sets wolf_storm_every; 0 or 1: every
 * event is timed. seen and kept count what was asked and timed (seen
 * scaled by the duty cycle below: an estimate of the events there were).
 */
struct wolf_storm {
	__u64 seen;
	__u64 kept;
	__u32 left;    /* events to skip before the next one timed */
	__u32 skipped; /* skipped since the last one timed */
};

static __u32 wolf_storm_every __attribute__((section(".data.wolf_storm")));

/*
 * Duty cycling, the budget's step past storm sampling (probekit's
 * Attach.Duty): the programs that time the events run only one
 * 2^wolf_duty_shift-th of the time, so an event they see stands for
 * 2^wolf_duty_shift, and what wolf_storm_take_at returns and counts as
 * seen is scaled by it. 0: they run all the time. Bounded, so that a
 * weight cannot overflow.
 */
#define WOLF_DUTY_MAX 8
static __u32 wolf_duty_shift __attribute__((section(".data.wolf_duty")));

static __always_inline __attribute__((unused)) __u32 wolf_duty(void)
{
	__u32 d = *(volatile __u32 *)&wolf_duty_shift;

	return d < WOLF_DUTY_MAX ? d : WOLF_DUTY_MAX;
}

/*
 * WOLF_STORM_SLOTS(n): n independent samplings sharing wolf_storm_every
 * (kinds of events whose weights must not mix: a spin wait timed must not
 * stand for sleeping waits skipped before it); wolf_storm_take_at(slot).
 * User space sums seen and kept over the slots.
 */
#define WOLF_STORM_SLOTS(n)                                                                 \
	struct {                                                                            \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);                                    \
		__uint(max_entries, n);                                                     \
		__type(key, __u32);                                                         \
		__type(value, struct wolf_storm);                                           \
	} wolf_storm SEC(".maps");                                                          \
	static __always_inline __attribute__((unused)) __u32 wolf_storm_take_at(__u32 slot) \
	{                                                                                   \
		__u32 every = *(volatile __u32 *)&wolf_storm_every, w, d = wolf_duty();     \
		struct wolf_storm *s = bpf_map_lookup_elem(&wolf_storm, &slot);             \
                                                                                            \
		if (!s)                                                                     \
			return 1 << d;                                                      \
		s->seen += 1 << d;                                                          \
		if (s->left) {                                                              \
			s->left--;                                                          \
			s->skipped++;                                                       \
			return 0;                                                           \
		}                                                                           \
		w = s->skipped + 1;                                                         \
		s->skipped = 0;                                                             \
		s->left = every > 1 ? bpf_get_prandom_u32() % (2 * every - 1) : 0;          \
		s->kept++;                                                                  \
		return w << d;                                                              \
	}                                                                                   \
	static __always_inline __attribute__((unused)) __u32 wolf_storm_take(void)          \
	{                                                                                   \
		return wolf_storm_take_at(0);                                               \
	}

#define WOLF_STORM() WOLF_STORM_SLOTS(1)

#endif /* WOLF_H */
