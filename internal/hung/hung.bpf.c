//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * wolf hung: which tasks sleep in D state, for how long, on what, and who
 * holds it.
 *
 * Three sources, because the SRE usually arrives after the hang began:
 *  - iter/task walks every task on demand and emits the blocked ones with
 *    their kernel stack, the lock they wait on and that lock's owner,
 *    decoded here (mutex and rw-semaphore owner words, CO-RE);
 *  - raw_tp/sched_switch notes when a task goes to sleep in D, exactly;
 *  - raw_tp/contention_begin/end note which sleeping lock a task waits on,
 *    on kernels whose task_struct has no blocker field.
 * khungtaskd's own reports (sched_process_hang) cross a ring buffer.
 * Everything else stays in bounded maps; every loss is counted.
 */
#include "wolf.h"

char LICENSE[] SEC("license") = "GPL";

#define MAX_STACK 32
#define WQ_NAME_LEN 32

/*
 * Set by user space before load. false makes this kernel behave like one
 * without task->blocker (before 6.14): tests use it to exercise the
 * contention-tracepoint path that older kernels depend on.
 */
const volatile bool use_blocker = true;

enum lock_source {
	LOCK_NONE = 0,
	LOCK_BLOCKER = 1,	/* task->blocker (6.16+) */
	LOCK_CONTENTION = 2,	/* lock:contention_begin seen while wolf ran */
	LOCK_BLOCKER_MUTEX = 3, /* task->blocker_mutex (6.14, 6.15) */
	LOCK_SLOWPATH =
		4, /* a kprobe on a lock's slow path, before 5.19 (user space checks the stack) */
};

enum lock_kind {
	KIND_UNKNOWN = 0,
	KIND_MUTEX = 1,
	KIND_RWSEM_READ = 2,  /* the victim wants it for reading */
	KIND_RWSEM_WRITE = 3, /* the victim wants it for writing */
	KIND_SEM = 4,
	KIND_RTMUTEX = 5,
	KIND_PERCPU_RWSEM = 6,
};

enum owner_kind {
	OWNER_NONE = 0,
	OWNER_TASK = 1,	       /* mutex or writer-owned rwsem: exact */
	OWNER_READERS = 2,     /* reader-owned rwsem; task is the last reader */
	OWNER_LAST_HOLDER = 3, /* semaphore's last holder (6.17+) */
};

struct task_rec {
	__u32 tid;
	__u32 tgid;
	__u32 state;
	__u32 flags;
	__u32 stack_bytes;   /* <0 from bpf_get_task_stack is stored as 0 */
	__u32 wanted;	     /* emitted because user space asked for this tid */
	__u64 now_sched;     /* the reading task's sched clock, ~now */
	__u64 last_arrival;  /* when this task last got a CPU (sched clock) */
	__u64 last_slice_ns; /* how long it then ran before leaving */
	__u64 since_ktime;   /* exact D-sleep start seen by sched_switch, or 0 */
	__u64 now_ktime;
	__u64 nr_switches; /* nvcsw + nivcsw */
	__u64 lock_addr;
	__u32 lock_source;
	__u32 lock_kind;
	__u64 lock_since_ktime; /* from contention_begin, or 0 */
	__u64 owner_word;	/* raw mutex/rwsem owner word */
	__u64 count_word;	/* rwsem count word */
	__u32 owner_kind;
	__u32 owner_tid;
	__u32 owner_tgid;
	__u32 dumper_tid; /* coredump: the thread writing the core */
	char owner_comm[WOLF_COMM_LEN];
	__u64 wq_func; /* kworker: the work function it runs */
	char wq_name[WQ_NAME_LEN];
	char comm[WOLF_COMM_LEN];
	__u64 stack[MAX_STACK];
	/*
	 * Where its time goes, cumulative (user space takes deltas between
	 * walks): CPU time, and time waiting on a run queue.
	 */
	__u64 sum_exec_ns;
	__u64 run_delay_ns;
	/* The address of its process's mmap_lock (0 for kernel threads): names
	 * the rw-semaphore a task waits on when it is one. */
	__u64 mm_lock_addr;
};

struct d_sleep {
	__u64 since_ktime;
	__u64 nr_switches;
};

#define WAIT_CALLERS 4

struct lock_wait {
	__u64 lock_addr;
	__u64 since_ktime;
	__u32 flags;
	__u32 _pad;
	/* A slow-path kprobe's: the stack where the wait began (see kp_wait). */
	__u64 callers[WAIT_CALLERS];
};

