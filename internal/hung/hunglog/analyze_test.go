package hunglog

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/finding/findingtest"
	"github.com/wolf-investigator/wolf/internal/kstack"
)

func analyzeFile(t *testing.T, name string) *Analysis {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, err := Analyze(f)
	if err != nil {
		t.Fatalf("Analyze(%s): %v", name, err)
	}
	return a
}

func analyzeString(t *testing.T, s string) *Analysis {
	t.Helper()
	a, err := Analyze(strings.NewReader(s))
	if err != nil {
		t.Fatalf("Analyze: %v", err)
	}
	return a
}

func victimPIDs(f finding.Finding) map[int]bool {
	m := map[int]bool{}
	for _, s := range findingtest.Subjects(f, finding.RoleVictim) {
		m[s.TID] = true
	}
	return m
}

func mustContain(t *testing.T, what, text string, words ...string) {
	t.Helper()
	for _, w := range words {
		if !strings.Contains(text, w) {
			t.Errorf("%s does not mention %q:\n  %s", what, w, text)
		}
	}
}

func joined(ss []string) string { return strings.Join(ss, "\n") }

// the hung-task write-up, example 1: a kworker on xfs-sync; the workqueue names XFS.
func TestXFSKworker(t *testing.T) {
	a := analyzeFile(t, "xfs_kworker.log")
	f := findingtest.Only(t, a.Findings, IDKworker)
	if f.Severity != finding.Warning {
		t.Errorf("severity %v, want warning", f.Severity)
	}
	mustContain(t, "title", f.Title, "kworker/13:0", "834409", "xfs-sync/dm-6", "xfs_log_worker", "XFS")
	mustContain(t, "remediation", joined(f.Remediation), "no_read_workqueue", "no_write_workqueue", "wolf hung")
	if f.Evidence["workqueue"] != "xfs-sync/dm-6" || f.Evidence["blocked_s"] != 11 {
		t.Errorf("evidence %v", f.Evidence)
	}
	r := a.Reports[0]
	if r.Comm != "kworker/13:0" || r.PID != 834409 || r.PPID != 2 || r.Kernel != "6.6.39-cloudflare-2024.7.3" {
		t.Errorf("report %+v", r)
	}
}

// the hung-task write-up, example 2: the decoded trace with do_exit and no timestamps.
func TestCoredumpDecoded(t *testing.T) {
	a := analyzeFile(t, "coredump_decoded.log")
	f := findingtest.Only(t, a.Findings, IDCoredump)
	mustContain(t, "title", f.Title, "test (pid 964)", "core dump", "not by the application")
	mustContain(t, "remediation", joined(f.Remediation), "core_pattern", "systemd-coredump", "ulimit -c")
	r := a.Reports[0]
	if r.Tainted != "Not tainted" || r.Kernel != "6.6.72-cloudflare-2025.1.7" || len(r.Stack) != 16 {
		t.Errorf("report: taint %q kernel %q %d frames", r.Tainted, r.Kernel, len(r.Stack))
	}
	if r.Site.Func != "do_exit" || !r.Site.Inferred {
		t.Errorf("site %+v", r.Site)
	}
	// The subject's stack drops the unwinder's "?" guesses.
	v := findingtest.Subjects(f, finding.RoleVictim)[0]
	for _, fr := range v.Stack {
		if strings.HasPrefix(fr, "?") {
			t.Errorf("unreliable frame in subject stack: %q", fr)
		}
	}
}

// the hung-task write-up, example 2 (second log): "Blocked by coredump." with no stack,
// dmesg -T stamps and CRLF line ends.
func TestCoredumpDmesgT(t *testing.T) {
	a := analyzeFile(t, "coredump_dmesg_T.log")
	f := findingtest.Only(t, a.Findings, IDCoredump)
	if got := victimPIDs(f); !got[8734] || !got[8736] || len(got) != 2 {
		t.Errorf("victims %v", got)
	}
	for _, r := range a.Reports {
		if !r.Coredump || r.TaskFlags != "0x400448" || r.Comm != "test" || r.Stamp != "Sun Nov 22 02:28:46 2026" {
			t.Errorf("report %+v", r)
		}
	}
	if len(a.Findings) != 1 {
		t.Errorf("%d findings, want 1 (the segfault line is not a report)", len(a.Findings))
	}
}

