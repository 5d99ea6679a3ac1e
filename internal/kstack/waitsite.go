// Package kstack reads a blocked task's kernel stack and says what the
// task waits on: a mutex, an rw-semaphore, an RCU grace period, a FUSE
// daemon, a core dump, I/O.
//
// It exists because the hung-task report names the victim, not the thing
// it waits for: the interesting frames hide under scheduler plumbing,
// unreliable "?" frames and lock slow paths, and the same wait looks
// different on every kernel build (inlined wrappers, clone suffixes,
// tail calls). Classify turns any of those shapes into one Site, and
// Site.Key lets callers put tasks that wait on the same thing together,
// which is how three unrelated-looking stacks in rtnetlink_rcv_msg,
// dev_ethtool and bonding_show_bonds become "3 tasks behind rtnl_mutex".
//
// It is pure string work: the live investigator (BPF stacks, symbolized)
// and the offline log analyzer (dmesg text) both use it.
package kstack

import "strings"

// Kind is the category of thing a task waits on.
type Kind string

// The kinds Classify tells apart.
const (
	Mutex          Kind = "mutex"
	RwsemWrite     Kind = "rwsem-write"
	RwsemRead      Kind = "rwsem-read"
	RTMutex        Kind = "rt-mutex"
	Semaphore      Kind = "semaphore"
	IO             Kind = "io"
	Fuse           Kind = "fuse"
	Coredump       Kind = "coredump"
	RCU            Kind = "rcu"
	Completion     Kind = "completion"
	WorkqueueFlush Kind = "workqueue-flush"
	PageLock       Kind = "page-lock"
	Writeback      Kind = "writeback"
	Freezer        Kind = "freezer" // frozen by the cgroup v1 freezer or suspend (D before 6.1)
	// Journal is a wait for a filesystem journal: a jbd2 transaction to
	// close or commit, journal space, the XFS log.
	Journal Kind = "journal"
	// QueueFreeze is a wait on a frozen block queue: I/O submitters wait
	// in blk_queue_enter while it is frozen, the freezer waits for the
	// I/O in flight to drain (elevator switch, queue limits update,
	// device reset or removal).
	QueueFreeze Kind = "queue-freeze"
	// NFS is a wait for an NFS server or the RPC layer under it.
	NFS   Kind = "nfs"
	Other Kind = "other"
)

// IsLock reports whether the kind is a sleeping lock, i.e. something with
// an owner that could be named.
func (k Kind) IsLock() bool {
	switch k {
	case Mutex, RwsemWrite, RwsemRead, RTMutex, Semaphore:
		return true
	}
	return false
}

// IsStorage reports whether the kind is a wait on storage or on what sits
// right above it (journals, page locks held across reads, writeback): the
// victims share a cause below them rather than a lock among them.
func (k Kind) IsStorage() bool {
	switch k {
	case IO, PageLock, Writeback, Journal, QueueFreeze:
		return true
	}
	return false
}

// Site is what one blocked task waits on, read from its stack.
type Site struct {
	Kind Kind
	// Func is the first meaningful frame: the function that decided to
	// wait, just outside the locking or waiting machinery, as a bare
	// symbol (see FuncName). "" when the stack has nothing but plumbing.
	Func string
	// Frame is Func's frame exactly as it was given.
	Frame string
	// LockFunc is the outermost wait primitive on the stack: the locking
	// call for locks ("down_write", "mutex_lock", "rtnl_lock"), the
	// waiting call otherwise ("synchronize_rcu_tasks", "request_wait_answer").
	LockFunc string
	// Object names what is waited on when it can be named: a kernel-wide
	// lock ("rtnl_mutex", "cgroup_mutex"), a per-object lock class
	// ("mmap_lock", "i_rwsem"), an RCU flavour ("rcu-tasks", "srcu").
	Object string
	// Global is true when Object is a single kernel-wide instance, so that
	// every task waiting on it waits on the very same thing.
	Global bool
	// Inferred is true when Object or Kind was deduced rather than read
	// off a frame: from a known caller whose lock wrapper was inlined or
	// tail-called away, or a coredump wait inlined into do_exit.
	Inferred bool
	// Describe is a short verb phrase for people, to follow a task's name:
	// "waits for rtnl_mutex (rtnl_lock) in rtnetlink_rcv_msg", "is blocked
	// by coredump (coredump_task_exit)", "waits for I/O (io_schedule) in
	// folio_wait_bit_common".
	Describe string
}