struct hang_event {
	__u32 tid;
	__u32 tgid;
	__u64 ktime;
	char comm[WOLF_COMM_LEN];
};

enum stat_index {
	STAT_D_SLEEPS = 0,    /* sched_switch into D */
	STAT_CONTENTIONS = 1, /* sleeping-lock contentions noted */
	STAT_HANG_EVENTS = 2,
	STAT_HANG_DROPS = 3, /* ring buffer full */
	STAT_MAP_FULL = 4,   /* a bounded map refused an update */
	STAT_WQ_STARTS = 5,
	STAT_RECORDS = 6, /* records written by the iterator */
	STAT_MAX = 7,
};

/* Entries age out (LRU) so the maps stay bounded on busy hosts. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct d_sleep);
} d_sleeps SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct lock_wait);
} lock_waits SEC(".maps");

/* Fallback for kernels without task->worker_private. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} wq_funcs SEC(".maps");

/* Tids user space wants a record for whatever their state: lock owners. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u8);
} wanted SEC(".maps");

/*
 * The end of a lock wait that began before wolf attached, for a kernel
 * without task->blocker: the walks cannot name that lock, but the wait's
 * contention_end does. User space puts in the tids of tasks its first
 * walk found asleep and every walk since in that same sleep (value zero);
 * contention_end writes each thread's first ends after that (lock, time,
 * stack) into its entry. User space trusts them only if a walk after the
 * insert found the task asleep with its switch count unchanged (the
 * insert preceded the wake, so these are the first ends since), and takes
 * the first raised by a sleeping lock's slow path from the call site the
 * walks saw the task asleep at: the end of the wait it slept in, and the
 * lock's type. Bounded: user space counts the tids it could not put in,
 * and pre_armed keeps the lookup off while no tid is in.
 */
#define PRE_END_IPS 8
#define PRE_END_SLOTS 4

struct pre_slot {
	__u64 lock_addr;
	__u64 end_ktime;
	__u64 ips[PRE_END_IPS];
	__s64 stack_bytes;
};

/* The first ends after the mark: a contended wait_lock inside the slow
 * path raises its own before the sleeping lock's. */
struct pre_end {
	__u32 n;
	__u32 _pad;
	struct pre_slot slots[PRE_END_SLOTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct pre_end);
} pre_ends SEC(".maps");

/* [0]: how many tids pre_ends holds, so that ends skip it when none. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} pre_armed SEC(".maps");

/* Keeps struct hang_event in BTF so bpf2go can generate its Go twin. */
const struct hang_event *unused_hang_event __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} hangs SEC(".maps");

WOLF_STATS()
WOLF_STORM()

/* The record is too big for the 512-byte BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct task_rec);
} scratch SEC(".maps");

static __always_inline __u64 task_switches(struct task_struct *t)
{
	return BPF_CORE_READ(t, nvcsw) + BPF_CORE_READ(t, nivcsw);
}

/*
 * Blocked the way wolf reports: D state; or, since 6.12, the TASK_IDLE
 * sleep of threads parked while their process dumps core (PF_POSTCOREDUMP),
 * which the kernel's own detector no longer sees.
 */
static __always_inline bool is_blocked(unsigned int state, unsigned int flags)
{
	if (wolf_task_is_d(state))
		return true;
	return (state & WOLF_TASK_UNINTERRUPTIBLE) && (flags & WOLF_PF_POSTCOREDUMP);
}

/*
 * A task switches out in D: stamp the sleep with the switch count. If the
 * task has not switched since, the stamp still describes its current
 * sleep, so nothing needs deleting when it wakes (no map op on switch-in).
 */
static __always_inline void note_d_sleep(__u32 tid, __u64 nr_switches)
{
	stat_inc(STAT_D_SLEEPS);
	/*
	 * Under a storm (WOLF_STORM: the budget spent with its gates at their
	 * longest) one sleep in N is stamped: on a memcg storm most switches
	 * are D sleeps of a few microseconds, and the stamp (a clock read and
	 * a hash lookup) was most of this program's cost. A sleep left
	 * unstamped keeps the task's last stamp, whose switch count no longer
	 * matches: the iterator then takes the start from the scheduler's
	 * clock (BlockedExact false), as for a task asleep before wolf began.
	 */
	if (!wolf_storm_take())
		return;
	struct d_sleep s = {
		.since_ktime = bpf_ktime_get_ns(),
		.nr_switches = nr_switches,
	};
	/*
	 * A task that slept in D before has its entry: written in place, a
	 * lookup, where an update of an LRU hash takes a node off a free
	 * list and puts one back (hundreds of ns; a storm of page-fault and
	 * lock sleeps is thousands a second).
	 */
	struct d_sleep *old = bpf_map_lookup_elem(&d_sleeps, &tid);
	if (old)
		*old = s;
	else if (bpf_map_update_elem(&d_sleeps, &tid, &s, BPF_ANY))
		stat_inc(STAT_MAP_FULL);
}

