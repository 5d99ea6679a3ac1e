package hung

import (
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/probekit"
)

// The lab's shape: two writers blocked on an inode rw-semaphore owned by a
// writer that waits for a FUSE daemon.
func fuseSnapshot() *Snapshot {
	lock := func() *Lock {
		return &Lock{Addr: 0xffff888104a1c2f0, Kind: LockRWSemWrite, Source: SourceBlocker, Owner: OwnerTask, OwnerTID: 6744, OwnerTGID: 6744, OwnerComm: "sh"}
	}
	victimStack := []string{"__schedule+0x3c5", "schedule+0x27", "schedule_preempt_disabled+0x15", "rwsem_down_write_slowpath+0x2b1", "down_write+0x5a", "fuse_file_write_iter+0x1d1", "vfs_write+0x24c", "ksys_write+0x73", "do_syscall_64+0x82", "entry_SYSCALL_64_after_hwframe+0x76"}
	return &Snapshot{
		Victims: []*Task{
			{TID: 6750, TGID: 6750, Comm: "sh", State: 2, Blocked: 41 * time.Second, BlockedExact: true, Lock: lock(), Stack: victimStack},
			{TID: 6751, TGID: 6751, Comm: "sh", State: 2, Blocked: 40 * time.Second, Lock: lock(), Stack: victimStack},
		},
		Owners: map[int]*Task{
			6744: {TID: 6744, TGID: 6744, Comm: "sh", State: 1, Wanted: true, Stack: []string{"__schedule+0x3c5", "schedule+0x27", "request_wait_answer+0xd0", "__fuse_simple_request+0xd8", "fuse_perform_write+0x2f4", "fuse_file_write_iter+0x32a", "vfs_write+0x24c"}},
		},
		FuseDaemons: func() []Proc { return []Proc{{PID: 6601, Comm: "fz"}} },
		Threshold:   5 * time.Second,
		HungTimeout: 120 * time.Second,
	}
}

func TestConcludeNamesOwnerAndFuseDaemon(t *testing.T) {
	fs := Conclude(fuseSnapshot())
	if len(fs) != 1 {
		t.Fatalf("want 1 finding, got %d: %+v", len(fs), fs)
	}
	f := fs[0]
	if f.ID != "hung.lock-owner" || f.Severity != finding.Critical {
		t.Errorf("id %s severity %v", f.ID, f.Severity)
	}
	for _, want := range []string{"2 tasks hung 41 s", "rw-semaphore ffff888104a1c2f0", "fuse_file_write_iter", "owner sh (pid 6744)", "FUSE daemon fz (pid 6601)"} {
		if !strings.Contains(f.Title, want) {
			t.Errorf("title %q lacks %q", f.Title, want)
		}
	}
	roles := map[string][]int{}
	for _, s := range f.Subjects {
		roles[s.Role] = append(roles[s.Role], s.PID)
	}
	if got := roles[finding.RoleOffender]; len(got) != 1 || got[0] != 6744 {
		t.Errorf("offenders %v", got)
	}
	if got := roles[finding.RoleVictim]; len(got) != 2 || got[0] != 6750 || got[1] != 6751 {
		t.Errorf("victims %v", got)
	}
	if got := roles[finding.RoleOwner]; len(got) != 1 || got[0] != 6601 {
		t.Errorf("chain owners %v", got)
	}
	if f.Evidence["blocked_s"] != 41.0 || f.Evidence["victims"] != 2 || f.Evidence["lock_mode"] != "write" {
		t.Errorf("evidence %v", f.Evidence)
	}
	if len(f.Remediation) == 0 || !strings.Contains(strings.Join(f.Remediation, " "), "abort") {
		t.Errorf("remediation %v", f.Remediation)
	}
}

func TestConcludeBelowKernelTimeoutIsStillCriticalWithOwner(t *testing.T) {
	s := fuseSnapshot()
	s.HungTimeout = 0
	if fs := Conclude(s); fs[0].Severity != finding.Critical {
		t.Errorf("severity %v", fs[0].Severity)
	}
}

func TestConcludeDeadlock(t *testing.T) {
	a := &Lock{Addr: 0xa0, Kind: LockMutex, Owner: OwnerTask, OwnerTID: 2, OwnerTGID: 2, OwnerComm: "b"}
	b := &Lock{Addr: 0xb0, Kind: LockMutex, Owner: OwnerTask, OwnerTID: 1, OwnerTGID: 1, OwnerComm: "a"}
	st := []string{"__schedule+0x1", "schedule+0x1", "schedule_preempt_disabled+0x1", "__mutex_lock.constprop.0+0x1", "foo+0x1"}
	s := &Snapshot{
		Victims: []*Task{{TID: 1, TGID: 1, Comm: "a", State: 2, Blocked: 9 * time.Second, Lock: a, Stack: st}},
		Owners: map[int]*Task{
			2: {TID: 2, TGID: 2, Comm: "b", State: 2, Lock: b, Stack: st},
			1: {TID: 1, TGID: 1, Comm: "a", State: 2, Lock: a, Stack: st},
		},
		Threshold: time.Second,
	}
	fs := Conclude(s)
	if len(fs) != 1 || fs[0].ID != "hung.deadlock" {
		t.Fatalf("got %+v", fs)
	}
}

