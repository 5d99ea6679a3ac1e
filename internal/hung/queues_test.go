package hung

import (
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// The "ps hangs" incident with its stall already on when wolf starts: a
// thread reads its own mapping of a FUSE file through /proc/self/mem and
// sleeps on the folio its READ is filling while it holds its mmap_lock
// for reading; an munmap queues a writer; cat /proc/PID/cmdline queues a
// reader behind the writer. Both waits are killable: no task->blocker,
// only the lock's wait list says who waits for what.
func psHangSnapshot() *Snapshot { return psHangSnapshotOwned(401, "memreader") }

// psHangSnapshotOwned is psHangSnapshot with the lock's owner word naming
// ownerTID (0: nothing).
func psHangSnapshotOwned(ownerTID int, ownerComm string) *Snapshot {
	const mmLock = 0xffff888112345d38
	folioStack := []string{"__schedule+0x3c5", "schedule+0x27", "io_schedule+0x46", "folio_wait_bit_common+0x13d", "__folio_lock+0x17", "filemap_fault+0x5a9", "__do_fault+0x33", "do_fault+0x1b2", "__handle_mm_fault+0x6a1", "handle_mm_fault+0x1b6", "__get_user_pages+0x2a8", "get_user_pages_remote+0xf6", "__access_remote_vm+0xa8", "mem_rw+0x17d", "vfs_read+0xb2"}
	writerStack := []string{"__schedule+0x3c5", "schedule+0x27", "schedule_preempt_disabled+0x15", "rwsem_down_write_slowpath+0x2b1", "down_write_killable+0x6a", "vm_mmap_pgoff+0x9f", "ksys_mmap_pgoff+0x1d4", "do_syscall_64+0x82"}
	readerStack := []string{"__schedule+0x3c5", "schedule+0x27", "schedule_preempt_disabled+0x15", "rwsem_down_read_slowpath+0x272", "down_read_killable+0x4d", "__access_remote_vm+0x6b", "proc_pid_cmdline_read+0x1e6", "vfs_read+0xb2"}
	memreader := &Task{TID: 401, TGID: 400, Comm: "memreader", State: 2, Blocked: 12 * time.Second, Stack: folioStack, MMLockAddr: mmLock,
		SumExec: 1e6, RunDelay: 2e6, At: 20e9}
	tasks := []*Task{
		memreader,
		{TID: 402, TGID: 400, Comm: "unmapper", State: 0x102, Blocked: 11 * time.Second, Stack: writerStack, MMLockAddr: mmLock},
		{TID: 500, TGID: 500, Comm: "cat", State: 0x102, Blocked: 10 * time.Second, Stack: readerStack, MMLockAddr: 0xffff888199990d38},
	}
	queues := []MMQueue{{TGID: 400, Comm: "pshang", Addr: mmLock, Owner: OwnerReaders, OwnerTID: ownerTID, OwnerTGID: 400, OwnerComm: ownerComm, Readers: 1,
		Waiters: []QueueWaiter{{TID: 402, Write: true}, {TID: 500}}}}
	resolveQueues(tasks, queues)
	nameMMLocks(tasks)
	owner := *memreader
	owner.Wanted = true
	return &Snapshot{
		Victims:   tasks,
		Owners:    map[int]*Task{401: &owner},
		Fuse:      []FuseReq{{DaemonPID: 600, DaemonComm: "fused", Conn: 53, Sender: 401, Opcode: 15, Unique: 42, Age: 12 * time.Second, Read: true, Waiting: 1}},
		FuseExact: true,
		FirstSeen: map[int]*Task{401: {TID: 401, SumExec: 0, RunDelay: 0, At: 15e9}},
		Threshold: 5 * time.Second,
	}
}

// A ps that read /proc/PID/cmdline between the reader's lock and the
// writer's queueing is the latest reader the lock names; it has exited.
// The reader still holding the lock, asleep in its read section, is
// named instead, as inferred.
func TestConcludePsHangLatestReaderGone(t *testing.T) {
	for _, owner := range []int{777, 0} {
		s := psHangSnapshotOwned(owner, "pgrep")
		delete(s.Owners, 401)
		var lf *finding.Finding
		for _, f := range Conclude(s) {
			if f.ID == "hung.lock-owner" {
				lf = &f
			}
		}
		if lf == nil {
			t.Fatalf("owner word %d: no hung.lock-owner: %+v", owner, Conclude(psHangSnapshotOwned(owner, "pgrep")))
		}
		if !strings.Contains(lf.Title, "memreader (pid 400, tid 401)") || !strings.Contains(lf.Title, "FUSE daemon fused (pid 600)") {
			t.Errorf("owner word %d: %s", owner, lf.Title)
		}
		if !strings.Contains(lf.Summary+strings.Join(func() []string {
			var d []string
			for _, sub := range lf.Subjects {
				d = append(d, sub.Detail)
			}
			return d
		}(), " "), "likely holds") {
			t.Errorf("owner word %d: the inference is not said: %s %+v", owner, lf.Summary, lf.Subjects)
		}
	}
}

func TestResolveQueuesNamesKillableWaits(t *testing.T) {
	s := psHangSnapshot()
	cat, writer := s.Victims[2], s.Victims[1]
	if cat.Lock == nil || writer.Lock == nil || s.Victims[0].Lock != nil {
		t.Fatalf("locks: cat %+v writer %+v reader-owner %+v", cat.Lock, writer.Lock, s.Victims[0].Lock)
	}
	if cat.Lock.Describe() != "mmap_lock of pshang (pid 400)" || cat.Lock.Kind != LockRWSemRead || cat.Lock.Source != SourceWaitList {
		t.Errorf("cat waits on %s (%v, %s)", cat.Lock.Describe(), cat.Lock.Kind, cat.Lock.Source)
	}
	if writer.Lock.Kind != LockRWSemWrite || cat.BehindWriter != 402 || writer.BehindWriter != 0 {
		t.Errorf("queue order: writer %v, cat behind %d", writer.Lock.Kind, cat.BehindWriter)
	}
	if cat.Lock.Owner != OwnerReaders || cat.Lock.OwnerTID != 401 {
		t.Errorf("owner %+v", cat.Lock)
	}
}

func TestConcludePsHangChainToTheFuseDaemon(t *testing.T) {
	fs := Conclude(psHangSnapshot())
	var lf, ff *finding.Finding
	for i := range fs {
		switch fs[i].ID {
		case "hung.lock-owner":
			lf = &fs[i]
		case "hung.fuse":
			ff = &fs[i]
		}
	}
	if lf == nil || ff == nil {
		var ids []string
		for _, f := range fs {
			ids = append(ids, f.ID+": "+f.Title)
		}
		t.Fatalf("findings %v", ids)
	}
	if !strings.Contains(lf.Title, "mmap_lock of pshang (pid 400)") || !strings.Contains(lf.Title, "FUSE daemon fused (pid 600)") {
		t.Errorf("title %q", lf.Title)
	}
	if lf.Evidence["mm_pid"] != 400 || lf.Evidence["owner_likely"] != true {
		t.Errorf("evidence %v", lf.Evidence)
	}
	var off, daemon, cat *finding.Subject
	for i := range lf.Subjects {
		sub := &lf.Subjects[i]
		switch {
		case sub.Role == finding.RoleOffender:
			off = sub
		case sub.Role == finding.RoleOwner && sub.PID == 600:
			daemon = sub
		case sub.Role == finding.RoleVictim && sub.PID == 500:
			cat = sub
		}
	}
	if off == nil || off.TID != 401 || off.Evidence["sleeps_on"] != "folio" || off.Evidence["fuse_opcode"] != "READ" ||
		off.Evidence["fuse_request_from_task"] != true || off.Evidence["mode"] != "read" || off.Evidence["runnable_ms"] != 2.0 {
		t.Errorf("offender %+v", off)
	}
	if daemon == nil || daemon.Evidence["fuse_daemon"] != true {
		t.Errorf("daemon %+v", daemon)
	}
	if cat == nil || cat.Evidence["behind_writer_tid"] != 402 || cat.Evidence["mode"] != "read" || cat.Lock != "mmap_lock of pshang (pid 400)" {
		t.Errorf("cat %+v", cat)
	}
	// The reader-owner is a victim too: of the FUSE daemon, exactly.
	if len(ff.Subjects) < 2 || ff.Subjects[len(ff.Subjects)-1].PID != 600 && ff.Subjects[0].PID != 600 {
		t.Errorf("fuse finding subjects %+v", ff.Subjects)
	}
}

// On 6.18 the folio waits are scheduler functions, left out of stacks: a
// task asleep on a folio in a fault shows filemap_fault innermost.
func TestPageCacheWaitWithoutFolioFrames(t *testing.T) {
	s := psHangSnapshot()
	s.Victims[0].Stack = []string{"filemap_fault+0xa0e", "__do_fault+0x34", "do_fault+0x319", "__handle_mm_fault+0x7fc", "handle_mm_fault+0xd0",
		"__get_user_pages+0x19f", "get_user_pages_remote+0xee", "__access_remote_vm+0xd0", "mem_rw+0x1c4", "vfs_read+0xbb"}
	s.Owners[401].Stack = s.Victims[0].Stack
	if !fuseWait(s.Victims[0]) || sleepsOn(s.Victims[0]) != "folio" {
		t.Fatalf("fuseWait %v sleepsOn %q", fuseWait(s.Victims[0]), sleepsOn(s.Victims[0]))
	}
	for _, f := range Conclude(s) {
		if f.ID == "hung.lock-owner" && !strings.Contains(f.Title, "FUSE daemon fused (pid 600)") {
			t.Errorf("title %q", f.Title)
		}
	}
	if pageCacheWait([]string{"rwsem_down_read_slowpath+0x1", "filemap_fault+0x2"}) {
		t.Error("a wait on a lock inside filemap_fault is not a folio wait")
	}
}
