package locks

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/hist"
)

// Type is a lock type as locks.bpf.c decodes it from the contention
// tracepoint's flags (enum lock_type).
type Type uint32

// The types, in the BPF side's order.
const (
	Spinlock Type = iota
	RwlockRead
	RwlockWrite
	Mutex
	RwsemRead
	RwsemWrite
	Semaphore
	RTMutex
	PercpuRwsemRead
	PercpuRwsemWrite
	RTRwlockRead
	RTRwlockWrite
	numTypes
)

var typeNames = [...]string{
	Spinlock:         "spinlock",
	RwlockRead:       "rwlock:R",
	RwlockWrite:      "rwlock:W",
	Mutex:            "mutex",
	RwsemRead:        "rwsem:R",
	RwsemWrite:       "rwsem:W",
	Semaphore:        "semaphore",
	RTMutex:          "rtmutex",
	PercpuRwsemRead:  "pcpu-sem:R",
	PercpuRwsemWrite: "pcpu-sem:W",
	RTRwlockRead:     "rt-rwlock:R",
	RTRwlockWrite:    "rt-rwlock:W",
}

// String is the short name perf lock contention also uses ("rwsem:R").
func (t Type) String() string {
	if t < numTypes {
		return typeNames[t]
	}
	return fmt.Sprintf("type%d", uint32(t))
}

// Noun is the lock's kind for sentences: "rw-semaphore", "mutex".
func (t Type) Noun() string {
	switch t {
	case Spinlock:
		return "spinlock"
	case RwlockRead, RwlockWrite:
		return "rwlock"
	case Mutex:
		return "mutex"
	case RwsemRead, RwsemWrite:
		return "rw-semaphore"
	case Semaphore:
		return "semaphore"
	case RTMutex:
		return "rt-mutex"
	case PercpuRwsemRead, PercpuRwsemWrite:
		return "percpu rw-semaphore"
	case RTRwlockRead, RTRwlockWrite:
		return "rt rwlock"
	}
	return "lock"
}

// Spins reports whether waiters burn CPU instead of sleeping.
func (t Type) Spins() bool { return t == Spinlock || t == RwlockRead || t == RwlockWrite }

// Read reports whether the waiter wanted the lock shared.
func (t Type) Read() bool {
	return t == RwlockRead || t == RwsemRead || t == PercpuRwsemRead || t == RTRwlockRead
}

// typeFlags maps --type words to the types they select.
var typeFlags = map[string][]Type{
	"spinlock":     {Spinlock},
	"rwlock":       {RwlockRead, RwlockWrite, RTRwlockRead, RTRwlockWrite},
	"mutex":        {Mutex},
	"rwsem":        {RwsemRead, RwsemWrite},
	"rwsem-read":   {RwsemRead},
	"rwsem-write":  {RwsemWrite},
	"semaphore":    {Semaphore},
	"rtmutex":      {RTMutex},
	"percpu-rwsem": {PercpuRwsemRead, PercpuRwsemWrite},
}

