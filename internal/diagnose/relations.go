package diagnose

import (
	"strings"

	"github.com/wolf-investigator/wolf/internal/fact"
)

// Every hop of a chain is one of these relations, and each carries the
// kernel mechanism that makes it a cause. A relation is only ever drawn
// between two facts that share a key (a tid, a lock address or mm, a pid
// inside a cgroup, a FUSE request's sender tid), never because two numbers
// happen to line up.
const (
	// A task asleep on a sleeping lock (mutex, rw-semaphore) runs again
	// only when the lock is handed to it: the kernel puts it on the lock's
	// wait list and it stays there until the holder releases. Keyed by the
	// lock's address (task->blocker, the contention tracepoints or the
	// lock's own wait list) or, for mmap_lock, by the mm's process.
	mechWaitsOnLock = "The task sleeps on the lock's wait list and runs again only when the lock is handed to it."
	// rw-semaphore fairness: once a writer waits at the head of the queue,
	// new readers queue behind it instead of sharing the lock with the
	// readers holding it (rwsem_down_read_slowpath), so one long reader
	// stalls every later reader through the writer.
	mechBehindWriter = "An rw-semaphore admits no new reader while a writer waits at the head of its queue, so this reader waits for the writer, which waits for the readers holding the lock."
	// A mutex owner word, a writer-owned rw-semaphore's owner, or a
	// measured hold (mmap_lock_acquire_returned .. released on the same
	// thread) names exactly who holds the lock.
	mechHeldBy = "Only the holder can release the lock; every waiter waits for as long as it holds it."
	// A reader-owned rw-semaphore records only its latest reader in the
	// owner word (readers do not register), so the holder is likely, not
	// certain.
	mechHeldByReader = "A reader-owned rw-semaphore records only its latest reader (readers do not register), so this is the likely holder: it took the lock for reading and has not run since."
	// Memory cgroup charge: a charge beyond memory.max/limit_in_bytes makes
	// the charging task reclaim from the cgroup's own LRU before it can go
	// on (try_charge_memcg -> try_to_free_mem_cgroup_pages); done under the
	// mmap_lock (a populate, a GUP, an older kernel's fault), the lock is
	// held for as long as the reclaim takes.
	mechReclaimUnderLock = "Each page the holder charges beyond its cgroup's memory limit makes it reclaim from the cgroup's own LRU lists before it can go on, and it does so while it holds the lock."
	mechMemcgLimit       = "The cgroup sits at its memory limit: every new charge in it is paid for by synchronous reclaim in the charging task."
	// CFS bandwidth control: when a cgroup has used its quota for the
	// period, its run queues are throttled and its tasks do not run until
	// the next period refills it; a task throttled while it holds a kernel
	// lock keeps it held. Keyed by the holder's pid inside the cgroup and
	// by the scheduler having switched the holder out while its cgroup's
	// run queue was throttled.
	mechThrottledHold = "The holder's cgroup used up its CPU quota for the period; CFS bandwidth control took its run queue off the CPU until the next period, with the lock still held."
	mechCPUQuota      = "CFS bandwidth control lets the cgroup's tasks run for at most its quota per period, and then throttles them until the period ends."
	// Run-queue wait: a runnable task holding a lock waits for a CPU like
	// any other; with more runnable tasks than CPUs the wait grows.
	mechRunnableHold = "The holder was runnable but not running: it waited on a run queue for a CPU while it held the lock."
	mechHostCPU      = "Every CPU is busy: runnable tasks, lock holders among them, queue for a CPU."
	// A FUSE request parks its sender (or the tasks waiting on the folios
	// it fills: fuse reads lock the page-cache folios and unlock them in
	// the reply's end callback) until the user-space daemon writes the
	// reply to /dev/fuse. Keyed by the request's sender tid (fuse_in_header
	// pid) read from the daemon's /dev/fuse queue.
	mechFuseRequest = "FUSE reads lock the page-cache folios they fill and unlock them only when the daemon's reply arrives; the task sleeps until then."
	mechFuseDaemon  = "Only the daemon serving the connection can answer the request, by writing its reply to /dev/fuse."
	// The holder sleeps in D (I/O, a page lock) while holding.
	mechBlockedHold = "The holder sleeps while it holds the lock; the lock is held until whatever it waits for happens."
	mechOnCPUHold   = "The holder was on a CPU, working, for most of the hold: the work it does under the lock is what makes others wait."
	mechHostMemory  = "The host has too little free memory: allocations wait while they reclaim it themselves (direct reclaim)."
	// Run-queue wait of a victim: runnable, not running.
	mechRunQueue = "A runnable task waits on a run queue until the scheduler gives it a CPU; with more runnable tasks than CPUs, each waits for the others' time slices."
	// Block I/O: a task in io_schedule sleeps until the device (or the
	// cgroup's throttle in front of it) completes its request.
	mechIO      = "The task sleeps until its block request completes: queued in the cgroup's throttle, in the device's queue, or on the device."
	mechIOLimit = "The cgroup's I/O limit (blkio.throttle, io.max) holds its requests back once it has used its rate for the slice; they wait in the throttle, not on the device."
	mechDirty   = "balance_dirty_pages pauses a task that dirties pages faster than its backing device writes them back, in proportion to how far over the dirty limit it is."
	mechJournal = "A journal commit (jbd2, XFS log) writes every transaction in it; an fsync that needs the commit waits for all of it, other tasks' data included."
	// mechSoftirqContext says whom a softirq's time goes to.
	mechSoftirqContext = "Softirq work runs in the context of the task on the CPU: work a task raises itself (loopback or local traffic it sends, I/O it completes) runs before it resumes; work an interrupt raises runs on whichever task it hit."
	mechSoftirq        = "Softirq processing runs before the interrupted task resumes, or in ksoftirqd; while it runs, other work on that CPU waits."
	mechSiteWait       = "The task sleeps uninterruptibly until whatever its wait site waits for happens."
	// A saturated resource and who used it: the consumers' use of it is
	// what everyone else waited behind.
	mechCPUConsumer    = "The CPUs' time went to these tasks; everyone else waited for it."
	mechDeviceConsumer = "The device's time went to these users' requests; everyone else's requests queued behind them."
	// CPU time burned in reclaim for a memory limit, and device reads that
	// are refaults: use of one resource made for another, whose limit is
	// then the upstream cause.
	mechCPUForReclaim  = "Reclaim runs on the CPU of the task that charges memory; at a memory limit every charge pays for it, so the CPU time goes to the limit, not to the work."
	mechReadForRefault = "A refault reads back a page the memory limit evicted shortly before: the device works for the limit, not for new data."
	mechCPUForMisses   = "Reclaim runs on the CPU of the task that charges memory, and a read of a page the limit evicted runs the page-cache miss path on it again (readahead, allocating, adding and charging the page, submitting the read): that CPU time goes to the limit, not to the work. The miss path's share is sampled, and counted for the limit in the proportion of the cgroup's reads that were refaults (the kernel's count, or wolf's measure of re-reads of evicted pages where the kernel dropped their shadow entries)."
)

// mechWaitsOn is the mechanism of a victim's wait on a kind of resource.
func mechWaitsOn(k fact.Kind, w fact.WaitKind) string {
	switch {
	case w == fact.WaitRunQueue || k == fact.HostCPU:
		return mechRunQueue
	case k == fact.FUSE:
		return mechFuseRequest
	case k == fact.Device:
		return mechIO
	case k == fact.IOLimit:
		return mechIOLimit
	case k == fact.Dirty:
		return mechDirty
	case k == fact.Journal:
		return mechJournal
	case k == fact.Softirq || k == fact.CPU:
		return mechSoftirq
	case k == fact.Site:
		return mechSiteWait
	}
	return mechWaitsOnLock
}

// mechConsumer is the mechanism of a saturated resource's consumer.
func mechConsumer(k fact.Kind) string {
	if k == fact.Device {
		return mechDeviceConsumer
	}
	return mechCPUConsumer
}

// mechUsedFor is the mechanism of a resource's use for another resource.
func mechUsedFor(k fact.Kind, what string) string {
	if k == fact.Device {
		return mechReadForRefault
	}
	if strings.Contains(what, fact.ActivityMissPath) {
		return mechCPUForMisses
	}
	return mechCPUForReclaim
}