func TestConcludeGroupsBySiteWithoutLock(t *testing.T) {
	io := []string{"__schedule+0x1", "schedule+0x1", "io_schedule+0x12", "folio_wait_bit_common+0x13e", "filemap_fault+0x5d4"}
	s := &Snapshot{
		Victims: []*Task{
			{TID: 10, TGID: 10, Comm: "a", State: 2, Blocked: 6 * time.Second, Stack: io},
			{TID: 11, TGID: 11, Comm: "b", State: 2, Blocked: 7 * time.Second, Stack: io},
		},
		Threshold: 5 * time.Second,
	}
	fs := Conclude(s)
	if len(fs) != 1 || fs[0].ID != "hung.io" || fs[0].Evidence["victims"] != 2 {
		t.Fatalf("got %+v", fs)
	}
}

func TestConcludeCoredumpNamesDumper(t *testing.T) {
	st := []string{"__schedule+0x1", "schedule+0x1", "do_exit+0x1", "do_group_exit+0x1", "get_signal+0x1"}
	s := &Snapshot{
		Victims: []*Task{{TID: 965, TGID: 964, Comm: "test", State: 2, Flags: pfPostCoredump, Blocked: 22 * time.Second, DumperTID: 964, Stack: st}},
		Owners:  map[int]*Task{},
		Comm:    func(int) string { return "test" },
	}
	fs := Conclude(s)
	if len(fs) != 1 || fs[0].ID != "hung.coredump" || !strings.HasPrefix(fs[0].Title, "Blocked by coredump") || !strings.Contains(fs[0].Title, "1 thread of test (pid 964)") || !strings.Contains(fs[0].Title, "while test (pid 964) writes") {
		t.Fatalf("got %+v", fs)
	}
}

func TestConcludeKworkerNamedByWorkFunction(t *testing.T) {
	st := []string{"__schedule+0x1", "schedule+0x1", "io_schedule+0x1", "xlog_wait_on_iclog+0x1", "xfs_log_force+0x1", "xfs_log_worker+0x1"}
	s := &Snapshot{Victims: []*Task{{TID: 834409, TGID: 834409, Comm: "kworker/13:0", State: 2, Flags: pfWQWorker | pfKthread, Blocked: 11 * time.Second, WQFunc: "xfs_log_worker", WQName: "xfs-sync/dm-6", Stack: st}}}
	fs := Conclude(s)
	if len(fs) != 1 || fs[0].ID != "hung.kworker" || !strings.Contains(fs[0].Title, "xfs_log_worker") || !strings.Contains(fs[0].Title, "xfs-sync/dm-6") {
		t.Fatalf("got %+v", fs)
	}
}

func TestRecoveredAndKhungtaskd(t *testing.T) {
	s := &Snapshot{
		Recovered: []*Task{{TID: 5, TGID: 5, Comm: "x", Blocked: 6 * time.Second}},
		Hangs:     []hangReport{{TID: 77, TGID: 77, Comm: "y"}},
		Threshold: 5 * time.Second,
	}
	fs := Conclude(s)
	ids := map[string]bool{}
	for _, f := range fs {
		ids[f.ID] = true
	}
	if !ids["hung.recovered"] || !ids["hung.khungtaskd"] {
		t.Errorf("ids %v", ids)
	}
}

type fakeSyms map[uint64]string

func (f fakeSyms) Symbolize(a uint64) string {
	if s, ok := f[a]; ok {
		return s
	}
	return "0x" + strings.TrimLeft("", "")
}

func TestGlobalName(t *testing.T) {
	syms := fakeSyms{1: "rtnl_mutex+0x0", 2: "some_struct+0x8", 3: "text_end+0x1a2b3c", 4: "mod_lock+0x0 [fuse]"}
	for addr, want := range map[uint64]string{1: "rtnl_mutex", 2: "some_struct+0x8", 3: "", 4: "", 5: ""} {
		if got := globalName(syms, addr); got != want {
			t.Errorf("globalName(%d) = %q, want %q", addr, got, want)
		}
	}
}

