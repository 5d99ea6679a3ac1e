//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * wolf io: block I/O per device, cgroup and process, and who waits for it.
 *
 * Requests. A request is born when the block layer makes it out of a bio
 * (rq->start_time_ns, the kernel's own stamp), issued to the driver
 * (block_rq_issue) and completed (block_rq_complete): queued is birth to
 * issue, on the device is issue to completion. The first of insert and
 * issue runs in the submitter's context on every kernel since 5.10 (a
 * request goes to a scheduler or plug from there, or straight to the
 * driver): that task is the request's issuer, and the cgroup is the bio's
 * (bio->bi_blkg), which is the one its bytes are charged to, whoever
 * issues them (the flusher writing back a cgroup's pages, blk-throttle's
 * worker dispatching what it held). A request born in blk-throttle's
 * dispatch work was held there: it is flagged so.
 *
 * Per request, two programs run on the hot path (issue and complete) and
 * one array slot, indexed by a hash of the request's address, carries its
 * issuer and times from one to the other; no hash map is written per
 * request. Above a rate, only one request in 2^n is followed so (struct
 * attr): the others are counted and timed by the completion alone, from
 * the kernel's own stamps, their cgroup read from their bio.
 * Completions add to one hash entry per (disk, cgroup, issuer) and one set
 * of histograms per (disk, cgroup): the per-disk and per-cgroup totals are
 * sums of those, made in user space.
 *
 * Waiters. A task that sleeps for I/O (io_schedule: in_iowait) is noted at
 * sched_switch; when it is woken (sched_waking), the request completing on
 * the waking CPU at that moment, if any, is the one it waited for: a
 * completion wakes its waiters from inside the completion (bio_endio ->
 * bi_end_io). So each wait is tied to a disk, a cgroup and a request's
 * times; the part of the wait before the request existed is where the
 * bio was held before the block layer made a request of it (blk-throttle,
 * when the request was born in its dispatcher). Waits this long or longer
 * cross a ring buffer with the waiter's kernel stack, which names the wait
 * site (writeback, a journal, wbt, tags).
 *
 * Writeback and filesystems: balance_dirty_pages pauses (dirty
 * throttling), jbd2 commits phase by phase, fsync and fdatasync per
 * process and device, XFS log grant sleeps, wbt and iocost state.
 *
 * Every map is bounded and every refused insert is counted in stats.
 */
#include "wolf.h"

char LICENSE[] SEC("license") = "GPL";

/* include/linux/blk_types.h: the operation is the low REQ_OP_BITS bits. */
#define WOLF_REQ_OP_MASK 0xff
#define WOLF_REQ_OP_READ 0
#define WOLF_REQ_OP_WRITE 1

/* Operation classes. */
#define OP_READ 0
#define OP_WRITE 1
#define OP_OTHER 2 /* flush, discard, write zeroes, … */
#define NR_OPS 3

/* Request and wait flags. */
#define F_THROTTLED 1	 /* born in blk-throttle's dispatch work: held there first */
#define F_KWORKER 2	 /* born in a workqueue worker (writeback, a stacked driver) */
#define F_TIMED 4	 /* birth and issue known: queued and device times are */
#define F_UNATTRIBUTED 8 /* its issuer not followed: attribution sampled (attr_shift) */
#define F_COUNTED 16	 /* a slot counted in following (never leaves the slot) */

/* Kinds of wait. */
#define WAIT_IO 0     /* an I/O sleep ended by a request's completion */
#define WAIT_OTHER 1  /* an I/O sleep ended otherwise (a timer, a qos wake-up) */
#define WAIT_DIRTY 2  /* a balance_dirty_pages pause */
#define WAIT_FSYNC 3  /* fsync or fdatasync, enter to exit */
#define WAIT_XFSLOG 4 /* an XFS log grant sleep */

#define RQ_SLOTS 16384 /* a power of two */
#define STACK_DEPTH 32

/* The address of blk_throtl_dispatch_work_fn (kallsyms), 0 if unknown. */
const volatile __u64 throtl_dispatch_fn = 0;
/* Requests this slow or slower are recorded one by one. */
const volatile __u64 slow_ns = 50000000;
/* Waits this long or longer are recorded one by one, with a stack. */
const volatile __u64 long_wait_ns = 20000000;
/*
 * A wake-up this soon after a completion on the same CPU, with no task
 * switch on it in between, is by it: a completion wakes its waiters from
 * inside itself, but one of a large request first ends writeback on every
 * page of it, which takes a while (256 pages for 1 MiB).
 */
const volatile __u64 link_ns = 2000000;
/* A commit or fsync this long wants the waiter programs. */
const volatile __u64 want_ns = 100000000;
/* --device: only this disk (major << 20 | minor); 0 for all. */
const volatile __u32 only_dev = 0;
/*
 * The bit of QUEUE_FLAG_STATS in a queue's flags (an enumerator in the
 * kernel's BTF since 5.17, found by user space), 64 when unknown: a queue
 * with it set stamps each request's issue time itself (io_start_time_ns,
 * right after block_rq_issue), so the issue program need not.
 */
const volatile __u32 queue_stats_bit = 64;

enum stat_index {
	STAT_EVENTS = 0,	 /* events of the rare programs (writeback, jbd2, fsync, …) */
	STAT_COMPLETIONS = 1,	 /* block_rq_complete runs on watched disks, as batches fold */
	STAT_UNTRACKED = 2,	 /* completions of requests born before wolf attached or lost */
	STAT_SLOT_TAKEN = 3,	 /* a request's slot held another in-flight request */
	STAT_PROC_FULL = 4,	 /* procs refused a new (disk, cgroup, issuer) */
	STAT_SLOW = 5,		 /* requests slower than slow_ns */
	STAT_SLEEP_FULL = 6,	 /* sleeps refused a sleeping task */
	STAT_WAIT_FULL = 7,	 /* waits refused a new waiter */
	STAT_SLOW_LOST = 8,	 /* slow requests the ring had no room for */
	STAT_LONG_LOST = 9,	 /* long waits the ring had no room for */
	STAT_IOWAIT_SLEEPS = 10, /* I/O sleeps seen begin */
	STAT_LINKED = 11,	 /* I/O sleeps ended by a completion */
	STAT_JOURNAL_FULL = 12,	 /* journals refused a device */
	STAT_FSYNC_FULL = 13,	 /* fsyncs refused a task */
	STAT_QOS_FULL = 14,	 /* qos refused a device */
	STAT_UNSTAMPED = 15,	 /* completions of issued requests the kernel did not stamp */
	STAT_MAX = 16,
};

WOLF_STATS()

/* Detail under wolf's CPU budget (wolf.h): the long waits' stacks, and
 * slow requests one by one. Their counts and sums are always kept. */
#define GATE_STACK 0
#define GATE_SLOW 1
WOLF_BUDGET(2)

/* One request in flight: its times from birth to completion (32 bytes: two
 * to a cache line, none across two). */
struct rq_slot {
	__u64 rq; /* the request's identity (rq_id): 0 free */
	__u64 birth_ns;
	__u64 issue_ns;
	__u32 tgid; /* the issuer: the task the request was born in */
	__u32 flags;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RQ_SLOTS);
	__type(key, __u32);
	__type(value, struct rq_slot);
} reqs SEC(".maps");

