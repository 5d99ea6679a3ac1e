package kstack

import "strings"

// prim describes a wait primitive: a function that is part of the
// machinery of waiting (a lock slow path, a completion, an RCU grace
// period, a FUSE request) rather than the code that decided to wait.
// Classify walks over a run of them from the innermost frame outwards; the
// first frame that is not one is the caller the site is named after.
type prim struct {
	kind Kind
	// rank orders how specific a primitive is about what is awaited: an
	// outer primitive replaces the kind found so far when its rank is at
	// least as high, so wait_for_completion (1) under __flush_work (3)
	// ends as a workqueue flush, and folio_wait_bit_common (2) under
	// folio_wait_writeback (3) as writeback.
	rank int
	// weak primitives are named wrappers (rtnl_lock, mmap_read_lock…):
	// they name the object but leave the kind to the slow path under
	// them, which knows better (read or write, mutex or rt-mutex).
	weak   bool
	object string // what is waited on, when the function says (rtnl_mutex)
	global bool   // the object is one kernel-wide instance
	family string // lock family, for the caller table: mutex, rwsem, percpu, sem
}

// exactPrims holds the primitives known by exact bare name.
var exactPrims = map[string]prim{}

// prefixPrims holds primitives recognised by name prefix, for families
// whose variants multiply across versions (mutex_lock_killable_nested…).
// Checked in order, after exactPrims.
var prefixPrims = []struct {
	prefix string
	p      prim
}{
	{"__mutex_lock", prim{kind: Mutex, rank: 3, family: "mutex"}},
	{"mutex_lock", prim{kind: Mutex, rank: 3, family: "mutex"}},
	{"__ww_mutex_lock", prim{kind: Mutex, rank: 3, family: "mutex"}},
	{"ww_mutex_lock", prim{kind: Mutex, rank: 3, family: "mutex"}},
	{"rwsem_down_write_slowpath", prim{kind: RwsemWrite, rank: 3, family: "rwsem"}},
	{"rwsem_down_read_slowpath", prim{kind: RwsemRead, rank: 3, family: "rwsem"}},
	// Before 5.3: rwsem_down_{read,write}_failed, reached through the
	// call_rwsem_* assembly thunks on x86.
	{"rwsem_down_write_failed", prim{kind: RwsemWrite, rank: 3, family: "rwsem"}},
	{"rwsem_down_read_failed", prim{kind: RwsemRead, rank: 3, family: "rwsem"}},
	{"call_rwsem_down_write_failed", prim{kind: RwsemWrite, rank: 3, family: "rwsem"}},
	{"call_rwsem_down_read_failed", prim{kind: RwsemRead, rank: 3, family: "rwsem"}},
	// The tty line discipline's own rw-semaphore.
	{"ldsem_down_write", prim{kind: RwsemWrite, rank: 3, family: "rwsem"}},
	{"ldsem_down_read", prim{kind: RwsemRead, rank: 3, family: "rwsem"}},
	{"down_write", prim{kind: RwsemWrite, rank: 3, family: "rwsem"}},
	{"__down_write", prim{kind: RwsemWrite, rank: 3, family: "rwsem"}},
	{"down_read", prim{kind: RwsemRead, rank: 3, family: "rwsem"}},
	{"__down_read", prim{kind: RwsemRead, rank: 3, family: "rwsem"}},
	{"percpu_down_write", prim{kind: RwsemWrite, rank: 3, family: "percpu"}},
	{"percpu_down_read", prim{kind: RwsemRead, rank: 3, family: "percpu"}},
	{"__percpu_down_read", prim{kind: RwsemRead, rank: 3, family: "percpu"}},
	{"rt_mutex_", prim{kind: RTMutex, rank: 3, family: "mutex"}},
	{"__rt_mutex_", prim{kind: RTMutex, rank: 3, family: "mutex"}},
	{"rtlock_", prim{kind: RTMutex, rank: 3, family: "mutex"}},
	{"rwbase_", prim{kind: RTMutex, rank: 3, family: "rwsem"}},
	{"rt_spin_lock", prim{kind: RTMutex, rank: 3, family: "mutex"}},
	{"wait_for_completion_io", prim{kind: IO, rank: 1}},
	{"wait_for_completion", prim{kind: Completion, rank: 1}},
	{"synchronize_rcu_tasks_trace", prim{kind: RCU, rank: 3, object: "rcu-tasks-trace", global: true}},
	{"synchronize_rcu_tasks_rude", prim{kind: RCU, rank: 3, object: "rcu-tasks-rude", global: true}},
	{"synchronize_rcu_tasks", prim{kind: RCU, rank: 3, object: "rcu-tasks", global: true}},
	{"synchronize_rcu", prim{kind: RCU, rank: 3, object: "rcu", global: true}},
	{"synchronize_srcu", prim{kind: RCU, rank: 3, object: "srcu"}},
	{"rcu_barrier", prim{kind: RCU, rank: 3, object: "rcu-barrier", global: true}},
	{"balance_dirty_pages", prim{kind: Writeback, rank: 3}},
}

