// Package hunglog is the offline half of wolf's hung-task investigator:
// `wolf analyze FILE` hands it a saved kernel log and gets back findings.
//
// A hung-task report names the victim, never the offender: "INFO: task
// ip:22514 blocked for more than 120 seconds" says who suffers, not who
// holds rtnl_mutex. Dozens of such reports with unrelated-looking
// stacks are what an SRE finds in the log at 3 a.m. This package reads
// every report (and sysrq-w dumps, which have no INFO line), classifies
// each stack with kstack, puts the tasks that wait on the same thing in
// one group, and names the owner when the log does: the kernel's own
// "likely owned by task" line (6.15+), or lockdep's "locks held" dump.
// Coredumps, kworkers and RCU-tasks stalls get the explanations the public
// write-ups earned (Cloudflare's "Searching for the cause of hung tasks in
// the Linux kernel", Datadog's "Performance and reliability pitfalls of
// eBPF").
//
// Logs are untrusted input of any size: lines are read with a cap, every
// collection is bounded, and what was cut is counted in Analysis.
package hunglog

import (
	"fmt"
	"io"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/hung/hunglog/logline"
	"github.com/wolf-investigator/wolf/internal/kstack"
)

// Bounds on what one analysis keeps. A kernel line is at most about 1 KiB
// (printk's record limit), a hung-task storm a few thousand tasks; beyond
// these the input is not a kernel log or is pathological, and memory stays
// bounded regardless.
const (
	MaxLineBytes    = logline.DefaultMaxLineBytes // longer lines are cut here and counted in LongLines
	MaxReports      = 4096                        // distinct hung tasks kept; the rest are counted in ReportsDropped
	MaxFrames       = 128                         // frames kept per stack
	MaxHolders      = 4096                        // lockdep "locks held by" entries kept
	MaxLocksPerTask = 48                          // lockdep held locks kept per task
	MaxOtherTasks   = 4096                        // non-D task dumps kept (to find RCU-tasks offenders)
	MaxStoredBytes  = 32 << 20                    // frames and lockdep entries kept, all reports together
	maxFrameBytes   = 512                         // a kept frame is cut here (decoded frames run to ~300)
	maxNameBytes    = 128                         // task, lock and workqueue names are cut here
	maxSubjects     = 24                          // victims listed per finding
	maxStreams      = 256                         // printk caller ids tracked separately
	maxTextBytes    = 4 << 10                     // parsing looks at no more of a line than this
)

// Report is one hung (or sysrq-dumped D-state) task, after merging repeated
// reports of the same task.
type Report struct {
	Comm      string
	PID       int // task->pid as the kernel prints it: a thread id
	TGID      int // 0 when the kernel did not print tgid:
	PPID      int
	State     string // "D"
	BlockedS  int    // from "blocked for more than N seconds"; 0 for sysrq dumps
	Kernel    string // release from the taint line, e.g. "6.6.39-cloudflare-2024.7.3"
	Tainted   string // "Not tainted" or "Tainted: G O"
	Workqueue string // kworkers: "xfs-sync/dm-6"
	WorkFunc  string // kworkers: "xfs_log_worker"
	TaskFlags string // task_flags:0x… as printed (6.13+)
	// Coredump is set by the kernel's "Blocked by coredump." line
	// (PF_POSTCOREDUMP): the task waits for its process's core dump.
	Coredump bool
	// Blocker is the kernel's guess at who holds the lock the task waits
	// on (CONFIG_DETECT_HUNG_TASK_BLOCKER, 6.15+), nil when not printed.
	Blocker *Blocker
	Stack   []string // innermost first, as printed, "?" frames included
	Site    kstack.Site
	// Source is "hung-task" for khungtaskd reports, "sysrq" for a D task
	// found in a task dump (sysrq-w, sysrq-t, an old kernel's dump after
	// its reports) with no hung-task report, "blocker line" for a task the
	// log names only in a blocker line.
	Source    string
	FirstLine int    // 1-based line of the report's first line
	Stamp     string // timestamp of that line as written, "" when none
	LastStamp string // timestamp of the latest report of this task
	Reports   int    // how many times the log reports this task
	Truncated bool   // the stack was cut off (log ends, frame cap, no </TASK>)
}

// Blocker is the kernel's hung-task blocker line: "INFO: task A:1 is
// blocked on a mutex likely owned by task B:2." and its variants.
type Blocker struct {
	Lock       string // "mutex", "semaphore", "rw-semaphore"
	As         string // rw-semaphore: "reader" or "writer", the victim's side
	OwnerComm  string
	OwnerPID   int
	OwnerAs    string // rw-semaphore: how the owner holds it
	NotFound   bool   // "… but the owner is not found."
	OwnerState string // from the owner's dump that follows, when printed
	OwnerTGID  int    // likewise (6.6+ task lines print tgid)
	OwnerStack []string
}

