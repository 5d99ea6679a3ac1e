package io

import (
	"time"

	"github.com/wolf-investigator/wolf/internal/hist"
)

// Snapshot is one window of io, plain data: what Conclude, Histograms and
// Facts read, and what the tests build by hand.
type Snapshot struct {
	Window time.Duration
	// Devices are the disks that completed requests in the window, or had
	// tasks waiting on them, busiest first.
	Devices []*Device
	// Waiters are the processes that waited in the window: for requests,
	// paused by dirty throttling, in fsync, for XFS log space.
	Waiters []*Waiter
	// LongWaits are single waits at least Config.LongWait long, with the
	// waiter's stack and what it says (at most keepLong a window).
	LongWaits []LongWait
	// SlowRequests are single requests at least Config.SlowRequest slow,
	// slowest first.
	SlowRequests []Request
	// Ongoing are tasks still asleep for I/O or in fsync when the window
	// ended, for at least ongoingMin.
	Ongoing []Ongoing
	// Journals are the jbd2 journals that committed (or were committing).
	Journals []*Journal
	// Limits are the I/O limits of the cgroups seen, per device (their
	// own and their ancestors').
	Limits []Limit
	// QoS is writeback throttling and iocost, per device, where active.
	QoS []QoS

	// Waiters are watched only once something calls for them (see
	// probe.arm): WaitersFrom is when, from the window's start (0: all of
	// it); WaitersOff says why they are not watched at all ("" when they
	// are).
	WaitersArmed bool
	WaitersFrom  time.Duration
	WaitersOff   string
	// Throttle says whether wolf can tell requests blk-throttle held
	// (its dispatch function is known).
	Throttle bool
	// CgroupVersion is the I/O controller's hierarchy (1 blkio, 2 io; 0
	// none).
	CgroupVersion int
	// AttrSample is the window's sparsest attribution sampling: one in
	// AttrSample of the requests tasks issued was followed to its issuer
	// (1, or 0 in hand-built snapshots: every one). Per-device and
	// per-cgroup counts, bytes and latencies are every request's.
	AttrSample int
	// AttrDuty, when above 1, is the part of AttrSample taken by running
	// the first sights (insert, issue) one AttrDuty-th of the time.
	AttrDuty int
	// WaitSample is the same for the waiters: one I/O sleep in WaitSample
	// was followed to its wake-up, and counts for WaitSample (waits'
	// counts and sums are estimates, their averages unbiased; a wait still
	// going may be unseen).
	WaitSample int
	// WaitDuty is 1 in how much of the time the waiter programs ran
	// (a disk merely busy: watchArm), 0 when they ran all of it once
	// armed; WaitSample includes it.
	WaitDuty int
	// Lost counts what the programs could not keep (full maps, rings).
	Lost Lost
}

// Lost is what the window could not keep, by cause.
type Lost struct {
	Untracked   uint64 // completions of requests whose issue wolf did not see
	SlotTaken   uint64 // requests whose slot another in-flight request held
	Procs       uint64 // completions not attributed: the per-issuer map was full
	Waits       uint64 // waits not counted: the waiters map was full
	Sleeps      uint64 // I/O sleeps not followed: the sleeps map was full
	SlowLost    uint64 // slow requests the ring had no room for
	LongLost    uint64 // long waits the ring had no room for
	Kept        uint64 // slow requests and long waits received but over the window's bound
	FsyncFull   uint64
	JournalFull uint64
}

// Total is everything lost.
func (l Lost) Total() uint64 {
	return l.Procs + l.Waits + l.Sleeps + l.SlowLost + l.LongLost + l.Kept + l.FsyncFull + l.JournalFull
}

// Device is one disk's window.
type Device struct {
	Name  string // the kernel's name: vda, nvme0n1, loop3
	Major int
	Minor int
	Ops
	// Total is birth to completion, OnDevice issue to completion, of the
	// requests whose birth and issue were seen (the timed ones).
	Total, OnDevice hist.Log2
	// Users are the device's consumers in the window, by cgroup and
	// issuing process, most bytes first.
	Users []*Usage
	// Stat is the kernel's own accounting (/proc/diskstats) over the
	// window; nil when the device was not in it.
	Stat *DiskStat
	// Backing is a loop device's backing file ("" for other devices).
	Backing string
	// Under are the disks its I/O goes on to (a loop device's backing
	// file's disk, a device-mapper device's members).
	Under []string
}

// Ops counts completed requests and their bytes.
type Ops struct {
	Reads, Writes, Other              uint64
	ReadBytes, WriteBytes, OtherBytes uint64
	Throttled, ThrottledBytes         uint64 // held by blk-throttle first
	Timed                             uint64 // with birth and issue seen
	QueuedNs, DeviceNs                uint64 // over the timed ones
	MaxTotalNs                        uint64 // the window's slowest, birth to completion
	MaxDeviceNs                       uint64
}

// Requests is every completed request.
func (o *Ops) Requests() uint64 { return o.Reads + o.Writes + o.Other }

func (o *Ops) add(b *Ops) {
	o.Reads += b.Reads
	o.Writes += b.Writes
	o.Other += b.Other
	o.ReadBytes += b.ReadBytes
	o.WriteBytes += b.WriteBytes
	o.OtherBytes += b.OtherBytes
	o.Throttled += b.Throttled
	o.ThrottledBytes += b.ThrottledBytes
	o.Timed += b.Timed
	o.QueuedNs += b.QueuedNs
	o.DeviceNs += b.DeviceNs
	o.MaxTotalNs = max(o.MaxTotalNs, b.MaxTotalNs)
	o.MaxDeviceNs = max(o.MaxDeviceNs, b.MaxDeviceNs)
}