/*
 * sched_switch runs at every context switch on the host: through a BTF
 * tracepoint prev is a typed pointer and its fields plain loads, where a
 * raw tracepoint pays a probe-read helper call for each.
 */
SEC("tp_btf/sched_switch")
int BPF_PROG(btf_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	unsigned int state;

	if (preempt)
		return 0;
	if (bpf_core_field_exists(prev->__state))
		state = prev->__state;
	else
		state = ((struct task_struct___pre514 *)prev)->state;
	if (!(state & WOLF_TASK_UNINTERRUPTIBLE))
		return 0;
	if (!is_blocked(state, prev->flags))
		return 0;
	note_d_sleep(prev->pid, prev->nvcsw + prev->nivcsw);
	return 0;
}

/* The same through a raw tracepoint, for kernels without BTF tracepoints. */
SEC("raw_tp/sched_switch")
int BPF_PROG(on_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	if (preempt)
		return 0;
	unsigned int state = wolf_task_state(prev);
	if (!(state & WOLF_TASK_UNINTERRUPTIBLE))
		return 0;
	if (!is_blocked(state, BPF_CORE_READ(prev, flags)))
		return 0;
	note_d_sleep(BPF_CORE_READ(prev, pid), task_switches(prev));
	return 0;
}

/* lock_wait.flags: the wait was seen by a slow-path kprobe, not the tracepoint. */
#define WAIT_F_KPROBE (1U << 31)

static __always_inline int wait_begin(__u64 lock, unsigned int flags)
{
	/* Spinners never sleep in D; and a map update here must stay rare. */
	if (flags & WOLF_LCB_F_SPIN)
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct lock_wait w = {
		.lock_addr = lock,
		.since_ktime = bpf_ktime_get_ns(),
		.flags = flags,
	};
	struct lock_wait *old = bpf_map_lookup_elem(&lock_waits, &tid);
	if (old)
		*old = w; /* in place, as note_d_sleep does */
	else if (bpf_map_update_elem(&lock_waits, &tid, &w, BPF_ANY))
		stat_inc(STAT_MAP_FULL);
	stat_inc(STAT_CONTENTIONS);
	return 0;
}

SEC("raw_tp/contention_begin")
int BPF_PROG(on_contention_begin, void *lock, unsigned int flags)
{
	return wait_begin((__u64)lock, flags);
}

/*
 * A wait that ended leaves its entry, marked over (lock_addr 0), rather
 * than being deleted: the thread's next wait writes it in place. The
 * iterator skips entries that are over.
 */
SEC("raw_tp/contention_end")
int BPF_PROG(on_contention_end, void *lock, int ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct lock_wait *w = bpf_map_lookup_elem(&lock_waits, &tid);
	if (w && w->lock_addr == (__u64)lock)
		w->lock_addr = 0;
	__u32 zero = 0;
	__u32 *armed = bpf_map_lookup_elem(&pre_armed, &zero);
	if (!armed || !*armed)
		return 0;
	struct pre_end *pe = bpf_map_lookup_elem(&pre_ends, &tid);
	if (!pe)
		return 0;
	__u32 i = pe->n;
	if (i >= PRE_END_SLOTS)
		return 0;
	struct pre_slot *sl = &pe->slots[i & (PRE_END_SLOTS - 1)];
	sl->end_ktime = bpf_ktime_get_ns();
	sl->stack_bytes = bpf_get_stack(ctx, sl->ips, sizeof(sl->ips), 0);
	sl->lock_addr = (__u64)lock;
	pe->n = i + 1;
	return 0;
}