/*
 * Completed requests per (disk, cgroup, issuer), with their latency
 * histograms: birth to completion, and on the device (queued is the
 * difference). One lookup per completion; the per-disk and per-cgroup
 * figures are sums over these entries, made in user space. Histogram
 * counts are not kept (the slots add up to them): fewer atomic adds.
 */
struct io_key {
	__u32 dev;
	__u32 tgid;  /* the issuer; 0 for requests blk-throttle dispatched */
	__u32 flags; /* F_KWORKER: the issuer is a kernel worker */
	__u32 _pad;
	__u64 cgid;
};

struct io_stats {
	__u64 ops[NR_OPS];
	__u64 bytes[NR_OPS];
	__u64 throttled; /* born in blk-throttle's dispatch work */
	__u64 throttled_bytes;
	struct wolf_hist total;
	struct wolf_hist device;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct io_key);
	__type(value, struct io_stats);
} procs SEC(".maps");

/*
 * Issuers' names, for the processes that are gone by the time user space
 * reads the window. Written when a CPU sees a request born of another
 * process than the last one it saw: rarely, under one busy workload.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, char[WOLF_COMM_LEN]);
} comms SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} last_tgid SEC(".maps");

/*
 * Whether the waiter programs (sched_switch, sched_waking) are wanted:
 * the request programs set it when they see something a waiter would
 * explain (a request held by blk-throttle, a slow request, a dirty pause,
 * a slow commit or fsync), and user space, which polls it, attaches them.
 * They cost more than the rest together, on every context switch of the
 * host, so a host whose I/O is healthy does not pay for them.
 */
__u32 want_waiters SEC(".data.want");

static __always_inline void want(void)
{
	if (!*(volatile __u32 *)&want_waiters)
		*(volatile __u32 *)&want_waiters = 1;
}

/*
 * The request completing on this CPU now, for the wake-ups it causes: a
 * completion wakes its waiters in the context it runs in, before its CPU
 * switches tasks, so a wake-up is the completion's only if the CPU runs
 * the same task as when it completed (task) and within link_ns. Telling it
 * by the task rather than clearing this at every context switch keeps the
 * waiter programs' most frequent run, sched_switch, off the map.
 */
struct done_ctx {
	__u64 at_ns;
	__u64 task; /* the current task at the completion */
	__u64 birth_ns;
	__u64 issue_ns;
	__u64 cgid;
	__u32 dev;
	__u32 flags;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct done_ctx);
} done SEC(".maps");

/*
 * A task asleep for I/O, or paused by dirty throttling, since start_ns (0:
 * awake). A thread's entry stays when its sleep ends and its next sleep
 * writes it in place: an insert and a delete per sleep cost more than the
 * rest of the two programs together. LRU: threads that exit give their
 * entries back.
 */
struct sleep {
	__u64 start_ns;
	__u32 kind; /* WAIT_IO, or WAIT_DIRTY when balance_dirty_pages asked */
	__u32 dev;  /* WAIT_DIRTY: the backing device */
	__u32 tgid;
	__u32 weight; /* the sleeps it stands for (1 << wait_shift when noted) */
	/*
	 * The thread's voluntary switches once asleep (the kernel counts the
	 * switch before the tracepoint): a wake-up finding another count
	 * ends a sleep whose own wake-up wolf missed (it raced the switch),
	 * which the next sleeps, left out by the sampling, did not overwrite.
	 */
	__u64 nvcsw;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct sleep);
} sleeps SEC(".maps");

/*
 * How many threads whose id falls in each bucket have a sleep noted and
 * not ended: a wake-up of a thread whose bucket is empty (a sleep left
 * out by the sampling, or none noted) ends there, without the hash lookup
 * of sleeps. A thread evicted asleep leaves its bucket counted: its
 * neighbours' wake-ups then look it up, as they all did before.
 */
#define PENDING_SLOTS 16384 /* a power of two */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PENDING_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} pending SEC(".maps");

static __always_inline __u32 *pending_of(__u32 tid)
{
	__u32 k = tid & (PENDING_SLOTS - 1);

	return bpf_map_lookup_elem(&pending, &k);
}

/* A thread's sleep is noted (its entry's start was 0). */
static __always_inline void pending_inc(__u32 tid)
{
	__u32 *p = pending_of(tid);

	if (p)
		__sync_fetch_and_add(p, 1);
}

/* Waits per (waiting thread, kind, disk, the cgroup of what it waited for). */
struct wait_key {
	__u32 tid;
	__u32 kind;
	__u32 dev;
	__u32 flags; /* of the request that ended it (F_THROTTLED) */
	__u64 cgid;
};

struct wait_stats {
	__u64 count;
	__u64 ns;
	__u64 held_ns;	 /* before the request existed (held in blk-throttle, …) */
	__u64 queued_ns; /* the requests' queued time */
	__u64 device_ns; /* and their time on the device */
	struct wolf_max max_ns;
	__u32 tgid; /* the thread's process */
	__u32 _pad;
	char comm[WOLF_COMM_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct wait_key);
	__type(value, struct wait_stats);
} waits SEC(".maps");

/* Slow requests, one by one. */
struct slow_rq {
	__u64 total_ns;
	__u64 queued_ns;
	__u64 device_ns;
	__u64 cgid;
	__u64 at_ns;
	__u32 dev;
	__u32 tgid;
	__u32 op;
	__u32 bytes;
	__u32 flags;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} slow_rqs SEC(".maps");

const struct slow_rq *unused_slow_rq __attribute__((unused));

/* Long waits, one by one, with the waiter's stack. */
struct long_wait {
	__u64 wait_ns;
	__u64 held_ns;
	__u64 queued_ns;
	__u64 device_ns;
	__u64 cgid;
	__u64 at_ns;
	__u32 tid;
	__u32 tgid;
	__u32 dev;
	__u32 kind;
	__u32 flags;
	__u32 stack_bytes;
	char comm[WOLF_COMM_LEN];
	__u64 stack[STACK_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} long_waits SEC(".maps");

const struct long_wait *unused_long_wait __attribute__((unused));

/* jbd2 commits per journal device, phase by phase. */
struct journal {
	__u64 commits;
	__u64 commit_ns;   /* start to end */
	__u64 flushing_ns; /* writing and waiting for ordered data */
	__u64 logging_ns;  /* writing the journal blocks */
	__u64 locked_ns;   /* waiting for running handles to stop */
	struct wolf_max max_ns;
	/* The commit in progress: its phases' starts (0: none). */
	__u64 started_ns;
	__u64 locked_at;
	__u64 flushing_at;
	__u64 logging_at;
	__u32 tid; /* the committing thread */
	__u32 transaction;
	__u32 sync_commits;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct journal);
} journals SEC(".maps");

/* A task in fsync or fdatasync (or asleep for the XFS log) since start. */
struct in_sync {
	__u64 start_ns;
	__u32 dev;
	__u32 tgid;
	__u32 kind; /* WAIT_FSYNC or WAIT_XFSLOG */
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct in_sync);
} syncs SEC(".maps");

/* Writeback throttling and iocost, per device. */
struct qos {
	__u64 wbt_steps; /* wbt changed its allowed depth */
	__u64 wbt_lat_events;
	__u64 wbt_lat_ns; /* the latest latency wbt found over its target */
	__s32 wbt_step;	  /* its latest scale step (> 0: scaled down) */
	__u32 wbt_normal; /* and the depth it then allowed normal writes */
	__u64 iocost_adjusts;
	__u64 iocost_vrate; /* the latest vrate (ppm of nominal, times 1e-2 steps as the kernel keeps it) */
	__s32 iocost_busy;    /* the latest busy level (> 0: the device is saturated) */
	__u32 iocost_rq_wait; /* the latest share of time requests waited for a budget, % */
	char name[32];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, char[32]);
	__type(value, struct qos);
} qoses SEC(".maps");

