package kstack

import (
	"strings"
	"testing"
)

// stack splits a trace pasted from a log, one frame a line, dropping the
// blank lines and the <TASK> markers the way the log parser does.
func stack(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l == "<TASK>" || l == "</TASK>" {
			continue
		}
		out = append(out, l)
	}
	return out
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name     string
		frames   string
		kind     Kind
		fn       string
		lockFunc string
		object   string
		key      string
		describe string // substring
	}{
		{
			name: "6.6 rtnetlink_rcv_msg behind rtnl_lock",
			frames: `
__schedule+0x3fc/0x1450
? srso_return_thunk+0x5/0x5f
schedule+0x5e/0xd0
schedule_preempt_disabled+0x15/0x30
__mutex_lock.constprop.0+0x3a5/0x6c0
__mutex_lock_slowpath+0x13/0x20
mutex_lock+0x3c/0x50
rtnl_lock+0x15/0x20
rtnetlink_rcv_msg+0x9/0x3c0
? __pfx_rtnetlink_rcv_msg+0x10/0x10
netlink_rcv_skb+0x58/0x110
netlink_unicast+0x242/0x370
netlink_sendmsg+0x254/0x4d0
__sys_sendto+0x1f3/0x220
__x64_sys_sendto+0x24/0x40
do_syscall_64+0x5d/0x90
entry_SYSCALL_64_after_hwframe+0x6e/0xd8`,
			kind: Mutex, fn: "rtnetlink_rcv_msg", lockFunc: "rtnl_lock", object: "rtnl_mutex",
			key: "lock:rtnl_mutex", describe: "waits for rtnl_mutex (rtnl_lock) in rtnetlink_rcv_msg",
		},
		{
			name: "5.15 dev_ethtool, rtnl_lock tail-called away",
			frames: `
__schedule+0x23d/0x590
schedule+0x4e/0xc0
schedule_preempt_disabled+0xe/0x10
__mutex_lock.constprop.0+0x263/0x490
__mutex_lock_slowpath+0x13/0x20
mutex_lock+0x34/0x40
dev_ethtool+0xc6/0x2db0
? __dev_get_by_name+0x5c/0x80
dev_ioctl+0x1ba/0x500
sock_do_ioctl+0xa9/0x130
sock_ioctl+0xef/0x300
__x64_sys_ioctl+0x8a/0xc0
do_syscall_64+0x5c/0xc0
entry_SYSCALL_64_after_hwframe+0x61/0xcb`,
			kind: Mutex, fn: "dev_ethtool", lockFunc: "mutex_lock", object: "rtnl_mutex",
			key: "lock:rtnl_mutex",
		},
		{
			name: "6.1 bonding_show_bonds in sysfs",
			frames: `
__schedule+0x34d/0x9e0
schedule+0x5a/0xd0
schedule_preempt_disabled+0x11/0x20
__mutex_lock.constprop.0+0x399/0x700
rtnl_lock+0x15/0x20
bonding_show_bonds+0x20/0xb0 [bonding]
class_attr_show+0x1b/0x30
sysfs_kf_seq_show+0xa1/0x100
seq_read_iter+0x11f/0x450
vfs_read+0x201/0x350
ksys_read+0x6f/0xf0
do_syscall_64+0x58/0xc0
entry_SYSCALL_64_after_hwframe+0x64/0xce`,
			kind: Mutex, fn: "bonding_show_bonds", lockFunc: "rtnl_lock", object: "rtnl_mutex",
			key: "lock:rtnl_mutex",
		},
		{
			name: "6.8 FUSE writer on the inode rwsem",
			frames: `
__schedule+0x27c/0x6b0
schedule+0x33/0x110
schedule_preempt_disabled+0x15/0x30
rwsem_down_write_slowpath+0x2b1/0x560
down_write+0x5a/0x60
fuse_file_write_iter+0x6d/0x3f0 [fuse]
vfs_write+0x23a/0x400
ksys_write+0x6f/0xf0
do_syscall_64+0x76/0x140
entry_SYSCALL_64_after_hwframe+0x76/0x7e`,
			kind: RwsemWrite, fn: "fuse_file_write_iter", lockFunc: "down_write", object: "i_rwsem",
			key: "lock:i_rwsem:fuse_file_write_iter", describe: "(write, down_write) in fuse_file_write_iter",
		},
		{
			name: "down_write inlined into an unknown caller",
			frames: `
__schedule+0x27c/0x6b0
schedule+0x33/0x110
schedule_preempt_disabled+0x15/0x30
rwsem_down_write_slowpath+0x2b1/0x560
my_driver_ioctl+0x6d/0x3f0 [mydrv]
__x64_sys_ioctl+0x8a/0xc0`,
			kind: RwsemWrite, fn: "my_driver_ioctl", lockFunc: "rwsem_down_write_slowpath",
			key: "rwsem:my_driver_ioctl", describe: "waits for rw-semaphore (write, rwsem_down_write_slowpath) in my_driver_ioctl",
		},
		{
			name: "6.12 FUSE getattr waits for the daemon",
			frames: `
__schedule+0x400/0x1720
schedule+0x27/0xf0
request_wait_answer+0xd0/0x2a0 [fuse]
__fuse_simple_request+0xd8/0x2c0 [fuse]
fuse_do_getattr+0x10b/0x2c0 [fuse]
fuse_update_get_attr+0xb6/0xf0 [fuse]
fuse_getattr+0x8e/0xe0 [fuse]
vfs_statx+0x98/0x1d0
do_statx+0x67/0xb0`,
			kind: Fuse, fn: "fuse_do_getattr", lockFunc: "__fuse_simple_request", key: "fuse",
			describe: "waits for a FUSE daemon's reply (__fuse_simple_request) in fuse_do_getattr",
		},
		{
			name: "the hung-task write-up: decoded coredump, coredump_task_exit inlined in do_exit",
			frames: `
__schedule (linux/kernel/sched/core.c:5378 linux/kernel/sched/core.c:6697)
schedule (linux/arch/x86/include/asm/preempt.h:85 (discriminator 13) linux/kernel/sched/core.c:6772 (discriminator 13))
[do_exit (linux/kernel/exit.c:433 (discriminator 4) linux/kernel/exit.c:825 (discriminator 4))
? finish_task_switch.isra.0 (linux/arch/x86/include/asm/irqflags.h:42 linux/kernel/sched/core.c:5250)
do_group_exit (linux/kernel/exit.c:1005)
get_signal (linux/kernel/signal.c:2869)
? srso_return_thunk (linux/arch/x86/lib/retpoline.S:217)
arch_do_signal_or_restart (linux/arch/x86/kernel/signal.c:310)
exit_to_user_mode_prepare (linux/kernel/entry/common.c:176 linux/kernel/entry/common.c:210)
syscall_exit_to_user_mode (linux/arch/x86/include/asm/entry-common.h:91 linux/kernel/entry/common.c:304)
do_syscall_64 (linux/arch/x86/entry/common.c:88)
entry_SYSCALL_64_after_hwframe (linux/arch/x86/entry/entry_64.S:121)`,
			kind: Coredump, fn: "do_exit", lockFunc: "coredump_task_exit", key: "coredump",
			describe: "is blocked by coredump (coredump_task_exit, inlined in do_exit)",
		},
		{
			name: "6.16 coredump with the helper frame present",
			frames: `
__schedule+0x2e6/0x1210
schedule+0x27/0xd0
coredump_task_exit+0xf4/0x150
do_exit+0xa2/0xa90
do_group_exit+0x30/0x80
get_signal+0x8d5/0x8e0`,
			kind: Coredump, fn: "do_exit", lockFunc: "coredump_task_exit", key: "coredump",
		},
		{
			name: "'Performance and reliability pitfalls of eBPF': system-probe detaching fentry waits for RCU tasks",
			frames: `
__schedule+0x2cb/0x760
schedule+0x63/0x110
schedule_timeout+0x157/0x170
wait_for_completion+0x88/0x150
__wait_rcu_gp+0x17e/0x190
synchronize_rcu_tasks_generic+0x64/0xe0
? __pfx_call_rcu_tasks+0x10/0x10
? __pfx_wakeme_after_rcu+0x10/0x10
synchronize_rcu_tasks+0x15/0x20
ftrace_shutdown.part.0+0xd1/0x1f0
? 0xffffffffc11f0000
unregister_ftrace_function+0x47/0x170
? 0xffffffffc11f0000
unregister_ftrace_direct+0x60/0x1e0
? bpf_trampoline_6442514787+0xba/0x1000
bpf_trampoline_update+0x505/0x5f0
bpf_trampoline_unlink_prog+0x9d/0x130
bpf_tracing_link_release+0x16/0x50
bpf_link_free+0x52/0x80
bpf_link_release+0x26/0x40
__fput+0xf9/0x2c0
task_work_run+0x5e/0xa0
exit_to_user_mode_loop+0x105/0x130
do_syscall_64+0x62/0x90
entry_SYSCALL_64_after_hwframe+0x73/0xdd`,
			kind: RCU, fn: "ftrace_shutdown", lockFunc: "synchronize_rcu_tasks", object: "rcu-tasks",
			key: "rcu:rcu-tasks", describe: "waits for an RCU-tasks grace period (synchronize_rcu_tasks) in ftrace_shutdown",
		},
		{
			name: "'Performance and reliability pitfalls of eBPF': rcu_tasks_kthread in synchronize_srcu",
			frames: `
__schedule+0x2cb/0x760
schedule+0x63/0x110
schedule_timeout+0x157/0x170
wait_for_completion+0x88/0x150
__synchronize_srcu+0x91/0xd0
? __pfx_wakeme_after_rcu+0x10/0x10
? ktime_get_mono_fast_ns+0x3c/0xa0
synchronize_srcu+0xb9/0x110
rcu_tasks_postscan+0x39/0x60
rcu_tasks_wait_gp+0x116/0x310
? _raw_spin_unlock_irqrestore+0x11/0x60
rcu_tasks_one_gp+0x108/0x140
rcu_tasks_kthread+0x33/0x40
kthread+0xef/0x120
? __pfx_kthread+0x10/0x10
ret_from_fork+0x44/0x70
ret_from_fork_asm+0x1b/0x30`,
			kind: RCU, fn: "rcu_tasks_postscan", lockFunc: "synchronize_srcu", object: "srcu",
			key: "rcu:srcu:rcu_tasks_postscan",
		},
		{
			name: "6.6 XFS log force from xfs_log_worker",
			frames: `
__schedule+0x3ed/0x1480
schedule+0x5e/0xd0
xlog_wait_on_iclog+0x16b/0x180 [xfs]
xfs_log_force+0x9a/0x230 [xfs]
xfs_log_worker+0x3b/0x90 [xfs]
process_one_work+0x174/0x340
worker_thread+0x27b/0x3a0
? __pfx_worker_thread+0x10/0x10
kthread+0xee/0x120
ret_from_fork+0x2d/0x50
ret_from_fork_asm+0x1b/0x30`,
			kind: Journal, fn: "xfs_log_worker", lockFunc: "xfs_log_force", key: "journal",
			describe: "waits for the XFS log (xfs_log_force) in xfs_log_worker",
		},
		{
			name: "4.18 ext4 writer waiting for journal space (Open-CAS issue 746)",
			frames: `
__schedule+0x2a6/0x700
? __wake_up_common_lock+0x89/0xc0
schedule+0x38/0xa0
jbd2_log_wait_commit+0xac/0x120 [jbd2]
? finish_wait+0x80/0x80
jbd2_log_do_checkpoint+0x392/0x400 [jbd2]
__jbd2_log_wait_for_space+0x69/0x1a0 [jbd2]
add_transaction_credits+0x27d/0x290 [jbd2]
? xas_store+0x1b0/0x5a0
start_this_handle+0x10a/0x510 [jbd2]`,
			kind: Journal, fn: "add_transaction_credits", lockFunc: "__jbd2_log_wait_for_space", key: "journal",
			describe: "waits for journal space (a checkpoint) (__jbd2_log_wait_for_space) in add_transaction_credits",
		},
		{
			name: "4.x rwsem slow path through the call_rwsem thunk",
			frames: `
__schedule+0x813/0x1cc0
schedule+0x92/0x180
rwsem_down_write_failed+0x774/0xc30
call_rwsem_down_write_failed+0x17/0x30
down_write+0x53/0x90
grab_super+0xb4/0x290
sget_userns+0x1ab/0x560`,
			kind: RwsemWrite, fn: "grab_super", lockFunc: "down_write", key: "rwsem:grab_super",
			describe: "waits for rw-semaphore (write, down_write) in grab_super",
		},
		{
			name: "jbd2 thread sleeping inside its commit",
			frames: `
__schedule+0x2eb/0x8d0
schedule+0x5b/0xd0
jbd2_journal_commit_transaction+0x301/0x2850 [jbd2]
? wait_woken+0x70/0x70
kjournald2+0xb7/0x2a0 [jbd2]
kthread+0x127/0x150`,
			kind: Journal, fn: "jbd2_journal_commit_transaction", lockFunc: "jbd2_journal_commit_transaction", key: "journal",
			describe: "waits for its journal commit to progress",
		},
		{
			name: "4.9 kworker waiting for a frozen queue (lxd issue 5014)",
			frames: `
[<ffffffff8780fe79>] ? __schedule+0x239/0x6f0
[<ffffffff87810362>] ? schedule+0x32/0x80
[<ffffffff878136ed>] ? schedule_timeout+0x1dd/0x380
blk_queue_enter+0x1cb/0x280
generic_make_request+0xa2/0x2d0`,
			kind: QueueFreeze, fn: "generic_make_request", lockFunc: "blk_queue_enter", key: "queue-freeze",
			describe: "waits for a frozen block queue to thaw (blk_queue_enter) in generic_make_request",
		},
		{
			name: "queue freezer draining I/O (elevator switch)",
			frames: `
__schedule+0x2f0/0x9c0
schedule+0x28/0x90
blk_mq_freeze_queue_wait+0x9e/0xe0
blk_mq_freeze_queue_nomemsave+0x12/0x20
elv_iosched_store+0x13b/0x370
queue_attr_store+0x17a/0x1a0`,
			kind: QueueFreeze, fn: "elv_iosched_store", lockFunc: "blk_mq_freeze_queue_nomemsave", key: "queue-freeze",
			describe: "freezes a block queue and waits for its I/O in flight to drain",
		},
		{
			name: "NFS write waiting for the server",
			frames: `
__schedule+0x2c4/0x700
schedule+0x38/0xa0
rpc_wait_bit_killable+0x1e/0xa0 [sunrpc]
__wait_on_bit+0x7a/0x90
out_of_line_wait_on_bit+0x91/0xb0
__rpc_wait_for_completion_task+0x2d/0x30 [sunrpc]
nfs4_do_close+0x2b8/0x310 [nfsv4]
__nfs4_close+0x11b/0x1e0 [nfsv4]`,
			kind: NFS, fn: "nfs4_do_close", lockFunc: "__rpc_wait_for_completion_task", key: "nfs",
			describe: "waits for the NFS server (RPC) (__rpc_wait_for_completion_task) in nfs4_do_close",
		},
		{
			name: "5.19 jbd2 commit waiting for open handles (systemd CI issue 536)",
			frames: `
__schedule+0x356/0x11a0
? autoremove_wake_function+0x32/0x60
schedule+0x5e/0xd0
jbd2_journal_wait_updates+0x77/0xe0 [jbd2 ae888ef92775c4ea4c63d1cd1f51b1b9f7d9f47d]
? cpuacct_percpu_seq_show+0x20/0x20
jbd2_journal_commit_transaction+0x2b3/0x1a40 [jbd2 ae888ef92775c4ea4c63d1cd1f51b1b9f7d9f47d]
? newidle_balance+0x2f4/0x430
kjournald2+0xb7/0x2a0 [jbd2 ae888ef92775c4ea4c63d1cd1f51b1b9f7d9f47d]`,
			kind: Journal, fn: "jbd2_journal_commit_transaction", lockFunc: "jbd2_journal_wait_updates", key: "journal",
			describe: "waits for open journal handles to close before committing",
		},
		{
			name: "6.1 page lock in filemap_fault",
			frames: `
__schedule+0x351/0xa20
schedule+0x5d/0xe0
io_schedule+0x42/0x70
folio_wait_bit_common+0x12d/0x360
? filemap_invalidate_unlock_two+0x40/0x40
__folio_lock_killable+0x1a/0x20
filemap_fault+0x52a/0x9f0
__do_fault+0x30/0x130
do_fault+0x1fb/0x410
__handle_mm_fault+0x660/0xfa0
handle_mm_fault+0xdb/0x2d0
do_user_addr_fault+0x19c/0x560
exc_page_fault+0x66/0x150
asm_exc_page_fault+0x22/0x30`,
			kind: PageLock, fn: "filemap_fault", lockFunc: "__folio_lock_killable", key: "page-lock",
		},
		{
			name: "5.15 fsync waits for writeback",
			frames: `
__schedule+0x23d/0x590
schedule+0x4e/0xc0
io_schedule+0x46/0x70
wait_on_page_bit_common+0x10c/0x3d0
? filemap_invalidate_unlock_two+0x40/0x40
wait_on_page_writeback+0x25/0x80
__filemap_fdatawait_range+0x97/0x110
file_write_and_wait_range+0xd3/0xf0
ext4_sync_file+0x7b/0x330
vfs_fsync_range+0x46/0x90
do_fsync+0x3d/0x80
__x64_sys_fsync+0x14/0x20`,
			kind: Writeback, fn: "ext4_sync_file", lockFunc: "file_write_and_wait_range", key: "writeback",
		},
		{
			name: "6.6 lru_add_drain_all flushing per-cpu work",
			frames: `
__schedule+0x3fc/0x1450
schedule+0x5e/0xd0
schedule_timeout+0x151/0x160
__wait_for_common+0x93/0x1b0
? __pfx_schedule_timeout+0x10/0x10
__flush_work.isra.0+0x161/0x220
? __pfx_wq_barrier_func+0x10/0x10
__lru_add_drain_all+0x13a/0x1e0
khugepaged+0x6a/0x1d0`,
			kind: WorkqueueFlush, fn: "__lru_add_drain_all", lockFunc: "__flush_work",
			key: "workqueue-flush:__lru_add_drain_all",
		},
		{
			name: "6.6 page fault waits for mmap_lock",
			frames: `
__schedule+0x3fc/0x1450
schedule+0x5e/0xd0
schedule_preempt_disabled+0x15/0x30
rwsem_down_read_slowpath+0x28e/0x4f0
down_read_killable+0x5b/0xe0
lock_mm_and_find_vma+0x9e/0x180
do_user_addr_fault+0x1bc/0x640
exc_page_fault+0x7f/0x180
asm_exc_page_fault+0x26/0x30`,
			kind: RwsemRead, fn: "do_user_addr_fault", lockFunc: "lock_mm_and_find_vma", object: "mmap_lock",
			key: "lock:mmap_lock:do_user_addr_fault", describe: "waits for mmap_lock (read, lock_mm_and_find_vma)",
		},
		{
			name: "'The case of the vanishing CPU': ps reading /proc/PID/cmdline",
			frames: `
__schedule+0x2eb/0x8d0
schedule+0x4e/0xb0
rwsem_down_read_slowpath+0x340/0x4f0
down_read_killable+0x47/0x60
__access_remote_vm+0x51/0x300
proc_pid_cmdline_read+0x1a4/0x380
vfs_read+0xb4/0x1a0
ksys_read+0x67/0xe0`,
			kind: RwsemRead, fn: "__access_remote_vm", lockFunc: "down_read_killable", object: "mmap_lock",
			key: "lock:mmap_lock:__access_remote_vm",
		},
		{
			name: "5.15 xfs_buf_lock on a semaphore",
			frames: `
__schedule+0x23d/0x590
schedule+0x4e/0xc0
schedule_timeout+0x104/0x140
__down_common+0x11d/0x230
__down+0x1d/0x30
down+0x47/0x60
xfs_buf_lock+0x31/0xe0 [xfs]
xfs_buf_find+0x3f1/0x630 [xfs]
xfs_buf_get_map+0x46/0x3a0 [xfs]`,
			kind: Semaphore, fn: "xfs_buf_lock", lockFunc: "down", key: "semaphore:xfs_buf_lock",
		},
		{
			name: "6.12 PREEMPT_RT i2c bus rt-mutex",
			frames: `
__schedule+0x3d8/0x1390
schedule_rtlock+0x1e/0x40
rt_mutex_slowlock_block.constprop.0+0x47/0x170
__rt_mutex_slowlock_locked.constprop.0+0xb6/0x1c0
rt_mutex_slowlock.constprop.0+0x4a/0x90
rt_mutex_lock_nested+0x44/0x50
i2c_adapter_lock_bus+0x16/0x20
__i2c_transfer+0x5a/0x6e0`,
			kind: RTMutex, fn: "i2c_adapter_lock_bus", lockFunc: "rt_mutex_lock_nested",
			key: "rt-mutex:i2c_adapter_lock_bus",
		},
		{
			name: "6.6 cgroup attach behind cgroup_threadgroup_rwsem",
			frames: `
__schedule+0x3fc/0x1450
schedule+0x5e/0xd0
percpu_rwsem_wait+0x11c/0x140
? __pfx_percpu_rwsem_wake_function+0x10/0x10
percpu_down_write+0x2e/0x170
cgroup_procs_write_start+0x7c/0x1c0
__cgroup_procs_write+0x5d/0x180
cgroup_procs_write+0x17/0x30
kernfs_fop_write_iter+0x14d/0x200`,
			kind: RwsemWrite, fn: "cgroup_procs_write_start", lockFunc: "percpu_down_write",
			object: "cgroup_threadgroup_rwsem", key: "lock:cgroup_threadgroup_rwsem",
		},
		{
			name: "6.1 write on a frozen filesystem",
			frames: `
__schedule+0x351/0xa20
schedule+0x5d/0xe0
percpu_rwsem_wait+0x10f/0x130
? percpu_free_rwsem+0x30/0x30
__percpu_down_read+0x75/0x90
vfs_write+0x36a/0x3f0
ksys_write+0x6f/0xf0
do_syscall_64+0x58/0xc0`,
			kind: RwsemRead, fn: "vfs_write", lockFunc: "__percpu_down_read", object: "sb_writers",
			key: "lock:sb_writers:vfs_write",
		},
		{
			name: "6.18 synchronize_rcu from netif_napi_del",
			frames: `
__schedule+0x46a/0x1580
schedule+0x27/0xd0
schedule_timeout+0x12b/0x140
__wait_for_common+0x8f/0x1a0
? __pfx_schedule_timeout+0x10/0x10
__wait_rcu_gp+0x129/0x140
synchronize_rcu_normal+0xcd/0x180
synchronize_rcu+0xf3/0x130
__netif_napi_del_locked+0x115/0x160
mlx5e_close_channel+0x4f/0x90 [mlx5_core]`,
			kind: RCU, fn: "__netif_napi_del_locked", lockFunc: "synchronize_rcu", object: "rcu", key: "rcu:rcu",
		},
		{
			name: "the hung-task write-up: calico-node polling in napi_disable",
			frames: `
__schedule+0x3fc/0x1450
schedule+0x5e/0xd0
schedule_hrtimeout_range_clock+0xbd/0x130
usleep_range_state+0x65/0x90
napi_disable+0x48/0x70
peer_remove_after_dead+0x3a/0xc0 [wireguard]
set_peer+0x3c0/0x4c0 [wireguard]
wg_set_device+0x1f4/0x5b0 [wireguard]
genl_family_rcv_msg_doit+0xef/0x150`,
			kind: Other, fn: "napi_disable", lockFunc: "usleep_range_state", key: "other:napi_disable",
			describe: "polling loop (usleep_range_state) in napi_disable",
		},
		{
			name: "arm64 6.6 reader in a sound driver",
			frames: `
__switch_to+0xe4/0x140
__schedule+0x2c4/0xa98
schedule+0x5c/0xc4
schedule_preempt_disabled+0x20/0x40
rwsem_down_read_slowpath+0x214/0x68c
down_read+0xb0/0xb8
fsl_xcvr_mode_put+0x4c/0xc0 [snd_soc_fsl_xcvr ac1b31380c6a6ea0d613bd5f78489e314a40f91f]
snd_ctl_elem_write+0xdc/0x180 [snd 852e63996474051c57bcd1a86ebfd81083073853]
__arm64_sys_ioctl+0x9c/0xe4
invoke_syscall.constprop.0+0x58/0xcc
el0_svc_common.constprop.0+0xac/0xd4
do_el0_svc+0x18/0x20
el0_svc+0x24/0xa0
el0t_64_sync_handler+0x98/0xdc
el0t_64_sync+0x154/0x158`,
			kind: RwsemRead, fn: "fsl_xcvr_mode_put", lockFunc: "down_read", key: "rwsem:fsl_xcvr_mode_put",
		},
		{
			name: "5.15 freezer",
			frames: `
__schedule+0x23d/0x590
schedule+0x4e/0xc0
__refrigerator+0x4c/0x130
get_signal+0x6f3/0x8d0
arch_do_signal_or_restart+0xde/0x100
exit_to_user_mode_loop+0xc4/0x160`,
			kind: Freezer, fn: "get_signal", lockFunc: "__refrigerator", key: "freezer",
		},
		{
			name: "the dumping thread writing the core to disk",
			frames: `
__schedule+0x3fc/0x1450
schedule+0x5e/0xd0
io_schedule+0x46/0x70
folio_wait_bit_common+0x13d/0x350
folio_wait_writeback+0x2c/0x90
__filemap_fdatawait_range+0x80/0xe0
filemap_write_and_wait_range+0x89/0xa0
ext4_file_write_iter+0x5d/0x810
__kernel_write_iter+0xf3/0x280
dump_emit+0x9c/0xe0
elf_core_dump+0xd66/0xf40
do_coredump+0xfdc/0x14e0
get_signal+0x97d/0x9a0`,
			kind: Coredump, fn: "ext4_file_write_iter", lockFunc: "do_coredump", key: "coredump",
			describe: "is writing a core dump (do_coredump) in ext4_file_write_iter",
		},
		{
			name: "idle kworker, plumbing only",
			frames: `
__schedule+0x3fc/0x1450
schedule+0x5e/0xd0
worker_thread+0xbe/0x3a0
? __pfx_worker_thread+0x10/0x10
kthread+0xee/0x120
ret_from_fork+0x2d/0x50`,
			kind: Other, fn: "", key: "other:", describe: "no meaningful frame",
		},
		{
			name:   "empty stack",
			frames: ``,
			kind:   Other, fn: "", key: "other:",
		},
		{
			name: "unknown wait, named after its caller",
			frames: `
__schedule+0x3fc/0x1450
schedule+0x5e/0xd0
nvme_dev_disable_locked+0x12/0x40 [nvme]
nvme_reset_work+0x44/0x300 [nvme]`,
			kind: Other, fn: "nvme_dev_disable_locked", key: "other:nvme_dev_disable_locked",
			describe: "sleeps in nvme_dev_disable_locked",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Classify(stack(tc.frames))
			if s.Kind != tc.kind {
				t.Errorf("Kind = %q, want %q (site %+v)", s.Kind, tc.kind, s)
			}
			if s.Func != tc.fn {
				t.Errorf("Func = %q, want %q", s.Func, tc.fn)
			}
			if tc.lockFunc != "" && s.LockFunc != tc.lockFunc {
				t.Errorf("LockFunc = %q, want %q", s.LockFunc, tc.lockFunc)
			}
			if tc.object != "" && s.Object != tc.object {
				t.Errorf("Object = %q, want %q", s.Object, tc.object)
			}
			if s.Key() != tc.key {
				t.Errorf("Key() = %q, want %q", s.Key(), tc.key)
			}
			if !strings.Contains(s.Describe, tc.describe) {
				t.Errorf("Describe = %q, want it to contain %q", s.Describe, tc.describe)
			}
			if s.Func != "" && FuncName(s.Frame) != s.Func {
				t.Errorf("Frame %q does not name Func %q", s.Frame, s.Func)
			}
		})
	}
}

