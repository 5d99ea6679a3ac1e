//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * wolf locks: who waits for which kernel lock, for how long, and who holds
 * it; and how long each process's mmap_lock is held, with what the holder
 * does meanwhile.
 *
 *  - lock:contention_begin/end: waits aggregated here per lock, type and
 *    waiter stack (count, total, max, log2 histogram), per waiting task,
 *    and per owner (mutex and writer-owned rw-semaphore owners decoded at
 *    begin, their stacks captured); rw-semaphore wait queues modelled
 *    (waiters now, most at once, readers queued behind a waiting writer,
 *    how long until the queue drains).
 *  - mmap_lock:*: hold and wait histograms per thread and mode; holds above
 *    a threshold cross a ring buffer with the releasing stack, the holder's
 *    CPU time and context switches during the hold.
 *  - a perf_event program counts kernel stacks only while the sampled
 *    thread holds its mmap_lock ("profile under lock").
 *
 * Spinning-lock contention keeps its pending state per CPU: the waiter
 * spins with preemption off, and a hash update keyed by task there would
 * take a bucket lock inside another lock's slow path.
 *
 * The aggregations are cumulative: user space ends a window by
 * subtracting its previous reading, and maxima are kept per window
 * (struct wolf_max, wolf.h).
 */
#include "wolf.h"

char LICENSE[] SEC("license") = "GPL";

/* kfuncs (6.2+); only the BTF-tracepoint programs call them. */
extern struct task_struct *bpf_task_from_pid(s32 pid) __ksym __weak;
extern void bpf_task_release(struct task_struct *p) __ksym __weak;
#define STACK_DEPTH 64

/* Set by user space before load. */
const volatile __u32 target_tgid = 0; /* 0: every process */
/*
 * wolf itself: attaching and detaching BPF programs takes kernel locks
 * (tracepoints_mutex, an RCU grace period), which are wolf's own waits and
 * no finding about the host.
 */
const volatile __u32 self_tgid = 0;
const volatile __u64 target_lock = 0;	     /* 0: every lock */
const volatile __u32 type_mask = 0xffffffff; /* enum lock_type bits */
const volatile __u64 hold_threshold_ns = 20 * 1000 * 1000;
const volatile bool owner_stacks = true;	 /* needs bpf_task_from_pid */
const volatile bool mmap_has_memcg_path = false; /* 5.14..6.13 tracepoint args */
/*
 * The reclaim investigator runs in this process and shares its per-thread
 * reclaim totals (reclaim_tasks, wolf.h): a hold's reclaim is their
 * difference from acquire to release, and the vmscan programs below are
 * not attached (user space leaves their rows out).
 */
const volatile bool reclaim_shared = false;
const volatile __u64 owner_stack_every_ns = 10 * 1000 * 1000;
/*
 * A stack walk costs microseconds (7-10 us on this project's VM, through a
 * page fault's reclaim); under heavy contention the same lock is waited
 * for from the same places thousands of times a second, so a thread's (or,
 * for spin locks, a CPU's) stack of a lock is walked at most once per this
 * interval, and the detail budget bounds the walks of all locks together.
 */
const volatile __u64 stack_every_ns = 100 * 1000 * 1000;
/*
 * No spin wait lasts this long: a pending spin wait older than this lost
 * its end (the program was busy on this CPU: a recursion miss) and is
 * dropped rather than charged to a later, unrelated end.
 */
const volatile __u64 max_spin_ns = 1000 * 1000 * 1000;

/* Lock types as wolf reports them, decoded from the LCB_F_* flags. */
enum lock_type {
	TYPE_SPINLOCK = 0,
	TYPE_RWLOCK_READ = 1,
	TYPE_RWLOCK_WRITE = 2,
	TYPE_MUTEX = 3,
	TYPE_RWSEM_READ = 4,
	TYPE_RWSEM_WRITE = 5,
	TYPE_SEMAPHORE = 6,
	TYPE_RTMUTEX = 7,
	TYPE_PERCPU_RWSEM_READ = 8,
	TYPE_PERCPU_RWSEM_WRITE = 9,
	TYPE_RT_RWLOCK_READ = 10,
	TYPE_RT_RWLOCK_WRITE = 11,
};

enum owner_kind {
	OWNER_NONE = 0,
	OWNER_TASK = 1,	   /* mutex or writer-owned rw-semaphore: exact */
	OWNER_READERS = 2, /* reader-owned rw-semaphore: task is the latest reader */
};

/* Counters in the stats array (WOLF_STATS); user space reads their names. */
enum stat_index {
	STAT_BEGIN = 0,
	STAT_END,
	STAT_PENDING_FULL,  /* no room to remember a wait */
	STAT_NESTED,	    /* spin contention while another was pending on this CPU */
	STAT_UNMATCHED_END, /* end without begin (began before wolf attached) */
	STAT_WAITS_FULL,
	STAT_TASKS_FULL,
	STAT_OWNERS_FULL,
	STAT_QUEUE_FULL,
	STAT_STACK_ERR,
	STAT_MM_EVENTS,
	STAT_MM_HOLDS_FULL,
	STAT_MM_STATS_FULL,
	STAT_MM_UNMATCHED, /* released without acquire (held before wolf attached) */
	STAT_HOLD_DROPS,   /* ring buffer full */
	STAT_SAMPLES,
	STAT_SAMPLES_UNDER_LOCK,
	STAT_PROFILE_FULL,
	STAT_STALE,	      /* pending wait whose end was lost */
	STAT_THROTTLED_HOLDS, /* a holder switched out with its cgroup throttled */
	STAT_MM_STALE_HOLD,   /* a hold whose release was lost, seen at user return */
	STAT_STACK_SKIPPED, /* a wait or long hold filed without a stack: the detail budget was spent */
	STAT_FOLD_FLUSH, /* a fold slot flushed to the maps for another key */
	STAT_SLEEP_WAITS, /* sleeping waits begun, timed or not: what a storm's estimates stand for */
	STAT_MM_LOST_RELEASE, /* a hold whose release was lost, seen at the thread's next acquire */
	STAT_MAX,
};

WOLF_STATS()

/*
 * The detail gates (wolf.h): stack walks of spin waits, of sleeping waits,
 * of owners, and of long mmap_lock holds at their release.
 */
enum detail_gate {
	GATE_SPIN = 0,
	GATE_SLEEP = 1,
	GATE_OWNER = 2,
	GATE_HOLD = 3,
	GATES = 4,
};

WOLF_BUDGET(GATES)

/*
 * Spin waits are what a storm has most of (a memcg storm's lru_lock and
 * page cache lock: tens of thousands a second), and each costs two
 * program runs. When the budget is spent with the gates at their longest,
 * about one in wolf_storm_every of them per CPU is timed and stands for
 * itself and those skipped before it (wolf.h): their counts, sums and
 * histograms become estimates, which the report says. An untimed wait
 * costs its begin a counter and its end a compare. Sleeping waits are
 * sampled the same way in a slot of their own (a spin wait timed must not
 * stand for sleeping ones): a storm's faulting threads wait for their
 * mmap_lock tens of thousands of times a second, and a timed one decodes
 * its owner, models the rw-semaphore's queue and is folded per waiter and
 * owner. A thread's first wait is always timed (it makes the thread's
 * entry); an untimed one costs its begin the thread's entry and a mark,
 * its end a compare. The waiter, owner and mmap_lock figures of timed
 * waits stand for those skipped, weighted as the counts; the queue model
 * sees the timed waits only, its depths a lower bound while sampling.
 * Past that, the budget runs the contention programs part of the time
 * (probekit's Attach.Duty, wolf_duty in wolf.h): a wait seen then stands
 * for 2^wolf_duty_shift times what it would.
 */
enum storm_slot {
	STORM_SPIN = 0,
	STORM_SLEEP = 1,
};
WOLF_STORM_SLOTS(2)

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, STACK_DEPTH * sizeof(__u64));
} stacks SEC(".maps");

/*
 * One wait: in progress (start_ns set, end_ns 0), or over but not yet
 * folded into the aggregations (both set). contention_end runs with the
 * lock just taken, so whatever it does lengthens the critical section
 * every other waiter queues behind: it only timestamps the end. The wait
 * is folded in at the thread's next contention_begin (or, for spin waits,
 * the CPU's next), where the time is the waiter's own; the waits still
 * unfolded when wolf stops are folded by user space.
 */
struct pending {
	__u64 start_ns;
	__u64 end_ns;
	__u64 lock;
	__u32 type;
	__s32 stack_id;
	__u32 owner_tid;
	__u32 owner_kind;
	__s32 owner_stack_id;
	__u32 mm_tgid;	     /* the lock is this process's mmap_lock */
	__u32 behind_writer; /* a reader queued behind a waiting writer */
	__u64 owner;	     /* task_struct *, read only when an owner is new */
	__u32 tgid;	     /* the waiter, for waits still going at the end */
	__u32 stack_tid;     /* the stack cache below is this thread's */
	/* The last stack taken, reused for the same lock within stack_every_ns. */
	__u64 stack_lock;
	__u64 stack_ns;
	__s32 stack_cached;
	__u32 flags;		  /* LCB_F_* of the begin */
	__u32 tid;		  /* the waiter (spin waits are folded by a later one) */
	__u32 end_win;		  /* the window it ended in: its maxima are that window's */
	__u32 slept;		  /* a slow-path kprobe's wait: the waiter slept in the slow path */
	char comm[WOLF_COMM_LEN]; /* the waiter's, sleeping locks only */
	__u32 weight;		  /* the waits it stands for: 1, or a storm's sample */
	__u32 pad2;
	__u64 skip_lock; /* a spin wait not timed (WOLF_STORM): its end returns at once */
	__u64 owner_rt;	 /* the owner's CPU time at begin */
	__u64 owner_rd;	 /* and its run-queue time */
	/*
	 * The thread's waits on acc_lock folded here, not yet into its
	 * waiters entry: a thread waits for the same lock over and over
	 * (a storm's faulting threads on their mmap_lock), and a hash lookup
	 * per wait was a good part of a sleeping wait's cost. A wait on
	 * another lock flushes them first; user space adds what is here.
	 */
	__u64 acc_lock;
	__u64 acc_count;
	__u64 acc_total_ns;
	struct wolf_max acc_max;
};