/*
 * Kernels without lock:contention_* (before 5.19): kprobes on the sleeping
 * locks' slow paths (user space attaches them to those this kernel has).
 * Entry is a contended acquire's start. Its end is not probed: a
 * kretprobe replaces the return address on the waiter's stack, and on
 * those kernels every stack of a waiter (the one wolf reads, the one in
 * /proc/PID/stack) then ends in the kretprobe trampoline. The entry keeps
 * the stack of the wait's start, and stands only while the task still
 * sleeps there (same_site); its lock is LOCK_SLOWPATH.
 */
static __always_inline int kp_wait(void *ctx, unsigned int flags)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct lock_wait w = {
		.lock_addr = wolf_kprobe_arg0(ctx),
		.since_ktime = bpf_ktime_get_ns(),
		.flags = flags | WAIT_F_KPROBE,
	};

	bpf_get_stack(ctx, w.callers, sizeof(w.callers), 0);
	if (bpf_map_update_elem(&lock_waits, &tid, &w, BPF_ANY))
		stat_inc(STAT_MAP_FULL);
	stat_inc(STAT_CONTENTIONS);
	return 0;
}

SEC("kprobe")
int kp_mutex_wait(void *ctx)
{
	return kp_wait(ctx, WOLF_LCB_F_MUTEX);
}

SEC("kprobe")
int kp_rwsem_read_wait(void *ctx)
{
	return kp_wait(ctx, WOLF_LCB_F_READ);
}

SEC("kprobe")
int kp_rwsem_write_wait(void *ctx)
{
	return kp_wait(ctx, WOLF_LCB_F_WRITE);
}

SEC("raw_tp/sched_process_hang")
int BPF_PROG(on_process_hang, struct task_struct *t)
{
	struct hang_event *e = bpf_ringbuf_reserve(&hangs, sizeof(*e), 0);
	stat_inc(STAT_HANG_EVENTS);
	if (!e) {
		stat_inc(STAT_HANG_DROPS);
		return 0;
	}
	e->tid = BPF_CORE_READ(t, pid);
	e->tgid = BPF_CORE_READ(t, tgid);
	e->ktime = bpf_ktime_get_ns();
	BPF_CORE_READ_STR_INTO(&e->comm, t, comm);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("raw_tp/workqueue_execute_start")
int BPF_PROG(on_wq_start, struct work_struct *work)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 fn = (__u64)BPF_CORE_READ(work, func);
	if (bpf_map_update_elem(&wq_funcs, &tid, &fn, BPF_ANY))
		stat_inc(STAT_MAP_FULL);
	stat_inc(STAT_WQ_STARTS);
	return 0;
}

/* 6.14 and 6.15 named only mutexes, in a field of their own. */
struct task_struct___615 {
	struct mutex *blocker_mutex;
} __attribute__((preserve_access_index));

/* Before 6.17 semaphores had no last_holder. */
struct semaphore___617 {
	unsigned long last_holder;
} __attribute__((preserve_access_index));

/* Which lock is t sleeping on, and as what? */
static __always_inline bool same_site(struct task_rec *r, struct lock_wait *w)
{
	for (int i = 0; i < 8; i++) {
		if (i * 8 >= r->stack_bytes)
			break;
		for (int j = 1; j < WAIT_CALLERS; j++) {
			if (w->callers[j] && r->stack[i] == w->callers[j])
				return true;
		}
	}
	return false;
}