// the hung-task write-up, example 3: dozens of victims in three unrelated-looking
// functions are one group behind rtnl_mutex.
func TestRTNLGroup(t *testing.T) {
	a := analyzeFile(t, "rtnl.log")
	if len(a.Groups) != 1 {
		t.Fatalf("%d groups, want 1: %+v", len(a.Groups), a.Groups)
	}
	f := findingtest.Only(t, a.Findings, IDGroup)
	if want := "6 tasks hung behind rtnl_mutex (rtnetlink_rcv_msg, dev_ethtool, bonding_show_bonds)"; f.Title != want {
		t.Errorf("title %q, want %q", f.Title, want)
	}
	if f.Severity != finding.Critical {
		t.Errorf("severity %v, want critical (a lock with 6 victims)", f.Severity)
	}
	if len(findingtest.Subjects(f, finding.RoleOffender)) != 0 {
		t.Error("an offender was invented; the log does not name one")
	}
	if f.Evidence["blocked_s"] != 245 || f.Evidence["victims"] != 6 || f.Evidence["reports"] != 9 {
		t.Errorf("evidence %v", f.Evidence)
	}
	mustContain(t, "summary", f.Summary, "wolf hung")
	mustContain(t, "remediation", joined(f.Remediation), "wolf hung", "/proc/OWNER_PID/stack")
	// Repeated reports merge and keep the longest blocked time.
	for _, r := range a.Reports {
		if r.Comm == "ip" && (r.BlockedS != 245 || r.Reports != 2) {
			t.Errorf("ip merged as %d s, %d reports", r.BlockedS, r.Reports)
		}
	}
}

// The same storm with a lockdep dump: the owner is named.
func TestRTNLLockdepOwner(t *testing.T) {
	a := analyzeFile(t, "rtnl_lockdep.log")
	f := findingtest.Only(t, a.Findings, IDLockOwner)
	off := findingtest.Subjects(f, finding.RoleOffender)
	if len(off) != 1 || off[0].PID != 3895365 || off[0].Comm != "calico-node" {
		t.Fatalf("offender %+v", off)
	}
	if !strings.Contains(joined(off[0].Stack), "napi_disable") {
		t.Errorf("offender stack lacks its own wait: %v", off[0].Stack)
	}
	if len(victimPIDs(f)) != 6 || victimPIDs(f)[3895365] {
		t.Errorf("victims %v", victimPIDs(f))
	}
	mustContain(t, "title", f.Title, "rtnl_mutex", "held by calico-node (pid 3895365)", "napi_disable")
	mustContain(t, "remediation", joined(f.Remediation), "/proc/3895365/stack")
	if f.Evidence["owner_source"] != "lockdep (locks held)" || f.Evidence["lockdep_class"] != "rtnl_mutex" {
		t.Errorf("evidence %v", f.Evidence)
	}
	if len(a.Held) != 9 {
		t.Errorf("%d lockdep tasks, want 9", len(a.Held))
	}
}

// 6.15+: the kernel names the mutex owner and dumps its stack.
func TestMutexOwner618(t *testing.T) {
	a := analyzeFile(t, "mutex_owner_618.log")
	f := findingtest.Only(t, a.Findings, IDLockOwner)
	off := findingtest.Subjects(f, finding.RoleOffender)
	if len(off) != 1 || off[0].PID != 6744 || off[0].Comm != "sh" {
		t.Fatalf("offender %+v", off)
	}
	if !strings.Contains(joined(off[0].Stack), "request_wait_answer") {
		t.Errorf("owner stack %v", off[0].Stack)
	}
	if got := victimPIDs(f); len(got) != 2 || !got[6745] || !got[6750] {
		t.Errorf("victims %v", got)
	}
	mustContain(t, "title", f.Title, "f_pos_lock", "held by sh (pid 6744)", "FUSE daemon")
	mustContain(t, "remediation", joined(f.Remediation), "abort")
	if f.Severity != finding.Critical {
		t.Errorf("severity %v", f.Severity)
	}
	// The owner's dump is not a report of its own.
	if len(a.Reports) != 2 || a.Reports[0].TGID != 6745 {
		t.Errorf("reports %+v", a.Reports)
	}
}

