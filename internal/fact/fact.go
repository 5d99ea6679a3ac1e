// Package fact is what the investigators measured, typed, for the
// diagnosis stage. Findings are one view of a window (for people); facts
// are another (for joins): the victims' waits, the resources they wait on,
// who holds or uses those resources and how much, where a holder's time
// went, and which resources are at a limit. The diagnosis stage
// (internal/diagnose) joins facts only, never a finding's JSON evidence,
// and a finding and the facts behind it are made from the same snapshot,
// so the two cannot disagree.
//
// Every fact names its resource by Key (see Resource): two investigators
// that see the same lock, cgroup or device make the same key, which is
// what a relation joins on. Every fact names the finding that reports it
// (Finding: its id), so that a diagnosis can fold that finding under it.
//
// Durations are wall time within the window (Set.Window); a wait or hold
// still going at the end of the window counts its time so far and says
// Ongoing.
package fact

import (
	"strconv"
	"time"
)

// Kind is what kind of thing a resource is.
type Kind string

// Resource kinds: everything a task can wait on. Keys are built by the
// functions below so that every investigator makes the same key for the
// same thing.
const (
	// The host's CPUs as a whole (run-queue waits on a saturated host).
	HostCPU Kind = "host-cpu"
	// One CPU (softirq time on it delays its tasks and its softirqs).
	CPU Kind = "cpu"
	// A cgroup's CPU bandwidth (cpu.max, cpu.cfs_quota_us).
	CPUQuota Kind = "cpu-quota"
	// A cgroup's memory limit (memory.max, memory.limit_in_bytes), or the
	// host's memory (cgroup "/").
	Memory Kind = "memory"
	// A kernel lock (mutex, rw-semaphore, mmap_lock, …).
	Lock Kind = "lock"
	// A FUSE connection, served by a user-space daemon.
	FUSE Kind = "fuse"
	// A block device (the kernel's disk name: vda, nvme0n1, loop3).
	Device Kind = "device"
	// A cgroup's I/O limit on one device (blkio.throttle.*, io.max,
	// io.latency, iocost).
	IOLimit Kind = "io-limit"
	// Dirty-page throttling (balance_dirty_pages) on a backing device.
	Dirty Kind = "dirty"
	// A filesystem journal (jbd2, XFS log) on a device.
	Journal Kind = "journal"
	// Softirq processing on one CPU.
	Softirq Kind = "softirq"
	// A place in the kernel where tasks sleep uninterruptibly that wolf
	// could not tie to a resource (named by the wait site's function).
	Site Kind = "site"
)

// Resource is one thing tasks wait on.
type Resource struct {
	Kind Kind
	Key  string // unique across kinds: built by the *Key functions
	Name string // for people: "mmap_lock of clickhouse (pid 812)", "vda", "cgroup /x's CPU quota"
	// What the key is made of, for the resource's subject.
	Cgroup   string // CPUQuota, Memory, IOLimit
	CgroupID uint64
	Device   string // Device, IOLimit, Dirty, Journal
	CPU      int    // CPU, Softirq (-1: not a CPU's)
	LockAddr string // Lock
	MMPID    int    // Lock: the process whose mmap_lock this is
	// LockType is the lock's kind for people ("rw-semaphore", "mutex").
	LockType string
	// Conn is a FUSE connection's directory under
	// /sys/fs/fuse/connections.
	Conn string
	// Under are the devices a Device's I/O goes on to (a loop device's
	// backing file's disk, a device-mapper or md device's members): a
	// wait on it is a wait on what holds those back.
	Under []string
}

// HostCPUKey is the host's CPUs.
func HostCPUKey() string { return "host-cpu" }

// HostCPUSaturatedPct is the share of the host's CPUs' time in use, in
// percent, at which they are saturated: the host-cpu saturation's AtLimit,
// whoever measures it (the checklist from /proc/stat, sched from the
// tasks it saw), and the mark wolf's own share is judged against.
const HostCPUSaturatedPct = 90.0

// CPUKey is one CPU.
func CPUKey(cpu int) string { return "cpu:" + strconv.Itoa(cpu) }