static const struct io_stats zero_io;
static const struct wait_stats zero_wait;
static const struct journal zero_journal;
static const struct qos zero_qos;

/* Before 5.16 a request named its disk itself. */
struct request___old {
	struct gendisk *rq_disk;
} __attribute__((preserve_access_index));

/* Before 5.17 a kthread's struct kthread hid in set_child_tid. */
struct task_struct___old {
	int *set_child_tid;
} __attribute__((preserve_access_index));

static __always_inline __u32 mkdev(int major, int minor)
{
	return ((__u32)major << 20) | ((__u32)minor & 0xfffff);
}

/*
 * The request's disk, as major << 20 | minor. rq is a BTF pointer (the
 * tracepoint's typed argument): plain loads, no probe reads.
 */
static __always_inline __u32 rq_dev(struct request *rq)
{
	struct gendisk *disk;

	if (bpf_core_field_exists(((struct request___old *)0)->rq_disk))
		disk = ((struct request___old *)rq)->rq_disk;
	else
		disk = rq->q->disk;
	if (!disk)
		return 0;
	return mkdev(disk->major, disk->first_minor);
}

static __always_inline __u32 op_class(__u32 cmd_flags)
{
	__u32 op = cmd_flags & WOLF_REQ_OP_MASK;

	if (op == WOLF_REQ_OP_READ)
		return OP_READ;
	if (op == WOLF_REQ_OP_WRITE)
		return OP_WRITE;
	return OP_OTHER;
}

/*
 * A request's identity as a number: its distance from a fixed address
 * (the first slot). The verifier refuses shifts and masks on a pointer,
 * but lets a privileged program subtract two pointers into a plain
 * number; requests are preallocated per queue, so the number is stable.
 */
static __always_inline __u64 rq_id(struct request *rq)
{
	__u32 zero = 0;
	struct rq_slot *base = bpf_map_lookup_elem(&reqs, &zero);

	if (!base)
		return 0;
	return (__u64)((char *)rq - (char *)base);
}

static __always_inline struct rq_slot *slot_of(__u64 id)
{
	__u64 h = id;
	__u32 key;

	/* Requests are a few hundred bytes apart: drop the low bits, mix. */
	h = (h >> 6) * 0x9E3779B97F4A7C15ULL;
	key = (__u32)(h >> 40) & (RQ_SLOTS - 1);
	return bpf_map_lookup_elem(&reqs, &key);
}

/*
 * The function workqueue worker t runs now; t is a plain pointer. A
 * kthread's struct kthread is in task->worker_private since 5.17, in
 * set_child_tid before; its data is the workqueue's struct worker.
 */
static __always_inline __u64 worker_func(struct task_struct *t)
{
	struct kthread *k;
	void *w;

	if (bpf_core_field_exists(t->worker_private))
		k = BPF_CORE_READ(t, worker_private);
	else
		k = (void *)BPF_CORE_READ((struct task_struct___old *)t, set_child_tid);
	if (!k)
		return 0;
	w = BPF_CORE_READ(k, data);
	if (!w)
		return 0;
	return (__u64)BPF_CORE_READ((struct worker *)w, current_func);
}

static __always_inline void note_comm(__u32 tgid)
{
	__u32 zero = 0, *last = bpf_map_lookup_elem(&last_tgid, &zero);
	char comm[WOLF_COMM_LEN];

	if (!tgid || !last || *last == tgid)
		return;
	*last = tgid;
	bpf_get_current_comm(comm, sizeof(comm));
	bpf_map_update_elem(&comms, &tgid, comm, BPF_ANY);
}

/* Whether the hash of a request's birth leaves it out under shift. */
static __always_inline bool attr_skip(__u64 birth, __u32 shift)
{
	if (!shift || !birth)
		return false;
	shift &= 15;
	return ((birth * 0x9E3779B97F4A7C15ULL) >> (64 - shift)) != 0;
}

/*
 * Attribution above a rate. Following a request from its first sight to
 * its completion (a slot written on the issuing CPU, read and freed on the
 * completing one) is what makes a request cost twice what its counts do.
 * Its counts, bytes and times need none of it: the completion reads the
 * birth and issue times the kernel stamps in the request (start_time_ns,
 * and io_start_time_ns where the queue keeps statistics: wbt, iocost,
 * iolatency), and the cgroup from its bio. Only its issuer (the task it
 * was born in, and whether blk-throttle held it) needs the first sight.
 * So when user space sets attr_shift (requests come faster than wolf's
 * budget for following each), one request in 2^attr_shift of those the
 * kernel stamps is followed, picked by a hash of its birth time: the
 * first sight and the completion pick the same ones without sharing
 * anything. Requests born in blk-throttle's dispatcher are always
 * followed (what the throttle held is what a waiter is told). The
 * completions judge by done_shift, which user space lowers one poll after
 * shift: a request left out under a larger shift is then still told from
 * one wolf missed (a hash whose top bits are not all zero has more of
 * them not all zero).
 *
 * Left out, a request still costs its first sights' runs: an empty
 * program's on each tracepoint, a third of what wolf spends on it. So
 * where every request's issue is stamped by the kernel (no completion of
 * one without: STAT_UNSTAMPED) and nothing held I/O back (want_waiters),
 * user space attaches the first sights (insert, issue) only part of the
 * time instead, and sets issue_duty: the requests followed are those born
 * while they ran (one in 2^shift of them), and a completion that finds no
 * slot of its own is one left out, not one wolf missed.
 */
struct attr {
	__u32 shift;
	__u32 done_shift;
	__u32 wait_shift; /* the waiter programs' own: see sched_switch */
	__u32 issue_duty; /* the first sights run part of the time: see rq_complete */
	/*
	 * The smallest shift in effect over the last second: a request the
	 * hash leaves out under it was left out under every shift of its
	 * life (unless it lived longer), so it has no slot to look at.
	 */
	__u32 look_shift;
};

struct attr attr SEC(".data.attr");

/*
 * Set once a request born in blk-throttle's dispatcher was followed: those
 * are followed whatever the hash says, so from then on every completion
 * looks for its slot (see look_shift).
 */
__u32 throttle_seen SEC(".data.held");

/* Whether the request surely has no slot: the hash left it out under every
 * shift in effect since it was born, and no request bypasses the hash. */
static __always_inline bool surely_left_out(__u64 birth)
{
	return !*(volatile __u32 *)&throttle_seen &&
	       attr_skip(birth, *(volatile __u32 *)&attr.look_shift);
}

/*
 * Slots holding a request born while issue_duty was set: while there are
 * none, a completion under issue_duty has no slot to look for (the first
 * sights ran for none of the requests in flight), and skips the look.
 * Written twice per request followed (a few thousand a second at most
 * under issue_duty), read by every completion. A slot whose request's
 * completion wolf missed stays counted until another birth takes it: the
 * completions then look, as they all did before.
 */
__u64 following SEC(".data.follow");

/* The request's slot if it holds this request: the same identity, and the
 * same birth where the kernel stamps it (a slot left by an earlier use of
 * the same request, whose completion wolf missed, is not this one's). */