// 6.16+: rw-semaphore reader/writer lines, and an owner that is not found.
func TestRwsemOwner618(t *testing.T) {
	a := analyzeFile(t, "rwsem_owner_618.log")
	f := findingtest.Only(t, a.Findings, IDLockOwner)
	off := findingtest.Subjects(f, finding.RoleOffender)
	if len(off) != 1 || off[0].PID != 46249 || off[0].Comm != "VLLM::EngineCor" {
		t.Fatalf("offender %+v", off)
	}
	if len(victimPIDs(f)) != 3 {
		t.Errorf("victims %v: readers and writers behind one owner belong together", victimPIDs(f))
	}
	var readers, writers, notFound int
	for _, r := range a.Reports {
		switch b := r.Blocker; {
		case b == nil:
		case b.NotFound:
			notFound++
		case b.As == "reader" && b.OwnerAs == "writer":
			readers++
		case b.As == "writer":
			writers++
		}
	}
	if readers != 1 || writers != 2 || notFound != 1 {
		t.Errorf("readers %d writers %d not-found %d", readers, writers, notFound)
	}
	g := findingtest.Only(t, a.Findings, IDGroup)
	mustContain(t, "modprobe finding", g.Title+g.Summary, "modprobe", "pernet_ops_rwsem", "could not find the owner")
}

// "Performance and reliability pitfalls of eBPF": sysrq-w shows system-probe and rcu_tasks_kthread in D; sysrq-t
// shows the container's init zapping its namespace. One deadlock.
func TestSysrqRCUTasks(t *testing.T) {
	a := analyzeFile(t, "sysrq_rcu_tasks.log")
	f := findingtest.Only(t, a.Findings, IDRCU)
	if len(a.Findings) != 1 {
		t.Errorf("%d findings, want the two halves merged into 1", len(a.Findings))
	}
	if f.Severity != finding.Critical {
		t.Errorf("severity %v", f.Severity)
	}
	mustContain(t, "title", f.Title, "fentry", "RCU-tasks", "system-probe")
	mustContain(t, "mechanism", f.Mechanism, "do_exit", "PID-namespace")
	mustContain(t, "remediation", joined(f.Remediation), "rcu-tasks: Maintain lists to eliminate RCU-tasks/do_exit() deadlocks", "tracepoints")
	off := findingtest.Subjects(f, finding.RoleOffender)
	if len(off) != 1 || off[0].Comm != "s6-svscan" || off[0].PID != 2776 {
		t.Errorf("offender %+v", off)
	}
	if got := victimPIDs(f); !got[2791] || !got[14] || len(got) != 2 {
		t.Errorf("victims %v", got)
	}
	for _, r := range a.Reports {
		if r.Source != "sysrq" || r.State != "D" {
			t.Errorf("report %s: source %q state %q", r.Comm, r.Source, r.State)
		}
	}
	if a.SysrqDumps != 2 || f.Evidence["fentry_detach"] != true {
		t.Errorf("sysrq dumps %d, evidence %v", a.SysrqDumps, f.Evidence)
	}
}