func init() {
	add := func(kind Kind, rank int, names ...string) {
		for _, n := range names {
			exactPrims[n] = prim{kind: kind, rank: rank}
		}
	}
	lock := func(kind Kind, family string, names ...string) {
		for _, n := range names {
			exactPrims[n] = prim{kind: kind, rank: 3, family: family}
		}
	}
	named := func(kind Kind, family, object string, global bool, names ...string) {
		for _, n := range names {
			exactPrims[n] = prim{kind: kind, rank: 3, weak: true, object: object, global: global, family: family}
		}
	}

	// Semaphores: exact names, because "down" is a prefix of everything.
	lock(Semaphore, "sem", "down", "__down", "down_interruptible", "down_killable",
		"down_timeout", "__down_common", "__down_interruptible", "__down_killable", "__down_timeout")
	// percpu_rwsem_wait serves readers and writers; the caller decides.
	exactPrims["percpu_rwsem_wait"] = prim{kind: RwsemRead, rank: 2, weak: true, family: "percpu"}

	// Named lock wrappers: the object is known from the function itself.
	named(Mutex, "mutex", "rtnl_mutex", true, "rtnl_lock", "rtnl_lock_killable",
		"rtnl_lock_interruptible", "rtnl_net_lock", "rtnl_net_lock_killable", "rtnl_nets_lock")
	// CONFIG_DEBUG_NET_SMALL_RTNL (6.13+): a per-netns mutex taken after
	// the global one; innermost names win, so it is not confused.
	named(Mutex, "mutex", "per-netns rtnl_mutex", false, "__rtnl_net_lock")
	named(Mutex, "mutex", "genl_mutex", true, "genl_lock")
	named(Mutex, "mutex", "cgroup_mutex", true, "cgroup_kn_lock_live", "cgroup_lock_and_drain_offline", "cgroup_lock")
	named(Mutex, "mutex", "system_transition_mutex", true, "lock_system_sleep")
	named(Mutex, "mutex", "f_pos_lock", false, "__fdget_pos", "fdget_pos", "__f_unlock_pos")
	named(RwsemRead, "rwsem", "mmap_lock", false, "mmap_read_lock", "mmap_read_lock_killable",
		"lock_mm_and_find_vma", "get_mmap_lock_carefully")
	named(RwsemWrite, "rwsem", "mmap_lock", false, "mmap_write_lock", "mmap_write_lock_killable")
	named(RwsemRead, "percpu", "cpu_hotplug_lock", true, "cpus_read_lock")
	named(RwsemWrite, "percpu", "cpu_hotplug_lock", true, "cpus_write_lock", "cpu_hotplug_begin")
	named(RwsemWrite, "percpu", "cgroup_threadgroup_rwsem", true, "cgroup_attach_lock")
	named(RwsemRead, "percpu", "sb_writers", false, "__sb_start_write", "sb_start_write")
	named(RwsemRead, "percpu", "dup_mmap_sem", true, "uprobe_start_dup_mmap")
	named(Semaphore, "sem", "console_sem", true, "console_lock")

	// Completions and their internals: generic, the caller says more.
	add(Completion, 1, "__wait_for_common", "wait_for_common", "do_wait_for_common")
	add(IO, 1, "wait_for_common_io")

	// RCU grace periods. __wait_rcu_gp is shared by every flavour, so it
	// names none; the synchronize_* above it does.
	add(RCU, 3, "__wait_rcu_gp", "wait_rcu_gp", "synchronize_net", "synchronize_sched",
		"exp_funnel_lock", "synchronize_rcu_expedited_wait", "synchronize_rcu_expedited_wait_once",
		"rcu_sync_enter", "srcu_barrier", "cond_synchronize_rcu")
	exactPrims["__synchronize_srcu"] = prim{kind: RCU, rank: 3, object: "srcu"}

	// Workqueue flushes and cancels wait for a work item to finish.
	add(WorkqueueFlush, 3, "__flush_work", "flush_work", "flush_workqueue", "__flush_workqueue",
		"drain_workqueue", "flush_delayed_work", "flush_rcu_work", "__cancel_work_sync",
		"__cancel_work_timer", "cancel_work_sync", "cancel_delayed_work_sync", "work_on_cpu_key",
		"work_on_cpu")

	// FUSE: the task waits for the user-space daemon to answer.
	add(Fuse, 3, "request_wait_answer", "__fuse_request_send", "fuse_request_send",
		"fuse_simple_request", "__fuse_simple_request", "fuse_wait_on_page_writeback",
		"fuse_wait_on_folio_writeback", "fuse_wait_on_writeback")

	// Coredump: a thread parked until the dumper has written the core.
	add(Coredump, 3, "coredump_task_exit", "coredump_wait", "wait_for_dump_helpers")

	// Page cache: PG_locked waits (rank 2) are refined by a writeback
	// caller (rank 3) because both wait on a folio bit the same way.
	add(PageLock, 2, "folio_wait_bit_common", "folio_wait_bit", "folio_wait_bit_killable",
		"__folio_lock", "__folio_lock_killable", "__folio_lock_or_retry", "folio_lock",
		"folio_lock_killable", "__lock_page", "__lock_page_killable", "__lock_page_or_retry",
		"lock_page", "wait_on_page_bit_common", "wait_on_page_bit", "wait_on_page_bit_killable",
		"folio_wait_locked", "put_and_wait_on_page_locked", "folio_put_wait_locked",
		"migration_entry_wait_on_locked", "__lock_page_async")
	add(Writeback, 3, "folio_wait_writeback", "folio_wait_writeback_killable", "folio_wait_stable",
		"wait_on_page_writeback", "wait_for_stable_page", "__filemap_fdatawait_range",
		"filemap_fdatawait_range", "filemap_fdatawait_keep_errors", "filemap_write_and_wait_range",
		"file_write_and_wait_range", "wb_wait_for_completion", "sync_inodes_sb", "wait_sb_inodes",
		"__writeback_inodes_sb_nr", "writeback_inodes_sb", "writeback_inodes_sb_nr")

	// Block and journal I/O.
	add(IO, 1, "io_schedule", "io_schedule_timeout", "bit_wait_io", "bit_wait_io_timeout",
		"sleep_on_buffer", "sync_buffer", "sleep_on_page", "sleep_on_page_killable", "get_request",
		"__wait_on_bit", "out_of_line_wait_on_bit", "__wait_on_bit_lock",
		"out_of_line_wait_on_bit_lock", "__wait_on_buffer", "__lock_buffer", "submit_bio_wait",
		"blk_execute_rq")
	add(IO, 2, "blk_mq_get_tag", "__blk_mq_alloc_requests", "blk_mq_alloc_request",
		"rq_qos_wait", "wbt_wait", "__rq_qos_throttle", "xfs_buf_iowait")

	// A frozen request queue: submitters wait in blk_queue_enter until it
	// thaws; the freezer waits for in-flight requests to complete.
	add(QueueFreeze, 3, "blk_queue_enter", "bio_queue_enter", "__bio_queue_enter",
		"blk_mq_freeze_queue_wait", "blk_mq_freeze_queue_wait_timeout", "blk_freeze_queue",
		"blk_mq_freeze_queue", "blk_mq_freeze_queue_nomemsave")

	// NFS and the sunrpc layer: a request waits for the server's reply, a
	// page for its write to be acknowledged, the client for recovery.
	add(NFS, 3, "rpc_wait_bit_killable", "__rpc_wait_for_completion_task", "rpc_wait_for_completion_task",
		"nfs_wait_bit_killable", "nfs_wait_on_request", "nfs4_wait_clnt_recover",
		"nfs_wait_client_init_complete", "nfs_wait_atomic_killable", "nfs_page_group_lock",
		"nfs_wait_on_inode", "nfs4_wait_for_completion_rpc_task", "__nfs_commit_inode",
		"nfs_commit_inode", "nfs_wb_all", "nfs_wb_page", "nfs_wait_bit_uninterruptible")

	// Filesystem journals: a handle waits for the running transaction to
	// close and commit, a fsync for a commit, the commit for open handles,
	// everyone for checkpoint space. Rank 3: it says more than the I/O
	// under it (jbd2_log_wait_commit sleeps in io_schedule on old kernels).
	add(Journal, 3, "jbd2_log_wait_commit", "wait_transaction_locked", "wait_transaction_switching",
		"jbd2_journal_wait_updates", "__jbd2_log_wait_for_space", "jbd2_log_do_checkpoint",
		"jbd2_complete_transaction", "jbd2_journal_force_commit", "jbd2_journal_force_commit_nested",
		"xlog_wait", "xlog_wait_on_iclog", "xlog_grant_head_wait", "xlog_grant_head_check",
		"xfs_log_force", "xfs_log_force_seq", "xfs_log_force_lsn")

	// Freezer: on kernels before 6.1 a frozen task sits in D.
	add(Freezer, 3, "__refrigerator")

	// Sleep loops: the caller polls for a condition (napi_disable…).
	add(Other, 1, "msleep", "ssleep", "usleep_range_state", "usleep_range", "schedule_timeout_uninterruptible")
}