static __always_inline struct rq_slot *slot_held(struct request *rq, __u64 *idp)
{
	__u64 id = rq_id(rq), birth = rq->start_time_ns;
	struct rq_slot *s = slot_of(id);

	*idp = id;
	if (!s || !id || s->rq != id || (birth && s->birth_ns != birth))
		return 0;
	return s;
}

/*
 * The first sight of a request (insert, or issue when it skips the
 * scheduler and plug), in its submitter's context: t is the current task
 * and tflags its flags; now is the time, or the request's birth where the
 * kernel stamped it (no clock read then). Returns the slot, now this
 * request's.
 */
static __always_inline struct rq_slot *rq_born(struct request *rq, __u64 now, struct task_struct *t,
					       unsigned int tflags, __u32 tgid)
{
	__u64 id = rq_id(rq), birth = rq->start_time_ns;
	struct rq_slot *s = slot_of(id);

	if (!s || !id)
		return 0;
	/* Held already: its insert claimed it. */
	if (s->rq == id && (!birth || s->birth_ns == birth))
		return s;
	/* Another request's, born less than a minute ago (or after this one). */
	if (s->rq && s->rq != id && (s->birth_ns > now || now - s->birth_ns < 60000000000ULL))
		stat_inc(STAT_SLOT_TAKEN); /* the other one's completion goes untracked */
	if (s->rq && (s->flags & F_COUNTED))
		__sync_fetch_and_add(&following, -1);
	s->rq = id;
	s->birth_ns = birth && birth <= now ? birth : now;
	s->issue_ns = 0;
	s->tgid = tgid;
	s->flags = 0;
	if (tflags & WOLF_PF_WQ_WORKER) {
		__u64 fn = worker_func(t);

		s->flags |= F_KWORKER;
		if (throtl_dispatch_fn && fn == throtl_dispatch_fn) {
			/* The dispatcher is not the issuer: the cgroup is what counts. */
			s->flags = F_THROTTLED;
			s->tgid = 0;
			if (!*(volatile __u32 *)&throttle_seen)
				*(volatile __u32 *)&throttle_seen = 1;
		}
	}
	if (*(volatile __u32 *)&attr.issue_duty) {
		s->flags |= F_COUNTED;
		__sync_fetch_and_add(&following, 1);
	}
	note_comm(s->tgid);
	return s;
}

static __always_inline bool watched(__u32 dev)
{
	return !only_dev || dev == only_dev;
}

/* Whether blk-throttle's dispatcher runs now (t: the current task). */
static __always_inline bool in_throttle(struct task_struct *t, unsigned int tflags)
{
	return throtl_dispatch_fn && (tflags & WOLF_PF_WQ_WORKER) &&
	       worker_func(t) == throtl_dispatch_fn;
}

/* include/linux/blk_types.h: REQ_OP_DRV_IN and REQ_OP_DRV_OUT. */
#define WOLF_REQ_OP_DRV_IN 34
#define WOLF_REQ_OP_DRV_OUT 35

/*
 * Whether the kernel stamps this request's issue time (io_start_time_ns)
 * as it issues it: its queue keeps statistics (wbt, iocost, iolatency
 * turn them on), and it is not a driver's passthrough command.
 */
static __always_inline bool queue_stamps(struct request *rq)
{
	__u32 bit = queue_stats_bit, op = rq->cmd_flags & WOLF_REQ_OP_MASK;

	if (bit >= 64 || op == WOLF_REQ_OP_DRV_IN || op == WOLF_REQ_OP_DRV_OUT)
		return false;
	return (rq->q->queue_flags >> bit) & 1;
}

/*
 * insert and issue. A request the sampling leaves out costs the hash of
 * its birth (and, at issue, a look at its slot, which an insert may have
 * claimed, unless the kernel stamps the issue itself); one followed is
 * born in its slot, and issue stamps it.
 */
static __always_inline int first_sight(struct request *rq, struct task_struct *t,
				       unsigned int tflags, __u32 tgid, bool issue)
{
	struct rq_slot *s;
	__u64 now, id;
	bool stamped;

	/* A request left out has nothing to do here on any disk. */
	if (attr_skip(rq->start_time_ns, *(volatile __u32 *)&attr.shift) &&
	    !in_throttle(t, tflags)) {
		if (!issue || queue_stamps(rq) || (only_dev && rq_dev(rq) != only_dev) ||
		    surely_left_out(rq->start_time_ns))
			return 0;
		s = slot_held(rq, &id);
		if (s)
			s->issue_ns = bpf_ktime_get_ns();
		return 0;
	}
	if (only_dev && rq_dev(rq) != only_dev)
		return 0;
	/*
	 * The clock is read only for a time the kernel does not stamp: the
	 * birth (start_time_ns, 0 without), and the issue where the queue
	 * stamps none (io_start_time_ns, right after this tracepoint).
	 */
	stamped = !issue || queue_stamps(rq);
	now = rq->start_time_ns;
	if (!now || !stamped)
		now = bpf_ktime_get_ns();
	s = rq_born(rq, now, t, tflags, tgid);
	if (s && !stamped)
		s->issue_ns = now;
	return 0;
}

/*
 * Since 5.11: the request is the first argument and the current task is a
 * BTF pointer (plain loads).
 */