// TypeNames lists what --type accepts.
func TypeNames() []string {
	var out []string
	for k := range typeFlags {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ParseTypes turns "mutex,rwsem" into the BPF side's type mask; "" is all.
func ParseTypes(s string) (uint32, error) {
	if strings.TrimSpace(s) == "" {
		return 0xffffffff, nil
	}
	var mask uint32
	for _, w := range strings.Split(s, ",") {
		ts, ok := typeFlags[strings.TrimSpace(strings.ToLower(w))]
		if !ok {
			return 0, fmt.Errorf("unknown lock type %q (want one of %s)", w, strings.Join(TypeNames(), ", "))
		}
		for _, t := range ts {
			mask |= 1 << t
		}
	}
	return mask, nil
}

// OwnerKind says how much is known about who holds a lock.
type OwnerKind uint32

const (
	OwnerNone    OwnerKind = 0
	OwnerTask    OwnerKind = 1 // mutex or writer-owned rw-semaphore: exact
	OwnerReaders OwnerKind = 2 // reader-owned rw-semaphore: the latest reader only
)

// Wait is contention aggregated per lock, type and waiter stack.
type Wait struct {
	Lock    uint64
	Type    Type
	Stack   []string // the waiter's kernel stack, innermost first
	MMTGID  int      // the lock is this process's mmap_lock
	Count   uint64
	TotalNs uint64
	MaxNs   uint64
	MaxTID  int
	// ReaderOwned counts waits that found the lock held by readers, and
	// BehindWriter reader waits that found a writer queued at the head.
	ReaderOwned  uint64
	BehindWriter uint64
	Ongoing      uint64 // of Count, waits still going when wolf stopped
}

// Waiter is one task's waits on one lock.
type Waiter struct {
	Lock    uint64
	TID     int
	TGID    int
	Comm    string
	Count   uint64
	TotalNs uint64
	MaxNs   uint64
	Ongoing bool // still waiting when wolf stopped
}

// Owner is waiting time attributed to the task that held the lock when
// the wait began.
type Owner struct {
	Lock    uint64
	TID     int
	TGID    int
	Comm    string
	Kind    OwnerKind
	Stack   []string // the owner's stack when a wait began; nil if unknown
	Count   uint64
	TotalNs uint64
	MaxNs   uint64
	// SpanNs is the time from the first to the last wait that found it
	// owning the lock, and OnCPUNs and RunnableNs the CPU time it got and
	// the time it waited on a run queue meanwhile; 0 with fewer than two.
	SpanNs, OnCPUNs, RunnableNs uint64
}

// Queue is the wait queue model of one sleeping lock.
type Queue struct {
	Lock        uint64
	MaxReaders  uint64
	MaxWriters  uint64
	Readers     int64 // waiting when wolf stopped
	Writers     int64
	BusyMaxNs   uint64 // longest time from a first waiter to an empty queue
	BusyTotalNs uint64
	BusyPeriods uint64
	// Samples are the waiting readers and writers every sample interval.
	Samples []QueueSample
}

// QueueSample is the queue's depth at one moment.
type QueueSample struct {
	At      time.Duration // since the start
	Readers int64
	Writers int64
}

// LockHist is the wait-time distribution of one lock and type (ns).
type LockHist struct {
	Lock uint64
	Type Type
	Hist hist.Log2
}

// MMStat is one thread's mmap_lock holds and waits in one mode.
type MMStat struct {
	TGID   int // the thread's process
	TID    int
	MMTGID int // whose mmap_lock (differs for /proc readers); 0 unknown
	Write  bool
	Comm   string
	Hold   hist.Log2 // ns
	Wait   hist.Log2 // ns
}

// Hold is one mmap_lock hold above the threshold.
type Hold struct {
	TGID, TID int
	MMTGID    int
	Comm      string
	Write     bool
	Start     time.Duration // since boot (CLOCK_MONOTONIC)
	HoldNs    uint64
	RuntimeNs uint64 // CPU time the holder got while holding it
	CSW       uint64 // its context switches while holding it
	// RunnableNs is the time it waited on a run queue while holding it
	// (sched_info.run_delay; its cgroup's throttled time included), and
	// ThrottledNs the part of that it was switched out with its cgroup
	// throttled (Snapshot.ThrottleSeen says whether wolf could see it).
	RunnableNs  uint64
	ThrottledNs uint64
	// Lock is the mmap_lock's address: the key that ties holds to the
	// contention on the same lock.
	Lock  uint64
	Stack []string
	// Memory reclaim the holder did while holding it.
	ReclaimNs      uint64
	ReclaimCalls   uint64
	PagesScanned   uint64
	PagesReclaimed uint64
	PagesActivated uint64
	PagesRefKeep   uint64
}

// ProfileStack is one kernel stack sampled while its thread held its
// mmap_lock.
type ProfileStack struct {
	TGID, TID int
	Write     bool
	Stack     []string
	Count     uint64
}
