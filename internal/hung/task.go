package hung

import (
	"fmt"
	"time"

	"github.com/wolf-investigator/wolf/internal/bpfrec"
	"github.com/wolf-investigator/wolf/internal/kallsyms"
	"github.com/wolf-investigator/wolf/internal/kstack"
)

// Symbolizer turns kernel addresses into "func+0x1f [module]"; the
// kallsyms package provides the real one, tests a fake.
type Symbolizer interface {
	Symbolize(addr uint64) string
}

// LockKind is how a task wants the lock it sleeps on.
type LockKind uint32

// Values match enum lock_kind in hung.bpf.c.
const (
	LockUnknown LockKind = iota
	LockMutex
	LockRWSemRead
	LockRWSemWrite
	LockSemaphore
	LockRTMutex
	LockPercpuRWSem
)

// Noun names the lock type the way the kernel's own messages do.
func (k LockKind) Noun() string {
	switch k {
	case LockMutex:
		return "mutex"
	case LockRWSemRead, LockRWSemWrite:
		return "rw-semaphore"
	case LockSemaphore:
		return "semaphore"
	case LockRTMutex:
		return "rt-mutex"
	case LockPercpuRWSem:
		return "percpu rw-semaphore"
	}
	return "lock"
}

// Mode says "read" or "write" for reader/writer locks, "" otherwise.
func (k LockKind) Mode() string {
	switch k {
	case LockRWSemRead:
		return "read"
	case LockRWSemWrite:
		return "write"
	}
	return ""
}

// LockSource says how wolf learnt which lock a task waits on.
type LockSource uint32

// Values match enum lock_source in hung.bpf.c.
const (
	SourceNone LockSource = iota
	SourceBlocker
	SourceContention
	SourceBlockerMutex
	SourceSlowpath // a kprobe on the lock's slow path (before 5.19), still where it began
	// SourceWaitList: the task was found on the lock's own wait list
	// (mmap_lock queues; user space only, not a BPF value).
	SourceWaitList LockSource = 100
)

func (s LockSource) String() string {
	switch s {
	case SourceBlocker:
		return "task->blocker"
	case SourceContention:
		return "lock:contention_begin"
	case SourceBlockerMutex:
		return "task->blocker_mutex"
	case SourceSlowpath:
		return "kprobe on the lock's slow path"
	case SourceWaitList:
		return "the lock's wait list"
	case SourcePreEnd:
		return "lock:contention_end of a wait that began before wolf attached"
	}
	return "none"
}

// OwnerKind says how much the owner field can be trusted.
type OwnerKind uint32

// Values match enum owner_kind in hung.bpf.c.
const (
	OwnerNone       OwnerKind = iota
	OwnerTask                 // mutex owner or writer of an rw-semaphore: exact
	OwnerReaders              // reader-owned rw-semaphore; the task is only the latest reader
	OwnerLastHolder           // a semaphore's last holder (6.17+)
)

// Lock is what a blocked task waits for, decoded in the kernel.
type Lock struct {
	Addr      uint64
	Name      string // kernel symbol for global locks, e.g. "rtnl_mutex"
	Kind      LockKind
	Source    LockSource
	Owner     OwnerKind
	OwnerTID  int
	OwnerTGID int
	OwnerComm string
	Readers   int // reader-owned rw-semaphore: readers holding it now
	// MMPID is set when the lock is a process's mmap_lock: that process.
	MMPID  int
	MMComm string
	// Inferred: the owner word named no live task (the latest reader had
	// gone), and the owner is a thread of the lock's process asleep inside
	// its read section (inferReader).
	Inferred bool
}

// Describe names the lock: "rtnl_mutex", "mmap_lock of x (pid 5)" or
// "rw-semaphore ffff8881…".
func (l *Lock) Describe() string {
	if l.Name != "" {
		return l.Name
	}
	if l.MMPID != 0 {
		if l.MMComm == "" {
			return fmt.Sprintf("mmap_lock of pid %d", l.MMPID)
		}
		return fmt.Sprintf("mmap_lock of %s (pid %d)", l.MMComm, l.MMPID)
	}
	return fmt.Sprintf("%s %x", l.Kind.Noun(), l.Addr)
}

// Task is one task record from the kernel, decoded.
type Task struct {
	TID, TGID    int
	Comm         string
	State        uint32
	Flags        uint32
	Stack        []string // innermost first
	Blocked      time.Duration
	BlockedExact bool // from sched_switch rather than estimated
	Lock         *Lock
	WQFunc       string // kworkers: the work function
	WQName       string // kworkers: the workqueue
	DumperTID    int    // coredump: the thread writing the core
	Wanted       bool   // emitted as a lock owner, whatever its state
	// Cumulative CPU time and run-queue time, and when they were read
	// (ktime): deltas between walks say where its time went.
	SumExec, RunDelay, At time.Duration
	// NrSwitches is its context switch count (nvcsw + nivcsw): a task
	// found asleep by two walks with the same count did not run between.
	NrSwitches uint64
	MMLockAddr uint64 // its process's mmap_lock; 0 for kernel threads
	// BehindWriter is, for a reader on an rw-semaphore's wait list, the
	// writer queued ahead of it (the reason it cannot share the lock).
	BehindWriter int
}