// CPUQuotaKey is a cgroup's CPU quota; cgroup is its path as the cpu
// controller's hierarchy shows it ("/x", v1 or v2).
func CPUQuotaKey(cgroup string) string { return "cpu-quota:" + cgroup }

// MemoryKey is a memory cgroup's limit; "/" is the host's memory.
func MemoryKey(cgroup string) string { return "memory:" + cgroup }

// MMLockKey is the mmap_lock of process pid.
func MMLockKey(pid int) string { return "lock:mm:" + strconv.Itoa(pid) }

// LockKey is the lock at a kernel address ("0xffff…"). An mmap_lock whose
// process is known keys by MMLockKey instead, however it was found.
func LockKey(addr string) string { return "lock:addr:" + addr }

// FUSEKey is a FUSE connection (its directory under
// /sys/fs/fuse/connections).
func FUSEKey(conn string) string { return "fuse:" + conn }

// DeviceKey is a block device by its kernel name ("vda").
func DeviceKey(dev string) string { return "device:" + dev }

// IOLimitKey is a cgroup's I/O limit on a device.
func IOLimitKey(cgroup, dev string) string { return "io-limit:" + cgroup + ":" + dev }

// DirtyKey is dirty-page throttling on a backing device ("" for the
// host's global dirty limit).
func DirtyKey(bdi string) string { return "dirty:" + bdi }

// JournalKey is a filesystem's journal on a device.
func JournalKey(dev string) string { return "journal:" + dev }

// SoftirqKey is softirq processing on a CPU.
func SoftirqKey(cpu int) string { return "softirq:" + strconv.Itoa(cpu) }

// SiteKey is a kernel wait site (its function) that wolf could not tie
// to a resource.
func SiteKey(fn string) string { return "site:" + fn }

// Task is a task as facts name it. Cgroups are per controller because on
// cgroup v1 a task's cpu and memory cgroups are different directories; on
// v2 they are the same path.
type Task struct {
	PID, TID int
	Comm     string
	// Cgroup paths, per controller hierarchy ("" unknown). CgroupID is
	// the v2 (or unified) id when known.
	CPUCgroup, MemCgroup, IOCgroup string
	CgroupID                       uint64
}

// WaitKind is how a victim waited.
type WaitKind string

// Wait kinds: every kind of victim.
const (
	WaitLock      WaitKind = "lock"      // asleep on a lock's wait list
	WaitRunQueue  WaitKind = "runqueue"  // runnable, no CPU
	WaitThrottled WaitKind = "throttled" // its cgroup's quota used up
	WaitReclaim   WaitKind = "reclaim"   // in direct reclaim (its own charge or the host's)
	WaitRefault   WaitKind = "refault"   // reading back pages its memory limit evicted
	WaitIO        WaitKind = "io"        // a block request (queued, throttled or on the device)
	WaitDirty     WaitKind = "dirty"     // paused by balance_dirty_pages
	WaitJournal   WaitKind = "journal"   // a journal commit (fsync behind someone else's data)
	WaitFUSE      WaitKind = "fuse"      // a FUSE request its daemon has not answered
	WaitSoftirq   WaitKind = "softirq"   // softirq work delayed, or a task delayed by softirqs on its CPU
	WaitBlocked   WaitKind = "blocked"   // D state, on something named only by its wait site
)

// Wait is a victim: a task that lost time waiting on a resource.
type Wait struct {
	Task Task
	Kind WaitKind
	On   string // the resource's key
	// Total is the time lost in the window (waits summed), Max the
	// longest single wait, Count how many waits.
	Total, Max time.Duration
	Count      int
	Ongoing    bool   // still waiting at the end of the window
	Hung       bool   // in D state long enough to be a hung task
	Mode       string // "read" or "write" for rw locks; "" otherwise
	// BehindWriter is the tid of the writer a reader queued behind on an
	// rw-semaphore (0: none).
	BehindWriter int
	// Numbers are more of the wait's measurements, keys with units
	// ("fuse_age_s", "fuse_unique"), for the hop that shows it.
	Numbers map[string]any
	// Detail says what the wait is, for people ("READ request #42 sent by
	// this task"), when the kind and resource do not.
	Detail string
	// AtLeast says Max and Total are lower bounds: the wait began before
	// wolf attached (the lock investigator never saw its begin) and ended
	// in the window, after the last look that found it still waiting.
	AtLeast bool
	// Likely marks a wait the kernel did not name exactly (a D-state task
	// placed by its wait site only; a request found by its sender, not on
	// the daemon's queue).
	Likely  bool
	Finding string // the id of the finding that reports it
	// FindingTitle tells that finding from others with the same id (""
	// when the id is enough).
	FindingTitle string
}