// The seed's rtnl case: three stacks that look unrelated must share a key.
func TestRTNLVictimsShareKey(t *testing.T) {
	callers := []string{"rtnetlink_rcv_msg+0x9/0x3c0", "dev_ethtool+0xc6/0x2db0", "bonding_show_bonds+0x20/0xb0 [bonding]"}
	keys := map[string]bool{}
	for i, c := range callers {
		frames := []string{"__schedule+0x3fc/0x1450", "schedule+0x5e/0xd0", "schedule_preempt_disabled+0x15/0x30",
			"__mutex_lock.constprop.0+0x3a5/0x6c0"}
		if i != 1 { // dev_ethtool's build tail-called rtnl_lock
			frames = append(frames, "rtnl_lock+0x15/0x20")
		}
		frames = append(frames, c, "do_syscall_64+0x5d/0x90")
		keys[Classify(frames).Key()] = true
	}
	if len(keys) != 1 || !keys["lock:rtnl_mutex"] {
		t.Fatalf("keys = %v, want only lock:rtnl_mutex", keys)
	}
}

// Tasks waiting on different instances of a per-object lock must not be
// merged just because the lock class matches.
func TestPerObjectLocksStayApart(t *testing.T) {
	a := Classify([]string{"rwsem_down_write_slowpath+0x1/0x2", "down_write+0x1/0x2", "fuse_file_write_iter+0x1/0x2"})
	b := Classify([]string{"rwsem_down_write_slowpath+0x1/0x2", "down_write+0x1/0x2", "do_truncate+0x1/0x2"})
	if a.Key() == b.Key() {
		t.Fatalf("different callers of i_rwsem grouped together: %q", a.Key())
	}
	r := Classify([]string{"rwsem_down_read_slowpath+0x1/0x2", "down_read+0x1/0x2", "fuse_file_write_iter+0x1/0x2"})
	if r.Key() != a.Key() {
		t.Fatalf("reader and writer of the same rwsem in the same caller split: %q vs %q", r.Key(), a.Key())
	}
}