SEC("tp_btf/block_rq_insert")
int BPF_PROG(rq_insert, struct request *rq)
{
	struct task_struct *t = bpf_get_current_task_btf();

	return first_sight(rq, t, t->flags, t->tgid, false);
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(rq_issue, struct request *rq)
{
	struct task_struct *t = bpf_get_current_task_btf();

	return first_sight(rq, t, t->flags, t->tgid, true);
}

/*
 * Before 5.11 the queue came first, and bpf_get_current_task_btf did not
 * exist: the current task is read with probe reads.
 */
static __always_inline int first_sight_old(struct request *rq, bool issue)
{
	struct task_struct *t = wolf_current();

	return first_sight(rq, t, BPF_CORE_READ(t, flags), bpf_get_current_pid_tgid() >> 32, issue);
}

SEC("tp_btf/block_rq_insert")
int BPF_PROG(rq_insert_q, struct request_queue *q, struct request *rq)
{
	return first_sight_old(rq, false);
}

/*
 * The request alone, without bpf_get_current_task_btf: 5.10 kernels whose
 * stable updates dropped the queue argument (Debian's 5.10.262 did) but
 * that still lack the helper.
 */
SEC("tp_btf/block_rq_insert")
int BPF_PROG(rq_insert_nb, struct request *rq)
{
	return first_sight_old(rq, false);
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(rq_issue_nb, struct request *rq)
{
	return first_sight_old(rq, true);
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(rq_issue_q, struct request_queue *q, struct request *rq)
{
	return first_sight_old(rq, true);
}

static __always_inline struct io_stats *proc_get(struct io_key *k)
{
	struct io_stats *v = bpf_map_lookup_elem(&procs, k);

	if (v)
		return v;
	if (bpf_map_update_elem(&procs, k, &zero_io, BPF_NOEXIST) &&
	    !bpf_map_lookup_elem(&procs, k)) {
		stat_inc(STAT_PROC_FULL);
		return 0;
	}
	return bpf_map_lookup_elem(&procs, k);
}

/*
 * Completions are added up per CPU in a batch of one key (disk, issuer,
 * cgroup), histograms included, folded into procs when BATCH completions
 * are in it or the key changes: one hash lookup and a few atomic adds
 * (the histograms' slots the batch filled, a steady workload's few) for
 * BATCH completions of a steady workload, and plain adds on the CPU's own
 * memory for each. User space reads the batches with the map (a batch
 * folded between the two readings is in neither, once, and counts in the
 * next window).
 */
#define BATCH 256

struct batch {
	struct io_key key;
	__u32 count; /* completions in the batch */
	__u32 timed; /* of them, with their times in the slots */
	__u64 ops[NR_OPS];
	__u64 bytes[NR_OPS];
	__u64 throttled;
	__u64 throttled_bytes;
	__u64 max_total_ns; /* the batch's slowest, folded as one maximum */
	__u64 max_device_ns;
	__u64 sum_total_ns; /* and its sums, folded as one add each */
	__u64 sum_device_ns;
	__u32 total_slots[WOLF_HIST_SLOTS]; /* struct wolf_hist's slots, per CPU */
	__u32 device_slots[WOLF_HIST_SLOTS];
	/*
	 * The last blkg a completion of this batch walked to its cgroup (see
	 * bio_cgid), in the batch rather than a map of its own: one lookup
	 * fewer per completion.
	 */
	__u64 blkg;
	__u64 blkcg; /* a blkg freed and reallocated for another cgroup has another */
	__u64 cgid;
};

/*
 * wolf_log2_slot without a branch: a boolean made of a subtraction's sign
 * bit, not of a comparison (fewer paths for the verifier to follow, and no
 * mispredicted branch per completion). For values under 2^63
 * (nanoseconds: 292 years).
 */
static __always_inline __u32 slot_of_value(__u64 v)
{
	__u64 r = 0, s;

	s = ((0xFFFFFFFFULL - v) >> 63) << 5;
	v >>= s;
	r |= s;
	s = ((0xFFFFULL - v) >> 63) << 4;
	v >>= s;
	r |= s;
	s = ((0xFFULL - v) >> 63) << 3;
	v >>= s;
	r |= s;
	s = ((0xFULL - v) >> 63) << 2;
	v >>= s;
	r |= s;
	s = ((0x3ULL - v) >> 63) << 1;
	v >>= s;
	r |= s;
	r |= v >> 1;
	/* floor(log2(v)) + 1, and 0 for 0: (v | -v) has its sign bit iff v != 0. */
	return r + ((v | (0 - v)) >> 63);
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2); /* followed requests, and those left out (F_UNATTRIBUTED) */
	__type(key, __u32);
	__type(value, struct batch);
} batches SEC(".maps");

/*
 * The bio's cgroup (the one its bytes are charged to), 0 without. The walk
 * from the bio's blkg to the cgroup's id touches four cache lines; a blkg
 * is one cgroup's on one queue and stays, so each CPU's batch remembers
 * the last blkg it walked from (by its distance from the batch, as rq_id).
 */
static __always_inline __u64 bio_cgid(struct batch *b, struct bio *bio)
{
	struct blkcg_gq *blkg;
	struct blkcg *blkcg;
	__u64 id, cid;

	if (!bio || !bpf_core_field_exists(bio->bi_blkg))
		return 0;
	blkg = bio->bi_blkg;
	if (!blkg)
		return 0;
	blkcg = blkg->blkcg;
	id = (__u64)((char *)blkg - (char *)b);
	cid = (__u64)((char *)blkcg - (char *)b);
	if (b->blkg != id || b->blkcg != cid) {
		b->cgid = blkcg->css.cgroup->kn->id;
		b->blkg = id;
		b->blkcg = cid;
	}
	return b->cgid;
}

/* Set by user space once the waiter programs are attached: until then
 * completions leave no context for wake-ups. */
__u32 waiters_armed SEC(".data.armed");

/*
 * Set by user space while the waiter programs run only one 2^n-th of the
 * time (a disk merely busy: see watchArm): a sleep noted then stands for
 * 2^wait_duty_shift times as many.
 */
__u32 wait_duty_shift SEC(".data.duty");

/*
 * A global function (not static): the kernel's verifier checks it once, on
 * its own, where a static one is checked again at each call along every
 * path of rq_complete that reaches it (79,000 instructions processed at
 * every start). Before Linux 5.12 a global function takes scalars only:
 * the batch's index, looked up again (a per-CPU array: a few loads).
 */
__noinline int batch_fold(__u32 bi)
{
	struct batch *b = bpf_map_lookup_elem(&batches, &bi);
	struct io_stats *st;

	if (!b || !b->count)
		return 0;
	/* The completions, counted here rather than one by one: user space
	 * wants only their rate (struct attr). */
	stat_add(STAT_COMPLETIONS, b->count);
	st = proc_get(&b->key);
	if (st) {
		for (int i = 0; i < NR_OPS; i++) {
			if (b->ops[i]) {
				__sync_fetch_and_add(&st->ops[i], b->ops[i]);
				__sync_fetch_and_add(&st->bytes[i], b->bytes[i]);
			}
		}
		if (b->throttled) {
			__sync_fetch_and_add(&st->throttled, b->throttled);
			__sync_fetch_and_add(&st->throttled_bytes, b->throttled_bytes);
		}
		if (b->timed) {
			__sync_fetch_and_add(&st->total.sum, b->sum_total_ns);
			__sync_fetch_and_add(&st->device.sum, b->sum_device_ns);
			wolf_max_add(&st->total.max, b->max_total_ns);
			wolf_max_add(&st->device.max, b->max_device_ns);
		}
	}
	/* The slots the batch filled, and only them, back to zero. */
	for (int i = 0; b->timed && i < WOLF_HIST_SLOTS; i++) {
		__u32 c = b->total_slots[i];

		if (c) {
			if (st)
				__sync_fetch_and_add(&st->total.slots[i], c);
			b->total_slots[i] = 0;
		}
		c = b->device_slots[i];
		if (c) {
			if (st)
				__sync_fetch_and_add(&st->device.slots[i], c);
			b->device_slots[i] = 0;
		}
	}
	b->count = 0;
	b->timed = 0;
	for (int i = 0; i < NR_OPS; i++) {
		b->ops[i] = 0;
		b->bytes[i] = 0;
	}
	b->throttled = 0;
	b->throttled_bytes = 0;
	b->max_total_ns = 0;
	b->max_device_ns = 0;
	b->sum_total_ns = 0;
	b->sum_device_ns = 0;
	return 0;
}

static __always_inline bool same_key(struct io_key *a, struct io_key *b)
{
	return a->dev == b->dev && a->tgid == b->tgid && a->flags == b->flags && a->cgid == b->cgid;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(rq_complete, struct request *rq, int error, unsigned int nr_bytes)
{
	__u32 dev = rq_dev(rq), zero = 0, bi = 0, op;
	struct io_key k = {};
	struct rq_slot *s;
	struct batch *b;
	__u64 id, now, total = 0, device = 0, birth, issue;
	__u32 flags = 0, duty;

	if (!watched(dev))
		return 0;
	now = bpf_ktime_get_ns();
	op = op_class(rq->cmd_flags);
	k.dev = dev;
	/* The kernel's stamps (0 where it keeps none); a followed request's
	 * own, taken at its first sight and issue, where it does not. */
	birth = rq->start_time_ns;
	issue = rq->io_start_time_ns;
	/*
	 * User space then keeps the first sights attached, unless the request
	 * was never issued (still MQ_RQ_IDLE): nothing times an issue that
	 * did not happen. The flush machinery ends a flush without data that
	 * way (an fsync's, blkdev_issue_flush) once the queue's own flush
	 * request is done, and a dispatch error ends a request before its
	 * driver started it.
	 */
	if (!issue && rq->state != MQ_RQ_IDLE)
		stat_inc(STAT_UNSTAMPED);
	duty = *(volatile __u32 *)&attr.issue_duty;
	/*
	 * A slot is looked at only where one may be this request's: a look is
	 * a cache miss (a line of a 512 KiB array, written on the issuing
	 * CPU), most of a completion's cost where it is made.
	 */
	s = 0;
	if (!(duty && !*(volatile __u64 *)&following) && !surely_left_out(birth))
		s = slot_held(rq, &id);
	if (s) {
		k.tgid = s->tgid;
		k.flags = s->flags & F_KWORKER;
		flags = s->flags & ~F_COUNTED;
		birth = s->birth_ns;
		if (!issue)
			issue = s->issue_ns;
		if (s->flags & F_COUNTED)
			__sync_fetch_and_add(&following, -1);
		s->rq = 0;
	} else if (duty || attr_skip(birth, *(volatile __u32 *)&attr.done_shift)) {
		k.flags = F_UNATTRIBUTED;
		flags = F_UNATTRIBUTED;
		bi = 1;
	} else {
		stat_inc(STAT_UNTRACKED);
	}
	b = bpf_map_lookup_elem(&batches, &bi);
	if (!b)
		return 0;
	k.cgid = bio_cgid(b, rq->bio);
	if (birth && issue && issue >= birth && now >= issue) {
		flags |= F_TIMED;
		total = now - birth;
		device = now - issue;
	}
	/* For the wake-ups this completion causes (sched_waking). */
	if (*(volatile __u32 *)&waiters_armed) {
		struct done_ctx *d = bpf_map_lookup_elem(&done, &zero);

		if (d) {
			d->at_ns = now;
			d->task = bpf_get_current_task();
			d->birth_ns = birth;
			d->issue_ns = issue;
			d->cgid = k.cgid;
			d->dev = dev;
			d->flags = flags;
		}
	}
	if (b->count && !same_key(&b->key, &k))
		batch_fold(bi);
	if (!b->count)
		b->key = k;
	b->count++;
	if (op < NR_OPS) {
		b->ops[op] += 1;
		b->bytes[op] += nr_bytes;
	}
	if (flags & F_THROTTLED) {
		b->throttled += 1;
		b->throttled_bytes += nr_bytes;
		want();
	}
	if (flags & F_TIMED) {
		__u32 ts = slot_of_value(total), ds = slot_of_value(device);

		if (ts < WOLF_HIST_SLOTS)
			b->total_slots[ts] += 1;
		if (ds < WOLF_HIST_SLOTS)
			b->device_slots[ds] += 1;
		b->sum_total_ns += total;
		b->sum_device_ns += device;
		b->timed++;
		if (total > b->max_total_ns)
			b->max_total_ns = total;
		if (device > b->max_device_ns)
			b->max_device_ns = device;
	}
	if (b->count >= BATCH)
		batch_fold(bi);
	if (!(flags & F_TIMED))
		return 0;
	if (total >= slow_ns) {
		struct slow_rq *e;

		stat_inc(STAT_SLOW);
		want();
		if (!wolf_detail_take(GATE_SLOW, now))
			return 0;
		e = bpf_ringbuf_reserve(&slow_rqs, sizeof(*e), 0);
		if (!e) {
			stat_inc(STAT_SLOW_LOST);
			return 0;
		}
		e->total_ns = total;
		e->queued_ns = total - device;
		e->device_ns = device;
		e->cgid = k.cgid;
		e->at_ns = now;
		e->dev = dev;
		e->tgid = k.tgid;
		e->op = op;
		e->bytes = nr_bytes;
		e->flags = flags;
		e->_pad = 0;
		bpf_ringbuf_submit(e, 0);
	}
	return 0;
}

/* A task goes to sleep: note an I/O sleep (io_schedule sets in_iowait). */
SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct sleep sl = {}, *old;
	__u32 tid, shift;

	if (preempt || !BPF_CORE_READ_BITFIELD(prev, in_iowait))
		return 0;
	if (wolf_task_state(prev) == WOLF_TASK_RUNNING)
		return 0;
	stat_inc(STAT_IOWAIT_SLEEPS);
	/*
	 * Above a rate of I/O sleeps (user space sets wait_shift, as it sets
	 * attr.shift for requests), one in 2^wait_shift is noted, at random,
	 * and its wait counts for 2^wait_shift: the counts and sums are
	 * estimates, the averages and the kinds of wait unbiased. A sleep
	 * balance_dirty_pages noted stays noted.
	 */
	shift = *(volatile __u32 *)&attr.wait_shift & 15;
	if (shift && (bpf_get_prandom_u32() & ((1U << shift) - 1)))
		return 0;
	tid = prev->pid;
	sl.start_ns = bpf_ktime_get_ns();
	sl.kind = WAIT_IO;
	sl.tgid = prev->tgid;
	sl.weight = 1U << ((shift + *(volatile __u32 *)&wait_duty_shift) & 31);
	sl.nvcsw = prev->nvcsw;
	old = bpf_map_lookup_elem(&sleeps, &tid);
	if (old) {
		if (!old->start_ns)
			pending_inc(tid);
		/* balance_dirty_pages just asked for this pause. */
		if (old->kind == WAIT_DIRTY && sl.start_ns - old->start_ns < 10000000) {
			sl.kind = WAIT_DIRTY;
			sl.dev = old->dev;
			sl.weight = old->weight;
		}
		*old = sl;
		return 0;
	}
	if (bpf_map_update_elem(&sleeps, &tid, &sl, BPF_ANY))
		stat_inc(STAT_SLEEP_FULL);
	else
		pending_inc(tid);
	return 0;
}

static __always_inline struct wait_stats *wait_get(struct wait_key *k)
{
	struct wait_stats *v = bpf_map_lookup_elem(&waits, k);

	if (v)
		return v;
	if (bpf_map_update_elem(&waits, k, &zero_wait, BPF_NOEXIST) &&
	    !bpf_map_lookup_elem(&waits, k)) {
		stat_inc(STAT_WAIT_FULL);
		return 0;
	}
	return bpf_map_lookup_elem(&waits, k);
}

/* A sleeping task is woken: if it slept for I/O, its wait ends. */
SEC("tp_btf/sched_waking")
int BPF_PROG(sched_waking, struct task_struct *wakee)
{
	struct wait_key k = {};
	struct wait_stats *w;
	struct done_ctx *d;
	struct sleep *sl;
	__u64 now, ns, held = 0, queued = 0, device = 0, wt;
	__u32 tid, tgid, zero = 0, kind, *p;

	if (!BPF_CORE_READ_BITFIELD(wakee, in_iowait))
		return 0;
	tid = wakee->pid;
	p = pending_of(tid);
	if (!p || !*(volatile __u32 *)p)
		return 0;
	sl = bpf_map_lookup_elem(&sleeps, &tid);
	if (!sl || !sl->start_ns)
		return 0;
	__sync_fetch_and_add(p, -1);
	if (sl->nvcsw != wakee->nvcsw) {
		sl->start_ns = 0; /* not this sleep's: one wolf missed the end of */
		return 0;
	}
	wt = sl->weight ? sl->weight : 1;
	now = bpf_ktime_get_ns();
	ns = now > sl->start_ns ? now - sl->start_ns : 0;
	kind = sl->kind;
	tgid = sl->tgid;
	k.tid = tid;
	k.dev = sl->dev;
	if (kind == WAIT_IO) {
		kind = WAIT_OTHER;
		d = bpf_map_lookup_elem(&done, &zero);
		if (d && d->at_ns && now - d->at_ns <= link_ns &&
		    d->task == bpf_get_current_task()) {
			kind = WAIT_IO;
			k.dev = d->dev;
			k.cgid = d->cgid;
			k.flags = d->flags & F_THROTTLED;
			if (d->flags & F_TIMED) {
				queued = d->issue_ns - d->birth_ns;
				device = d->at_ns - d->issue_ns;
				if (d->birth_ns > sl->start_ns)
					held = d->birth_ns - sl->start_ns;
			}
			stat_inc(STAT_LINKED);
		}
	}
	sl->start_ns = 0; /* awake: the thread's next sleep writes it in place */
	k.kind = kind;
	w = wait_get(&k);
	if (w) {
		/*
		 * Plain adds: the entry is this thread's (tid is in the key),
		 * and the kernel wakes a task under its pi_lock, one waker at
		 * a time.
		 */
		w->count += wt;
		w->ns += ns * wt;
		w->held_ns += held * wt;
		w->queued_ns += queued * wt;
		w->device_ns += device * wt;
		wolf_max_add(&w->max_ns, ns);
		if (!w->comm[0]) {
			w->tgid = tgid;
			BPF_CORE_READ_STR_INTO(&w->comm, wakee, comm);
		}
	}
	if (ns >= long_wait_ns && wolf_detail_take(GATE_STACK, now)) {
		struct long_wait *e = bpf_ringbuf_reserve(&long_waits, sizeof(*e), 0);
		long n;

		if (!e) {
			stat_inc(STAT_LONG_LOST);
			return 0;
		}
		e->wait_ns = ns;
		e->held_ns = held;
		e->queued_ns = queued;
		e->device_ns = device;
		e->cgid = k.cgid;
		e->at_ns = now;
		e->tid = tid;
		e->tgid = tgid;
		e->dev = k.dev;
		e->kind = kind;
		e->flags = k.flags;
		BPF_CORE_READ_STR_INTO(&e->comm, wakee, comm);
		n = bpf_get_task_stack(wakee, e->stack, sizeof(e->stack), 0);
		e->stack_bytes = n > 0 ? n : 0;
		bpf_ringbuf_submit(e, 0);
	}
	return 0;
}

/*
 * Dirty throttling: balance_dirty_pages is about to pause the task for
 * pause ms (a pause of 0 or less is none). The sleep that follows is
 * marked, so that its wake-up counts it as a dirty pause, not an I/O wait.
 */
static __always_inline __u32 parse_bdi(const char *name)
{
	__u32 major = 0, minor = 0, *cur = &major;
	bool colon = false;

	for (int i = 0; i < 16; i++) {
		char c = name[i];

		if (c >= '0' && c <= '9') {
			*cur = *cur * 10 + (c - '0');
		} else if (c == ':' && !colon) {
			colon = true;
			cur = &minor;
		} else {
			break;
		}
	}
	if (!colon)
		return 0;
	return mkdev(major, minor);
}

SEC("tracepoint/writeback/balance_dirty_pages")
int balance_dirty_pages(struct trace_event_raw_balance_dirty_pages *ctx)
{
	struct sleep sl = {}, *old;
	char name[16];
	__u32 tid;

	if (BPF_CORE_READ(ctx, pause) <= 0)
		return 0;
	stat_inc(STAT_EVENTS);
	want();
	bpf_probe_read_kernel(name, sizeof(name), ctx->bdi);
	tid = (__u32)bpf_get_current_pid_tgid();
	sl.start_ns = bpf_ktime_get_ns();
	sl.kind = WAIT_DIRTY;
	sl.dev = parse_bdi(name);
	sl.tgid = bpf_get_current_pid_tgid() >> 32;
	sl.weight = 1;
	/* The pause is the thread's next voluntary switch. */
	sl.nvcsw = BPF_CORE_READ(wolf_current(), nvcsw) + 1;
	old = bpf_map_lookup_elem(&sleeps, &tid);
	if (old) {
		if (!old->start_ns)
			pending_inc(tid);
		*old = sl;
	} else if (bpf_map_update_elem(&sleeps, &tid, &sl, BPF_ANY)) {
		stat_inc(STAT_SLEEP_FULL);
	} else {
		pending_inc(tid);
	}
	return 0;
}

/* jbd2: a commit's phases, per journal device. */
static __always_inline struct journal *journal_get(__u32 dev)
{
	struct journal *j = bpf_map_lookup_elem(&journals, &dev);

	if (j)
		return j;
	if (bpf_map_update_elem(&journals, &dev, &zero_journal, BPF_NOEXIST) &&
	    !bpf_map_lookup_elem(&journals, &dev)) {
		stat_inc(STAT_JOURNAL_FULL);
		return 0;
	}
	return bpf_map_lookup_elem(&journals, &dev);
}

/* The classic jbd2_commit events share one layout (jbd2_commit class). */
#define J_START 0
#define J_LOCKING 1
#define J_FLUSHING 2
#define J_LOGGING 3

static __always_inline int jbd2_phase(struct trace_event_raw_jbd2_commit *ctx, int phase)
{
	__u64 now = bpf_ktime_get_ns();
	struct journal *j;
	__u32 dev;

	stat_inc(STAT_EVENTS);
	dev = BPF_CORE_READ(ctx, dev);
	j = journal_get(dev);
	if (!j)
		return 0;
	switch (phase) {
	case J_START:
		j->started_ns = now;
		j->locked_at = 0;
		j->flushing_at = 0;
		j->logging_at = 0;
		j->tid = (__u32)bpf_get_current_pid_tgid();
		j->transaction = BPF_CORE_READ(ctx, transaction);
		break;
	case J_LOCKING:
		j->locked_at = now;
		break;
	case J_FLUSHING:
		if (j->locked_at && now > j->locked_at)
			j->locked_ns += now - j->locked_at;
		j->flushing_at = now;
		break;
	case J_LOGGING:
		if (j->flushing_at && now > j->flushing_at)
			j->flushing_ns += now - j->flushing_at;
		j->logging_at = now;
		break;
	}
	return 0;
}

SEC("tracepoint/jbd2/jbd2_start_commit")
int jbd2_start_commit(struct trace_event_raw_jbd2_commit *ctx)
{
	return jbd2_phase(ctx, J_START);
}

SEC("tracepoint/jbd2/jbd2_commit_locking")
int jbd2_commit_locking(struct trace_event_raw_jbd2_commit *ctx)
{
	return jbd2_phase(ctx, J_LOCKING);
}

SEC("tracepoint/jbd2/jbd2_commit_flushing")
int jbd2_commit_flushing(struct trace_event_raw_jbd2_commit *ctx)
{
	return jbd2_phase(ctx, J_FLUSHING);
}

SEC("tracepoint/jbd2/jbd2_commit_logging")
int jbd2_commit_logging(struct trace_event_raw_jbd2_commit *ctx)
{
	return jbd2_phase(ctx, J_LOGGING);
}

SEC("tracepoint/jbd2/jbd2_end_commit")
int jbd2_end_commit(struct trace_event_raw_jbd2_end_commit *ctx)
{
	__u64 now = bpf_ktime_get_ns(), ns;
	struct journal *j;
	__u32 dev;

	stat_inc(STAT_EVENTS);
	dev = BPF_CORE_READ(ctx, dev);
	j = journal_get(dev);
	if (!j || !j->started_ns)
		return 0;
	ns = now > j->started_ns ? now - j->started_ns : 0;
	if (j->logging_at && now > j->logging_at)
		j->logging_ns += now - j->logging_at;
	j->commits++;
	j->commit_ns += ns;
	if (BPF_CORE_READ(ctx, sync_commit))
		j->sync_commits++;
	wolf_max_tag(&j->max_ns, ns, j->tid);
	if (ns >= want_ns)
		want();
	j->started_ns = 0;
	j->locked_at = 0;
	j->flushing_at = 0;
	j->logging_at = 0;
	return 0;
}

/* fsync and fdatasync: per task, enter to exit, on the file's device. */
static __always_inline __u32 fd_dev(int fd)
{
	struct task_struct *t = wolf_current();
	struct file **fds, *f;
	unsigned int max;

	if (fd < 0)
		return 0;
	fds = BPF_CORE_READ(t, files, fdt, fd);
	max = BPF_CORE_READ(t, files, fdt, max_fds);
	if (!fds || (unsigned int)fd >= max)
		return 0;
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) || !f)
		return 0;
	return BPF_CORE_READ(f, f_inode, i_sb, s_dev);
}

