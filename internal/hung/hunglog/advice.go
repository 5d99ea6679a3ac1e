package hunglog

import (
	"fmt"
	"strings"

	"github.com/wolf-investigator/wolf/internal/kstack"
)

// This file holds the words: how each kind of hang works and what to do
// about it, in the terms the public write-ups taught (it is the dump, not
// the app; the kworker's workqueue names the subsystem; rtnl_mutex is
// global).

func mechanism(id string, g *Group) string {
	s := g.Site
	switch {
	case s.Object == "rtnl_mutex":
		return "rtnl_mutex is the single global lock that serializes network configuration: netlink requests (ip, CNI plugins, container setup), ethtool ioctls and many /sys/class/net files take it. " +
			"One task holding it for long leaves every other task that touches network configuration in D state, which is why unrelated processes hang together."
	case s.Object == "mmap_lock":
		return "mmap_lock guards a process's address space: page faults and readers of /proc/PID/cmdline, maps or environ (ps, top) take it for read, mmap, munmap, mprotect and brk for write. " +
			"One slow holder, or a writer queued behind one, stalls every thread of the process and every tool that inspects it."
	case s.Object == "sb_writers":
		return "Every write to a filesystem takes its sb_writers lock for read, and freezing the filesystem (fsfreeze, LVM or VM snapshots) takes it for write. " +
			"Writers sleep in D state until the filesystem is thawed."
	case s.Kind.IsLock():
		return "A sleeping lock keeps its waiters in uninterruptible sleep until the owner releases it, so the hung tasks are victims and the cause is whatever the owner is doing. " +
			"The hung-task report names only the waiters; the owner comes from the lock's owner field (mutexes, rw-semaphores), the kernel's blocker report (6.15+) or lockdep."
	case id == IDCoredump:
		return "When a process dies with a core-dumping signal, the kernel parks all its threads in uninterruptible sleep (coredump_task_exit) until the dump is written, so that the memory being dumped stays consistent. " +
			"The larger the process and the slower the dump target (a disk, a pipe to systemd-coredump), the longer its threads stay in D, and the hung-task warning blames the application for the dump's duration."
	case id == IDKworker:
		v := g.Victims[0]
		return fmt.Sprintf("A kworker runs work items that subsystems queue; the report names the kworker, but its Workqueue line names the queue (%s) and the function it was running (%s). ", v.Workqueue, v.WorkFunc) +
			"The stall belongs to that subsystem, and usually to whatever it waits on underneath (for filesystems, the block device)."
	case s.Kind == kstack.PageLock:
		return "A page (folio) lock is held while the page is read from disk, written back, truncated or migrated; others who need the page sleep until it is unlocked. " +
			"It is held across I/O, so a slow device keeps it long, and a task that locked the page and then blocked elsewhere keeps it forever; page locks have no owner the kernel records."
	case s.Kind == kstack.Writeback:
		return "A writer that dirtied more than the dirty limits allow, or an fsync, waits for dirty pages to be written back. " +
			"The device under the filesystem (or writeback throttling in front of it) is not keeping up; the waiters share that cause rather than a lock."
	case s.Kind == kstack.IO:
		return "The tasks wait in io_schedule for block I/O they submitted to complete. " +
			"The storage underneath is slow, stuck or saturated; the hung tasks share its latency as a cause, not a lock among themselves."
	case id == IDJournal:
		return "Every change to an ext4 filesystem runs inside a jbd2 journal handle. When the running transaction closes, new handles wait (wait_transaction_locked) until the journal thread (jbd2/DEV) commits it, fsync waits for that commit (jbd2_log_wait_commit), and the commit itself waits for the handles still open (jbd2_journal_wait_updates) and for its I/O. " +
			"One slow commit, because the device is slow or because a task holds a handle open while it is stuck elsewhere, stalls every writer of the filesystem. XFS's log works alike (xlog_wait, xfs_log_force)."
	case id == IDFreeze:
		return "A block queue is frozen while its I/O scheduler, limits or hardware queues change, or while the device is reset or removed: new I/O waits in blk_queue_enter until it thaws, and the freeze waits for the I/O already in flight to complete. " +
			"If the device does not complete that I/O, or the task that froze the queue is stuck before unfreezing it, every submitter hangs."
	case id == IDNFS:
		return "NFS operations send RPCs to the server and, on a hard mount (the default), wait for the answer indefinitely, retrying as the server or network allows. " +
			"A server that is down, overloaded or unreachable leaves every task touching the mount in D state; their locks (inodes, pages) spread the stall."
	case s.Kind == kstack.Fuse:
		return "A FUSE filesystem forwards each request to a user-space daemon and waits, uninterruptibly for most operations, for its reply. " +
			"If the daemon is stuck, slow or stopped, every task touching the mount hangs, and the inode locks those tasks hold spread the stall to others."
	case s.Kind == kstack.RCU && s.Object == "srcu" && rcuTasksKthread(g):
		return "rcu_tasks_kthread ends an RCU-tasks grace period only after synchronize_srcu(&tasks_rcu_exit_srcu) has waited for every task late in do_exit(). " +
			"A task that blocks inside that exit window (a PID-namespace init reaping its children in zap_pid_ns_processes) stalls RCU-tasks, and with it every fentry/fexit detach and ftrace update."
	case s.Kind == kstack.RCU && strings.HasPrefix(s.Object, "rcu-tasks"):
		return "An RCU-tasks grace period ends when every task has voluntarily scheduled; ftrace and BPF trampoline updates (attaching or detaching fentry/fexit programs) wait for one. " +
			"A task that never schedules voluntarily, or rcu_tasks_kthread stuck on an exiting task, holds every such update."
	case s.Kind == kstack.RCU:
		return "synchronize_rcu() and its relatives block until every CPU has passed a quiescent state. " +
			"A CPU spinning in a long non-preemptible section (look for RCU stall warnings) holds the grace period and every waiter with it."
	case s.Kind == kstack.WorkqueueFlush:
		return "Flushing or cancelling work waits until a work item has run to completion on a kworker. " +
			"The hang is wherever that work item is stuck, often a kworker waiting on a lock the flusher holds."
	case s.Kind == kstack.Completion:
		return "The task waits for a completion that another context (a kthread, an interrupt handler, a device) must signal. " +
			"It stays in D until that context finishes; the stack's caller says which one."
	case s.Kind == kstack.Freezer:
		return "The task is frozen by the cgroup v1 freezer or by system suspend and sleeps until thawed. " +
			"Kernels before 6.1 keep frozen tasks in D state, so the hung-task detector reports them."
	}
	if s.Kind == kstack.Other && s.LockFunc != "" {
		return fmt.Sprintf("The task polls in a sleep loop (%s) inside %s, re-checking a condition that another context must change. ", s.LockFunc, s.Func) +
			"It stays in D until that happens; what it polls for is in that function's source (napi_disable, for instance, waits for the NAPI poll to stop)."
	}
	if s.Func == "" {
		return "The log has the report's header but not the stack that says what the task waits for: it was cut, or printed below the console's log level (the header is KERN_ERR, the stack KERN_INFO). " +
			"`dmesg` or the journal of the same boot may have it; live, `wolf hung` or /proc/PID/stack shows it."
	}
	return fmt.Sprintf("The task sleeps uninterruptibly in %s, which the stack does not tie to a known lock or wait primitive. ", s.Func) +
		"What it waits for is in that function's source; the full stack is in the subjects."
}