func TestFuncName(t *testing.T) {
	tests := map[string]string{
		"rwsem_down_write_slowpath+0x2b1/0x560":                                       "rwsem_down_write_slowpath",
		"__mutex_lock.constprop.0+0x1a0/0x9c0":                                        "__mutex_lock",
		"? finish_task_switch.isra.0+0x8f":                                            "finish_task_switch",
		"request_wait_answer+0xd0/0x2a0 [fuse]":                                       "request_wait_answer",
		"fsl_xcvr_mode_put+0x4c/0xc0 [snd_soc_fsl_xcvr ac1b31380c6a6]":                "fsl_xcvr_mode_put",
		"__schedule (linux/kernel/sched/core.c:5378 linux/kernel/sched/core.c:6697) ": "__schedule",
		"[do_exit (linux/kernel/exit.c:433 (discriminator 4))":                        "do_exit",
		"[<ffffffff8108a0b5>] ? wait_for_completion+0x88/0x150":                       "wait_for_completion",
		"[<ffffffc0080a2b14>] __switch_to+0xe4/0x140":                                 "__switch_to",
		"ftrace_shutdown.part.0+0xd1/0x1f0":                                           "ftrace_shutdown",
		"mlx5_cmd_exec.cold+0x2/0x30 [mlx5_core]":                                     "mlx5_cmd_exec",
		"? 0xffffffffc11f0000":                                                        "",
		"0xffffffffc11f0000":                                                          "",
		"":                                                                            "",
		"   ":                                                                         "",
		"?":                                                                           "",
		"[<ffff":                                                                      "",
		"RIP: 0033:0x1ce792e":                                                         "",
		"bpf_prog_6deef7357e7b4530_handler+0x4e/0x8c":                                 "bpf_prog_6deef7357e7b4530_handler",
		"schedule":                                                                    "schedule",
	}
	for in, want := range tests {
		if got := FuncName(in); got != want {
			t.Errorf("FuncName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestUnreliable(t *testing.T) {
	for in, want := range map[string]bool{
		"? srso_return_thunk+0x5/0x5f":        true,
		" ? __pfx_kthread+0x10/0x10":          true,
		"[<ffffffff8108a0b5>] ? foo+0x1/0x2":  true,
		"schedule+0x63/0x110":                 false,
		"[<ffffffff8108a0b5>] foo+0x1/0x2":    false,
		"do_exit (linux/kernel/exit.c:433) ?": false,
	} {
		if got := Unreliable(in); got != want {
			t.Errorf("Unreliable(%q) = %v, want %v", in, got, want)
		}
	}
}