static __always_inline int sync_enter(int fd)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct in_sync s = {};
	__u32 tid = (__u32)id;

	stat_inc(STAT_EVENTS);
	s.dev = fd_dev(fd);
	if (!s.dev || !watched(s.dev))
		return 0;
	s.start_ns = bpf_ktime_get_ns();
	s.tgid = id >> 32;
	s.kind = WAIT_FSYNC;
	if (bpf_map_update_elem(&syncs, &tid, &s, BPF_ANY))
		stat_inc(STAT_FSYNC_FULL);
	return 0;
}

static __always_inline void wait_add(__u32 tid, struct in_sync *s, __u64 ns)
{
	struct wait_key k = { .tid = tid, .kind = s->kind, .dev = s->dev };
	struct wait_stats *w = wait_get(&k);

	if (!w)
		return;
	__sync_fetch_and_add(&w->count, 1);
	__sync_fetch_and_add(&w->ns, ns);
	wolf_max_add(&w->max_ns, ns);
	if (!w->comm[0]) {
		w->tgid = s->tgid;
		bpf_get_current_comm(&w->comm, sizeof(w->comm));
	}
}

static __always_inline int sync_exit(__u32 kind)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct in_sync *s = bpf_map_lookup_elem(&syncs, &tid);
	__u64 now = bpf_ktime_get_ns(), ns;

	stat_inc(STAT_EVENTS);
	if (!s || s->kind != kind)
		return 0;
	ns = now > s->start_ns ? now - s->start_ns : 0;
	if (ns >= want_ns)
		want();
	wait_add(tid, s, ns);
	bpf_map_delete_elem(&syncs, &tid);
	return 0;
}

