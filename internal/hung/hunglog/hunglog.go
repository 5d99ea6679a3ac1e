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
// Coredumps, kworkers and RCU-tasks stalls get the explanations the
// seed stories earned.
//
// Logs are untrusted input of any size: lines are read with a cap, every
// collection is bounded, and what was cut is counted in Analysis.
package hunglog

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/kstack"
)

// Bounds on what one analysis keeps. A kernel line is at most about 1 KiB
// (printk's record limit), a hung-task storm a few thousand tasks; beyond
// these the input is not a kernel log or is pathological, and memory stays
// bounded regardless.
const (
	MaxLineBytes    = 64 << 10 // longer lines are cut here and counted in LongLines
	MaxReports      = 4096     // distinct hung tasks kept; the rest are counted in ReportsDropped
	MaxFrames       = 128      // frames kept per stack
	MaxHolders      = 4096     // lockdep "locks held by" entries kept
	MaxLocksPerTask = 48       // lockdep held locks kept per task
	MaxOtherTasks   = 4096     // non-D task dumps kept (to find RCU-tasks offenders)
	MaxStoredBytes  = 32 << 20 // frames and lockdep entries kept, all reports together
	maxFrameBytes   = 512      // a kept frame is cut here (decoded frames run to ~300)
	maxNameBytes    = 128      // task, lock and workqueue names are cut here
	maxSubjects     = 24       // victims listed per finding
	maxStreams      = 256      // printk caller ids tracked separately
	maxTextBytes    = 4 << 10  // parsing looks at no more of a line than this
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
	// found in a sysrq-w / sysrq-t dump with no hung-task report.
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
	OwnerStack []string
}

// HeldLocks is one task of a lockdep "Showing all locks held" dump. A task
// blocked acquiring a lock lists it too (lockdep records the acquire before
// the wait), as its last entry.
type HeldLocks struct {
	Comm  string
	PID   int
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
	Holders  []*Owner // other candidates when the log is ambiguous
	LockName string   // lockdep class of the lock waited on, when known
}

// Owner is a task named as holding what a group waits on.
type Owner struct {
	Comm   string
	PID    int
	State  string
	Stack  []string
	Site   *kstack.Site // what the owner itself waits on, when its stack is known
	Source string       // "hung-task blocker line" or "lockdep"
}

// Analysis is everything Analyze found in one log.
type Analysis struct {
	Reports  []Report
	Groups   []Group
	Findings []finding.Finding
	Held     []HeldLocks // lockdep dumps, latest per task
	Lines    int         // lines read

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
// not a kernel log yields an empty analysis.
func Analyze(r io.Reader) (*Analysis, error) {
	p := newParser()
	br := bufio.NewReaderSize(r, MaxLineBytes)
	for {
		raw, long, err := readLine(br)
		if len(raw) > 0 || err == nil {
			p.lines++
			if long {
				p.a.LongLines++
			}
			p.feed(raw)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("hunglog: read line %d: %w", p.lines+1, err)
		}
	}
	p.finish()
	a := p.a
	a.Lines = p.lines
	buildGroups(a, p)
	a.Findings = buildFindings(a, p)
	finding.Sort(a.Findings)
	return a, nil
}

// readLine returns one line without its newline, at most MaxLineBytes of
// it; the rest of a longer line is read and thrown away so that a binary
// file or a giant single line costs no more memory than a normal one.
func readLine(br *bufio.Reader) (line []byte, long bool, err error) {
	b, err := br.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return trimNL(b), false, err
	}
	keep := make([]byte, len(b))
	copy(keep, b)
	for errors.Is(err, bufio.ErrBufferFull) {
		_, err = br.ReadSlice('\n')
	}
	if errors.Is(err, io.EOF) {
		err = nil // the long line was the last; report EOF on the next call
	}
	return keep, true, err
}

func trimNL(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		return b[:n-1]
	}
	return b
}