// "Performance and reliability pitfalls of eBPF" exactly as the slides have it: task lines cut after "stack:0"
// (no pid), a misspelled register line, no sysrq-t dump.
func TestDatadogSlidesVerbatim(t *testing.T) {
	log := `[ 183.865273] task:rcu_tasks_kthre state:D stack:0
[ 183.865284] Call Trace:
[ 183.865288] <TASK>
[ 183.865322] __schedule+0x2cb/0x760
[ 183.865340] schedule+0x63/0x110
[ 183.865345] schedule_timeout+0x157/0x170
[ 183.865357] wait_for_completion+0x88/0x150
[ 183.865367] __synchronize_srcu+0x91/0xd0
[ 183.865374] ? __pfx_wakeme_after_rcu+0x10/0x10
[ 183.865392] synchronize_srcu+0xb9/0x110
[ 183.865399] rcu_tasks_postscan+0x39/0x60
[ 183.865405] rcu_tasks_wait_gp+0x116/0x310
[ 183.865440] rcu_tasks_kthread+0x33/0x40
[ 183.865447] kthread+0xef/0x120
[ 183.865464] ret_from_fork+0x44/0x70
[ 183.865495] </TASK>
[ 183.865554] task:system-probe state:D stack:0
[ 183.865559] Call Trace:
[ 183.865562] <TASK>
[ 183.865567] __schedule+0x2cb/0x760
[ 183.865578] schedule+0x63/0x110
[ 183.865583] schedule_timeout+0x157/0x170
[ 183.865593] wait_for_completion+0x88/0x150
[ 183.865603] __wait_rcu_gp+0x17e/0x190
[ 183.865611] synchronize_rcu_tasks_generic+0x64/0xe0
[ 183.865632] synchronize_rcu_tasks+0x15/0x20
[ 183.865638] ftrace_shutdown.part.0+0xd1/0x1f0
[ 183.865651] ? 0xffffffffc11f0000
[ 183.865702] unregister_ftrace_direct+0x60/0x1e0
[ 183.865736] bpf_trampoline_update+0x505/0x5f0
[ 183.865757] bpf_trampoline_unlink_prog+0x9d/0x130
[ 183.865765] bpf_tracing_link_release+0x16/0x50
[ 183.865850] entry_SYSCALL_64_after_hwframe+0x73/0xdd
[ 183.865856] RTP: 0033:0x1ce792e
`
	a := analyzeString(t, log)
	f := findingtest.Only(t, a.Findings, IDRCU)
	mustContain(t, "title", f.Title, "fentry", "system-probe")
	mustContain(t, "summary", f.Summary, "zap_pid_ns_processes")
	if len(a.Reports) != 2 || len(a.Reports[1].Stack) != 14 || !a.Reports[1].Truncated {
		t.Errorf("reports %+v", a.Reports)
	}
}

// journalctl -k, with user-space lines from a full journal mixed in.
func TestJournalctlFuse(t *testing.T) {
	a := analyzeFile(t, "journalctl_fuse.log")
	f := findingtest.Only(t, a.Findings, IDFuse)
	mustContain(t, "title", f.Title, "2 tasks", "FUSE daemon", "fuse_do_getattr", "fuse_lookup_name")
	mustContain(t, "remediation", joined(f.Remediation), "/sys/fs/fuse/connections/")
	if a.Kernel != "6.8.0-45-generic" || a.Reports[0].Stamp != "Nov 22 02:28:40" {
		t.Errorf("kernel %q stamp %q", a.Kernel, a.Reports[0].Stamp)
	}
	if len(a.Findings) != 1 {
		t.Errorf("%d findings", len(a.Findings))
	}
}

// A log cut mid-report: the next report and the end of file cut traces.
func TestTruncated(t *testing.T) {
	a := analyzeFile(t, "truncated.log")
	if len(a.Reports) != 2 || a.TruncatedStack != 2 {
		t.Fatalf("%d reports, %d truncated", len(a.Reports), a.TruncatedStack)
	}
	for _, r := range a.Reports {
		if !r.Truncated || len(r.Stack) != 4 || r.Site.Kind != kstack.PageLock {
			t.Errorf("report %s:%d truncated=%v frames=%d kind=%s", r.Comm, r.PID, r.Truncated, len(r.Stack), r.Site.Kind)
		}
	}
	f := findingtest.Only(t, a.Findings, IDIO)
	if f.Evidence["truncated_stacks"] != 2 {
		t.Errorf("evidence %v", f.Evidence)
	}
}

// Lines of other messages, and another CPU's WARN trace, interleaved with
// the report (printk caller ids tell them apart).
func TestInterleaved(t *testing.T) {
	a := analyzeFile(t, "interleaved.log")
	if len(a.Reports) != 1 {
		t.Fatalf("%d reports", len(a.Reports))
	}
	r := a.Reports[0]
	if r.Comm != "xfsaild/dm-3" || r.PID != 1431 || len(r.Stack) != 12 {
		t.Errorf("report %s:%d with %d frames: %v", r.Comm, r.PID, len(r.Stack), r.Stack)
	}
	for _, fr := range r.Stack {
		if strings.Contains(fr, "dev_watchdog") || strings.Contains(fr, "call_timer_fn") {
			t.Errorf("foreign frame %q in the stack", fr)
		}
	}
	if r.Site.Kind != kstack.Semaphore || r.Site.Func != "xfs_buf_lock" {
		t.Errorf("site %+v", r.Site)
	}
}