// Key is the grouping key: tasks whose sites have the same key wait on the
// same thing as far as the stack can tell.
//
//   - a kernel-wide lock groups by the lock alone: every waiter of
//     rtnl_mutex is behind the same owner, whatever called rtnl_lock;
//   - other locks group by lock class and caller, because two inodes'
//     i_rwsem are different locks and only the caller hints at which;
//   - RCU waits group by flavour (an SRCU domain also by caller);
//   - FUSE, coredump, I/O, page lock, writeback and freezer waits group by
//     kind: they share a cause (the daemon, the dump, the disk);
//   - the rest group by kind and caller.
func (s Site) Key() string {
	switch {
	case s.Kind.IsLock():
		if s.Object != "" {
			if s.Global {
				return "lock:" + s.Object
			}
			return "lock:" + s.Object + ":" + s.Func
		}
		family := string(s.Kind)
		if s.Kind == RwsemRead || s.Kind == RwsemWrite {
			family = "rwsem" // readers and writers of one rwsem meet here
		}
		return family + ":" + s.Func
	case s.Kind == RCU:
		if s.Object == "srcu" {
			return "rcu:srcu:" + s.Func
		}
		return "rcu:" + s.Object
	case s.Kind == Fuse, s.Kind == Coredump, s.Kind == IO, s.Kind == PageLock,
		s.Kind == Writeback, s.Kind == Freezer, s.Kind == Journal, s.Kind == QueueFreeze, s.Kind == NFS:
		return string(s.Kind)
	}
	return string(s.Kind) + ":" + s.Func
}

// frame is one reliable frame: raw text and bare name.
type frame struct{ raw, name string }

// Classify reads a stack, innermost frame first, and returns what the task
// waits on. It never fails: a stack it cannot place is Other, named
// after its first meaningful frame.
func Classify(frames []string) Site {
	fs := make([]frame, 0, len(frames))
	for _, f := range frames {
		if Unreliable(f) {
			continue // a stale return address, not part of the wait
		}
		if n := FuncName(f); n != "" {
			fs = append(fs, frame{raw: strings.TrimSpace(f), name: n})
		}
	}

	var (
		s       Site
		rank    = -1
		family  string
		sawPrim bool
		i       int
	)
	for ; i < len(fs); i++ {
		n := fs[i].name
		p, ok := lookupPrim(n)
		if !ok {
			if plumbing(n) {
				continue
			}
			break
		}
		sawPrim = true
		s.LockFunc = n
		if p.family != "" {
			family = p.family
		}
		switch {
		case p.weak && s.Kind != "":
			// A named wrapper over a slow path we already read: keep the
			// slow path's kind, take the wrapper's name for the object.
		case p.rank >= rank:
			if p.kind != s.Kind {
				s.Object, s.Global = "", false // the object belonged to the old kind
			}
			s.Kind, rank = p.kind, p.rank
		}
		if p.object != "" && (s.Object == "" || (s.Kind == RCU && s.Object == "rcu")) {
			s.Object, s.Global = p.object, p.global
		}
	}
	if i < len(fs) {
		s.Func, s.Frame = fs[i].name, fs[i].raw
	}

	switch {
	case !sawPrim && (s.Func == "do_exit" || s.Func == "exit_mm"):
		// The only direct sleep in do_exit (exit_mm before 5.16) is the
		// coredump wait, coredump_task_exit, inlined: the Cloudflare write-up's
		// "do_exit (linux/kernel/exit.c:433)" case.
		s.Kind, s.LockFunc, s.Inferred = Coredump, "coredump_task_exit", true
	case !sawPrim && s.Func == "jbd2_journal_commit_transaction":
		// The journal thread sleeping right inside the commit: the waits
		// for open handles and for the commit's I/O are inlined there.
		s.Kind, s.LockFunc, s.Inferred = Journal, "jbd2_journal_commit_transaction", true
	case s.Kind == "":
		s.Kind = Other
	}
	if s.Kind.IsLock() && s.Object == "" {
		if c, ok := lookupCallerLock(s.Func, family); ok {
			s.Object, s.Global, s.Inferred = c.object, c.global, true
		}
	}
	if s.Kind == RCU && s.Object == "" {
		s.Object, s.Global = "rcu", true
	}
	if s.Kind != Coredump {
		// The dumping thread itself: whatever it waits on (the disk, a
		// pipe to systemd-coredump), it waits because it dumps core.
		for _, f := range fs {
			if f.name == "do_coredump" || f.name == "vfs_coredump" {
				s.Kind, s.LockFunc, s.Object, s.Global = Coredump, f.name, "", false
				break
			}
		}
	}
	s.Describe = describe(s)
	return s
}