/*
 * Per-thread state is written in place (an update or delete per event
 * costs a bucket lock and a copy); LRU so that threads that exit give
 * their entries back. start_ns == 0 means no wait in progress.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* tid */
	__type(value, struct pending);
} pending_task SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pending);
} pending_cpu SEC(".maps");

/*
 * How many threads' entries await a sleeping wait's end (a timed wait not
 * over, or an untimed one's mark), so that an end with none awaited skips
 * the lookup of its thread's entry: with the begin duty-cycled
 * (probekit's Attach.Duty) most ends are of waits whose begin was not
 * seen, and that lookup was most of what they cost.
 *
 * Entry AWAITED_WORD is changed only where an entry starts or stops
 * awaiting an end, by its own thread (await_note): its low 32 bits count
 * the entries awaiting, its high 32 bits count the starts. The count can
 * only be high, never low: every -1 follows a +1 of the same entry, and
 * an entry that stops awaiting otherwise (evicted from the LRU) leaves it
 * one too high, which costs lookups, not waits. User space takes what is
 * too high back (AWAITED_CORR, reconcileAwaited in collect.go) when it has
 * counted the entries awaiting while the word did not change; the
 * starts in the high bits make sure nothing began and ended meanwhile.
 * Sleeping waits are thousands a second, not tens of thousands: the
 * shared line is cheap.
 */
enum awaited_index {
	AWAITED_WORD = 0,
	AWAITED_CORR = 1, /* user space's: how far the count is too high */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} awaited SEC(".maps");

#define AWAITED_START ((1ULL << 32) | 1)

static __always_inline bool awaiting(const struct pending *p)
{
	return p && (p->skip_lock || (p->start_ns && !p->end_ns));
}

/* An entry went from awaiting an end (was) to awaiting one (is), or back. */
static __always_inline void await_note(bool was, bool is)
{
	__u32 k = AWAITED_WORD;
	__u64 *w;

	if (was == is)
		return;
	w = bpf_map_lookup_elem(&awaited, &k);
	if (!w)
		return;
	if (is)
		__sync_fetch_and_add(w, AWAITED_START);
	else
		__sync_fetch_and_add(w, -1);
}

/* No entry awaits an end: the count, less what user space took back. */
static __always_inline bool none_awaited(void)
{
	__u32 kw = AWAITED_WORD, kc = AWAITED_CORR;
	__u64 *w = bpf_map_lookup_elem(&awaited, &kw);
	__u64 *c = bpf_map_lookup_elem(&awaited, &kc);

	if (!w || !c)
		return false;
	return (__u32)*w == (__u32)*c;
}

/* A thread's first wait is built here (too big for the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pending);
} pending_scratch SEC(".maps");

/*
 * The aggregations are per CPU: under heavy contention every CPU updates
 * the same lock's entry, and shared counters would bounce their cache line
 * between CPUs on every wait (plain adds here; user space sums the CPUs).
 * User space scales their max_entries down on hosts with many CPUs.
 */

/* Waits per lock, type and waiter stack. */
struct wait_key {
	__u64 lock;
	__u32 type;
	__s32 stack_id;
	__u32 mm_tgid;
	__u32 pad;
};

struct wait_val {
	__u64 count;
	__u64 total_ns;
	__u64 writer_head;   /* reader waits that found a writer at the queue's head */
	__u32 owner_readers; /* waits that found the lock reader-owned */
	__u32 pad;
	struct wolf_max max; /* the window's longest wait; tag: its waiter */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct wait_key);
	__type(value, struct wait_val);
} waits SEC(".maps");

/* Histogram per lock and type. */
struct lock_key {
	__u64 lock;
	__u32 type;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 2048);
	__type(key, struct lock_key);
	__type(value, struct wolf_hist);
} lock_hist SEC(".maps");

/*
 * Spin waits fold into a per-CPU cache before the maps above: a spin lock
 * under contention is waited for tens of thousands of times a second, the
 * same lock from the same place over and over, and two hash lookups per
 * wait (waits, lock_hist) were most of a wait's cost. A wait whose key
 * (lock, type, stack, mm) holds its slot adds to it in place; one that
 * finds the slot taken by another key flushes that key into the maps
 * first. Two slots a key (its hash's pair): of the two, a new key takes
 * the one that has folded fewer waits, so that a lock waited for all
 * the time keeps its slot among locks waited for once (a storm's page-
 * table locks, one per page table). User space reads the slots with
 * the maps (after them: a flush between the two reads is then missed for
 * one window, never counted twice; see collect.go). 32 slots (21 KB a
 * CPU, of the 32 KB a per-CPU value may take): a fault storm waits for
 * hundreds of page-table locks a few times each, and every one of them
 * that finds its pair taken flushes a slot (two hash lookups).
 */
#define FOLD_SLOTS 32

struct fold_slot {
	struct wait_key key;
	struct wait_val val;
	struct wolf_hist hist; /* the lock's histogram's share */
};

struct fold_slots {
	struct fold_slot s[FOLD_SLOTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fold_slots);
} fold_cache SEC(".maps");

/* Waits per lock and waiting task. */
struct task_key {
	__u64 lock;
	__u32 tid;
	__u32 pad;
};

struct task_val {
	__u64 count;
	__u64 total_ns;
	struct wolf_max max_ns;
	__u32 tgid;
	char comm[WOLF_COMM_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct task_key);
	__type(value, struct task_val);
} waiters SEC(".maps");

/* Waiting time attributed to the owner found at begin (perf lock -o). */
struct owner_key {
	__u64 lock;
	__u32 owner_tid;
	__s32 owner_stack_id;
	__u32 owner_kind;
	__u32 pad;
};

/* An owner's clocks at one wait that found it owning the lock. */
struct owner_clock {
	__u64 ns; /* the wait's start */
	__u64 rt; /* the owner's CPU time then */
	__u64 rd; /* its run-queue time then */
};

/* The first and last such waits of each window (two slots, by window). */
struct owner_span {
	__u32 win[2];
	struct owner_clock first[2];
	struct owner_clock last[2];
};

static __always_inline void span_add(struct owner_span *sp, __u32 w, __u64 ns, __u64 rt, __u64 rd)
{
	__u32 s = w & 1;
	struct owner_clock c = { .ns = ns, .rt = rt, .rd = rd };

	if (sp->win[s] < w || (sp->win[s] == w && !sp->first[s].ns)) {
		sp->win[s] = w;
		sp->first[s] = c;
		sp->last[s] = c;
		return;
	}
	if (sp->win[s] != w)
		return; /* a newer window holds the slot: this one was reported */
	if (ns < sp->first[s].ns)
		sp->first[s] = c;
	if (ns > sp->last[s].ns)
		sp->last[s] = c;
}

struct owner_val {
	__u64 count;
	__u64 total_ns;
	struct wolf_max max_ns;
	__u32 owner_tgid;
	char owner_comm[WOLF_COMM_LEN];
	/*
	 * The owner's CPU time and run-queue time at the first and the last
	 * wait of a window that found it owning the lock: between the two,
	 * where its time went while others waited (user space takes the
	 * deltas). Per window, as the maxima.
	 */
	struct owner_span span;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct owner_key);
	__type(value, struct owner_val);
} owners SEC(".maps");

/* Owner stacks are captured once per owner change or interval per lock. */
struct owner_seen {
	__u64 at_ns;
	__u32 tid;
	__s32 stack_id;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64); /* lock */
	__type(value, struct owner_seen);
} owner_last SEC(".maps");

/* The wait queue of each sleeping lock, as seen from begin/end. */
struct queue {
	__s64 readers; /* waiting now */
	__s64 writers;
	__u64 busy_since; /* first waiter of the current busy period */
	__u64 busy_total_ns;
	__u64 busy_periods;
	struct wolf_max max_readers; /* per window, as every max here */
	struct wolf_max max_writers;
	struct wolf_max busy_max_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64); /* lock */
	__type(value, struct queue);
} queues SEC(".maps");

static __always_inline __u32 lock_type(__u32 flags)
{
	if (flags & WOLF_LCB_F_PERCPU)
		return (flags & WOLF_LCB_F_WRITE) ? TYPE_PERCPU_RWSEM_WRITE
						  : TYPE_PERCPU_RWSEM_READ;
	if (flags & WOLF_LCB_F_MUTEX)
		return TYPE_MUTEX;
	if (flags & WOLF_LCB_F_RT) {
		if (flags & WOLF_LCB_F_READ)
			return TYPE_RT_RWLOCK_READ;
		if (flags & WOLF_LCB_F_WRITE)
			return TYPE_RT_RWLOCK_WRITE;
		return TYPE_RTMUTEX;
	}
	if (flags & WOLF_LCB_F_SPIN) {
		if (flags & WOLF_LCB_F_READ)
			return TYPE_RWLOCK_READ;
		if (flags & WOLF_LCB_F_WRITE)
			return TYPE_RWLOCK_WRITE;
		return TYPE_SPINLOCK;
	}
	if (flags & WOLF_LCB_F_READ)
		return TYPE_RWSEM_READ;
	if (flags & WOLF_LCB_F_WRITE)
		return TYPE_RWSEM_WRITE;
	return TYPE_SEMAPHORE;
}

/* Pure spinning: the mutex's optimistic spin is not inside another lock. */
static __always_inline bool spinning(__u32 flags)
{
	return (flags & WOLF_LCB_F_SPIN) && !(flags & WOLF_LCB_F_MUTEX);
}

static __always_inline bool is_rwsem(__u32 type)
{
	return type == TYPE_RWSEM_READ || type == TYPE_RWSEM_WRITE;
}