// Usage is one consumer of a device: a cgroup's requests issued by one
// process (PID 0: issued by a kernel worker on the cgroup's behalf, or
// dispatched by blk-throttle).
type Usage struct {
	Cgroup   string // path in the I/O controller's hierarchy ("" unknown)
	CgroupID uint64
	PID      int
	Comm     string
	Kworker  bool // the issuer was a kernel worker (writeback, a stacked driver)
	// Estimated: its requests and bytes include a share of its cgroup's
	// requests whose issuer was not followed (Snapshot.AttrSample), in
	// proportion to the ones followed; the cgroup's busiest issuer's
	// latencies include the requests not followed.
	Estimated bool
	// Unattributed: the cgroup's requests whose issuer was not followed,
	// none of its requests being followed in the window (PID 0).
	Unattributed bool
	Ops
	Total, OnDevice hist.Log2
}

// DiskStat is a device's /proc/diskstats over the window.
type DiskStat struct {
	BusyPct  float64 // io_ticks: share of the window with a request in flight
	AvgQueue float64 // weighted time in queue over the window: average requests in flight
	InFlight uint64  // at the end of the window
	// NrRequests and QueueDepth are the queue's limits (sysfs), 0 unknown.
	NrRequests int
}

// Wait kinds.
const (
	KindIO     = "io"      // an I/O sleep ended by a request's completion
	KindOther  = "iowait"  // an I/O sleep ended otherwise (a timer, a throttle's wake-up)
	KindDirty  = "dirty"   // paused by balance_dirty_pages
	KindFsync  = "fsync"   // in fsync or fdatasync
	KindXFSLog = "xfs-log" // asleep for XFS log space
)

var kindNames = [...]string{KindIO, KindOther, KindDirty, KindFsync, KindXFSLog}

// Waiter is one process's waits of one kind in the window: for requests
// of one cgroup on one device, throttled or not; paused by dirty
// throttling on a device; in fsync on a device.
type Waiter struct {
	PID     int
	TID     int // the thread that waited longest
	Comm    string
	Threads int    // threads of the process that waited so
	Cgroup  string // the waiter's own I/O cgroup
	Kind    string
	Device  string // the device's name (kind io, dirty, fsync, xfs-log)
	// For kind io: the cgroup the awaited requests were charged to (the
	// waiter's own, or another's: a journal thread waiting for a cgroup's
	// data), and whether blk-throttle held them.
	ReqCgroup   string
	ReqCgroupID uint64
	Throttled   bool
	Count       int
	Total, Max  time.Duration
	// The waits' parts (kind io): before the request existed (Held: in
	// blk-throttle when Throttled), queued in the block layer, on the
	// device.
	Held, Queued, OnDevice time.Duration
	// PerThread are the same waits thread by thread.
	PerThread []ThreadWait
}

// ThreadWait is one thread's part of a Waiter's waits.
type ThreadWait struct {
	TID        int
	Count      int
	Total, Max time.Duration
}

// LongWait is one long wait, with what the waiter's stack says.
type LongWait struct {
	PID, TID  int
	Comm      string
	Kind      string
	Device    string
	ReqCgroup string
	Throttled bool
	Wait      time.Duration
	Held      time.Duration
	Queued    time.Duration
	OnDevice  time.Duration
	Stack     []string // innermost first
	Site      Site
	At        time.Duration // from the window's start
}

// Request is one slow request.
type Request struct {
	Device            string
	Op                string // read, write, other
	Bytes             uint32
	Cgroup            string
	PID               int
	Comm              string
	Kworker           bool
	Throttled         bool
	Total, Queued, On time.Duration
	At                time.Duration // from the window's start
}

// Ongoing is a task still waiting at the end of the window.
type Ongoing struct {
	PID, TID int
	Comm     string
	Kind     string // io (asleep for I/O), dirty, fsync, xfs-log
	Device   string
	For      time.Duration
}

// Journal is one jbd2 journal's commits in the window.
type Journal struct {
	Device                                string
	Commits                               uint64
	SyncCommits                           uint64
	Total, Flushing, Logging, Locked, Max time.Duration
	Committer                             int    // the jbd2 thread (tid)
	CommitterComm                         string // "jbd2/loop0-8"
	InProgress                            time.Duration
	InProgressPhase                       string // "starting", "locked", "flushing", "logging"
}

// Limit is one cgroup's I/O limit on one device.
type Limit struct {
	Cgroup string
	Device string
	// File is where it is set ("blkio.throttle.read_bps_device",
	// "io.max"); Key what ("rbps", "wiops", "target" for io.latency).
	File  string
	Key   string
	Value uint64 // bytes/s, IOs/s, or µs (io.latency)
	// Own says the limit is the cgroup's own; else it is an ancestor's
	// (Cgroup then names the ancestor).
	Own bool
}

// QoS is writeback throttling and iocost on a device in the window.
type QoS struct {
	Device       string
	WBTSteps     uint64 // wbt changed its depth this often
	WBTStep      int    // its latest scale step (> 0: scaled down)
	WBTNormal    uint32 // the depth it then allowed normal writes
	WBTLatEvents uint64 // it saw reads slower than its target
	WBTLat       time.Duration
	IOCostAdj    uint64 // iocost adjusted its rate
	IOCostBusy   int    // its latest busy level (> 0: saturated)
	IOCostRqWait uint32 // the latest share of time requests waited for budget, %
}