struct syscall_enter_args {
	struct trace_entry ent;
	int __syscall_nr;
	__u64 args[6];
};

SEC("tracepoint/syscalls/sys_enter_fsync")
int sys_enter_fsync(struct syscall_enter_args *ctx)
{
	return sync_enter((int)ctx->args[0]);
}

SEC("tracepoint/syscalls/sys_exit_fsync")
int sys_exit_fsync(void *ctx)
{
	return sync_exit(WAIT_FSYNC);
}

SEC("tracepoint/syscalls/sys_enter_fdatasync")
int sys_enter_fdatasync(struct syscall_enter_args *ctx)
{
	return sync_enter((int)ctx->args[0]);
}

SEC("tracepoint/syscalls/sys_exit_fdatasync")
int sys_exit_fdatasync(void *ctx)
{
	return sync_exit(WAIT_FSYNC);
}

/* XFS: a task sleeps for log space, and is woken when there is some. */
SEC("tracepoint/xfs/xfs_log_grant_sleep")
int xfs_log_grant_sleep(struct trace_event_raw_xfs_loggrant_class *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct in_sync s = {};
	__u32 tid = (__u32)id;

	stat_inc(STAT_EVENTS);
	s.dev = BPF_CORE_READ(ctx, dev);
	if (!watched(s.dev))
		return 0;
	s.start_ns = bpf_ktime_get_ns();
	s.tgid = id >> 32;
	s.kind = WAIT_XFSLOG;
	if (bpf_map_update_elem(&syncs, &tid, &s, BPF_ANY))
		stat_inc(STAT_FSYNC_FULL);
	return 0;
}