static __always_inline bool wanted(__u64 lock, __u32 type, __u64 pid_tgid)
{
	if (self_tgid && (pid_tgid >> 32) == self_tgid)
		return false;
	if (target_lock && lock != target_lock)
		return false;
	if (!(type_mask & (1U << type)))
		return false;
	if (target_tgid && (pid_tgid >> 32) != target_tgid)
		return false;
	return true;
}

/*
 * Owner stacks come from bpf_get_task_stack (another task's stack), which
 * fills a buffer rather than the stack map; they are kept here keyed by a
 * hash of their frames, with the top bit set so they never collide with a
 * stack map id.
 */
struct frames {
	__u64 ip[STACK_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct frames);
} owner_frames SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct frames);
} scratch SEC(".maps");

/*
 * A new owner entry is built here: with its per-window span it is too big
 * for the BPF stack beside everything on_begin inlines.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct owner_val);
} owner_scratch SEC(".maps");

/* Always zero: a new histogram is too big for the BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wolf_hist);
} zero_hist SEC(".maps");

/* Look key up in map, inserting a zeroed value first if it is absent. */
static __always_inline void *lookup_or_init(void *map, const void *key, const void *zero)
{
	void *v = bpf_map_lookup_elem(map, key);

	if (v)
		return v;
	bpf_map_update_elem(map, key, zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(map, key);
}

static __always_inline struct wolf_hist *hist_for(void *map, const void *key)
{
	__u32 zero = 0;
	struct wolf_hist *z = bpf_map_lookup_elem(&zero_hist, &zero);

	if (!z)
		return 0;
	return lookup_or_init(map, key, z);
}

/*
 * Global functions (not static, never inlined) are checked by the kernel's
 * verifier once each, on their own, where an inlined function is checked
 * again along every path of its caller that reaches it: on_begin inlined
 * the fold of a thread's last wait and the walk of an owner's stack into
 * 740,000 instructions processed, 1.7 s of verifier time at every start.
 * Before Linux 5.12 a global function takes scalars only, so what the
 * kprobe programs (kernels before 5.19) call looks its entry up again.
 */

/*
 * Another task's stack, by pid, into owner_frames: its key (top bit set,
 * so never a stack map id), or -1. Only BTF-tracepoint programs call it
 * (kfuncs); owner_stacks off leaves the kfunc calls as dead code, which
 * the verifier skips on kernels without them.
 */
__noinline int walk_owner_stack(__u32 pid)
{
	__u64 h = 14695981039346656037ULL; /* FNV-1a */
	struct task_struct *t;
	struct frames *f;
	__u32 zero = 0, key;
	long n;

	if (!owner_stacks)
		return -1;
	f = bpf_map_lookup_elem(&scratch, &zero);
	if (!f)
		return -1;
	t = bpf_task_from_pid(pid);
	if (!t)
		return -1;
	n = bpf_get_task_stack(t, f->ip, sizeof(f->ip), 0);
	bpf_task_release(t);
	if (n <= 0)
		return -1;
	for (int i = 0; i < STACK_DEPTH; i++) {
		if (i * 8 >= n)
			f->ip[i] = 0;
		h ^= f->ip[i];
		h *= 1099511628211ULL;
	}
	key = (__u32)(h ^ (h >> 32)) | 0x80000000U;
	if (bpf_map_update_elem(&owner_frames, &key, f, BPF_ANY)) {
		stat_inc(STAT_STACK_ERR);
		return -1;
	}
	return (__s32)key;
}

/*
 * The owner's stack: walking another task's stack costs microseconds, so
 * it is taken at most once per owner_stack_every_ns per lock. Within the
 * interval the same owner reuses its stack; a different owner (a lock
 * passed around under churn) goes without one.
 */
static __always_inline __s32 owner_stack(__u64 lock, struct task_struct *o, __u32 tid,
					 const bool can_walk, __u64 now)
{
	struct owner_seen *seen = bpf_map_lookup_elem(&owner_last, &lock);
	__s32 id = -1;

	if (seen && now - seen->at_ns < owner_stack_every_ns)
		return seen->tid == tid ? seen->stack_id : -1;
	if (can_walk && owner_stacks && wolf_detail_take(GATE_OWNER, now))
		id = walk_owner_stack(BPF_CORE_READ(o, pid));
	struct owner_seen s = { .at_ns = now, .tid = tid, .stack_id = id };
	bpf_map_update_elem(&owner_last, &lock, &s, BPF_ANY);
	return id;
}

/*
 * The tgid whose mmap_lock lock is, if it is the current task's own. With
 * btf (the BTF tracepoints' programs, on kernels that have kfuncs and so
 * bpf_get_current_task_btf), plain loads instead of two probe reads.
 */
static __always_inline __u32 own_mmap_lock(__u64 lock, const bool btf)
{
	__u64 off = bpf_core_field_offset(struct mm_struct, mmap_lock);

	if (btf) {
		struct task_struct *cur = bpf_get_current_task_btf();
		struct mm_struct *mm = cur->mm;

		if (mm && lock == (__u64)mm + off)
			return cur->tgid;
		return 0;
	}
	struct task_struct *cur = (struct task_struct *)bpf_get_current_task();
	struct mm_struct *mm = BPF_CORE_READ(cur, mm);

	if (mm && lock == (__u64)mm + off)
		return BPF_CORE_READ(cur, tgid);
	return 0;
}

static __always_inline void queue_enter(__u64 lock, __u32 type, __u64 now)
{
	struct queue z = {};
	struct queue *q = lookup_or_init(&queues, &lock, &z);
	__s64 before, n;

	if (!q) {
		stat_inc(STAT_QUEUE_FULL);
		return;
	}
	before = q->readers + q->writers;
	/*
	 * Atomic adds whose result is unused (atomic fetch is 5.12+), then a
	 * plain read: with others entering at the same instant the depth read
	 * may include them, which is the queue's depth then too.
	 */
	if (type == TYPE_RWSEM_READ) {
		__sync_fetch_and_add(&q->readers, 1);
		n = q->readers;
		if (n > 0)
			wolf_max_add(&q->max_readers, n);
	} else {
		__sync_fetch_and_add(&q->writers, 1);
		n = q->writers;
		if (n > 0)
			wolf_max_add(&q->max_writers, n);
	}
	if (before <= 0)
		q->busy_since = now;
}

static __always_inline void queue_leave(__u64 lock, __u32 type, __u64 now)
{
	struct queue *q = bpf_map_lookup_elem(&queues, &lock);

	if (!q)
		return;
	if (type == TYPE_RWSEM_READ)
		__sync_fetch_and_add(&q->readers, -1);
	else
		__sync_fetch_and_add(&q->writers, -1);
	if (q->readers + q->writers <= 0 && q->busy_since) {
		__u64 busy = now - q->busy_since;

		q->busy_since = 0;
		q->busy_total_ns += busy;
		q->busy_periods += 1;
		wolf_max_add(&q->busy_max_ns, busy);
	}
}

/* Does a writer wait at the head of this rw-semaphore's queue? */
static __always_inline bool writer_at_head(__u64 lock)
{
	struct rw_semaphore *s = (struct rw_semaphore *)lock;
	struct list_head *first = BPF_CORE_READ(s, wait_list.next);
	__u64 head = lock + bpf_core_field_offset(struct rw_semaphore, wait_list);
	struct rwsem_waiter *w;

	if (!first || (__u64)first == head)
		return false;
	w = container_of(first, struct rwsem_waiter, list);
	return BPF_CORE_READ(w, type) == RWSEM_WAITING_FOR_WRITE;
}

static __always_inline bool spin_type(__u32 type)
{
	return type == TYPE_SPINLOCK || type == TYPE_RWLOCK_READ || type == TYPE_RWLOCK_WRITE;
}

/*
 * The queue model is kept for rw-semaphores, where readers and writers
 * queue differently (Datadog's FOSDEM talk); its counters are shared between CPUs, which
 * under heavy contention costs a cache-line transfer per wait.
 */
static __always_inline bool queued_type(__u32 type)
{
	return is_rwsem(type);
}

/*
 * Spin waits' stacks, per CPU, by lock: a spin lock under contention is
 * waited for thousands of times a second on each CPU, by whichever thread
 * runs there, and a stack walk costs a microsecond or two. Each CPU walks
 * the stack of a wait on a given lock at most once per stack_every_ns and
 * files the waits on that lock in between under it: under contention the
 * stacks are a sample, spread over time, of where the lock is waited for.
 * Direct-mapped: a lock whose slot another took walks again.
 */
#define STACK_SLOTS 16

struct stack_slot {
	__u64 lock;
	__u64 ns;
	__s32 id;
	__u32 type;
};

struct stack_slots {
	struct stack_slot s[STACK_SLOTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack_slots);
} stack_cache SEC(".maps");

/* A spin wait's stack id, from this CPU's cache of the lock's when fresh. */
static __always_inline __s32 spin_stack(void *ctx, __u64 lock, __u32 type, __u64 now)
{
	__u32 zero = 0;
	struct stack_slots *c = bpf_map_lookup_elem(&stack_cache, &zero);
	struct stack_slot *sl;
	__s32 id;

	if (!c)
		return -1;
	sl = &c->s[wolf_bound((__u32)(lock >> 6) ^ (__u32)(lock >> 16) ^ type, STACK_SLOTS - 1)];
	if (sl->lock == lock && sl->type == type && now - sl->ns < stack_every_ns)
		return sl->id;
	if (!wolf_detail_take(GATE_SPIN, now)) {
		/*
		 * Out of budget: the lock's last stack, however old, else
		 * none, and the slot stays as it is for another interval
		 * (the gate is asked once per interval, not per wait).
		 */
		stat_inc(STAT_STACK_SKIPPED);
		id = sl->lock == lock && sl->type == type ? sl->id : -1;
	} else {
		id = bpf_get_stackid(ctx, &stacks, 0);
		if (id < 0)
			stat_inc(STAT_STACK_ERR);
	}
	sl->lock = lock;
	sl->type = type;
	sl->ns = now;
	sl->id = id;
	return id;
}

/* A sleeping wait's stack id, from its thread's cache in c when fresh. */
static __always_inline __s32 waiter_stack(void *ctx, struct pending *c, __u64 lock, __u32 type,
					  __u32 tid, __u64 now)
{
	/* Its own, of this lock, taken as a wait of the same type (c->type: the last wait's). */
	bool mine = c && c->stack_tid == tid && c->stack_lock == lock && c->type == type;
	__s32 id;

	if (mine && now - c->stack_ns < stack_every_ns)
		return c->stack_cached;
	if (!wolf_detail_take(GATE_SLEEP, now)) {
		/* Out of budget: as for spin waits. */
		stat_inc(STAT_STACK_SKIPPED);
		id = mine ? c->stack_cached : -1;
	} else {
		id = bpf_get_stackid(ctx, &stacks, 0);
		if (id < 0)
			stat_inc(STAT_STACK_ERR);
	}
	if (c) {
		c->stack_tid = tid;
		c->stack_lock = lock;
		c->stack_ns = now;
		c->stack_cached = id;
	}
	return id;
}

/* sched_info.run_delay exists with CONFIG_SCHED_INFO. */
static __always_inline __u64 task_run_delay(struct task_struct *t)
{
	if (bpf_core_field_exists(t->sched_info.run_delay))
		return BPF_CORE_READ(t, sched_info.run_delay);
	return 0;
}

int account_btf(struct pending *p);
int account_raw(struct pending *p);
int account_kp(__u32 tid);
int fold_spin_cpu(struct pending *p);
static __always_inline void fold_spin(struct pending *p);

static __always_inline void on_begin(void *ctx, __u64 lock, __u32 flags, const bool can_walk,
				     const bool kp)
{
	__u32 type = lock_type(flags);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 zero = 0;
	__u64 now;

	stat_inc(STAT_BEGIN);
	if (!wanted(lock, type, pid_tgid))
		return;
	if (spinning(flags)) {
		struct pending *p = bpf_map_lookup_elem(&pending_cpu, &zero);
		__u32 weight;

		if (!p)
			return;
		weight = wolf_storm_take_at(STORM_SPIN);
		if (!weight) {
			/* Not timed: its end only clears the mark. */
			p->skip_lock = lock;
			return;
		}
		p->skip_lock = 0;
		now = bpf_ktime_get_ns();
		if (p->start_ns && p->end_ns) {
			fold_spin_cpu(p); /* the CPU's last spin wait (a call: walk_owner_stack) */
		} else if (p->start_ns) {
			/*
			 * A spin wait in an interrupt on top of another is on
			 * another lock (on the same one it would deadlock): a
			 * begin on the same lock means the last one's end was
			 * lost (an end program attached after its begin), and
			 * this begin's end must not close that one.
			 */
			if (p->lock != lock && now - p->start_ns < max_spin_ns) {
				stat_inc(STAT_NESTED);
				return;
			}
			stat_inc(STAT_STALE);
		}
		p->start_ns = now;
		p->end_ns = 0;
		p->lock = lock;
		p->type = type;
		p->tid = (__u32)pid_tgid;
		p->tgid = pid_tgid >> 32;
		p->owner_kind = OWNER_NONE;
		p->mm_tgid = 0;
		p->behind_writer = 0;
		p->weight = weight;
		p->stack_id = spin_stack(ctx, lock, type, now);
		return;
	}

	__u32 tid = (__u32)pid_tgid;
	struct pending *old = bpf_map_lookup_elem(&pending_task, &tid);
	__u32 weight = 1 << wolf_duty(); /* a first wait, timed whatever the storm */
	bool was = awaiting(old);	 /* the returns before await_note change nothing */

	if (old && old->skip_lock) {
		/* A mutex's second begin (spinning, then sleeping) of an untimed wait. */
		if (old->skip_lock == lock && (old->flags & WOLF_LCB_F_SPIN) &&
		    (flags & WOLF_LCB_F_MUTEX))
			return;
		old->skip_lock = 0; /* an untimed wait whose end was lost */
	}
	if (!(old && old->start_ns && !old->end_ns && old->lock == lock &&
	      (old->flags & WOLF_LCB_F_SPIN) && (flags & WOLF_LCB_F_MUTEX)))
		/* Not a mutex's second begin; duty-cycled, an estimate too. */
		stat_add(STAT_SLEEP_WAITS, 1 << wolf_duty());
	if (old && old->start_ns && old->end_ns) {
		/* The thread's last wait (see walk_owner_stack on why a call). */
		if (kp)
			account_kp(tid);
		else if (can_walk)
			account_btf(old);
		else
			account_raw(old);
	} else if (old && old->start_ns) {
		/*
		 * A mutex reports begin twice, spinning then sleeping, with
		 * one end: keep the first start. Any other begin replaces a
		 * pending wait, whose end was then lost.
		 */
		if (old->lock == lock && (old->flags & WOLF_LCB_F_SPIN) &&
		    (flags & WOLF_LCB_F_MUTEX))
			return;
		stat_inc(STAT_STALE);
		/* Out of the queue model too, or its depth only grows. */
		if (queued_type(old->type))
			queue_leave(old->lock, old->type, bpf_ktime_get_ns());
		old->start_ns = 0;
	}
	if (old) {
		weight = wolf_storm_take_at(STORM_SLEEP);
		if (!weight) {
			/* Not timed: its end only clears the mark. */
			old->skip_lock = lock;
			old->flags = flags;
			await_note(was, true);
			return;
		}
	}
	now = bpf_ktime_get_ns();

	/*
	 * The new wait is written in place into the thread's entry (a copy
	 * of a whole entry per wait, and the BPF stack it took, were not
	 * needed); a thread's first wait is built in a per-CPU scratch entry
	 * and inserted. The stack cache and the waits folded in (acc_*)
	 * stay as they are.
	 */
	struct pending *p = old;
	__s32 stack_id = waiter_stack(ctx, old, lock, type, tid, now);
	struct task_struct *o = 0;

	if (!p) {
		p = bpf_map_lookup_elem(&pending_scratch, &zero);
		if (!p)
			return;
		__builtin_memset(p, 0, sizeof(*p));
	}
	p->start_ns = now;
	p->end_ns = 0;
	p->lock = lock;
	p->type = type;
	p->stack_id = stack_id;
	p->owner_tid = 0;
	p->owner_kind = OWNER_NONE;
	p->owner_stack_id = -1;
	p->behind_writer = 0;
	p->owner = 0;
	p->owner_rt = 0;
	p->owner_rd = 0;
	p->flags = flags;
	p->tid = tid;
	p->end_win = 0;
	p->slept = 0;
	p->weight = weight;
	p->tgid = pid_tgid >> 32;
	bpf_get_current_comm(&p->comm, sizeof(p->comm));
	p->mm_tgid = own_mmap_lock(lock, can_walk);
	if (type == TYPE_MUTEX) {
		o = wolf_mutex_owner((void *)lock);
		if (o)
			p->owner_kind = OWNER_TASK;
	} else if (is_rwsem(type)) {
		struct wolf_rwsem_state st = wolf_rwsem_owner((void *)lock);

		o = st.task;
		if (st.writer)
			p->owner_kind = OWNER_TASK;
		else if (st.readers)
			p->owner_kind = OWNER_READERS;
		if (type == TYPE_RWSEM_READ && !st.writer && writer_at_head(lock))
			p->behind_writer = 1;
	}
	if (o && p->owner_kind != OWNER_NONE) {
		__u32 otid = BPF_CORE_READ(o, pid);

		p->owner_tid = otid;
		p->owner = (__u64)o;
		p->owner_rt = BPF_CORE_READ(o, se.sum_exec_runtime);
		p->owner_rd = task_run_delay(o);
		if (p->owner_kind == OWNER_TASK)
			p->owner_stack_id = owner_stack(lock, o, otid, can_walk, now);
	}
	if (!old && bpf_map_update_elem(&pending_task, &tid, p, BPF_ANY)) {
		stat_inc(STAT_PENDING_FULL);
		return;
	}
	await_note(was, true);
	if (queued_type(type))
		queue_enter(lock, type, now);
}

static __always_inline void account_mm_wait(struct pending *p, __u64 d, __u64 n);

/*
 * The name and process of an owner wolf has not seen waited on before.
 * The task pointer was read at begin, possibly long ago: with kfuncs, the
 * task is looked up by tid and used only if it is still the same task;
 * without, it is read as it is (a probe read of memory that may have been
 * reused: a wrong name at worst). Left unnamed, user space names it from
 * /proc if the tid still lives.
 */
static __always_inline void owner_name(struct pending *p, struct owner_val *ov, const bool can_walk)
{
	struct task_struct *o = (struct task_struct *)p->owner;

	if (can_walk && owner_stacks) {
		struct task_struct *t = bpf_task_from_pid(p->owner_tid);

		if (!t)
			return;
		if ((__u64)t == p->owner) {
			ov->owner_tgid = BPF_CORE_READ(t, tgid);
			BPF_CORE_READ_STR_INTO(&ov->owner_comm, t, comm);
		}
		bpf_task_release(t);
		return;
	}
	ov->owner_tgid = BPF_CORE_READ(o, tgid);
	BPF_CORE_READ_STR_INTO(&ov->owner_comm, o, comm);
}

/* Adds src's window maxima into dst (the tagged form of wolf_max_merge). */
static __always_inline void hist_merge(struct wolf_hist *dst, const struct wolf_hist *src)
{
	for (int i = 0; i < WOLF_HIST_SLOTS; i++)
		if (src->slots[i])
			dst->slots[i] += src->slots[i];
	dst->count += src->count;
	dst->sum += src->sum;
	wolf_max_merge(&dst->max, &src->max);
}

/* A slot's waits into the maps (per CPU, as the slot: plain adds). */
static __always_inline void fold_flush(struct fold_slot *sl)
{
	struct wait_val wz = {};
	struct wait_val *wv = lookup_or_init(&waits, &sl->key, &wz);
	struct lock_key lk = { .lock = sl->key.lock, .type = sl->key.type };
	struct wolf_hist *h;

	if (wv) {
		wv->count += sl->val.count;
		wv->total_ns += sl->val.total_ns;
		wv->owner_readers += sl->val.owner_readers;
		wv->writer_head += sl->val.writer_head;
		wolf_max_merge(&wv->max, &sl->val.max);
	} else {
		stat_inc(STAT_WAITS_FULL);
	}
	h = hist_for(&lock_hist, &lk);
	if (h)
		hist_merge(h, &sl->hist);
	else
		stat_inc(STAT_WAITS_FULL);
}

/*
 * A slot that folded one wait (a page-table lock, waited for once on this
 * CPU: a storm's commonest key to flush): its histogram has that one value,
 * so it goes to the lock's histogram as one add, and only what it set is
 * cleared, not the whole slot (two thirds of it the histogram's slots).
 */
static __always_inline void fold_flush_one(struct fold_slot *sl)
{
	struct wait_val wz = {};
	struct wait_val *wv = lookup_or_init(&waits, &sl->key, &wz);
	struct lock_key lk = { .lock = sl->key.lock, .type = sl->key.type };
	__u64 d = sl->val.total_ns;
	__u32 s = wolf_log2_slot(d);
	struct wolf_hist *h;

	if (wv) {
		wv->count += 1;
		wv->total_ns += d;
		wv->owner_readers += sl->val.owner_readers;
		wv->writer_head += sl->val.writer_head;
		wolf_max_merge(&wv->max, &sl->val.max);
	} else {
		stat_inc(STAT_WAITS_FULL);
	}
	h = hist_for(&lock_hist, &lk);
	if (h) {
		if (s < WOLF_HIST_SLOTS)
			h->slots[s] += 1;
		h->count += 1;
		h->sum += d;
		wolf_max_merge(&h->max, &sl->hist.max);
	} else {
		stat_inc(STAT_WAITS_FULL);
	}
	if (s < WOLF_HIST_SLOTS)
		sl->hist.slots[s] = 0;
	sl->hist.count = 0;
	sl->hist.sum = 0;
	__builtin_memset(&sl->hist.max, 0, sizeof(sl->hist.max));
	__builtin_memset(&sl->val, 0, sizeof(sl->val));
}

static __always_inline bool fold_holds(struct fold_slot *sl, struct pending *p)
{
	return sl->key.lock == p->lock && sl->key.type == p->type &&
	       sl->key.stack_id == p->stack_id && sl->key.mm_tgid == p->mm_tgid;
}

/*
 * A wait that is over, d long, into this CPU's fold cache: its count, time
 * and maximum per lock, type, stack and mm, and its lock's histogram.
 */
static __always_inline void fold_wait(struct pending *p, __u64 d)
{
	__u32 zero = 0;
	struct fold_slots *fs = bpf_map_lookup_elem(&fold_cache, &zero);
	struct fold_slot *sl, *sl2;
	__u32 i;

	if (!fs)
		return;
	i = (__u32)(p->lock >> 6) ^ (__u32)(p->lock >> 16) ^ p->type ^ (__u32)p->stack_id * 7;
	sl = &fs->s[wolf_bound(i, FOLD_SLOTS - 1)];
	if (!fold_holds(sl, p)) {
		sl2 = &fs->s[wolf_bound(i ^ 1, FOLD_SLOTS - 1)];
		if (fold_holds(sl2, p)) {
			sl = sl2;
		} else if (sl2->val.count < sl->val.count) {
			/* The pair's busier key stays (a lock waited for all
			 * the time, not one of the page-table locks that are
			 * each waited for a few times). */
			sl = sl2;
		}
	}
	if (!fold_holds(sl, p)) {
		if (sl->val.count == 1) {
			fold_flush_one(sl); /* and cleared */
			stat_inc(STAT_FOLD_FLUSH);
		} else if (sl->val.count) {
			fold_flush(sl);
			stat_inc(STAT_FOLD_FLUSH);
			__builtin_memset(sl, 0, sizeof(*sl));
		}
		sl->key.lock = p->lock;
		sl->key.type = p->type;
		sl->key.stack_id = p->stack_id;
		sl->key.mm_tgid = p->mm_tgid;
	}
	__u64 n = p->weight > 1 ? p->weight : 1;

	sl->val.count += n;
	sl->val.total_ns += d * n;
	wolf_max_tag_at(&sl->val.max, d, p->tid, p->end_win);
	if (p->owner_kind == OWNER_READERS)
		sl->val.owner_readers += n;
	if (p->behind_writer)
		sl->val.writer_head += n;
	wolf_hist_add_local_n(&sl->hist, d, n, p->end_win);
}

/* A spin wait that is over into the fold cache; p->start_ns is cleared. */
static __always_inline void fold_spin(struct pending *p)
{
	__u64 d = p->end_ns - p->start_ns;

	p->start_ns = 0;
	p->end_ns = 0;
	fold_wait(p, d);
}

/*
 * The thread's waits folded in its pending entry into its waiters entry
 * (per CPU, as the map: plain adds), named as the thread is now.
 */
static __always_inline void waiter_flush(struct pending *p, __u32 tid)
{
	struct task_key tk = { .lock = p->acc_lock, .tid = tid };
	struct task_val *tv = bpf_map_lookup_elem(&waiters, &tk);

	if (!tv) {
		struct task_val tz = { .tgid = p->tgid };

		__builtin_memcpy(tz.comm, p->comm, sizeof(tz.comm));
		tv = lookup_or_init(&waiters, &tk, &tz);
	}
	if (tv) {
		tv->count += p->acc_count;
		tv->total_ns += p->acc_total_ns;
		wolf_max_merge(&tv->max_ns, &p->acc_max);
	} else {
		stat_inc(STAT_TASKS_FULL);
	}
	p->acc_count = 0;
	p->acc_total_ns = 0;
}

/*
 * Fold a wait that is over into the aggregations; p->start_ns is cleared.
 * Counts and sums go to the window the fold happens in, maxima to the one
 * the wait ended in (user space folded it into that window's report
 * already if it was still unfolded then: see collect.go).
 */
static __always_inline void account(struct pending *p, const bool can_walk)
{
	__u64 d = p->end_ns - p->start_ns;
	__u64 start = p->start_ns;
	__u64 n = p->weight > 1 ? p->weight : 1; /* a storm's sample stands for n */
	__u32 tid = p->tid;

	p->start_ns = 0;
	p->end_ns = 0;

	fold_wait(p, d);

	if (spin_type(p->type))
		return; /* per-task and owner detail for sleeping locks only */
	if (p->mm_tgid)
		account_mm_wait(p, d, n);

	if (p->acc_count && p->acc_lock != p->lock)
		waiter_flush(p, tid);
	if (!p->acc_count) {
		p->acc_lock = p->lock;
		__builtin_memset(&p->acc_max, 0, sizeof(p->acc_max));
	}
	p->acc_count += n;
	p->acc_total_ns += d * n;
	wolf_max_tag_at(&p->acc_max, d, 0, p->end_win);

	if (p->owner_kind == OWNER_NONE)
		return;
	struct owner_key ok = { .lock = p->lock,
				.owner_tid = p->owner_tid,
				.owner_stack_id = p->owner_stack_id,
				.owner_kind = p->owner_kind };
	struct owner_val *ov = bpf_map_lookup_elem(&owners, &ok);
	if (!ov) {
		/* Named once per owner entry rather than at every begin. */
		__u32 zero = 0;
		struct owner_val *oz = bpf_map_lookup_elem(&owner_scratch, &zero);

		if (oz) {
			__builtin_memset(oz, 0, sizeof(*oz));
			owner_name(p, oz, can_walk);
			ov = lookup_or_init(&owners, &ok, oz);
		}
	}
	if (ov) {
		ov->count += n;
		ov->total_ns += d * n;
		wolf_max_tag_at(&ov->max_ns, d, 0, p->end_win);
		span_add(&ov->span, p->end_win, start, p->owner_rt, p->owner_rd);
	} else {
		stat_inc(STAT_OWNERS_FULL);
	}
}

/* fold_spin as a global function, for tracepoints (5.19+): a pointer. */
__noinline int fold_spin_cpu(struct pending *p)
{
	if (p && p->start_ns && p->end_ns)
		fold_spin(p);
	return 0;
}

/*
 * account as global functions, one per kind of program. From tracepoints
 * (Linux 5.19+) p is the thread's pending entry, passed as a pointer
 * (5.12+); from kprobes (older kernels too) the entry is looked up again.
 */
__noinline int account_btf(struct pending *p)
{
	if (p && p->start_ns && p->end_ns)
		account(p, true);
	return 0;
}

__noinline int account_raw(struct pending *p)
{
	if (p && p->start_ns && p->end_ns)
		account(p, false);
	return 0;
}

__noinline int account_kp(__u32 tid)
{
	struct pending *p = bpf_map_lookup_elem(&pending_task, &tid);

	if (p && p->start_ns && p->end_ns)
		account(p, false);
	return 0;
}

/* The lock is held here: timestamp the wait's end, fold it in later. */
static __always_inline void on_end(__u64 lock)
{
	__u32 zero = 0, tid;
	struct pending *p;
	__u64 now;

	stat_inc(STAT_END);
	p = bpf_map_lookup_elem(&pending_cpu, &zero);
	if (p && p->skip_lock == lock) {
		p->skip_lock = 0; /* a spin wait the storm left untimed */
		return;
	}
	if (p && p->start_ns && !p->end_ns && p->lock == lock) {
		now = bpf_ktime_get_ns();
		if (now - p->start_ns < max_spin_ns) {
			p->end_ns = now;
			p->end_win = wolf_window_now();
		} else {
			stat_inc(STAT_STALE);
			p->start_ns = 0;
		}
		return;
	}
	/*
	 * No thread's entry awaits an end: this one's wait began before
	 * wolf saw it (the begin duty-cycled, or not yet attached).
	 */
	if (none_awaited()) {
		if (!target_tgid && !target_lock)
			stat_inc(STAT_UNMATCHED_END);
		return;
	}
	tid = (__u32)bpf_get_current_pid_tgid();
	p = bpf_map_lookup_elem(&pending_task, &tid);
	if (p && p->skip_lock == lock) {
		p->skip_lock = 0; /* a sleeping wait the storm left untimed */
		await_note(true, false);
		return;
	}
	if (!p || !p->start_ns || p->end_ns || p->lock != lock) {
		if (!target_tgid && !target_lock)
			stat_inc(STAT_UNMATCHED_END);
		return;
	}
	now = bpf_ktime_get_ns();
	p->end_ns = now;
	p->end_win = wolf_window_now();
	await_note(true, awaiting(p)); /* a mark and a timed wait at once: never */
	/* The queue model needs the waiter gone now, not at its next wait. */
	if (queued_type(p->type))
		queue_leave(lock, p->type, now);
}

/* BTF tracepoints: typed arguments, and kfuncs for the owner's stack. */
SEC("tp_btf/contention_begin")
int BPF_PROG(btf_contention_begin, void *lock, unsigned int flags)
{
	on_begin(ctx, (__u64)lock, flags, true, false);
	return 0;
}

SEC("tp_btf/contention_end")
int BPF_PROG(btf_contention_end, void *lock, int ret)
{
	on_end((__u64)lock);
	return 0;
}

/* Raw tracepoints for kernels without BTF tracepoints: no owner stacks. */
SEC("raw_tp/contention_begin")
int BPF_PROG(raw_contention_begin, void *lock, unsigned int flags)
{
	on_begin(ctx, (__u64)lock, flags, false, false);
	return 0;
}

SEC("raw_tp/contention_end")
int BPF_PROG(raw_contention_end, void *lock, int ret)
{
	on_end((__u64)lock);
	return 0;
}

/*
 * Kprobes on the sleeping locks' slow paths, for kernels without the
 * lock:contention_* tracepoints (before 5.19), the way libbpf-tools'
 * klockstat finds lock waits: entry begins a wait (only contended
 * acquires reach a slow path). User space attaches them to the functions
 * this kernel has: __mutex_lock_slowpath and its interruptible and
 * killable twins, rwsem_down_read_slowpath, rwsem_down_write_slowpath.
 * Spin locks are left alone: a kprobe inside their slow path costs more
 * than the waits it would time.
 *
 * The end is not a kretprobe: on those kernels its trampoline replaces
 * the waiter's return address, and the waiter's stack (which wolf hung
 * and /proc/PID/stack read) then ends there. Instead, sched_switch marks a
 * waiter that goes to sleep inside a slow path (its stack, against the
 * slow paths' text in slow_ranges), and the wait ends when that waiter
 * next gets a CPU: woken, it takes the lock (or finds the wait
 * interrupted). A wait that spins to the lock without sleeping is not
 * timed; the next begin replaces it.
 */
#define MAX_SLOW_RANGES 8
#define SLOW_STACK_DEPTH 12

struct slow_range {
	__u64 start;
	__u64 end;
};

const volatile struct slow_range slow_ranges[MAX_SLOW_RANGES] = {};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64[SLOW_STACK_DEPTH]);
} slow_stack SEC(".maps");