static __always_inline void find_lock(struct task_struct *t, struct task_rec *r)
{
	if (!use_blocker) {
		/* fall through to the contention tracepoint */
	} else if (bpf_core_field_exists(t->blocker)) {
		unsigned long b = BPF_CORE_READ(t, blocker);
		if (b) {
			r->lock_addr = b & ~WOLF_BLOCKER_TYPE_MASK;
			r->lock_source = LOCK_BLOCKER;
			switch (b & WOLF_BLOCKER_TYPE_MASK) {
			case WOLF_BLOCKER_MUTEX:
				r->lock_kind = KIND_MUTEX;
				break;
			case WOLF_BLOCKER_SEM:
				r->lock_kind = KIND_SEM;
				break;
			case WOLF_BLOCKER_RWSEM_READER:
				r->lock_kind = KIND_RWSEM_READ;
				break;
			default:
				r->lock_kind = KIND_RWSEM_WRITE;
			}
		}
	} else if (bpf_core_field_exists(((struct task_struct___615 *)t)->blocker_mutex)) {
		struct mutex *m = BPF_CORE_READ((struct task_struct___615 *)t, blocker_mutex);
		if (m) {
			r->lock_addr = (__u64)m;
			r->lock_source = LOCK_BLOCKER_MUTEX;
			r->lock_kind = KIND_MUTEX;
		}
	}

	__u32 tid = r->tid;
	struct lock_wait *w = bpf_map_lookup_elem(&lock_waits, &tid);
	if (!w || !w->lock_addr)
		return; /* none, or over (contention_end) */
	/*
	 * A slow-path kprobe's wait has no end event: it still stands only if
	 * the task sleeps where that wait began, one of the return addresses
	 * of its stack then (the lock call's callers) among the innermost of
	 * its stack now. Stack walks leave out the __sched slow paths
	 * themselves (mutexes), not their callers.
	 */
	if ((w->flags & WAIT_F_KPROBE) && !same_site(r, w))
		return;
	if (r->lock_source == LOCK_NONE) {
		r->lock_addr = w->lock_addr;
		r->lock_source = (w->flags & WAIT_F_KPROBE) ? LOCK_SLOWPATH : LOCK_CONTENTION;
		if (w->flags & WOLF_LCB_F_MUTEX)
			r->lock_kind = KIND_MUTEX;
		else if (w->flags & WOLF_LCB_F_RT)
			r->lock_kind = KIND_RTMUTEX;
		else if (w->flags & WOLF_LCB_F_PERCPU)
			r->lock_kind = KIND_PERCPU_RWSEM;
		else if (w->flags & WOLF_LCB_F_READ)
			r->lock_kind = KIND_RWSEM_READ;
		else if (w->flags & WOLF_LCB_F_WRITE)
			r->lock_kind = KIND_RWSEM_WRITE;
		else
			r->lock_kind = KIND_SEM;
	}
	if (w->lock_addr == r->lock_addr)
		r->lock_since_ktime = w->since_ktime;
}

static __always_inline void fill_owner(struct task_rec *r, struct task_struct *owner)
{
	if (!owner)
		return;
	r->owner_tid = BPF_CORE_READ(owner, pid);
	r->owner_tgid = BPF_CORE_READ(owner, tgid);
	BPF_CORE_READ_STR_INTO(&r->owner_comm, owner, comm);
}

/* Decode the owner the way the rtnl_mutex bpftrace script does, for any lock. */
static __always_inline void find_owner(struct task_rec *r)
{
	if (!r->lock_addr)
		return;
	switch (r->lock_kind) {
	case KIND_MUTEX: {
		struct mutex *m = (struct mutex *)r->lock_addr;
		r->owner_word = BPF_CORE_READ(m, owner.counter);
		struct task_struct *o = (struct task_struct *)(r->owner_word & ~WOLF_MUTEX_FLAGS);
		if (o) {
			r->owner_kind = OWNER_TASK;
			fill_owner(r, o);
		}
		break;
	}
	case KIND_RWSEM_READ:
	case KIND_RWSEM_WRITE: {
		struct rw_semaphore *s = (struct rw_semaphore *)r->lock_addr;
		r->owner_word = BPF_CORE_READ(s, owner.counter);
		r->count_word = BPF_CORE_READ(s, count.counter);
		struct task_struct *o =
			(struct task_struct *)(r->owner_word & ~WOLF_RWSEM_OWNER_FLAGS);
		if (r->count_word & WOLF_RWSEM_WRITER_LOCKED) {
			r->owner_kind = OWNER_TASK;
			fill_owner(r, o);
		} else if (r->owner_word & WOLF_RWSEM_READER_OWNED) {
			/* Readers do not register; this is only the latest one. */
			r->owner_kind = OWNER_READERS;
			fill_owner(r, o);
		}
		break;
	}
	case KIND_SEM: {
		struct semaphore___617 *s = (struct semaphore___617 *)r->lock_addr;
		if (bpf_core_field_exists(s->last_holder)) {
			unsigned long h = BPF_CORE_READ(s, last_holder);
			if (h) {
				r->owner_kind = OWNER_LAST_HOLDER;
				fill_owner(r, (struct task_struct *)h);
			}
		}
		break;
	}
	default:
		break;
	}
}

static __always_inline void find_worker(struct task_struct *t, struct task_rec *r)
{
	if (!(r->flags & WOLF_PF_WQ_WORKER))
		return;
	if (bpf_core_field_exists(t->worker_private)) {
		struct worker *w = BPF_CORE_READ(t, worker_private);
		if (w) {
			r->wq_func = (__u64)BPF_CORE_READ(w, current_func);
			BPF_CORE_READ_STR_INTO(&r->wq_name, w, current_pwq, wq, name);
		}
	}
	if (!r->wq_func) {
		__u32 tid = r->tid;
		__u64 *fn = bpf_map_lookup_elem(&wq_funcs, &tid);
		if (fn)
			r->wq_func = *fn;
	}
}

