package hung

import (
	"fmt"
	"slices"
	"time"

	"github.com/wolf-investigator/wolf/internal/bpfrec"
	"github.com/wolf-investigator/wolf/internal/human"
	"github.com/wolf-investigator/wolf/internal/kstack"
)

// MMQueue is a process's mmap_lock with sleepers on it, read from the lock
// (dump_mm_queues): its owner word and its wait list in queue order.
type MMQueue struct {
	TGID      int // whose mmap_lock
	Comm      string
	Addr      uint64
	Owner     OwnerKind
	OwnerTID  int
	OwnerTGID int
	OwnerComm string
	Readers   int // reader-owned: readers holding it now (the count word)
	Waiters   []QueueWaiter
	More      bool // the list went on beyond what was read
}

// QueueWaiter is one sleeper on a lock's wait list.
type QueueWaiter struct {
	TID   int
	Write bool
}

func decodeQueue(r *hungMmQueueRec) MMQueue {
	q := MMQueue{TGID: int(r.Tgid), Comm: bpfrec.CString(r.Comm[:]), Addr: r.LockAddr,
		Owner: OwnerKind(r.OwnerKind), OwnerTID: int(r.OwnerTid), OwnerTGID: int(r.OwnerTgid),
		OwnerComm: bpfrec.CString(r.OwnerComm[:]), More: r.More != 0}
	if q.Owner == OwnerReaders {
		q.Readers = int(r.CountWord >> 8)
	}
	for i := 0; i < int(r.Nr) && i < len(r.WaiterTid); i++ {
		q.Waiters = append(q.Waiters, QueueWaiter{TID: int(r.WaiterTid[i]), Write: r.WaiterWrite[i] != 0})
	}
	return q
}

// lockFrom is the lock a waiter of q waits on, as decoded from the lock.
func (q *MMQueue) lockFor(w QueueWaiter) *Lock {
	l := &Lock{Addr: q.Addr, Kind: LockRWSemRead, Source: SourceWaitList, Owner: q.Owner,
		OwnerTID: q.OwnerTID, OwnerTGID: q.OwnerTGID, OwnerComm: q.OwnerComm, Readers: q.Readers,
		MMPID: q.TGID, MMComm: q.Comm}
	if w.Write {
		l.Kind = LockRWSemWrite
	}
	if l.OwnerTID == 0 {
		l.Owner = OwnerNone
	}
	return l
}

// resolveQueues gives the tasks that sleep on an mmap_lock's wait list
// that lock, when nothing else named one (a killable wait sets no
// task->blocker; a wait that began before wolf was not seen by the
// contention tracepoint); names the mmap_locks they and others wait on;
// and says which reader queued behind a writer.
func resolveQueues(tasks []*Task, queues []MMQueue) {
	type pos struct {
		q            *MMQueue
		w            QueueWaiter
		behindWriter int
	}
	at := map[int]pos{}
	byAddr := map[uint64]*MMQueue{}
	for i := range queues {
		q := &queues[i]
		byAddr[q.Addr] = q
		writer := 0
		for _, w := range q.Waiters {
			p := pos{q: q, w: w}
			if !w.Write && writer != 0 {
				p.behindWriter = writer
			}
			if w.Write && writer == 0 {
				writer = w.TID
			}
			at[w.TID] = p
		}
	}
	for _, t := range tasks {
		if t == nil {
			continue
		}
		p, ok := at[t.TID]
		switch {
		case ok && t.Lock == nil:
			t.Lock = p.q.lockFor(p.w)
		case ok && t.Lock.Addr == p.q.Addr:
			t.Lock.MMPID, t.Lock.MMComm = p.q.TGID, p.q.Comm
			if t.Lock.Owner == OwnerNone && p.q.OwnerTID != 0 {
				l := p.q.lockFor(p.w)
				t.Lock.Owner, t.Lock.OwnerTID, t.Lock.OwnerTGID, t.Lock.OwnerComm, t.Lock.Readers = l.Owner, l.OwnerTID, l.OwnerTGID, l.OwnerComm, l.Readers
			}
		case t.Lock != nil:
			if q := byAddr[t.Lock.Addr]; q != nil {
				t.Lock.MMPID, t.Lock.MMComm = q.TGID, q.Comm
			}
		}
		if ok {
			t.BehindWriter = p.behindWriter
		}
	}
}

// nameMMLocks names the locks that are some known task's own mmap_lock
// (its address is in every task record), when no wait list did.
func nameMMLocks(tasks []*Task) {
	mm := map[uint64]*Task{}
	for _, t := range tasks {
		if t != nil && t.MMLockAddr != 0 {
			if o, ok := mm[t.MMLockAddr]; !ok || t.TID == t.TGID || o.TID != o.TGID {
				mm[t.MMLockAddr] = t
			}
		}
	}
	for _, t := range tasks {
		if t == nil || t.Lock == nil || t.Lock.MMPID != 0 {
			continue
		}
		if o, ok := mm[t.Lock.Addr]; ok {
			t.Lock.MMPID = o.TGID
			if o.TID == o.TGID {
				t.Lock.MMComm = o.Comm
			}
		}
	}
}