/* Is the current task's kernel stack inside a slow path? */
static __always_inline bool in_slowpath(void *ctx)
{
	__u32 zero = 0;
	__u64 *ips = bpf_map_lookup_elem(&slow_stack, &zero);
	long n;

	if (!ips)
		return false;
	n = bpf_get_stack(ctx, ips, SLOW_STACK_DEPTH * sizeof(__u64), 0);
	for (int i = 0; i < SLOW_STACK_DEPTH; i++) {
		if (i * 8 >= n)
			break;
		for (int j = 0; j < MAX_SLOW_RANGES; j++) {
			if (slow_ranges[j].start && ips[i] >= slow_ranges[j].start &&
			    ips[i] < slow_ranges[j].end)
				return true;
		}
	}
	return false;
}

SEC("raw_tp/sched_switch")
int BPF_PROG(kp_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u32 tid = BPF_CORE_READ(prev, pid);
	struct pending *p = bpf_map_lookup_elem(&pending_task, &tid);

	if (p && p->start_ns && !p->end_ns && !p->slept && !preempt &&
	    wolf_task_state(prev) != WOLF_TASK_RUNNING && in_slowpath(ctx))
		p->slept = 1;
	tid = BPF_CORE_READ(next, pid);
	p = bpf_map_lookup_elem(&pending_task, &tid);
	if (p && p->slept && p->start_ns && !p->end_ns) {
		p->slept = 0;
		p->end_ns = bpf_ktime_get_ns();
		await_note(true, awaiting(p));
		p->end_win = wolf_window_now();
		if (queued_type(p->type))
			queue_leave(p->lock, p->type, p->end_ns);
	}
	return 0;
}

