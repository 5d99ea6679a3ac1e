package hunglog

import (
	"strings"
	"testing"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/finding/findingtest"
)

// A lister of the lock whose own stack waits for something else holds it,
// though lockdep lists it last "at rtnl_lock" like the waiters (the shape of
// syzbot's "task hung in rtnl_lock" reports).
func TestLockdepHolderByState(t *testing.T) {
	log := `INFO: task kworker/u4:0:7 blocked for more than 143 seconds.
kworker/u4:0    D24128     7      2 0x80004000
Workqueue: netns cleanup_net
Call Trace:
 __schedule+0x94f/0x1e70
 schedule+0xd9/0x260
 synchronize_rcu_expedited+0x57f/0x5f0
 synchronize_net+0x3b/0x60
 rollback_registered_many+0x66e/0x10d0
 cleanup_net+0x4e2/0xa60
INFO: task syz-executor.2:11340 blocked for more than 143 seconds.
syz-executor.2  D26840 11340   9045 0x00000004
Call Trace:
 __schedule+0x94f/0x1e70
 schedule+0xd9/0x260
 __mutex_lock+0x7b0/0x13c0
 mutex_lock_nested+0x16/0x20
 rtnl_lock+0x17/0x20
 dev_ioctl+0x1a3/0xc60
Showing all locks held in the system:
4 locks held by kworker/u4:0/7:
 #2: ffffffff89997088 (pernet_ops_rwsem){++++}, at: cleanup_net+0xae/0xa60
 #3: ffffffff899a4320 (rtnl_mutex){+.+.}, at: rtnl_lock+0x17/0x20
3 locks held by kworker/1:4/9051:
 #2: ffffffff899a4320 (rtnl_mutex){+.+.}, at: rtnl_lock+0x17/0x20
1 lock held by syz-executor.2/11340:
 #0: ffffffff899a4320 (rtnl_mutex){+.+.}, at: rtnl_lock+0x17/0x20
`
	a := analyzeString(t, log)
	f := findingtest.Only(t, a.Findings, IDLockOwner)
	off := findingtest.Subjects(f, finding.RoleOffender)
	if len(off) != 1 || off[0].TID != 7 || len(findingtest.Subjects(f, finding.RoleHolder)) != 0 {
		t.Fatalf("subjects %+v", f.Subjects)
	}
	mustContain(t, "title", f.Title, "rtnl_mutex held by kworker/u4:0 (pid 7)", "RCU grace period")
}

// Two tasks each holding what the other waits for: said as a deadlock.
func TestDeadlockAcrossTasks(t *testing.T) {
	log := `INFO: task a:10 blocked for more than 122 seconds.
task:a               state:D stack:0     pid:10    tgid:10    ppid:1      flags:0x00000000
Call Trace:
 <TASK>
 __schedule+0x1/0x2
 schedule+0x1/0x2
 __mutex_lock.constprop.0+0x1/0x2
 foo_ioctl+0x10/0x20 [foo]
 </TASK>
INFO: task a:10 is blocked on a mutex likely owned by task b:11.
INFO: task b:11 blocked for more than 122 seconds.
task:b               state:D stack:0     pid:11    tgid:11    ppid:1      flags:0x00000000
Call Trace:
 <TASK>
 __schedule+0x1/0x2
 schedule+0x1/0x2
 __mutex_lock.constprop.0+0x1/0x2
 bar_ioctl+0x10/0x20 [bar]
 </TASK>
INFO: task b:11 is blocked on a mutex likely owned by task a:10.
`
	a := analyzeString(t, log)
	f := findingtest.Only(t, a.Findings, IDDeadlock)
	mustContain(t, "title", f.Title, "Deadlock", "a (pid 10)", "b (pid 11)")
	mustContain(t, "summary", f.Summary, "a (pid 10) waits for", "held by b (pid 11)")
	if len(findingtest.Subjects(f, finding.RoleOffender)) != 2 || f.Severity != finding.Critical {
		t.Errorf("subjects %+v", f.Subjects)
	}
	for _, g := range a.Findings {
		if g.ID == IDLockOwner {
			t.Errorf("the deadlock's halves reported again: %s", g.Title)
		}
	}
}

// NVMe timeouts before journal waits are named as the likely cause, with
// their own advice; an OOM kill in a memory cgroup is told as such.
func TestEventsBeforeTheHang(t *testing.T) {
	log := `[  107.508575] nvme nvme0: I/O 12 QID 3 timeout, aborting
[  168.958145] nvme nvme0: I/O 8 QID 3 timeout, reset controller
[  170.100000] Memory cgroup out of memory: Killed process 4242 (java) total-vm:3149468kB, anon-rss:164992kB
[  242.664114] INFO: task ext4-writer:2041 blocked for more than 120 seconds.
[  242.664761]       Not tainted 6.1.0-12-amd64 #1 Debian 6.1.52-1
[  242.665983] task:ext4-writer     state:D stack:0     pid:2041  ppid:1      flags:0x00000002
[  242.666000] Call Trace:
[  242.666001]  <TASK>
[  242.666002]  __schedule+0x2a6/0x700
[  242.666003]  schedule+0x38/0xa0
[  242.666004]  wait_transaction_locked+0x8a/0xd0 [jbd2]
[  242.666005]  add_transaction_credits+0x11f/0x290 [jbd2]
[  242.666006]  start_this_handle+0x10a/0x510 [jbd2]
[  242.666007]  jbd2__journal_start+0xea/0x1f0 [jbd2]
[  242.666008]  </TASK>
[  250.000000] nvme nvme0: I/O 9 QID 3 timeout, aborting
`
	a := analyzeString(t, log)
	if len(a.Events) != 2 || a.Events[0].Kind != EventNVMe || a.Events[0].Count != 3 || a.Events[1].Device != "memcg" {
		t.Fatalf("events %+v", a.Events)
	}
	f := findingtest.Only(t, a.Findings, IDJournal)
	mustContain(t, "title", f.Title, "ext4 journal")
	mustContain(t, "summary", f.Summary, "NVMe", "nvme0", "OOM kill in a memory cgroup", "likely cause")
	mustContain(t, "remediation", joined(f.Remediation), "nvme error-log /dev/nvme0", "jbd2/DEV-8", "memory.events")
	if ev, ok := f.Evidence["preceding_events"].([]string); !ok || len(ev) != 2 || !strings.Contains(ev[0], "line 1") {
		t.Errorf("evidence %v", f.Evidence["preceding_events"])
	}
}

// Events that do not precede the hang, or whose mechanism does not touch
// the wait, are not called its cause; none of them is a finding alone.
func TestEventsAreNotFindings(t *testing.T) {
	a := analyzeString(t, `[  1.0] nvme nvme0: I/O 12 QID 3 timeout, aborting
[  2.0] watchdog: BUG: soft lockup - CPU#3 stuck for 22s! [kworker/3:1:99]
[  3.0] NVRM: Xid (PCI:0000:61:00): 45, pid=1496200, name=distprovers-gpu, Ch 0000000a
`)
	if len(a.Findings) != 0 || len(a.Events) != 3 {
		t.Errorf("%d findings, events %+v", len(a.Findings), a.Events)
	}
}