// FuseReq is a request a FUSE daemon has not answered, read from its
// /dev/fuse (dump_fuse).
type FuseReq struct {
	DaemonPID  int
	DaemonComm string
	Conn       uint32 // the connection's device number, its name in /sys/fs/fuse/connections
	Sender     int    // the task that sent it (fuse_in_header pid)
	Opcode     uint32
	Unique     uint64
	NodeID     uint64
	Age        time.Duration // 0 when the kernel does not stamp requests (before 6.14)
	Read       bool          // the daemon read it and owes the reply; else it has not even read it
	Waiting    int           // requests waiting on the connection
}

func decodeFuse(r *hungFuseReqRec, hz int) FuseReq {
	f := FuseReq{DaemonPID: int(r.DaemonTgid), DaemonComm: bpfrec.CString(r.DaemonComm[:]), Conn: r.ConnDev,
		Sender: int(r.SenderPid), Opcode: r.Opcode, Unique: r.Unique, NodeID: r.Nodeid,
		Read: r.State == 2, Waiting: int(r.NumWaiting)}
	if r.CreateJiffies != 0 && r.NowJiffies >= r.CreateJiffies && hz > 0 {
		f.Age = time.Duration(r.NowJiffies-r.CreateJiffies) * time.Second / time.Duration(hz)
	}
	return f
}

// ConnName is the connection's directory under /sys/fs/fuse/connections.
func (f *FuseReq) ConnName() string { return fmt.Sprint(f.Conn) }

// fuseOps names FUSE opcodes (include/uapi/linux/fuse.h).
var fuseOps = map[uint32]string{1: "LOOKUP", 2: "FORGET", 3: "GETATTR", 4: "SETATTR", 5: "READLINK", 6: "SYMLINK",
	8: "MKNOD", 9: "MKDIR", 10: "UNLINK", 11: "RMDIR", 12: "RENAME", 13: "LINK", 14: "OPEN", 15: "READ", 16: "WRITE",
	17: "STATFS", 18: "RELEASE", 20: "FSYNC", 21: "SETXATTR", 22: "GETXATTR", 23: "LISTXATTR", 24: "REMOVEXATTR",
	25: "FLUSH", 26: "INIT", 27: "OPENDIR", 28: "READDIR", 29: "RELEASEDIR", 30: "FSYNCDIR", 31: "GETLK", 32: "SETLK",
	33: "SETLKW", 34: "ACCESS", 35: "CREATE", 36: "INTERRUPT", 37: "BMAP", 38: "DESTROY", 39: "IOCTL", 40: "POLL",
	41: "NOTIFY_REPLY", 42: "BATCH_FORGET", 43: "FALLOCATE", 44: "READDIRPLUS", 45: "RENAME2", 46: "LSEEK",
	47: "COPY_FILE_RANGE"}

// OpName is the request's opcode by name.
func (f *FuseReq) OpName() string {
	if n, ok := fuseOps[f.Opcode]; ok {
		return n
	}
	return fmt.Sprintf("opcode %d", f.Opcode)
}

// fuseWait says whether a task's own wait can be a FUSE request's: asleep
// in the request itself (request_wait_answer), or on a page-cache folio,
// which a FUSE read keeps locked until its reply.
func fuseWait(t *Task) bool {
	switch kstack.Classify(t.Stack).Kind {
	case kstack.Fuse, kstack.PageLock:
		return true
	}
	return pageCacheWait(t.Stack)
}

// pageCacheFuncs sleep, uninterruptibly, only on a page-cache folio (its
// lock or its uptodate bit). Kernel stacks leave the scheduler's functions
// out (__sched), and since the folio waits became __sched (seen on 6.18)
// the innermost frame of a task asleep on a folio in a page fault is
// filemap_fault itself.
var pageCacheFuncs = []string{"filemap_fault", "filemap_read", "filemap_get_pages", "filemap_update_page",
	"filemap_read_folio", "do_read_cache_folio", "lock_folio_maybe_drop_mmap"}

// pageCacheWait says whether a stack's innermost meaningful frame is one
// of them.
func pageCacheWait(stack []string) bool {
	for _, fr := range stack {
		fn := kstack.FuncName(fr)
		if fn == "" || kstack.Unreliable(fr) {
			continue
		}
		return slices.Contains(pageCacheFuncs, fn)
	}
	return false
}

// requestOf finds the oldest request the task sent that a daemon still owes.
func requestOf(reqs []FuseReq, tid int) *FuseReq {
	var best *FuseReq
	for i := range reqs {
		r := &reqs[i]
		if r.Sender == tid && (best == nil || r.Age > best.Age) {
			best = r
		}
	}
	return best
}

// describe says what the request is, for the chain's text.
func (f *FuseReq) describe() string {
	state := "not yet read by"
	if f.Read {
		state = "read but not answered by"
	}
	age := ""
	if f.Age > 0 {
		age = " for " + human.Duration(f.Age)
	}
	return fmt.Sprintf("its %s request #%d is %s FUSE daemon %s (pid %d)%s", f.OpName(), f.Unique, state, f.DaemonComm, f.DaemonPID, age)
}