SEC("kprobe")
int kp_mutex_begin(void *ctx)
{
	on_begin(ctx, wolf_kprobe_arg0(ctx), WOLF_LCB_F_MUTEX, false, true);
	return 0;
}

SEC("kprobe")
int kp_rwsem_read_begin(void *ctx)
{
	on_begin(ctx, wolf_kprobe_arg0(ctx), WOLF_LCB_F_READ, false, true);
	return 0;
}

SEC("kprobe")
int kp_rwsem_write_begin(void *ctx)
{
	on_begin(ctx, wolf_kprobe_arg0(ctx), WOLF_LCB_F_WRITE, false, true);
	return 0;
}

/* ---- mmap_lock: holds, waits, and what the holder does meanwhile ---- */

/*
 * One thread's mmap_lock hold; hold_start_ns == 0 means it holds none.
 * Waits are not timed here: an uncontended acquire waits for nothing, and
 * contended ones reach contention_end, which files them under the
 * thread (account_mm_wait), so mmap_lock_start_locking is left alone.
 */
struct mm_thread {
	__u64 hold_start_ns;
	__u64 hold_mm;
	__u64 hold_lock;       /* &hold_mm->mmap_lock: the contention's key */
	__u64 runtime_ns;      /* the holder's CPU time at acquire */
	__u64 csw;	       /* its context switches at acquire */
	__u64 run_delay;       /* its time waiting on a run queue at acquire */
	__u64 throttled_since; /* switched out while its cgroup was throttled */
	__u64 throttled_ns;    /* throttled time during this hold */
	__u32 write;
	__u32 mm_tgid;
	/* Memory reclaim done while holding it (ClickHouse's per-hold table). */
	__u64 reclaim_start_ns;
	__u64 reclaim_ns;
	__u64 reclaim_calls;
	__u64 pages_scanned;
	__u64 pages_reclaimed;
	__u64 pages_activated; /* nr_activate[0] + [1]: scanned, then kept active */
	__u64 pages_ref_keep;  /* referenced, kept on the inactive list */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* tid */
	__type(value, struct mm_thread);
} mm_threads SEC(".maps");