static __always_inline void find_dumper(struct task_struct *t, struct task_rec *r)
{
	if (!(r->flags & (WOLF_PF_POSTCOREDUMP | WOLF_PF_EXITING)))
		return;
	if (!bpf_core_field_exists(t->signal->core_state))
		return;
	struct task_struct *d = BPF_CORE_READ(t, signal, core_state, dumper.task);
	if (d)
		r->dumper_tid = BPF_CORE_READ(d, pid);
}

SEC("iter/task")
int dump_tasks(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;
	if (!t)
		return 0;

	__u32 tid = t->pid;
	unsigned int state = wolf_task_state(t);
	bool want = bpf_map_lookup_elem(&wanted, &tid) != NULL;
	if (!want && !is_blocked(state, t->flags))
		return 0;

	__u32 zero = 0;
	struct task_rec *r = bpf_map_lookup_elem(&scratch, &zero);
	if (!r)
		return 0;
	__builtin_memset(r, 0, sizeof(*r));

	r->tid = tid;
	r->tgid = t->tgid;
	r->state = state;
	r->flags = t->flags;
	r->wanted = want;
	BPF_CORE_READ_STR_INTO(&r->comm, t, comm);
	r->nr_switches = task_switches(t);

	/*
	 * When did it go to sleep? Exactly, if sched_switch saw it and it
	 * has not switched since; otherwise from the scheduler's own clock:
	 * it last got a CPU at last_arrival and ran for the last slice.
	 */
	struct d_sleep *s = bpf_map_lookup_elem(&d_sleeps, &tid);
	if (s && s->nr_switches == r->nr_switches)
		r->since_ktime = s->since_ktime;
	r->now_ktime = bpf_ktime_get_ns();
	if (bpf_core_field_exists(t->sched_info.last_arrival)) {
		struct task_struct *cur = wolf_current();
		r->last_arrival = BPF_CORE_READ(t, sched_info.last_arrival);
		r->last_slice_ns = BPF_CORE_READ(t, se.sum_exec_runtime) -
				   BPF_CORE_READ(t, se.prev_sum_exec_runtime);
		r->now_sched = BPF_CORE_READ(cur, sched_info.last_arrival) +
			       (BPF_CORE_READ(cur, se.sum_exec_runtime) -
				BPF_CORE_READ(cur, se.prev_sum_exec_runtime));
	}

	/* The stack first: a slow-path kprobe's lock is checked against it. */
	long n = bpf_get_task_stack(t, r->stack, sizeof(r->stack), 0);
	r->stack_bytes = n > 0 ? n : 0;

	find_lock(t, r);
	find_owner(r);
	find_worker(t, r);
	find_dumper(t, r);
	r->sum_exec_ns = BPF_CORE_READ(t, se.sum_exec_runtime);
	if (bpf_core_field_exists(t->sched_info.run_delay))
		r->run_delay_ns = BPF_CORE_READ(t, sched_info.run_delay);
	struct mm_struct *mm = BPF_CORE_READ(t, mm);
	if (mm)
		r->mm_lock_addr = (__u64)&mm->mmap_lock;

	bpf_seq_write(ctx->meta->seq, r, sizeof(*r));
	stat_inc(STAT_RECORDS);
	return 0;
}

/*
 * ---- mmap_lock wait queues, read from the lock ----
 * mmap_lock is taken killable by the syscalls and /proc readers that wait
 * on it (mmap, munmap, /proc/PID/cmdline), and a killable wait sets no
 * task->blocker, so a wait that began before wolf attached names no lock.
 * The lock itself does: its wait list holds one rwsem_waiter per sleeping
 * task, in queue order, with what it wants. The list is read without its
 * spinlock (a snapshot; a waiter leaving meanwhile can cut it short), and
 * bounded.
 */
#define MAX_QUEUE 16
#define WOLF_RWSEM_FLAG_WAITERS (1UL << 1)