// lookupPrim finds the primitive a bare function name is, if any.
func lookupPrim(name string) (prim, bool) {
	if p, ok := exactPrims[name]; ok {
		return p, true
	}
	for _, e := range prefixPrims {
		if strings.HasPrefix(name, e.prefix) {
			return e.p, true
		}
	}
	return prim{}, false
}

// plumbingExact and plumbingPrefix are frames that are never what a task
// waits on nor who decided to wait: the scheduler itself, syscall and
// interrupt entry, return thunks, kthread and workqueue loops. They are
// stepped over wherever they appear.
var plumbingExact = map[string]bool{
	"schedule": true, "__schedule": true, "schedule_timeout": true, "schedule_timeout_killable": true,
	"schedule_timeout_interruptible": true, "schedule_timeout_idle": true,
	"schedule_preempt_disabled": true, "schedule_idle": true, "schedule_rtlock": true, "preempt_schedule": true,
	"preempt_schedule_common": true, "preempt_schedule_irq": true, "preempt_schedule_notrace": true,
	"__cond_resched": true, "_cond_resched": true, "freezable_schedule": true,
	"context_switch": true, "do_task_dead": true, "kthread": true, "worker_thread": true,
	"process_one_work": true, "process_scheduled_works": true, "smpboot_thread_fn": true,
	"kthread_worker_fn": true, "rescuer_thread": true,
	"do_syscall_64": true, "do_syscall_32_irqs_on": true, "do_fast_syscall_32": true,
	"__do_fast_syscall_32": true, "do_int80_syscall_32": true, "syscall_exit_to_user_mode": true,
	"syscall_exit_to_user_mode_prepare": true, "exit_to_user_mode_prepare": true,
	"exit_to_user_mode_loop": true, "irqentry_exit_to_user_mode": true, "irqentry_exit": true,
	"arch_do_signal_or_restart": true, "srso_return_thunk": true, "srso_alias_return_thunk": true,
	"__x86_return_thunk": true, "retbleed_return_thunk": true, "its_return_thunk": true,
	"invoke_syscall": true, "el0_svc_common": true, "do_el0_svc": true, "el0_svc": true,
	"el0t_64_sync_handler": true, "el0t_64_sync": true, "cpu_switch_to": true,
}