/* The reclaim investigator's, when reclaim_shared (else one unused entry). */
WOLF_RECLAIM_TASKS()

static __always_inline struct mm_thread *mm_thread_of(__u32 tid)
{
	struct mm_thread z = {};
	struct mm_thread *t = lookup_or_init(&mm_threads, &tid, &z);

	if (!t)
		stat_inc(STAT_MM_HOLDS_FULL);
	return t;
}

struct mm_key {
	__u32 tgid; /* the holder's process */
	__u32 tid;
	__u32 mm_tgid; /* whose mmap_lock (differs for /proc readers) */
	__u32 write;
};

struct mm_val {
	struct wolf_hist hold;
	struct wolf_hist wait;
	char comm[WOLF_COMM_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2048);
	__type(key, struct mm_key);
	__type(value, struct mm_val);
} mm_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mm_val);
} zero_mm SEC(".maps");

/* A hold above hold_threshold_ns, with what it cost. */
struct hold_event {
	__u64 start_ns;
	__u64 hold_ns;
	__u64 runtime_ns; /* CPU time the holder got during the hold */
	__u64 csw;	  /* context switches during the hold */
	__u64 mm;
	__u32 tid;
	__u32 tgid;
	__u32 mm_tgid;
	__u32 write;
	__s32 stack_id; /* kernel stack at release */
	__u32 pad;
	char comm[WOLF_COMM_LEN];
	__u64 reclaim_ns;
	__u64 reclaim_calls;
	__u64 pages_scanned;
	__u64 pages_reclaimed;
	__u64 pages_activated;
	__u64 pages_ref_keep;
	__u64 runnable_ns;  /* waiting on a run queue during the hold (throttled included) */
	__u64 throttled_ns; /* of which its cgroup was throttled (scheduler-seen) */
	__u64 lock;	    /* the mmap_lock's address, as contention tracepoints see it */
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} holds SEC(".maps");

/*
 * Holders switched out throttled and not yet back: while it is zero, the
 * switch-in side skips its lookup, so sched_switch costs a few loads.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} throttled_pending SEC(".maps");

/*
 * Before 6.14 the tracepoints also carried the memcg path, before write.
 * Each read uses a constant offset (the verifier refuses a computed ctx
 * pointer) and the barrier keeps clang from merging the two into one.
 */
#define WOLF_CTX_ARG(ctx, i)                     \
	({                                       \
		__u64 __v = ((__u64 *)(ctx))[i]; \
		asm volatile("" : "+r"(__v));    \
		__v;                             \
	})

static __always_inline bool mm_arg_write(__u64 *ctx)
{
	if (mmap_has_memcg_path)
		return WOLF_CTX_ARG(ctx, 2);
	return WOLF_CTX_ARG(ctx, 1);
}