func remediation(id string, g *Group, a *Analysis) []string {
	s := g.Site
	var out []string
	switch {
	case id == IDLockOwner:
		o := g.Owner
		end := o
		if len(g.Chain) > 1 {
			end = g.Chain[len(g.Chain)-1].Holder
		}
		out = append(out,
			fmt.Sprintf("See what %s (pid %d) is doing: `cat /proc/%d/stack` as root, or `wolf hung --pid %d` for its decoded wait; the victims wait until it releases %s.", end.Comm, end.PID, end.PID, end.PID, lockName(g)),
			"Killing the victims does not help; the lock is released only when the owner proceeds or exits.")
		if !o.Certain {
			out = append(out, "Lockdep lists the owner without its state: confirm live with `wolf hung`, which reads the lock's owner field.")
		}
		if end.Site != nil {
			out = append(out, ownerAdvice(end)...)
		}
	case s.Kind.IsLock() && len(g.Holders) > 0:
		out = append(out,
			fmt.Sprintf("One of the tasks lockdep lists with the lock (pids %s) holds it; `cat /proc/PID/stack` of each shows which one is not waiting for it, or run `wolf hung` while it happens: it reads the lock's owner from the kernel.", holderPIDs(g)),
			"Killing the victims does not help; the lock is released only when its owner proceeds or exits.")
	case s.Kind.IsLock():
		out = append(out,
			"The log does not say who holds the lock. While it is happening, run `wolf hung`: it reads the lock's owner from the kernel and shows the owner's stack.",
			fmt.Sprintf("Then `cat /proc/OWNER_PID/stack`; the victims' own stacks are in /proc/PID/stack (pids %s).", pidList(g, 6)),
			"Kernels 6.15+ built with CONFIG_DETECT_HUNG_TASK_BLOCKER=y print the likely owner in the report itself; lockdep kernels list the locks held after it.")
	case id == IDCoredump:
		out = append(out,
			"It is the core dump, not the application: check `sysctl kernel.core_pattern` (a pipe to systemd-coredump? then `coredumpctl list`) and kernel.core_pipe_limit.",
			"Bound the dump: `ulimit -c` or systemd LimitCORE=, ProcessSizeMax=/ExternalSizeMax= in /etc/systemd/coredump.conf; a large process takes long to dump, to a slow disk longer.",
			"Find out why the process crashed: the signal and backtrace are in the core (`coredumpctl info PID`) or the application's log.",
			"If large dumps are expected, raise kernel.hung_task_timeout_secs above the dump time instead of chasing the warning.")
	case id == IDKworker:
		v := g.Victims[0]
		sub := subsystem(v.Workqueue, v.WorkFunc)
		if sub.name != "" {
			out = append(out, fmt.Sprintf("Workqueue %s runs %s: %s.", v.Workqueue, v.WorkFunc, sub.hint))
		} else {
			out = append(out, fmt.Sprintf("Find the subsystem that owns workqueue %s and %s, and what it waits on.", v.Workqueue, v.WorkFunc))
		}
		if sub.storage {
			out = append(out,
				"Check the device's latency and errors: `iostat -x 1`, /proc/pressure/io, and the log for I/O errors or timeouts of the device and what sits under it (`lsblk`, `dmsetup table`).",
				"On dm-crypt, check the no_read_workqueue/no_write_workqueue flags (`dmsetup table NAME` shows them; `cryptsetup refresh --perf-no_read_workqueue --perf-no_write_workqueue NAME` sets them): the XFS stalls of Cloudflare's hung-task write-up came from losing them.")
		}
		out = append(out, "Run `wolf hung` while it happens to see what the kworker waits on.")
	case id == IDIO && s.Kind == kstack.PageLock:
		out = append(out,
			"A page lock has no recorded owner: look among the other hung tasks for one that holds pages of the same file while blocked elsewhere (a lock, a journal, a FUSE daemon); if there is none, the page is under I/O and the device is slow (`iostat -x 1`, /proc/pressure/io).",
			"Run `wolf hung` while it happens to see the waiters' files and devices.")
	case id == IDIO:
		out = append(out,
			"Measure the storage: `iostat -x 1`, `cat /proc/pressure/io`; look in the log for I/O errors, resets and timeouts (blk_update_request, nvme ... timeout, SCSI aborts).",
			"For network filesystems (NFS, CIFS, Ceph) check the server and the network path.",
			"Run `wolf hung` while it happens to see which device the tasks wait on.")
	case id == IDJournal:
		out = append(out,
			"Find the journal thread (jbd2/DEV-8 for ext4, xfsaild/xfs-cil for XFS) among the hung tasks or with `wolf hung`: if it waits for I/O, the device under the filesystem is the cause (`iostat -x 1`, errors in the log); if it waits in jbd2_journal_wait_updates, a task holding a journal handle open is stuck elsewhere, and that task is the cause.",
			"Writers of other filesystems are not affected: the DEV in jbd2/DEV-8 names the one to look at.")
	case id == IDFreeze:
		out = append(out,
			"Find who froze the queue: a task in blk_mq_freeze_queue_wait (an elevator or queue-limit change through sysfs, a device reset or removal, a dm table reload); if it is among the hung tasks its stack says why, and its I/O in flight is what never completes.",
			"Check the device for timeouts and resets in the log (nvme, SCSI), which leave in-flight I/O uncompleted and the freeze unfinished.")
	case id == IDNFS:
		out = append(out,
			"Check the NFS server and the path to it: `nfsstat -rc` (retransmissions), `cat /proc/self/mountstats`, `rpcdebug -m rpc -s all` for a short while; the log's 'nfs: server … not responding' lines name the server.",
			"A soft or 'softerr' mount with timeo/retrans returns errors instead of hanging; `umount -f` (then -l) releases tasks stuck on a dead server.")
	case id == IDFuse:
		out = append(out,
			"Find the daemon behind the mount (`grep fuse /proc/mounts`; the process holding /dev/fuse open) and look at its state and /proc/PID/stack.",
			"If the daemon is gone or stuck for good, abort the connection: `echo 1 > /sys/fs/fuse/connections/N/abort`, N being the mount's minor device number (`mountpoint -d MOUNT`); the victims then get ENOTCONN instead of hanging.",
			"`wolf hung` names the FUSE daemon each task waits for.")
	case s.Kind == kstack.RCU:
		out = append(out,
			`Look for RCU stall warnings in the same log ("rcu: INFO: ... detected stalls", "rcu_tasks_wait_gp: ... grace period ... jiffies old"): they name the CPU or task holding the grace period.`)
		if strings.HasPrefix(s.Object, "rcu-tasks") || rcuTasksKthread(g) {
			out = append(out,
				"RCU-tasks waits come from ftrace and BPF trampoline updates (fentry/fexit attach and detach). If rcu_tasks_kthread is stuck in synchronize_srcu, look for a task exiting in zap_pid_ns_processes (`echo t > /proc/sysrq-trigger`): that is the RCU-tasks/do_exit deadlock fixed in Linux 6.9 (\"rcu-tasks: Maintain lists to eliminate RCU-tasks/do_exit() deadlocks\").")
		}
		out = append(out, "Run `wolf hung` while it happens for the live stacks.")
	case s.Kind == kstack.WorkqueueFlush:
		out = append(out, "Find the work item's kworker: a kworker report in the same log, or `wolf hung` live; the flush ends when that work does.")
	case s.Kind == kstack.Freezer:
		out = append(out, "Look for a frozen cgroup (freezer.state in cgroup v1, cgroup.freeze in v2) and thaw it if nobody meant it to stay frozen.")
	default:
		out = append(out, fmt.Sprintf("Run `wolf hung` while it happens to decode the live wait; `cat /proc/PID/stack` for the victims (pids %s).", pidList(g, 6)))
	}
	switch s.Object {
	case "rtnl_mutex":
		if g.Owner == nil && len(g.Holders) == 0 {
			out = append(out, "Suspect whatever reconfigures the network at the time: CNI agents (calico-node, cilium), WireGuard or VPN daemons, NetworkManager, bonding scripts, monitoring agents calling ethtool. In Cloudflare's hung-task write-up, calico-node held RTNL in wg_set_device while waiting in napi_disable.")
		}
	case "sb_writers":
		out = append(out, "Check for a frozen filesystem and thaw it: `fsfreeze --unfreeze MOUNTPOINT` (and find the snapshot tool that froze it).")
	case "mmap_lock":
		out = append(out, "Do not run ps or top against the process while it is stuck: reading /proc/PID/cmdline queues behind the same lock (ClickHouse, \"The case of the vanishing CPU: A Linux kernel debugging story\"). wolf reads only comm, stat and stack.")
	}
	return out
}