// Without caller ids, unrelated lines inside a trace are tolerated.
func TestInterleavedNoCallerIDs(t *testing.T) {
	log := `INFO: task dd:500 blocked for more than 120 seconds.
      Not tainted 6.1.0-26-amd64 #1 Debian 6.1.112-1
task:dd              state:D stack:0     pid:500   ppid:400    flags:0x00004000
Call Trace:
 <TASK>
 __schedule+0x34d/0x9e0
eth0: Link is Up - 10Gbps/Full - flow control off
 schedule+0x5a/0xd0
 io_schedule+0x42/0x70
audit: type=1400 audit(1.2:3): apparmor="DENIED"
 folio_wait_bit_common+0x12d/0x360
 folio_wait_writeback+0x28/0x80
 __filemap_fdatawait_range+0x90/0x100
 file_write_and_wait_range+0xb1/0xe0
 ext4_sync_file+0x7b/0x330
 </TASK>
`
	a := analyzeString(t, log)
	if len(a.Reports) != 1 || len(a.Reports[0].Stack) != 8 || a.Reports[0].Site.Kind != kstack.Writeback {
		t.Fatalf("reports %+v", a.Reports)
	}
}

// The seed's text, tabs and all: header-only reports with no trace.
func TestSeedHeaderOnly(t *testing.T) {
	log := "INFO: task kworker/13:0:834409 blocked for more than 11 seconds.\n" +
		" \tTainted: G      \tO   \t6.6.39-cloudflare-2024.7.3 #1\n" +
		"\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\" disables this message.\n" +
		"task:kworker/13:0\tstate:D stack:0 \tpid:834409 ppid:2   flags:0x00004000\n" +
		"Workqueue: xfs-sync/dm-6 xfs_log_worker\n" +
		"INFO: task XXX:1495882 blocked for more than 10 seconds.\n" +
		"     Tainted: G          O       6.6.39-cloudflare-2024.7.3 #1\n" +
		"task:XXX         state:D stack:0     pid:1495882 ppid:1      flags:0x00004002\n"
	a := analyzeString(t, log)
	if len(a.Reports) != 2 {
		t.Fatalf("reports %+v", a.Reports)
	}
	k := a.Reports[0]
	if k.Comm != "kworker/13:0" || k.PID != 834409 || k.Workqueue != "xfs-sync/dm-6" || k.WorkFunc != "xfs_log_worker" ||
		k.Kernel != "6.6.39-cloudflare-2024.7.3" {
		t.Errorf("kworker %+v", k)
	}
	findingtest.Only(t, a.Findings, IDKworker)
	if x := a.Reports[1]; x.Comm != "XXX" || x.PID != 1495882 || x.PPID != 1 {
		t.Errorf("XXX %+v", x)
	}
}

func TestTaskNamesWithSpacesAndColons(t *testing.T) {
	log := `INFO: task my app:v2:4242 blocked for more than 120 seconds.
      Not tainted 5.15.0-119-generic #129-Ubuntu
task:my app:v2       state:D stack:    0 pid: 4242 ppid:     1 flags:0x00000000
Call Trace:
 <TASK>
 __schedule+0x23d/0x590
 schedule+0x4e/0xc0
 rwsem_down_write_slowpath+0x217/0x4d0
 down_write+0x43/0x50
 do_truncate+0x71/0xd0
 </TASK>
`
	a := analyzeString(t, log)
	if len(a.Reports) != 1 {
		t.Fatalf("reports %+v", a.Reports)
	}
	r := a.Reports[0]
	if r.Comm != "my app:v2" || r.PID != 4242 || r.PPID != 1 || r.BlockedS != 120 || r.Site.Func != "do_truncate" {
		t.Errorf("report %+v", r)
	}
}