static __always_inline bool mm_arg_success(__u64 *ctx)
{
	if (mmap_has_memcg_path)
		return WOLF_CTX_ARG(ctx, 3);
	return WOLF_CTX_ARG(ctx, 2);
}

static __always_inline __u32 mm_owner_tgid(struct mm_struct *mm)
{
	struct task_struct *cur = (struct task_struct *)bpf_get_current_task();

	if (BPF_CORE_READ(cur, mm) == mm)
		return BPF_CORE_READ(cur, tgid);
	if (bpf_core_field_exists(mm->owner))
		return BPF_CORE_READ(mm, owner, tgid); /* CONFIG_MEMCG */
	return 0;
}

/* k's entry, created if new, named comm (NULL: the current task's). */
static __always_inline struct mm_val *mm_stats_named(struct mm_key *k, const char *comm)
{
	__u32 zero = 0;
	struct mm_val *z, *v = bpf_map_lookup_elem(&mm_stats, k);

	if (v)
		return v;
	z = bpf_map_lookup_elem(&zero_mm, &zero);
	if (!z)
		return 0;
	v = lookup_or_init(&mm_stats, k, z);
	if (!v)
		stat_inc(STAT_MM_STATS_FULL);
	else if (!v->comm[0] && comm)
		__builtin_memcpy(v->comm, comm, sizeof(v->comm));
	else if (!v->comm[0])
		bpf_get_current_comm(&v->comm, sizeof(v->comm));
	return v;
}

/* A contended wait for the thread's own mmap_lock, into its histogram. */
static __always_inline void account_mm_wait(struct pending *p, __u64 d, __u64 n)
{
	struct mm_key k = { .tgid = p->tgid,
			    .tid = p->tid,
			    .mm_tgid = p->mm_tgid,
			    .write = p->type == TYPE_RWSEM_WRITE };
	struct mm_val *v = mm_stats_named(&k, 0);

	if (v)
		wolf_hist_add_local_n(&v->wait, d, n, p->end_win); /* keyed by tid */
}

static __always_inline bool mm_wanted(__u64 pid_tgid)
{
	if (self_tgid && (pid_tgid >> 32) == self_tgid)
		return false;
	return !target_tgid || (pid_tgid >> 32) == target_tgid;
}

/*
 * A hold begins. With btf (5.11+: bpf_get_current_task_btf), the holder's
 * clocks are plain loads from its task_struct; without, each is a probe
 * read, a helper call of its own: the acquire runs for every mmap_lock
 * taken on the host (an mmap-heavy workload takes it 70 000 times a
 * second), and four probe reads were half of its cost.
 */
static __always_inline int mm_acquired(__u64 *ctx, const bool btf)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	struct mm_struct *mm = (struct mm_struct *)ctx[0];
	bool write = mm_arg_write(ctx);
	struct mm_thread *t;

	stat_inc(STAT_MM_EVENTS);
	if (!mm_wanted(pid_tgid) || !mm_arg_success(ctx))
		return 0;
	t = mm_thread_of(tid);
	if (!t)
		return 0;
	if (t->hold_start_ns && t->hold_mm == (__u64)mm) {
		/* mmap_write_downgrade: the hold goes on, now for reading. */
		if (t->write && !write)
			return 0;
		/*
		 * The same lock taken again in the same mode: the last hold's
		 * release was not seen (the programs attach one at a time, so
		 * a release between the acquire's attach and its own is
		 * missed). Carried on, that hold would span the thread's sleep
		 * in between: khugepaged's 10 s between scans of a process, a
		 * critical "hold" on an idle host. It is dropped, counted.
		 */
		stat_inc(STAT_MM_LOST_RELEASE);
	}
	if (btf) {
		struct task_struct *cur = bpf_get_current_task_btf();

		if (cur->mm == mm)
			t->mm_tgid = cur->tgid;
		else
			t->mm_tgid = mm_owner_tgid(mm);
		t->runtime_ns = cur->se.sum_exec_runtime;
		t->csw = cur->nvcsw + cur->nivcsw;
		t->run_delay = 0;
		if (bpf_core_field_exists(cur->sched_info.run_delay))
			t->run_delay = cur->sched_info.run_delay;
	} else {
		struct task_struct *cur = (struct task_struct *)bpf_get_current_task();

		t->mm_tgid = mm_owner_tgid(mm);
		t->runtime_ns = BPF_CORE_READ(cur, se.sum_exec_runtime);
		t->csw = BPF_CORE_READ(cur, nvcsw) + BPF_CORE_READ(cur, nivcsw);
		t->run_delay = task_run_delay(cur);
	}
	t->hold_start_ns = now;
	t->hold_mm = (__u64)mm;
	t->hold_lock = (__u64)mm + bpf_core_field_offset(struct mm_struct, mmap_lock);
	t->throttled_since = 0;
	t->throttled_ns = 0;
	t->write = write;
	t->reclaim_start_ns = 0;
	if (reclaim_shared) {
		/* The thread's reclaim so far: the release takes the difference. */
		struct wolf_reclaim_task *rt = bpf_map_lookup_elem(&reclaim_tasks, &tid);

		t->reclaim_ns = rt ? rt->ns : 0;
		t->reclaim_calls = rt ? rt->calls : 0;
		t->pages_scanned = rt ? rt->scanned : 0;
		t->pages_reclaimed = rt ? rt->reclaimed : 0;
		t->pages_activated = rt ? rt->activated : 0;
		t->pages_ref_keep = rt ? rt->ref_keep : 0;
		return 0;
	}
	t->reclaim_ns = 0;
	t->reclaim_calls = 0;
	t->pages_scanned = 0;
	t->pages_reclaimed = 0;
	t->pages_activated = 0;
	t->pages_ref_keep = 0;
	return 0;
}

/*
 * The reclaim a hold did: with reclaim_shared, the thread's totals now
 * minus at acquire (a thread whose entry was evicted and made again in
 * between counts from zero); else what the vmscan programs added up.
 */
static __always_inline void hold_reclaim(struct hold_event *e, struct mm_thread *t, __u32 tid)
{
	if (reclaim_shared) {
		struct wolf_reclaim_task *rt = bpf_map_lookup_elem(&reclaim_tasks, &tid);

		if (!rt || rt->calls < t->reclaim_calls) {
			e->reclaim_calls = rt ? rt->calls : 0;
			e->reclaim_ns = rt ? rt->ns : 0;
			e->pages_scanned = rt ? rt->scanned : 0;
			e->pages_reclaimed = rt ? rt->reclaimed : 0;
			e->pages_activated = rt ? rt->activated : 0;
			e->pages_ref_keep = rt ? rt->ref_keep : 0;
			return;
		}
		e->reclaim_calls = rt->calls - t->reclaim_calls;
		e->reclaim_ns = rt->ns - t->reclaim_ns;
		e->pages_scanned = rt->scanned - t->pages_scanned;
		e->pages_reclaimed = rt->reclaimed - t->pages_reclaimed;
		e->pages_activated = rt->activated - t->pages_activated;
		e->pages_ref_keep = rt->ref_keep - t->pages_ref_keep;
		return;
	}
	e->reclaim_ns = t->reclaim_ns;
	e->reclaim_calls = t->reclaim_calls;
	e->pages_scanned = t->pages_scanned;
	e->pages_reclaimed = t->pages_reclaimed;
	e->pages_activated = t->pages_activated;
	e->pages_ref_keep = t->pages_ref_keep;
}

SEC("raw_tp/mmap_lock_acquire_returned")
int on_mm_acquired(__u64 *ctx)
{
	return mm_acquired(ctx, true);
}

/* The same, for kernels before 5.11 (no bpf_get_current_task_btf). */
SEC("raw_tp/mmap_lock_acquire_returned")
int on_mm_acquired_probe(__u64 *ctx)
{
	return mm_acquired(ctx, false);
}

/*
 * Holds fold into a per-CPU cache by thread, as waits do (fold_cache):
 * the release runs as often as the acquire, and the hash lookup of the
 * thread's mm_stats entry was most of it. A thread's holds add to its
 * slot while it keeps the slot; another thread's flushes them first.
 * 32 slots (19 KB a CPU): a storm's 32 faulting threads, where 16 flushed
 * a slot at most releases.
 */
#define MM_FOLD_SLOTS 32

struct mm_fold_slot {
	struct mm_key key;
	char comm[WOLF_COMM_LEN]; /* the thread's, for a new mm_stats entry */
	struct wolf_hist hold;
};

struct mm_fold_slots {
	struct mm_fold_slot s[MM_FOLD_SLOTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mm_fold_slots);
} mm_fold SEC(".maps");

static __always_inline void mm_fold_hold(struct mm_key *k, __u64 d)
{
	__u32 zero = 0;
	struct mm_fold_slots *fs = bpf_map_lookup_elem(&mm_fold, &zero);
	struct mm_fold_slot *sl;

	if (!fs)
		return;
	sl = &fs->s[wolf_bound(k->tid ^ (k->tid >> 4) ^ k->write, MM_FOLD_SLOTS - 1)];
	if (sl->key.tid != k->tid || sl->key.tgid != k->tgid || sl->key.mm_tgid != k->mm_tgid ||
	    sl->key.write != k->write) {
		if (sl->hold.count) {
			/* Another thread runs here: the slot's thread's name. */
			struct mm_val *v = mm_stats_named(&sl->key, sl->comm);

			if (v)
				hist_merge(&v->hold, &sl->hold);
		}
		__builtin_memset(sl, 0, sizeof(*sl));
		sl->key = *k;
		bpf_get_current_comm(&sl->comm, sizeof(sl->comm));
	}
	wolf_hist_add_local(&sl->hold, d);
}

/*
 * A hold ends. A long one goes to user space with what it cost the
 * holder: with btf, its clocks are plain loads, as at the acquire.
 */