func TestStateLetter(t *testing.T) {
	for s, want := range map[uint32]string{0: "R", 1: "S", 2: "D", 0x102: "D", 0x402: "I", 4: "T"} {
		if got := stateLetter(s); got != want {
			t.Errorf("stateLetter(%#x) = %s, want %s", s, got, want)
		}
	}
}

func TestAuditSysctls(t *testing.T) {
	vals := map[string]int64{"kernel.hung_task_timeout_secs": 120, "kernel.hung_task_warnings": 0, "kernel.hung_task_panic": 0}
	read := func(n string) (int64, error) {
		v, ok := vals[n]
		if !ok {
			return 0, errNotFound
		}
		return v, nil
	}
	fs := auditSysctls(read)
	if len(fs) != 1 || fs[0].ID != "audit.hung-task-silenced" {
		t.Fatalf("got %+v", fs)
	}
	vals["kernel.hung_task_warnings"] = 10
	if fs := auditSysctls(read); len(fs) != 0 {
		t.Errorf("healthy settings gave %+v", fs)
	}
	vals["kernel.hung_task_timeout_secs"] = 0
	if fs := auditSysctls(read); len(fs) != 1 || fs[0].ID != "audit.hung-task-disabled" {
		t.Errorf("got %+v", fs)
	}
}

type notFound struct{}

func (notFound) Error() string { return "not found" }

var errNotFound = notFound{}

// Without data symbols (no CONFIG_KALLSYMS_ALL, as on this project's CI
// kernel) the rtnl lock is still named, from the waiters' frames.
func TestConcludeNamesRtnlFromStacks(t *testing.T) {
	st := []string{"rtnl_lock+0x15", "rtnetlink_rcv_msg+0x13b", "netlink_rcv_skb+0x58", "netlink_unicast+0x1a3"}
	lock := &Lock{Addr: 0xffffffff8a2b3c40, Kind: LockMutex, Source: SourceBlocker, Owner: OwnerTask, OwnerTID: 38, OwnerTGID: 38, OwnerComm: "calico-node"}
	s := &Snapshot{
		Victims:   []*Task{{TID: 7, TGID: 7, Comm: "ip", State: 2, Blocked: 30 * time.Second, Lock: lock, Stack: st}},
		Owners:    map[int]*Task{38: {TID: 38, TGID: 38, Comm: "calico-node", State: 2, Stack: []string{"napi_disable+0x4e", "peer_remove_after_dead+0x2f", "wg_set_device+0x3a1"}}},
		Threshold: 5 * time.Second,
	}
	fs := Conclude(s)
	if len(fs) != 1 || !strings.Contains(fs[0].Title, "on rtnl_mutex; owner calico-node (pid 38)") {
		t.Fatalf("got %+v", fs)
	}
}

// The blocked tasks' stacks, outermost first, one task each: both
// victims of the lab fold into one stack of value 2.
func TestProfileOfBlockedTasks(t *testing.T) {
	p := fuseSnapshot().Profile()
	if p == nil || p.Name != "blocked_stacks" || p.Unit != "tasks" || p.Total() != 2 {
		t.Fatalf("profile %+v", p)
	}
	f := p.Stacks[0].Frames
	if f[0] != "[D state]" || f[1] != "entry_SYSCALL_64_after_hwframe+0x76" || f[len(f)-1] != "__schedule+0x3c5" {
		t.Errorf("frames %v", f)
	}
	if (&Snapshot{}).Profile() != nil {
		t.Error("a profile with no blocked task")
	}
}

func TestTableForTheKernel(t *testing.T) {
	has := func(table []probekit.Attach, target string) (probekit.Attach, bool) {
		for _, a := range table {
			if a.Target == target {
				return a, true
			}
		}
		return probekit.Attach{}, false
	}
	old := tableFor(attachTable, false, false)
	if _, ok := has(old, wqStartTarget); !ok {
		t.Error("without worker_private the work-function program must attach")
	}
	if a, _ := has(old, "lock/contention_begin"); a.Shed != 0 {
		t.Error("without task->blocker the contention programs are what names a waiter's lock: never shed")
	}
	now := tableFor(attachTable, true, true)
	if _, ok := has(now, wqStartTarget); ok {
		t.Error("with worker_private the work-function program is left out")
	}
	b, _ := has(now, "lock/contention_begin")
	e, _ := has(now, "lock/contention_end")
	if b.Shed == 0 || b.Shed != e.Shed {
		t.Errorf("with task->blocker begin and end are shed, together: %d, %d", b.Shed, e.Shed)
	}
	if len(now) != len(attachTable)-1 {
		t.Errorf("rows: %d of %d", len(now), len(attachTable))
	}
}