var plumbingPrefix = []string{
	"__pfx_", "__switch_to", "finish_task_switch", "ret_from_fork", "entry_SYSCALL",
	"entry_SYSENTER", "entry_INT80", "asm_", "schedule_hrtimeout", "__traceiter_",
}

// plumbing reports whether name is a frame to step over.
func plumbing(name string) bool {
	if plumbingExact[name] {
		return true
	}
	for _, p := range plumbingPrefix {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// callerLock names the lock a well-known caller takes directly through a
// generic primitive, for when no named wrapper frame is on the stack: the
// wrapper was inlined (inode_lock, mmap_read_lock) or tail-called away
// (rtnl_lock is a one-line mutex_lock(&rtnl_mutex) that some builds turn
// into a jump, leaving mutex_lock returning straight into the caller). The
// lock family disambiguates callers that take several locks.
type callerLock struct {
	family string
	object string
	global bool
}

var callerLocks = map[string][]callerLock{}

func init() {
	set := func(family, object string, global bool, callers ...string) {
		for _, c := range callers {
			callerLocks[c] = append(callerLocks[c], callerLock{family, object, global})
		}
	}
	set("mutex", "rtnl_mutex", true, "rtnetlink_rcv_msg", "dev_ethtool", "bonding_show_bonds",
		"bonding_store_bonds", "dev_ioctl", "devinet_ioctl", "register_netdev", "unregister_netdev",
		"addrconf_dad_work", "addrconf_verify_work", "linkwatch_event", "__tun_chr_ioctl",
		"do_ip_setsockopt", "do_ipv6_setsockopt", "ip_mc_drop_socket", "ipv6_sock_mc_close",
		"wg_set_device", "default_device_exit_batch", "ethnl_default_doit", "ethnl_default_set_doit",
		"ethnl_default_start", "register_netdevice_notifier", "unregister_netdevice_notifier")
	set("rwsem", "pernet_ops_rwsem", true, "register_pernet_subsys", "unregister_pernet_subsys",
		"register_pernet_device", "unregister_pernet_device", "copy_net_ns", "cleanup_net",
		"register_netdevice_notifier", "unregister_netdevice_notifier")
	set("mutex", "cgroup_mutex", true, "proc_cgroup_show", "css_killed_work_fn", "css_release_work_fn",
		"cgroup_mkdir", "cgroup_rmdir")
	set("percpu", "cgroup_threadgroup_rwsem", true, "cgroup_procs_write_start", "copy_process",
		"exit_signals", "cgroup_update_dfl_csses")
	set("percpu", "dup_mmap_sem", true, "register_for_each_vma", "dup_mmap")
	set("rwsem", "mmap_lock", false, "do_user_addr_fault", "__access_remote_vm", "access_remote_vm",
		"vm_mmap_pgoff", "__vm_munmap", "do_madvise", "do_mprotect_pkey", "register_for_each_vma",
		"find_active_uprobe", "__do_sys_brk", "exit_mmap", "exit_mm", "get_user_pages_unlocked",
		"do_page_fault", "do_mlock", "__mm_populate", "proc_pid_cmdline_read", "get_cmdline")
	set("percpu", "sb_writers", false, "vfs_write", "mnt_want_write", "mnt_want_write_file",
		"vfs_fallocate", "do_sys_ftruncate", "vfs_copy_file_range", "vfs_iter_write",
		"do_splice_direct", "file_start_write")
	set("rwsem", "i_rwsem", false, "generic_file_write_iter", "fuse_file_write_iter",
		"fuse_cache_write_iter", "ext4_buffered_write_iter", "shmem_file_write_iter", "do_truncate",
		"chmod_common", "chown_common", "iterate_dir", "lookup_slow", "open_last_lookups",
		"filename_create", "do_rmdir", "do_unlinkat", "vfs_setxattr", "vfs_removexattr")
}

func lookupCallerLock(caller, family string) (callerLock, bool) {
	for _, c := range callerLocks[caller] {
		if c.family == family {
			return c, true
		}
	}
	return callerLock{}, false
}