static __always_inline int mm_released(__u64 *ctx, const bool btf)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	struct mm_thread *t;

	stat_inc(STAT_MM_EVENTS);
	if (!mm_wanted(pid_tgid))
		return 0;
	t = bpf_map_lookup_elem(&mm_threads, &tid);
	if (!t || !t->hold_start_ns || t->hold_mm != ctx[0]) {
		stat_inc(STAT_MM_UNMATCHED);
		return 0;
	}
	__u64 d = now - t->hold_start_ns;
	struct mm_key k = {
		.tgid = pid_tgid >> 32, .tid = tid, .mm_tgid = t->mm_tgid, .write = t->write
	};
	mm_fold_hold(&k, d);
	if (d >= hold_threshold_ns) {
		struct hold_event *e = bpf_ringbuf_reserve(&holds, sizeof(*e), 0);
		__u64 runtime, csw, run_delay = 0;

		if (btf) {
			struct task_struct *cur = bpf_get_current_task_btf();

			runtime = cur->se.sum_exec_runtime;
			csw = cur->nvcsw + cur->nivcsw;
			if (bpf_core_field_exists(cur->sched_info.run_delay))
				run_delay = cur->sched_info.run_delay;
		} else {
			struct task_struct *cur = (struct task_struct *)bpf_get_current_task();

			runtime = BPF_CORE_READ(cur, se.sum_exec_runtime);
			csw = BPF_CORE_READ(cur, nvcsw) + BPF_CORE_READ(cur, nivcsw);
			run_delay = task_run_delay(cur);
		}
		if (e) {
			e->start_ns = t->hold_start_ns;
			e->hold_ns = d;
			e->runtime_ns = runtime - t->runtime_ns;
			e->csw = csw - t->csw;
			e->mm = t->hold_mm;
			e->tid = tid;
			e->tgid = pid_tgid >> 32;
			e->mm_tgid = t->mm_tgid;
			e->write = t->write;
			/*
			 * Under a storm most holds of a faulting process are
			 * long (reclaim under the lock), and the walk through
			 * reclaim's frames costs microseconds: the hold is
			 * reported whatever the budget, its stack when it allows.
			 */
			if (wolf_detail_take(GATE_HOLD, now)) {
				e->stack_id = bpf_get_stackid(ctx, &stacks, 0);
			} else {
				e->stack_id = -1;
				stat_inc(STAT_STACK_SKIPPED);
			}
			bpf_get_current_comm(&e->comm, sizeof(e->comm));
			hold_reclaim(e, t, tid);
			e->runnable_ns = run_delay - t->run_delay;
			e->lock = t->hold_lock;
			e->throttled_ns = t->throttled_ns;
			bpf_ringbuf_submit(e, 0);
		} else {
			stat_inc(STAT_HOLD_DROPS);
		}
	}
	t->hold_start_ns = 0;
	return 0;
}

SEC("raw_tp/mmap_lock_released")
int on_mm_released(__u64 *ctx)
{
	return mm_released(ctx, true);
}

/* The same, for kernels before 5.11 (no bpf_get_current_task_btf). */
SEC("raw_tp/mmap_lock_released")
int on_mm_released_probe(__u64 *ctx)
{
	return mm_released(ctx, false);
}

/*
 * ---- memory reclaim under mmap_lock ----
 * Only threads holding an mmap_lock are counted; reclaim is rare, so a
 * lookup per reclaim event costs nothing worth measuring.
 */
static __always_inline struct mm_thread *holding(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct mm_thread *t = bpf_map_lookup_elem(&mm_threads, &tid);

	return t && t->hold_start_ns ? t : 0;
}

static __always_inline void reclaim_begin(void)
{
	struct mm_thread *t = holding();

	if (t) {
		t->reclaim_start_ns = bpf_ktime_get_ns();
		t->reclaim_calls += 1;
	}
}

static __always_inline void reclaim_end(void)
{
	struct mm_thread *t = holding();

	if (t && t->reclaim_start_ns) {
		t->reclaim_ns += bpf_ktime_get_ns() - t->reclaim_start_ns;
		t->reclaim_start_ns = 0;
	}
}

SEC("raw_tp/mm_vmscan_memcg_reclaim_begin")
int on_memcg_reclaim_begin(void *ctx)
{
	reclaim_begin();
	return 0;
}

SEC("raw_tp/mm_vmscan_memcg_reclaim_end")
int on_memcg_reclaim_end(void *ctx)
{
	reclaim_end();
	return 0;
}

SEC("raw_tp/mm_vmscan_direct_reclaim_begin")
int on_direct_reclaim_begin(void *ctx)
{
	reclaim_begin();
	return 0;
}

SEC("raw_tp/mm_vmscan_direct_reclaim_end")
int on_direct_reclaim_end(void *ctx)
{
	reclaim_end();
	return 0;
}

SEC("raw_tp/mm_vmscan_lru_shrink_inactive")
int BPF_PROG(on_shrink_inactive, int nid, unsigned long nr_scanned, unsigned long nr_reclaimed,
	     struct reclaim_stat *stat)
{
	struct mm_thread *t = holding();

	if (t) {
		t->pages_scanned += nr_scanned;
		t->pages_reclaimed += nr_reclaimed;
		t->pages_activated +=
			BPF_CORE_READ(stat, nr_activate[0]) + BPF_CORE_READ(stat, nr_activate[1]);
		t->pages_ref_keep += BPF_CORE_READ(stat, nr_ref_keep);
	}
	return 0;
}

/*
 * ---- holders throttled by CFS bandwidth control ----
 * A holder switched out while runnable whose cgroup is throttled waits
 * for the next period with the lock held. Which test says "throttled"
 * depends on the kernel: since 6.18 a task is throttled on its way back
 * to user space (task->throttled), so a holder inside the kernel never
 * is; before, a throttled cgroup's run queue took every task of it off
 * the CPU at once (cfs_rq->throttle_count counts throttled ancestors too).
 */
struct task_struct___618 {
	bool throttled;
} __attribute__((preserve_access_index));

static __always_inline bool task_throttled(struct task_struct *t)
{
	struct task_struct___618 *t618 = (void *)t;

	/* t is a BTF pointer (sched_switch's prev): direct loads. */
	if (bpf_core_field_exists(t618->throttled))
		return t618->throttled;
	if (bpf_core_field_exists(t->se.cfs_rq))
		return t->se.cfs_rq->throttle_count > 0;
	return false;
}

/* A BTF pointer's state (5.14 renamed state to __state): a direct load. */
static __always_inline unsigned int switch_state(struct task_struct *t)
{
	if (bpf_core_field_exists(t->__state))
		return t->__state;
	return ((struct task_struct___pre514 *)t)->state;
}

/* Throttled only on the way back to user space (6.18+). */
static __always_inline bool throttle_at_user_return(struct task_struct *t)
{
	struct task_struct___618 *t618 = (void *)t;

	return bpf_core_field_exists(t618->throttled);
}

/*
 * Attached only on kernels that throttle a group's run queue as a whole
 * (before 6.18): since, a task is throttled on its way back to user space,
 * where it holds no mmap_lock (user space says so without watching).
 */
SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u32 zero = 0;
	__u64 *pending = bpf_map_lookup_elem(&throttled_pending, &zero);

	if (!pending)
		return 0;
	/*
	 * Switched out runnable with its cgroup throttled, holding? Direct
	 * loads (prev and next are BTF pointers): this runs at every switch.
	 */
	if (switch_state(prev) == WOLF_TASK_RUNNING && task_throttled(prev)) {
		__u32 tid = prev->pid;
		struct mm_thread *t = bpf_map_lookup_elem(&mm_threads, &tid);

		if (t && t->hold_start_ns && throttle_at_user_return(prev)) {
			/*
			 * A task throttled on its way back to user space holds
			 * no mmap_lock: the hold on record is one whose release
			 * was not seen. Dropped, and counted, rather than
			 * reported as a hold that goes on, throttled.
			 */
			t->hold_start_ns = 0;
			stat_inc(STAT_MM_STALE_HOLD);
		} else if (t && t->hold_start_ns && !t->throttled_since) {
			t->throttled_since = bpf_ktime_get_ns();
			__sync_fetch_and_add(pending, 1);
			stat_inc(STAT_THROTTLED_HOLDS);
		}
	}
	if (!*pending)
		return 0;
	__u32 ntid = next->pid;
	struct mm_thread *n = bpf_map_lookup_elem(&mm_threads, &ntid);

	if (n && n->throttled_since) {
		n->throttled_ns += bpf_ktime_get_ns() - n->throttled_since;
		n->throttled_since = 0;
		__sync_fetch_and_add(pending, -1);
	}
	return 0;
}

/* ---- profile under lock ---- */

struct prof_key {
	__u32 tgid;
	__u32 tid;
	__s32 stack_id;
	__u32 write;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct prof_key);
	__type(value, __u64);
} under_lock SEC(".maps");

SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	struct mm_thread *h;

	stat_inc(STAT_SAMPLES);
	if (!tid)
		return 0; /* idle */
	h = bpf_map_lookup_elem(&mm_threads, &tid);
	if (!h || !h->hold_start_ns)
		return 0;
	stat_inc(STAT_SAMPLES_UNDER_LOCK);
	struct prof_key k = { .tgid = pid_tgid >> 32, .tid = tid, .write = h->write };
	k.stack_id = bpf_get_stackid(ctx, &stacks, 0);
	if (k.stack_id < 0) {
		stat_inc(STAT_STACK_ERR);
		return 0;
	}
	__u64 one = 1;
	__u64 *c = bpf_map_lookup_elem(&under_lock, &k);
	if (c)
		__sync_fetch_and_add(c, 1);
	else if (bpf_map_update_elem(&under_lock, &k, &one, BPF_NOEXIST))
		stat_inc(STAT_PROFILE_FULL);
	return 0;
}

/* Keep types that only user space reads in the object's BTF, for bpf2go. */
const struct hold_event *unused_hold_event __attribute__((unused));