// HeldLocks is one task of a lockdep "Showing all locks held" dump. A task
// blocked acquiring a lock lists it too (lockdep records the acquire before
// the wait), as its last entry.
type HeldLocks struct {
	Comm string
	PID  int
	// Count is the number the "N locks held by" line gives. Lockdep does
	// not list the locks of a task that is running on another CPU, so a
	// Count above len(Locks) means the list was left out, not that the
	// task holds nothing.
	Count int
	Locks []HeldLock
}

// HeldLock is one "#N: ffff… (name){…}, at: func+0x…" entry.
type HeldLock struct {
	Addr string // lock address, "" on old kernels that do not print it
	Name string // lockdep class, e.g. "rtnl_mutex", "&sb->s_type->i_mutex_key#16"
	At   string // bare function that took it, e.g. "rtnl_lock"
}

// Group is a set of reports that wait on the same thing.
type Group struct {
	Key      string
	Site     kstack.Site // the first victim's site
	Victims  []*Report
	Owner    *Owner   // who holds what they wait on, when the log says
	Holders  []*Owner // other holders (readers), or candidates when the log is ambiguous
	LockName string   // lockdep class of the lock waited on, when known
	// Chain follows the owner when it is itself blocked: the first link
	// is this group's owner, each next one the owner of what the previous
	// waits for. Deadlock is set when the chain comes back to a victim.
	Chain    []ChainLink
	Deadlock bool
	lockID   string // the lock lockdep shows the victims acquiring
}

// ChainLink is one step of a wait chain: Holder holds Lock.
type ChainLink struct {
	Holder *Owner
	Lock   string
	group  *Group
}

// Owner is a task named as holding what a group waits on.
type Owner struct {
	Comm   string
	PID    int // the id the kernel printed: a thread id
	TGID   int // its process, when the log says; 0 otherwise
	State  string
	Stack  []string
	Site   *kstack.Site // what the owner itself waits on, when its stack is known
	Source string       // "the kernel's hung-task blocker report" or "lockdep (…)"
	// Certain is false for a lockdep candidate whose own state the log
	// does not show: it lists the lock, but may be waiting for it too.
	Certain bool
	hung    bool // the owner is itself a blocked task of the log
}

// Analysis is everything Analyze found in one log.
type Analysis struct {
	Reports  []Report
	Groups   []Group
	Findings []finding.Finding
	Held     []HeldLocks // lockdep dumps, latest per task
	Lines    int         // physical lines read
	// BytesRead is how much of the input was read; Cut says why reading
	// stopped before its end ("" when it did not), Binary that the input
	// was not text at all.
	BytesRead int64
	Cut       string
	Binary    bool
	Host      string // the host name the log's syslog lines carry, "" when none
	// Events are the other kernel-log events that may explain a hang
	// (device timeouts, I/O errors, lockups, stalls, OOM kills).
	Events []Event

	Kernel         string // the kernel release the reports name
	ReportsDropped int    // reports not kept because MaxReports was reached
	LongLines      int    // lines longer than MaxLineBytes (cut)
	TruncatedStack int    // reports whose stack was cut off
	MemoryCapHit   bool   // MaxStoredBytes was reached: later stacks were not kept
	Suppressed     bool   // the kernel said "Future hung task reports are suppressed"
	SysrqDumps     int    // "sysrq: Show Blocked State" / "Show State" dumps seen
	RCUStalls      int    // RCU CPU/tasks stall warnings seen
	RCUTasksStalls int    // of which about an RCU-tasks flavour
}

// Analyze reads a kernel log and returns the hung-task reports in it,
// grouped, with findings. It fails only when reading fails; input that is
// not a kernel log yields an empty analysis, and input beyond the limits of
// package logline is left unread and said so in Analysis.Cut.
func Analyze(r io.Reader) (*Analysis, error) {
	return AnalyzeLimited(r, logline.Limits{})
}

// AnalyzeLimited is Analyze with explicit input limits.
func AnalyzeLimited(r io.Reader, lim logline.Limits) (*Analysis, error) {
	p := newParser()
	lr := logline.NewReader(r, lim)
	for {
		l, ok := lr.Next()
		if !ok {
			break
		}
		p.feed(l)
	}
	if err := lr.Err(); err != nil {
		return nil, fmt.Errorf("hunglog: %w", err)
	}
	st := lr.Stats()
	p.finish()
	a := p.a
	a.Lines, a.LongLines, a.Cut, a.Binary, a.BytesRead = st.Lines, st.LongLines, st.Cut, st.Binary, st.Bytes
	buildGroups(a, p)
	a.Findings = buildFindings(a, p)
	finding.Sort(a.Findings)
	return a, nil
}