// Task flag bits, from include/linux/sched.h.
const (
	pfExiting      = 0x00000004
	pfPostCoredump = 0x00000008
	pfWQWorker     = 0x00000020
	pfKthread      = 0x00200000
)

// StateLetter is the letter ps shows for the task's state.
func (t *Task) StateLetter() string { return stateLetter(t.State) }

func stateLetter(s uint32) string {
	switch {
	case s == 0:
		return "R"
	case s&0x2 != 0 && s&0x400 != 0:
		return "I"
	case s&0x2 != 0:
		return "D"
	case s&0x1 != 0:
		return "S"
	case s&0x4 != 0:
		return "T"
	case s&0x8 != 0:
		return "t"
	}
	return "?"
}

// Killable reports TASK_KILLABLE sleeps (D, but a fatal signal ends them);
// khungtaskd skips these.
func (t *Task) Killable() bool { return t.State&0x100 != 0 }

// Kthread reports kernel threads.
func (t *Task) Kthread() bool { return t.Flags&pfKthread != 0 }

// Label is "comm (pid N)" or "comm (pid N, tid M)" for threads.
func (t *Task) Label() string { return taskLabel(t.Comm, t.TGID, t.TID) }

func taskLabel(comm string, tgid, tid int) string {
	if tgid == tid || tgid == 0 {
		return fmt.Sprintf("%s (pid %d)", comm, tid)
	}
	return fmt.Sprintf("%s (pid %d, tid %d)", comm, tgid, tid)
}

// decode turns a raw record into a Task. The blocked duration is exact
// when sched_switch saw the task go to sleep, else computed from the
// scheduler clock (error: at most the tick that last updated it).
func decode(r *hungTaskRec, sym Symbolizer) *Task {
	t := &Task{
		TID:    int(r.Tid),
		TGID:   int(r.Tgid),
		Comm:   bpfrec.CString(r.Comm[:]),
		State:  r.State,
		Flags:  r.Flags,
		Wanted: r.Wanted != 0,
	}
	n := int(r.StackBytes / 8)
	if n > len(r.Stack) {
		n = len(r.Stack)
	}
	for _, a := range r.Stack[:n] {
		if a == 0 {
			break
		}
		t.Stack = append(t.Stack, sym.Symbolize(a))
	}
	switch {
	case r.SinceKtime != 0 && r.NowKtime >= r.SinceKtime:
		t.Blocked = time.Duration(r.NowKtime - r.SinceKtime)
		t.BlockedExact = true
	case r.LastArrival != 0 && r.NowSched > r.LastArrival+r.LastSliceNs:
		t.Blocked = time.Duration(r.NowSched - r.LastArrival - r.LastSliceNs)
	}
	if r.LockAddr != 0 {
		l := &Lock{
			Addr:      r.LockAddr,
			Kind:      LockKind(r.LockKind),
			Source:    LockSource(r.LockSource),
			Owner:     OwnerKind(r.OwnerKind),
			OwnerTID:  int(r.OwnerTid),
			OwnerTGID: int(r.OwnerTgid),
			OwnerComm: bpfrec.CString(r.OwnerComm[:]),
			Name:      globalName(sym, r.LockAddr),
		}
		if l.Owner == OwnerReaders {
			l.Readers = int(r.CountWord >> 8)
		}
		if l.OwnerTID == 0 {
			l.Owner = OwnerNone
		}
		t.Lock = l
	}
	if r.WqFunc != 0 {
		t.WQFunc = kstack.Func(sym.Symbolize(r.WqFunc))
		t.WQName = bpfrec.CString(r.WqName[:])
	}
	t.DumperTID = int(r.DumperTid)
	t.SumExec, t.RunDelay, t.At = time.Duration(r.SumExecNs), time.Duration(r.RunDelayNs), time.Duration(r.NowKtime)
	t.MMLockAddr = r.MmLockAddr
	t.NrSwitches = r.NrSwitches
	return t
}

// globalName names a lock that is a kernel global (rtnl_mutex), and
// returns "" for locks inside heap objects, whose address no symbol covers.
func globalName(sym Symbolizer, addr uint64) string {
	return kallsyms.GlobalName(sym.Symbolize(addr))
}
