package diagnose

import "github.com/wolf-investigator/wolf/internal/finding"

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
)

// Relations, the names the JSON carries.
const (
	waitsOn       = finding.WaitsOn
	heldBy        = finding.HeldBy
	spendsHold    = finding.SpendsHold
	constrainedBy = finding.ConstrainedBy
)