// Hold is a task holding a lock (or, for FUSE, a daemon owning a
// request) while others wait.
type Hold struct {
	On     string // the resource's key
	Holder Task
	// Exact: the holder is known for certain (a mutex owner, a measured
	// hold); false: the latest reader of a reader-owned rw-semaphore.
	Exact bool
	Mode  string
	// Max and Total measured holds; Holds how many; Charged the time
	// others waited while it held it.
	Max, Total, Charged time.Duration
	Holds               int
	// Where the holder's time went while it held it (nil: unknown).
	Split        *Split
	Finding      string
	FindingTitle string
}

// Split is where a task's wall time went over a span: on a CPU, runnable
// without one, throttled by its quota, in reclaim, waiting for I/O, asleep
// otherwise. The parts may overlap (reclaim is on-CPU time too).
type Split struct {
	Span                                    time.Duration
	OnCPU, Runnable, Throttled, Reclaim, IO time.Duration
	Sleep                                   time.Duration
	PagesScanned, PagesReclaimed            uint64
	ThrottleKnown                           bool // the kernel let wolf see throttling per task
	// For a hold still going: what the holder is doing now.
	State    string // "R", "S", "D"
	SleepsOn string // a resource key, "" unknown
	Site     string // the wait site's function
	// Span is only the stretch between the first and the last wait that
	// found the holder owning the lock, not a measured hold.
	Bounded bool
	// Still says the span is a hold still going when wolf stopped (a hung
	// offender), watched for Span.
	Still        bool
	Finding      string
	FindingTitle string
}

// Usage is a consumer of a resource, measured in the window: CPU seconds
// of a process on the host's CPUs (and of which what part in reclaim, or
// in the page-cache miss path: ActivityMissPath),
// bytes a cgroup read from a device, pages a cgroup refaulted, softirq
// time on a CPU by vector. A consumer is a task (PID, and TID for one
// thread) or a cgroup (Task with only a cgroup set).
type Usage struct {
	On       string // the resource's key
	By       Task
	Amount   float64
	Unit     string  // "cpu_s", "bytes", "requests", "pages", "ns"
	Share    float64 // of the resource's capacity over the window, 0..1 (0: unknown)
	Activity string  // what the consumer spent it on: "", "reclaim", "user", "system", "NET_RX", "writeback"
	// For is the resource this use was made on behalf of: CPU burned in
	// reclaim "for" a memory limit, device time "for" refaults.
	For string
	// Threads is how many threads of the consumer used it (0: unknown,
	// or a thread itself).
	Threads int
	// PIDs are the processes a use sums when it is several processes of
	// one name in one cgroup (a worker pool, stress-ng's hogs), largest
	// first; By is the largest of them. Empty for one process.
	PIDs         []int
	Finding      string
	FindingTitle string
	// BusyShare is of the resource's busy time, measured in the same
	// window as Amount (CPU samples: of every task's samples), 0..1 (0:
	// unknown): a share that holds whichever window the resource's
	// total was measured over.
	BusyShare float64
	// Window is the window Amount was measured over: its investigator's,
	// filled in by Set.Merge from the set the use came in (0: the
	// set's). Investigators attach one after another, seconds apart on a
	// slow machine, so their windows differ, and an amount of seconds is
	// a share of the resource's time over its own window, not over the
	// longest.
	Window time.Duration
}

// ActivityMissPath is a Usage's activity for CPU time in the page-cache
// miss path: readahead, adding and charging folios, submitting the reads
// of pages that were not in memory.
const ActivityMissPath = "page-cache misses"