func TestSelfDeadlock(t *testing.T) {
	log := `INFO: task bash:52508 blocked for more than 122 seconds.
      Not tainted 6.17.0 #1
task:bash            state:D stack:0     pid:52508 tgid:52508 ppid:1      task_flags:0x400100 flags:0x00004002
Call Trace:
 <TASK>
 __schedule+0x46a/0x1580
 schedule+0x27/0xd0
 rwsem_down_write_slowpath+0x2b1/0x560
 down_write+0x5a/0x60
 dlm_acq_release_grant+0x33/0x90 [mxfs]
 </TASK>
INFO: task bash:52508 <writer> blocked on an rw-semaphore likely owned by task bash:52508 <writer>
`
	a := analyzeString(t, log)
	f := findingtest.Only(t, a.Findings, IDLockOwner)
	mustContain(t, "title", f.Title, "waits for a lock it holds itself")
}

// Lockdep lists two possible holders: the log cannot decide, so no one is
// called the offender, and both are shown.
func TestLockdepAmbiguous(t *testing.T) {
	log := `INFO: task a:10 blocked for more than 120 seconds.
task:a               state:D stack:0     pid:10    ppid:1      flags:0x00000000
Call Trace:
 mutex_lock+0x3c/0x50
 foo_ioctl+0x10/0x20 [foo]
Showing all locks held in the system:
1 lock held by a/10:
 #0: ffff888100001000 (&foo->lock){+.+.}-{3:3}, at: foo_ioctl+0x10/0x20 [foo]
1 lock held by b/11:
 #0: ffff888100001000 (&foo->lock){+.+.}-{3:3}, at: foo_ioctl+0x10/0x20 [foo]
1 lock held by c/12:
 #0: ffff888100001000 (&foo->lock){+.+.}-{3:3}, at: foo_ioctl+0x10/0x20 [foo]
=============================================
`
	a := analyzeString(t, log)
	f := findingtest.Only(t, a.Findings, IDGroup)
	if len(findingtest.Subjects(f, finding.RoleOffender)) != 0 || len(findingtest.Subjects(f, finding.RoleHolder)) != 2 {
		t.Errorf("subjects %+v", f.Subjects)
	}
	if f.Evidence["lockdep_class"] != "&foo->lock" {
		t.Errorf("evidence %v", f.Evidence)
	}
}

func TestSuppressedAndRCUStalls(t *testing.T) {
	log := `rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:
INFO: task kworker/u8:1:77 blocked for more than 245 seconds.
task:kworker/u8:1    state:D stack:0     pid:77    ppid:2      flags:0x00004000
Workqueue: netns cleanup_net
Call Trace:
 __wait_rcu_gp+0x129/0x140
 synchronize_rcu+0xf3/0x130
 ops_exit_list+0x30/0x70
 cleanup_net+0x233/0x3b0
Future hung task reports are suppressed, see sysctl kernel.hung_task_warnings
`
	a := analyzeString(t, log)
	if !a.Suppressed || a.RCUStalls != 1 {
		t.Errorf("suppressed %v, rcu stalls %d", a.Suppressed, a.RCUStalls)
	}
	f := findingtest.Only(t, a.Findings, IDRCU)
	mustContain(t, "summary", f.Summary, "lower bound")
	if f.Evidence["rcu_stall_lines"] != 1 {
		t.Errorf("evidence %v", f.Evidence)
	}
}

func TestNotAKernelLog(t *testing.T) {
	a := analyzeString(t, "hello\nworld\nCall Trace:\n foo+0x1/0x2\nINFO: task broken\ntask:\n#0: x\n")
	if len(a.Reports) != 0 || len(a.Findings) != 0 || a.Lines != 7 {
		t.Errorf("analysis %+v", a)
	}
}

type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n > 0 {
		return 0, os.ErrDeadlineExceeded
	}
	r.n++
	return copy(p, "INFO: task a:1 blocked for more than 1 seconds.\n"), nil
}

func TestReadErrorIsWrapped(t *testing.T) {
	_, err := Analyze(&failingReader{})
	if err == nil || !strings.Contains(err.Error(), "hunglog: read line") {
		t.Fatalf("err = %v", err)
	}
}