// ownerAdvice adds what to do about what the owner itself waits on.
func ownerAdvice(o *Owner) []string {
	switch o.Site.Kind {
	case kstack.Fuse:
		return []string{fmt.Sprintf("The owner waits for a FUSE daemon: fix or abort that daemon (`echo 1 > /sys/fs/fuse/connections/N/abort`) and %s releases the lock.", o.Comm)}
	case kstack.IO, kstack.PageLock, kstack.Writeback, kstack.Journal, kstack.QueueFreeze:
		return []string{"The owner waits for storage (" + o.Site.Describe + "): the device under it is the root cause (`iostat -x 1`, /proc/pressure/io, errors in the log)."}
	case kstack.RCU:
		return []string{"The owner waits for an RCU grace period while holding the lock: look for RCU stall warnings or a CPU that does not schedule; a grace period that takes minutes is the root cause."}
	case kstack.NFS:
		return []string{"The owner waits for the NFS server: the server or the network path is the root cause."}
	case kstack.Coredump:
		return []string{"The owner is dumping core: the lock is released when the dump ends (see kernel.core_pattern)."}
	}
	return nil
}

// wqInfo is what a workqueue name tells about the subsystem behind it.
type wqInfo struct {
	name    string // "XFS"
	hint    string // what that means
	storage bool   // a filesystem or block subsystem: look at the disk
}