// ActivityRefault is a Usage's activity for the bytes of pages a memory
// cgroup read back after reclaim had evicted them, as the kernel counts
// them (workingset_refault_file: a re-read that found the shadow entry
// eviction left). ActivityEvictedReread is the same measured directly
// (a sample of the pages reclaim evicted, followed to their re-read):
// it sees the re-reads whose shadow entries the kernel dropped.
// ActivityShadowlessReread is the re-reads the kernel's count missed for
// that reason, estimated from its own counters (the shadow nodes it
// dropped, at the rate the shadows it kept came back): kernel refaults
// plus these are the re-reads when the measure is not there. All are on
// the memory cgroup's key.
const (
	ActivityRefault          = "refault"
	ActivityEvictedReread    = "evicted re-reads"
	ActivityShadowlessReread = "re-reads without shadows"
)

// Saturation says a resource is at its limit in the window: its
// utilisation (Level, 0..1: the busy share of the CPUs or the device,
// the share of periods a quota throttled, usage over a memory limit),
// its limit and use in Unit, and named numbers with units in their keys
// for the hops that reach it.
type Saturation struct {
	On      string
	Level   float64
	Limit   float64
	Used    float64
	Unit    string
	Numbers map[string]float64
	// Members are the processes in the resource's cgroup (CPUQuota,
	// Memory, IOLimit), when the investigator listed them.
	Members []int
	// AtLimit is the investigator's verdict that the resource held its
	// users back in the window (a memory cgroup that hit its limit and
	// reclaimed, a quota that throttled, busy CPUs with tasks waiting);
	// Level alone may be high without that.
	AtLimit      bool
	Finding      string
	FindingTitle string
	// Remediation is what to do about the resource at its limit, when the
	// investigator knows better than the diagnosis stage.
	Remediation []string
	// LimitText says the limit for people, with where it is set: "1 MiB/s
	// of reads (blkio.throttle.read_bps_device)" ("" when Limit says it).
	LimitText string
}

// Set is every fact of one window, from every investigator.
type Set struct {
	Window      time.Duration
	Resources   map[string]*Resource
	Waits       []Wait
	Holds       []Hold
	Usage       []Usage
	Saturations []Saturation
	// Self is wolf's own process (0: unknown): its threads contending
	// with each other (attaching and detaching its programs) are wolf's
	// own doing, not the host's.
	Self int
}

// Resource adds r (once per key; later calls fill what the first left
// empty) and returns the stored one.
func (s *Set) Resource(r Resource) *Resource {
	if s.Resources == nil {
		s.Resources = map[string]*Resource{}
	}
	old, ok := s.Resources[r.Key]
	if !ok {
		c := r
		s.Resources[r.Key] = &c
		return &c
	}
	if old.Name == "" {
		old.Name = r.Name
	}
	if old.Cgroup == "" {
		old.Cgroup = r.Cgroup
	}
	if old.CgroupID == 0 {
		old.CgroupID = r.CgroupID
	}
	if old.Device == "" {
		old.Device = r.Device
	}
	if old.LockAddr == "" {
		old.LockAddr = r.LockAddr
	}
	if old.MMPID == 0 {
		old.MMPID = r.MMPID
	}
	if len(old.Under) == 0 {
		old.Under = r.Under
	}
	return old
}

// Merge adds every fact of o to s. The window is the longer of the two;
// each use keeps the window it was measured over (Usage.Window).
func (s *Set) Merge(o *Set) {
	if o == nil {
		return
	}
	s.Window = max(s.Window, o.Window)
	if s.Self == 0 {
		s.Self = o.Self
	}
	for _, r := range o.Resources {
		s.Resource(*r)
	}
	s.Waits = append(s.Waits, o.Waits...)
	s.Holds = append(s.Holds, o.Holds...)
	for _, u := range o.Usage {
		if u.Window <= 0 {
			u.Window = o.Window
		}
		s.Usage = append(s.Usage, u)
	}
	s.Saturations = append(s.Saturations, o.Saturations...)
}