// describe writes the phrase a person reads in a finding.
func describe(s Site) string {
	in := ""
	if s.Func != "" {
		in = " in " + s.Func
	}
	via := ""
	if s.LockFunc != "" {
		via = " (" + s.LockFunc + ")"
	}
	// lock names the lock ("rtnl_mutex", or the generic noun), then the
	// mode and primitive in parentheses: "rw-semaphore (write, down_write)".
	lock := func(noun, mode string) string {
		if s.Object != "" {
			noun = s.Object
		}
		var paren []string
		if mode != "" {
			paren = append(paren, mode)
		}
		if s.LockFunc != "" {
			paren = append(paren, s.LockFunc)
		}
		if len(paren) > 0 {
			noun += " (" + strings.Join(paren, ", ") + ")"
		}
		return "waits for " + noun + in
	}
	switch s.Kind {
	case Mutex:
		return lock("mutex", "")
	case RwsemWrite:
		return lock("rw-semaphore", "write")
	case RwsemRead:
		return lock("rw-semaphore", "read")
	case RTMutex:
		return lock("rt-mutex", "")
	case Semaphore:
		return lock("semaphore", "")
	case Fuse:
		return "waits for a FUSE daemon's reply" + via + in
	case Coredump:
		switch {
		case s.Inferred:
			return "is blocked by coredump (coredump_task_exit, inlined in " + s.Func + ")"
		case s.LockFunc == "do_coredump" || s.LockFunc == "vfs_coredump":
			return "is writing a core dump (" + s.LockFunc + ")" + in
		}
		return "is blocked by coredump" + via
	case RCU:
		return "waits for " + rcuPhrase(s.Object) + via + in
	case IO:
		return "waits for I/O" + via + in
	case PageLock:
		return "waits for a page lock" + via + in
	case Writeback:
		return "waits for page writeback" + via + in
	case Journal:
		return "waits for " + journalPhrase(s.LockFunc) + via + in
	case QueueFreeze:
		switch s.LockFunc {
		case "blk_mq_freeze_queue_wait", "blk_freeze_queue", "blk_mq_freeze_queue", "blk_mq_freeze_queue_nomemsave",
			"blk_mq_freeze_queue_wait_timeout":
			return "freezes a block queue and waits for its I/O in flight to drain" + via + in
		}
		return "waits for a frozen block queue to thaw" + via + in
	case NFS:
		return "waits for the NFS server (RPC)" + via + in
	case Completion:
		return "waits for a completion" + via + in
	case WorkqueueFlush:
		return "waits for queued work to finish" + via + in
	case Freezer:
		return "is frozen by the cgroup freezer or suspend" + via
	}
	if s.LockFunc != "" {
		return "sleeps in a polling loop" + via + in
	}
	if s.Func == "" {
		return "sleeps, with no meaningful frame on its stack"
	}
	return "sleeps in " + s.Func
}

// journalPhrase says which journal wait a primitive is.
func journalPhrase(fn string) string {
	switch fn {
	case "wait_transaction_locked", "wait_transaction_switching":
		return "the journal's running transaction to commit before a new one can start"
	case "jbd2_log_wait_commit", "jbd2_complete_transaction", "jbd2_journal_force_commit", "jbd2_journal_force_commit_nested":
		return "a journal commit"
	case "jbd2_journal_wait_updates":
		return "open journal handles to close before committing"
	case "jbd2_journal_commit_transaction":
		return "its journal commit to progress"
	case "__jbd2_log_wait_for_space", "jbd2_log_do_checkpoint":
		return "journal space (a checkpoint)"
	case "xlog_wait", "xlog_wait_on_iclog", "xlog_grant_head_wait", "xlog_grant_head_check", "xfs_log_force",
		"xfs_log_force_seq", "xfs_log_force_lsn":
		return "the XFS log"
	}
	return "the filesystem journal"
}

func rcuPhrase(object string) string {
	switch object {
	case "rcu-tasks":
		return "an RCU-tasks grace period"
	case "rcu-tasks-trace":
		return "an RCU-tasks-trace grace period"
	case "rcu-tasks-rude":
		return "an RCU-tasks-rude grace period"
	case "srcu":
		return "an SRCU grace period"
	case "rcu-barrier":
		return "pending RCU callbacks"
	}
	return "an RCU grace period"
}