SEC("tracepoint/xfs/xfs_log_grant_wake")
int xfs_log_grant_wake(void *ctx)
{
	return sync_exit(WAIT_XFSLOG);
}

/* Writeback throttling (wbt) and iocost, per device. */
static __always_inline struct qos *qos_get(const char *name)
{
	char key[32] = {};
	struct qos *q;

	bpf_probe_read_kernel_str(key, sizeof(key), name);
	q = bpf_map_lookup_elem(&qoses, key);
	if (q)
		return q;
	if (bpf_map_update_elem(&qoses, key, &zero_qos, BPF_NOEXIST) &&
	    !bpf_map_lookup_elem(&qoses, key)) {
		stat_inc(STAT_QOS_FULL);
		return 0;
	}
	q = bpf_map_lookup_elem(&qoses, key);
	if (q)
		__builtin_memcpy(q->name, key, sizeof(key));
	return q;
}

SEC("tracepoint/wbt/wbt_step")
int wbt_step(struct trace_event_raw_wbt_step *ctx)
{
	struct qos *q;

	stat_inc(STAT_EVENTS);
	q = qos_get(ctx->name);
	if (!q)
		return 0;
	q->wbt_steps++;
	q->wbt_step = BPF_CORE_READ(ctx, step);
	q->wbt_normal = BPF_CORE_READ(ctx, normal);
	return 0;
}

SEC("tracepoint/wbt/wbt_lat")
int wbt_lat(struct trace_event_raw_wbt_lat *ctx)
{
	struct qos *q;

	stat_inc(STAT_EVENTS);
	q = qos_get(ctx->name);
	if (!q)
		return 0;
	q->wbt_lat_events++;
	q->wbt_lat_ns = BPF_CORE_READ(ctx, lat);
	return 0;
}

SEC("tracepoint/iocost/iocost_ioc_vrate_adj")
int iocost_vrate_adj(struct trace_event_raw_iocost_ioc_vrate_adj *ctx)
{
	__u32 loc = BPF_CORE_READ(ctx, __data_loc_devname);
	struct qos *q;

	stat_inc(STAT_EVENTS);
	q = qos_get((const char *)ctx + (loc & 0xffff));
	if (!q)
		return 0;
	q->iocost_adjusts++;
	q->iocost_vrate = BPF_CORE_READ(ctx, new_vrate);
	q->iocost_busy = BPF_CORE_READ(ctx, busy_level);
	q->iocost_rq_wait = BPF_CORE_READ(ctx, rq_wait_pct);
	return 0;
}