// subsystem maps a kworker's workqueue and function to the subsystem that
// queued the work, the clue the XFS example of Cloudflare's write-up turned on.
func subsystem(wq, fn string) wqInfo {
	base := wq
	if i := strings.IndexByte(base, '/'); i >= 0 {
		base = base[:i]
	}
	has := func(prefixes ...string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(base, p) || strings.HasPrefix(fn, p) {
				return true
			}
		}
		return false
	}
	switch {
	case has("xfs"):
		return wqInfo{"XFS", "XFS is slow to push its log or metadata, a filesystem under pressure; look at the device beneath it", true}
	case has("ext4", "jbd2"):
		return wqInfo{"ext4", "ext4 or its journal (jbd2) is slow to commit; look at the device beneath it", true}
	case has("btrfs"):
		return wqInfo{"btrfs", "btrfs background work is stuck; look at the devices beneath it and for running balance or scrub", true}
	case has("kcryptd", "dm-crypt", "crypt_"):
		return wqInfo{"dm-crypt", "dm-crypt's encryption workers are backlogged", true}
	case has("kdmflush", "dm_", "dm-"):
		return wqInfo{"device-mapper", "a device-mapper target is slow to complete I/O", true}
	case has("writeback", "wb_workfn"):
		return wqInfo{"page-cache writeback", "the flusher cannot write dirty pages fast enough; the disk is the bottleneck", true}
	case has("md_misc", "md_", "raid", "mdX_raid"):
		return wqInfo{"md RAID", "the md layer is suspended or resyncing and waits for its member devices", true}
	case has("kblockd", "blk_"):
		return wqInfo{"the block layer", "block requests are not completing", true}
	case has("nvme"):
		return wqInfo{"NVMe", "the NVMe driver is resetting or waiting on a controller", true}
	case has("scsi", "sd_"):
		return wqInfo{"SCSI", "SCSI error handling or a device reset is in progress", true}
	case has("nfs", "rpciod", "rpc_"):
		return wqInfo{"NFS/RPC", "the NFS server or the network path to it is slow", true}
	case has("ceph"):
		return wqInfo{"Ceph", "the Ceph cluster or the network path to it is slow", true}
	case has("netns", "cleanup_net"):
		return wqInfo{"network namespace cleanup", "tearing down a network namespace, which takes rtnl_mutex and waits for RCU", false}
	case has("ipv6_addrconf", "addrconf"):
		return wqInfo{"IPv6 address configuration", "it takes rtnl_mutex; look for who holds it", false}
	case has("mm_percpu_wq", "vmstat", "lru_add_drain"):
		return wqInfo{"memory management", "per-CPU memory bookkeeping is starved, often by a CPU that never schedules", false}
	case has("cgroup"):
		return wqInfo{"cgroups", "cgroup teardown waits on cgroup_mutex or on an RCU grace period", false}
	}
	return wqInfo{}
}