struct mm_queue_rec {
	__u32 tgid;
	__u32 nr; /* waiters recorded, head of the queue first */
	__u64 lock_addr;
	__u64 count_word;
	__u64 owner_word;
	__u32 owner_kind; /* enum owner_kind */
	__u32 owner_tid;
	__u32 owner_tgid;
	__u32 more; /* the queue went on beyond MAX_QUEUE */
	char owner_comm[WOLF_COMM_LEN];
	char comm[WOLF_COMM_LEN];
	__u32 waiter_tid[MAX_QUEUE];
	__u32 waiter_write[MAX_QUEUE];
};

const struct mm_queue_rec *unused_mm_queue_rec __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mm_queue_rec);
} queue_scratch SEC(".maps");

SEC("iter/task")
int dump_mm_queues(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;

	if (!t || t->pid != t->tgid)
		return 0;
	struct mm_struct *mm = BPF_CORE_READ(t, mm);
	if (!mm)
		return 0;
	struct rw_semaphore *sem = &mm->mmap_lock;
	__u64 count = BPF_CORE_READ(sem, count.counter);
	if (!(count & WOLF_RWSEM_FLAG_WAITERS))
		return 0;

	__u32 zero = 0;
	struct mm_queue_rec *r = bpf_map_lookup_elem(&queue_scratch, &zero);
	if (!r)
		return 0;
	__builtin_memset(r, 0, sizeof(*r));
	r->tgid = t->tgid;
	r->lock_addr = (__u64)sem;
	r->count_word = count;
	BPF_CORE_READ_STR_INTO(&r->comm, t, comm);
	r->owner_word = BPF_CORE_READ(sem, owner.counter);
	struct task_struct *o = (struct task_struct *)(r->owner_word & ~WOLF_RWSEM_OWNER_FLAGS);
	if (o && (count & WOLF_RWSEM_WRITER_LOCKED))
		r->owner_kind = OWNER_TASK;
	else if (o && (r->owner_word & WOLF_RWSEM_READER_OWNED))
		r->owner_kind = OWNER_READERS; /* only the latest reader */
	if (r->owner_kind) {
		r->owner_tid = BPF_CORE_READ(o, pid);
		r->owner_tgid = BPF_CORE_READ(o, tgid);
		BPF_CORE_READ_STR_INTO(&r->owner_comm, o, comm);
	}

	struct list_head *head = &sem->wait_list;
	struct list_head *pos = BPF_CORE_READ(head, next);
	for (int i = 0; i < MAX_QUEUE; i++) {
		if (!pos || pos == head)
			break;
		/* list is the first member of struct rwsem_waiter */
		struct rwsem_waiter *w = (struct rwsem_waiter *)pos;
		struct task_struct *wt = BPF_CORE_READ(w, task);
		if (wt) {
			__u32 n = r->nr;
			if (n < MAX_QUEUE) {
				r->waiter_tid[n] = BPF_CORE_READ(wt, pid);
				r->waiter_write[n] =
					BPF_CORE_READ(w, type) == RWSEM_WAITING_FOR_WRITE;
				r->nr = n + 1;
			}
		}
		pos = BPF_CORE_READ(pos, next);
	}
	if (pos && pos != head)
		r->more = 1;
	bpf_seq_write(ctx->meta->seq, r, sizeof(*r));
	return 0;
}

/*
 * ---- FUSE requests a daemon has not answered ----
 * Walked from the daemons' side: every open /dev/fuse (char 10:229) whose
 * file is bound to a connection, its requests not yet read (the input
 * queue's pending list) and read but unanswered (the processing hash).
 * Each request names the task that sent it (in.h.pid), which is what ties
 * a task asleep on a page-cache folio being filled by FUSE (the folio
 * stays locked until the READ's reply) to the daemon that owes the reply.
 */
#define MAX_FUSE_PENDING 32
#define FUSE_PQ_BUCKETS 256 /* FUSE_PQ_HASH_SIZE */
#define MAX_FUSE_PER_BUCKET 4
#define WOLF_FUSE_DEVT ((10U << 20) | 229) /* MKDEV(MISC_MAJOR, FUSE_MINOR) */

enum fuse_req_state {
	FUSE_REQ_PENDING = 1,	 /* the daemon has not read it */
	FUSE_REQ_PROCESSING = 2, /* read, not answered */
};

struct fuse_req_rec {
	__u32 daemon_tgid;
	__u32 daemon_tid;
	__u32 fd;
	__u32 conn_dev;
	__u32 sender_pid;
	__u32 opcode;
	__u64 unique;
	__u64 nodeid;
	__u64 create_jiffies; /* 0: this kernel does not stamp requests */
	__u64 now_jiffies;
	__u32 state;
	__u32 num_waiting;
	char daemon_comm[WOLF_COMM_LEN];
};