// Bounded memory: reports beyond MaxReports are counted, not kept.
func TestReportCap(t *testing.T) {
	var b strings.Builder
	for i := 1; i <= MaxReports+10; i++ {
		b.WriteString("INFO: task t:")
		b.WriteString(strconv.Itoa(i))
		b.WriteString(" blocked for more than 120 seconds.\n")
	}
	a := analyzeString(t, b.String())
	if len(a.Reports) != MaxReports || a.ReportsDropped != 10 {
		t.Errorf("%d reports kept, %d dropped", len(a.Reports), a.ReportsDropped)
	}
	f := findingtest.Only(t, a.Findings, IDLimits)
	mustContain(t, "summary", f.Summary, "10 hung tasks beyond the first 4096")
}

func TestMemoryBudget(t *testing.T) {
	p := newParser()
	if !p.spend(MaxStoredBytes-10) || p.spend(11) || !p.spend(10) || !p.a.MemoryCapHit {
		t.Fatalf("spend: stored %d, cap hit %v", p.stored, p.a.MemoryCapHit)
	}
}

// manyGroupsWithLockdep is a worst case for matching lockdep's "locks
// held" against report groups: every report its own group, every holder
// with the maximum number of locks.
func manyGroupsWithLockdep() string {
	var b strings.Builder
	for i := 1; i <= MaxReports; i++ {
		fmt.Fprintf(&b, "INFO: task t%d:%d blocked for more than 120 seconds.\ntask:t state:D pid:%d\nCall Trace:\n mutex_lock+0x1/0x2\n f%d+0x1/0x2\n", i, i, i, i)
	}
	b.WriteString("Showing all locks held in the system:\n")
	for i := 1; i <= MaxHolders; i++ {
		fmt.Fprintf(&b, "48 locks held by h/%d:\n", i)
		for j := 0; j < MaxLocksPerTask; j++ {
			fmt.Fprintf(&b, " #%d: ffff%06x%02x (l%d){+.+.}-{3:3}, at: f%d+0x1/0x2\n", j, i, j, j, i)
		}
	}
	return b.String()
}

// Thousands of lock groups and lockdep entries are all kept. (How fast:
// BenchmarkManyGroupsWithLockdep; a first, quadratic version took a minute.)
func TestManyGroupsWithLockdep(t *testing.T) {
	a := analyzeString(t, manyGroupsWithLockdep())
	if len(a.Groups) != MaxReports || len(a.Held) != MaxHolders {
		t.Errorf("%d groups, %d lockdep tasks", len(a.Groups), len(a.Held))
	}
}

func BenchmarkManyGroupsWithLockdep(b *testing.B) {
	in := manyGroupsWithLockdep()
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, err := Analyze(strings.NewReader(in)); err != nil {
			b.Fatal(err)
		}
	}
}

func TestFrameCap(t *testing.T) {
	var b strings.Builder
	b.WriteString("INFO: task t:1 blocked for more than 120 seconds.\ntask:t state:D pid:1\nCall Trace:\n")
	for i := 0; i < MaxFrames*3; i++ {
		b.WriteString(" f+0x1/0x2\n")
	}
	a := analyzeString(t, b.String())
	if len(a.Reports) != 1 || len(a.Reports[0].Stack) != MaxFrames || !a.Reports[0].Truncated {
		t.Errorf("reports %d, frames %d", len(a.Reports), len(a.Reports[0].Stack))
	}
}

func TestLongLinesAndBinaryJunk(t *testing.T) {
	junk := make([]byte, 0, 300<<10)
	junk = append(junk, strings.Repeat("A", 200<<10)...)
	junk = append(junk, '\n')
	for i := 0; i < 70<<10; i++ {
		junk = append(junk, byte(i*7919>>3))
	}
	junk = append(junk, "\n\x00\xff\xfe\n[ 1.0] INFO: task x\xff:9 blocked for more than 3 seconds.\n"...)
	junk = append(junk, "Call Trace:\n \xc3\x28+0x1/0x2\n"...)
	a, err := Analyze(strings.NewReader(string(junk)))
	if err != nil {
		t.Fatal(err)
	}
	if a.LongLines < 1 {
		t.Errorf("long lines %d", a.LongLines)
	}
	if len(a.Reports) != 1 || a.Reports[0].PID != 9 {
		t.Fatalf("reports %+v", a.Reports)
	}
	if c := a.Reports[0].Comm; c != "x\uFFFD" {
		t.Errorf("comm %q not sanitized", c)
	}
}