// wqDevice extracts the instance from a per-device workqueue name:
// "xfs-sync/dm-6" -> "dm-6".
func wqDevice(wq string) string {
	_, dev, ok := strings.Cut(wq, "/")
	if !ok {
		return ""
	}
	return dev
}

// rcuTasksKthread reports whether the group is rcu_tasks_kthread waiting
// for exiting tasks (rcu_tasks_postscan's synchronize_srcu).
func rcuTasksKthread(g *Group) bool {
	for _, v := range g.Victims {
		if strings.HasPrefix(v.Comm, "rcu_tasks") || stackHas(v.Stack, "rcu_tasks_postscan") {
			return true
		}
	}
	return false
}

// holderPIDs lists the candidate holders' pids for commands.
func holderPIDs(g *Group) string {
	var ps []string
	for _, h := range g.Holders {
		ps = append(ps, fmt.Sprint(h.PID))
	}
	return strings.Join(ps, " ")
}

// journalName names the journal a group waits for: ext4's jbd2 or XFS's log.
func journalName(g *Group) string {
	switch g.Site.LockFunc {
	case "xlog_wait", "xlog_wait_on_iclog", "xlog_grant_head_wait", "xlog_grant_head_check", "xfs_log_force",
		"xfs_log_force_seq", "xfs_log_force_lsn":
		return "the XFS log"
	}
	return "the ext4 journal (jbd2)"
}