const struct fuse_req_rec *unused_fuse_req_rec __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fuse_req_rec);
} fuse_scratch SEC(".maps");

/* Before 6.14 requests carried no creation time. */
struct fuse_req___614 {
	unsigned long create_time;
} __attribute__((preserve_access_index));

/*
 * A request's fields into this CPU's record, which the caller then writes
 * out. A global function (not static, never inlined): the kernel's
 * verifier checks it once, on its own, rather than at each of the 1,056
 * places the walk below may reach it (163,000 instructions processed at
 * every start when it was inlined). Before Linux 5.12 a global function
 * takes scalars only: the request's address, and the record looked up.
 */
__noinline int fill_fuse_req(__u64 addr, __u32 state)
{
	struct fuse_req *req = (struct fuse_req *)addr;
	struct fuse_req_rec *r;
	__u32 zero = 0;

	r = bpf_map_lookup_elem(&fuse_scratch, &zero);
	if (!r)
		return -1;
	r->state = state;
	r->sender_pid = BPF_CORE_READ(req, in.h.pid);
	r->opcode = BPF_CORE_READ(req, in.h.opcode);
	r->unique = BPF_CORE_READ(req, in.h.unique);
	r->nodeid = BPF_CORE_READ(req, in.h.nodeid);
	r->create_jiffies = 0;
	if (bpf_core_field_exists(((struct fuse_req___614 *)req)->create_time))
		r->create_jiffies = BPF_CORE_READ((struct fuse_req___614 *)req, create_time);
	return 0;
}

static __always_inline void emit_fuse_req(struct bpf_iter__task_file *ctx, struct fuse_req_rec *r,
					  struct list_head *req, __u32 state)
{
	if (fill_fuse_req((__u64)req, state) == 0) /* the list is the request's first member */
		bpf_seq_write(ctx->meta->seq, r, sizeof(*r));
}

SEC("iter/task_file")
int dump_fuse(struct bpf_iter__task_file *ctx)
{
	struct file *file = ctx->file;
	struct task_struct *task = ctx->task;

	if (!file || !task)
		return 0;
	if (!bpf_core_type_exists(struct fuse_dev))
		return 0; /* FUSE is a module here, or absent */
	struct inode *ino = BPF_CORE_READ(file, f_inode);
	if (!ino || BPF_CORE_READ(ino, i_rdev) != WOLF_FUSE_DEVT ||
	    (BPF_CORE_READ(ino, i_mode) & 0170000) != 0020000)
		return 0;
	struct fuse_dev *fud = BPF_CORE_READ(file, private_data);
	if (!fud)
		return 0; /* opened, not yet mounted */
	struct fuse_conn *fc = BPF_CORE_READ(fud, fc);
	if (!fc)
		return 0;

	__u32 zero = 0;
	struct fuse_req_rec *r = bpf_map_lookup_elem(&fuse_scratch, &zero);
	if (!r)
		return 0;
	__builtin_memset(r, 0, sizeof(*r));
	r->daemon_tgid = task->tgid;
	r->daemon_tid = task->pid;
	r->fd = ctx->fd;
	r->conn_dev = BPF_CORE_READ(fc, dev);
	r->num_waiting = BPF_CORE_READ(fc, num_waiting.counter);
	r->now_jiffies = bpf_jiffies64();
	BPF_CORE_READ_STR_INTO(&r->daemon_comm, task, comm);

	struct list_head *head = &fc->iq.pending;
	struct list_head *pos = BPF_CORE_READ(head, next);
	for (int i = 0; i < MAX_FUSE_PENDING; i++) {
		if (!pos || pos == head)
			break;
		emit_fuse_req(ctx, r, pos, FUSE_REQ_PENDING);
		pos = BPF_CORE_READ(pos, next);
	}
	struct list_head *buckets = BPF_CORE_READ(fud, pq.processing);
	if (!buckets)
		return 0;
	for (int b = 0; b < FUSE_PQ_BUCKETS; b++) {
		struct list_head *bh = &buckets[b];
		struct list_head *p = BPF_CORE_READ(bh, next);
		for (int j = 0; j < MAX_FUSE_PER_BUCKET; j++) {
			if (!p || p == bh)
				break;
			emit_fuse_req(ctx, r, p, FUSE_REQ_PROCESSING);
			p = BPF_CORE_READ(p, next);
		}
	}
	return 0;
}