// journalSentence points at the journal thread when the log has it.
func journalSentence(g *Group, a *Analysis) string {
	for i := range a.Reports {
		r := &a.Reports[i]
		if !strings.HasPrefix(r.Comm, "jbd2/") {
			continue
		}
		return fmt.Sprintf(" The journal thread %s (pid %d) is blocked too: it %s.", r.Comm, r.PID, r.Site.Describe)
	}
	return ""
}

// freezer returns the task that froze the queue a group waits on, when it
// is among the group's victims.
func freezer(g *Group) *Report {
	for _, v := range g.Victims {
		switch v.Site.LockFunc {
		case "blk_mq_freeze_queue_wait", "blk_freeze_queue", "blk_mq_freeze_queue", "blk_mq_freeze_queue_nomemsave",
			"blk_mq_freeze_queue_wait_timeout":
			return v
		}
	}
	return nil
}

// flushSentence names the hung kworkers of the log: a flush waits for a
// work item, and a kworker stuck running one is where such a flush ends.
// The log does not say which work is flushed, so it is a pointer, not a
// link.
func flushSentence(g *Group, a *Analysis) string {
	var ks []string
	for i := range a.Reports {
		r := &a.Reports[i]
		if r.Workqueue == "" || len(ks) == 3 {
			continue
		}
		ks = append(ks, fmt.Sprintf("%s (pid %d, workqueue %s running %s) %s", r.Comm, r.PID, r.Workqueue, r.WorkFunc, r.Site.Describe))
	}
	if len(ks) == 0 {
		return ""
	}
	return " Hung kworkers in the same log: " + strings.Join(ks, "; ") + ". If the flushed work is theirs, the flush ends when they do."
}
