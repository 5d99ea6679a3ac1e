package hung

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
	"github.com/wolf-investigator/wolf/internal/kstack"
)

// Proc is a process found outside the BPF records (a FUSE daemon).
type Proc struct {
	PID  int
	Comm string
}

// Snapshot is everything the analysis needs, gathered by Run (or built by
// tests): the blocked tasks, the owners followed, khungtaskd's reports.
type Snapshot struct {
	Victims   []*Task       // tasks in D at the last scan, blocked >= Threshold
	Recovered []*Task       // blocked >= Threshold earlier in the window, running again by its end
	Owners    map[int]*Task // lock owners fetched by tid, any state
	Hangs     []hangReport  // khungtaskd reports during the window
	// FuseDaemons lists processes holding /dev/fuse open; called only when a
	// chain ends at a FUSE request.
	FuseDaemons func() []Proc
	// Comm looks up a task's name when no record has it (may return "").
	Comm        func(tid int) string
	Threshold   time.Duration
	HungTimeout time.Duration // kernel.hung_task_timeout_secs; 0 if off or unknown
	CorePattern string        // kernel.core_pattern, for coredump findings
	// Fuse is what FUSE daemons owe, read from their /dev/fuse; FuseExact
	// says it was read (else FuseDaemons, by open file, is all there is).
	Fuse      []FuseReq
	FuseExact bool
	// FirstSeen is each task's first record in the window: with its last,
	// where its time went meanwhile.
	FirstSeen map[int]*Task
	// Ended are lock waits that began before wolf attached and ended in
	// the window (any length; Blocked the longest seen, a lower bound),
	// and EndedOwners their locks' owners as the last walk that found
	// them waiting saw them.
	Ended       []*Task
	EndedOwners map[int]*Task
	// EndedFuse is what FUSE daemons owed when the walks last saw an
	// ended wait's owner asleep in FUSE (nil: not read).
	EndedFuse []FuseReq
}

// group is the victims that wait on one thing.
type group struct {
	key     string
	kind    string // lock, coredump, kworker, fuse, rcu, io, site
	lock    *Lock
	site    kstack.Site
	victims []*Task
}

const maxHops = 4

// Conclude turns a snapshot into findings: one per thing the victims wait
// on, the offender named when it can be known, plus tasks that recovered.
func Conclude(s *Snapshot) []finding.Finding {
	fs, _ := ConcludeFacts(s)
	return fs
}

// groupVictims groups victims by what they wait on; fuseReq says whether
// a task has a request a FUSE daemon still owes (a task asleep on a folio
// its own FUSE read is filling waits for the daemon, not for a disk).
func groupVictims(victims []*Task, fuseReq func(tid int) bool) []*group {
	byKey := map[string]*group{}
	var order []*group
	for _, t := range victims {
		g := &group{site: kstack.Classify(t.Stack)}
		switch {
		case t.Lock != nil:
			g.kind, g.key, g.lock = "lock", fmt.Sprintf("lock:%x", t.Lock.Addr), t.Lock
		case fuseReq != nil && fuseReq(t.TID) && fuseWait(t):
			g.kind, g.key = "fuse", "fuse"
		case t.Flags&pfPostCoredump != 0 || g.site.Kind == kstack.Coredump:
			g.kind, g.key = "coredump", fmt.Sprintf("coredump:%d", t.TGID)
		case t.Flags&pfWQWorker != 0 && t.WQFunc != "":
			g.kind, g.key = "kworker", "kworker:"+t.WQFunc+":"+g.site.Key()
		case g.site.Kind == kstack.Fuse:
			g.kind, g.key = "fuse", "fuse"
		case g.site.Kind == kstack.RCU:
			g.kind, g.key = "rcu", "rcu:"+g.site.Key()
		case g.site.Kind.IsStorage():
			g.kind, g.key = "io", "io:"+g.site.Key()
		default:
			g.kind, g.key = "site", "site:"+g.site.Key()
		}
		if have, ok := byKey[g.key]; ok {
			have.victims = append(have.victims, t)
			continue
		}
		g.victims = []*Task{t}
		byKey[g.key] = g
		order = append(order, g)
	}
	for _, g := range order {
		sort.Slice(g.victims, func(i, j int) bool { return g.victims[i].Blocked > g.victims[j].Blocked })
	}
	return order
}

// hop is one link of a wait chain: a task and what it is doing.
type hop struct {
	task  *Task  // nil for a process known only by pid (a FUSE daemon)
	proc  Proc   // set when task is nil
	what  string // "holds rw-semaphore ffff…", "FUSE daemon"
	doing string // "sleeping (S) in request_wait_answer: waits for a FUSE daemon's reply"
	// held is the lock this hop's task holds (nil for a daemon); req the
	// FUSE request it waits for, read from the daemon's /dev/fuse.
	held *Lock
	req  *FuseReq
}

func (h hop) label() string {
	if h.task != nil {
		return h.task.Label()
	}
	return taskLabel(h.proc.Comm, h.proc.PID, h.proc.PID)
}

// chain follows owners: the lock's owner, what it waits on, that thing's
// owner, up to maxHops. It reports a cycle (a deadlock) when it meets a
// task twice.
func (s *Snapshot) chain(start *Lock) (hops []hop, deadlock bool) {
	seen := map[int]bool{}
	lock := s.inferReader(start)
	for i := 0; i < maxHops && lock != nil && lock.Owner != OwnerNone; i++ {
		tid := lock.OwnerTID
		if seen[tid] {
			return hops, true
		}
		seen[tid] = true
		o := s.Owners[tid]
		if o == nil {
			// The owner exited or was not fetched: say what the lock word said.
			o = &Task{TID: tid, TGID: lock.OwnerTGID, Comm: lock.OwnerComm, State: ^uint32(0)}
		}
		h := hop{task: o, what: "holds " + lock.Describe(), held: lock}
		if lock.Owner == OwnerReaders {
			h.what = fmt.Sprintf("last reader of %s (%d readers hold it)", lock.Describe(), lock.Readers)
		}
		if lock.Inferred {
			h.what = fmt.Sprintf("likely holds %s for reading (asleep inside its read section; the lock names only its latest reader, which has gone)", lock.Describe())
		}
		h.doing = describeTaskWait(o)
		if o.Lock != nil && o.Lock.Owner != OwnerNone {
			hops = append(hops, h)
			lock = o.Lock
			continue
		}
		if req := requestOf(s.Fuse, o.TID); req != nil && fuseWait(o) {
			// Its own request, found where the daemon keeps what it owes.
			h.req = req
			h.doing += "; " + req.describe()
			hops = append(hops, h, hop{proc: Proc{PID: req.DaemonPID, Comm: req.DaemonComm}, what: "FUSE daemon",
				doing: fmt.Sprintf("has not answered its %s request #%d", req.OpName(), req.Unique), req: req})
			break
		}
		hops = append(hops, h)
		if site := kstack.Classify(o.Stack); site.Kind == kstack.Fuse && s.FuseDaemons != nil {
			for _, d := range s.FuseDaemons() {
				hops = append(hops, hop{proc: d, what: "FUSE daemon", doing: "has not answered the request"})
			}
		}
		break
	}
	return hops, false
}

// readSection are the frames under which a task holds its process's
// mmap_lock for reading while it may sleep: a fault on its own mapping, or
// an access to it through /proc/PID/mem or ptrace.
var readSection = []string{"__access_remote_vm", "access_remote_vm", "get_user_pages_remote", "lock_mm_and_find_vma", "do_user_addr_fault"}

// inferReader: a reader-held mmap_lock records only its latest reader, and
// a short-lived one (a ps or pgrep reading /proc/PID/cmdline) that took
// and dropped it before the writer queued leaves a pointer to a task that
// is gone, so the owner cannot be decoded. The reader that still holds it
// is then most likely a thread of the lock's own process asleep inside its
// read section, not waiting for the lock itself: when exactly one such
// thread is among the blocked tasks, it is named, as inferred.
func (s *Snapshot) inferReader(l *Lock) *Lock {
	if l == nil || l.MMPID == 0 || (l.Owner != OwnerNone && s.Owners[l.OwnerTID] != nil) {
		return l
	}
	if l.Owner != OwnerNone && l.Owner != OwnerReaders {
		return l
	}
	var found *Task
	for _, t := range s.Victims {
		if t.TGID != l.MMPID || t.MMLockAddr != l.Addr || (t.Lock != nil && t.Lock.Addr == l.Addr) {
			continue
		}
		if !slices.ContainsFunc(t.Stack, func(f string) bool { return slices.Contains(readSection, kstack.Func(f)) }) {
			continue
		}
		if found != nil {
			return l // two candidates: no guess
		}
		found = t
	}
	if found == nil {
		return l
	}
	c := *l
	c.Owner, c.OwnerTID, c.OwnerTGID, c.OwnerComm, c.Inferred = OwnerReaders, found.TID, found.TGID, found.Comm, true
	if s.Owners == nil {
		s.Owners = map[int]*Task{}
	}
	if s.Owners[found.TID] == nil {
		s.Owners[found.TID] = found
	}
	return &c
}

func describeTaskWait(t *Task) string {
	if t.State == ^uint32(0) {
		return "state unknown (it did not show up in the task walk; it may have exited)"
	}
	st := t.StateLetter()
	if st == "R" {
		return "running (R): it holds the lock while on CPU or runnable"
	}
	site := kstack.Classify(t.Stack)
	var b strings.Builder
	fmt.Fprintf(&b, "%s", stateWord(st))
	if t.Lock != nil {
		fmt.Fprintf(&b, ", waiting for %s", t.Lock.Describe())
	}
	if site.Func != "" || site.Describe != "" {
		if site.Describe != "" {
			fmt.Fprintf(&b, ": %s", site.Describe)
		} else {
			fmt.Fprintf(&b, " in %s", site.Func)
		}
	}
	return b.String()
}

func stateWord(letter string) string {
	switch letter {
	case "D":
		return "blocked (D)"
	case "S":
		return "sleeping (S)"
	case "T", "t":
		return "stopped (" + letter + ")"
	}
	return "in state " + letter
}

func (s *Snapshot) groupFinding(g *group) finding.Finding {
	maxB, minB := g.victims[0].Blocked, g.victims[len(g.victims)-1].Blocked
	n := len(g.victims)
	f := finding.Finding{
		Investigator: "hung",
		Severity:     finding.Warning,
		Evidence: map[string]any{
			"victims":       n,
			"blocked_s":     human.Round(maxB.Seconds(), 1),
			"blocked_min_s": human.Round(minB.Seconds(), 1),
			"since_exact":   g.victims[0].BlockedExact,
			"wait_site":     g.site.Func,
		},
		References: []string{"https://blog.cloudflare.com/searching-for-the-cause-of-hung-tasks-in-the-linux-kernel/"},
	}
	if s.HungTimeout > 0 {
		f.Evidence["hung_task_timeout_s"] = s.HungTimeout.Seconds()
		if maxB >= s.HungTimeout {
			f.Severity = finding.Critical
		}
	}
	if k := s.khungtaskdReported(g.victims); k > 0 {
		f.Evidence["khungtaskd_reports"] = k
	}
	tasks := human.Plural(n, "task", "tasks")
	var victimSubjects []finding.Subject
	for _, v := range g.victims {
		sub := subject(finding.RoleVictim, v, fmt.Sprintf("%s for %s in %s", v.StateLetter(), human.Duration(v.Blocked), kstack.Classify(v.Stack).Func))
		sub.Evidence = s.taskEvidence(v)
		sub.Evidence["blocked_s"] = human.Round(v.Blocked.Seconds(), 1)
		if v.Lock != nil {
			sub.Lock, sub.LockAddr = v.Lock.Describe(), fmt.Sprintf("0x%x", v.Lock.Addr)
			if m := v.Lock.Kind.Mode(); m != "" {
				sub.Evidence["mode"] = m
			}
			if v.BehindWriter != 0 {
				sub.Evidence["behind_writer_tid"] = v.BehindWriter
				sub.Detail += fmt.Sprintf(", queued behind writer tid %d", v.BehindWriter)
			}
			if v.Lock.MMPID != 0 {
				sub.Evidence["mm_pid"] = v.Lock.MMPID
			}
		}
		victimSubjects = append(victimSubjects, sub)
	}

	switch g.kind {
	case "lock":
		s.lockFinding(&f, g, tasks, maxB)
	case "coredump":
		f.ID = "hung.coredump"
		v := g.victims[0]
		dumper := "another thread"
		if v.DumperTID != 0 {
			dumper = fmt.Sprintf("thread %d", v.DumperTID)
			sub := finding.Subject{Role: finding.RoleOffender, PID: v.TGID, TID: v.DumperTID, Comm: s.comm(v.DumperTID), Detail: "writing the core dump"}
			if d := s.Owners[v.DumperTID]; d != nil {
				dumper = d.Label()
				sub.State, sub.Stack = d.StateLetter(), d.Stack
				sub.Detail = "writing the core dump, " + describeTaskWait(d)
			} else if sub.Comm != "" {
				dumper = taskLabel(sub.Comm, v.TGID, v.DumperTID)
			}
			f.Subjects = append(f.Subjects, sub)
			f.Evidence["dumper_tid"] = v.DumperTID
		}
		if s.CorePattern != "" {
			f.Evidence["core_pattern"] = s.CorePattern
		}
		f.Title = fmt.Sprintf("Blocked by coredump: %s of %s blocked %s while %s writes the core dump", human.Plural(n, "thread", "threads"), taskLabel(v.Comm, v.TGID, v.TGID), human.Duration(maxB), dumper)
		f.Summary = "The process crashed and the kernel is dumping its memory; its other threads wait until the dump is written. The application is the victim here, not the cause of the hang."
		if strings.HasPrefix(s.CorePattern, "|") {
			f.Summary += fmt.Sprintf(" The dump goes to a pipe (%s): if that handler reads slowly or not at all, the dump, and the threads, wait for it.", s.CorePattern)
		}
		f.Mechanism = "On a fatal signal with core dumps enabled, every other thread of the process parks in coredump_task_exit (PF_POSTCOREDUMP) while one thread writes the memory image to core_pattern; the bigger the process and the slower the target, the longer they wait. Since Linux 6.12 they park in TASK_IDLE (state I), so khungtaskd no longer reports them."
		f.Remediation = []string{
			"Check kernel.core_pattern and where the dump goes (a pipe to systemd-coredump or another handler, or a file on a slow disk); a pipe handler that does not read stalls the dump.",
			"Limit dump size for huge processes (ulimit -c, systemd-coredump ProcessSizeMax=) or disable dumps where they are not read.",
			"Find why the process crashed (its own logs, the signal in the coredump).",
		}
	case "kworker":
		v := g.victims[0]
		f.ID = "hung.kworker"
		wq := v.WQName
		if wq == "" {
			wq = "unknown workqueue"
		}
		f.Title = fmt.Sprintf("%s hung %s running %s (workqueue %s)", joinLabels(g.victims, 2), human.Duration(maxB), v.WQFunc, wq)
		f.Summary = fmt.Sprintf("Kernel worker threads are blocked in %s while running the work item %s from workqueue %s: the subsystem behind that function is slowed down or stuck.", g.site.Func, v.WQFunc, wq)
		f.Mechanism = "A kworker executes deferred work for a subsystem; the work function's name says which. When it blocks, every later item on that workqueue waits too."
		f.Evidence["work_func"] = v.WQFunc
		f.Evidence["workqueue"] = wq
		f.Remediation = []string{
			fmt.Sprintf("Look at the subsystem that owns %s (for xfs_log_worker: the filesystem and the device under it; check its latency and errors).", v.WQFunc),
			"For dm-crypt devices, consider the no_read_workqueue/no_write_workqueue options (the XFS case of Cloudflare's \"Searching for the cause of hung tasks in the Linux kernel\").",
		}
	case "fuse":
		f.ID = "hung.fuse"
		f.Severity = finding.Critical
		f.Title = fmt.Sprintf("%s hung %s waiting for a FUSE daemon's reply", tasks, human.Duration(maxB))
		f.Summary = "The tasks sent requests to a FUSE filesystem and its user-space daemon has not answered."
		f.Mechanism = "A FUSE request parks the caller in request_wait_answer until the daemon writes the reply to /dev/fuse; a stuck or slow daemon stalls every caller, and the locks they hold."
		s.addFuseDaemons(&f, g.victims)
		f.Remediation = fuseRemedies()
	case "rcu":
		f.ID = "hung.rcu"
		f.Title = fmt.Sprintf("%s hung %s waiting for an RCU grace period (%s)", tasks, human.Duration(maxB), g.site.Func)
		f.Summary = "The tasks wait for an RCU grace period that does not end. With synchronize_rcu_tasks, a task that never voluntarily switches (or one stuck in late do_exit) holds it back."
		f.Mechanism = "RCU-tasks waits until every task has voluntarily context-switched, and for exiting tasks through an SRCU section; detaching BPF trampolines (fentry/fexit) waits for it. Kernels before the 2024 fix \"rcu-tasks: Maintain lists to eliminate RCU-tasks/do_exit() deadlocks\" could deadlock against zap_pid_ns_processes."
		f.Remediation = []string{
			"Find the task holding the grace period back: echo t > /proc/sysrq-trigger and look for tasks in do_exit/zap_pid_ns_processes.",
			"If BPF fentry/fexit programs are being detached, upgrade to a kernel with the RCU-tasks do_exit fix (6.9+) or use tracepoints.",
		}
	case "io":
		f.ID = "hung.io"
		f.Title = fmt.Sprintf("%s blocked %s in I/O wait: %s", tasks, human.Duration(maxB), g.site.Describe)
		f.Summary = "The tasks wait for block I/O or page I/O to complete: the storage under them is slow, stuck or saturated."
		f.Mechanism = "io_schedule puts a task in D until the device completes its request; a slow or failing device, or a saturated queue, shows up as tasks hung in I/O wait."
		f.Remediation = []string{
			"Check the devices: iostat -x 1 (await, %util), /proc/pressure/io, and the kernel log for I/O errors or resets.",
		}
	default:
		f.ID = "hung.wait-site"
		f.Title = fmt.Sprintf("%s blocked %s in %s", tasks, human.Duration(maxB), g.site.Func)
		f.Summary = fmt.Sprintf("The tasks sleep uninterruptibly in %s (%s); wolf could not identify a lock or owner for this wait.", g.site.Func, g.site.Describe)
		if l := s.lockAt(g.site.Func); l != nil {
			f.Summary += fmt.Sprintf(" Other tasks blocked at the same place wait on %s owned by %s: these very likely do too. This kernel records which lock a task waits on only for waits that began while wolf watched (no task->blocker before 6.14).", l.Describe(), taskLabel(l.OwnerComm, l.OwnerTGID, l.OwnerTID))
			f.Evidence["likely_lock_addr"] = fmt.Sprintf("0x%x", l.Addr)
			f.Evidence["likely_owner_pid"] = l.OwnerTGID
		}
		f.Mechanism = "D-state sleeps end only when the event the task waits for happens; the first meaningful frame of its kernel stack names what that is."
		f.Remediation = []string{
			fmt.Sprintf("Read the full stacks below and the code around %s to see what wakes it.", g.site.Func),
		}
	}
	f.Subjects = append(f.Subjects, victimSubjects...)
	return f
}

// lockAt finds a victim of a known, owned lock whose wait site is fn.
func (s *Snapshot) lockAt(fn string) *Lock {
	for _, v := range s.Victims {
		if v.Lock != nil && v.Lock.Owner != OwnerNone && kstack.Classify(v.Stack).Func == fn {
			return v.Lock
		}
	}
	return nil
}

func (s *Snapshot) lockFinding(f *finding.Finding, g *group, tasks string, maxB time.Duration) {
	l := g.lock
	f.Evidence["lock_addr"] = fmt.Sprintf("0x%x", l.Addr)
	f.Evidence["lock_type"] = l.Kind.Noun()
	if m := l.Kind.Mode(); m != "" {
		f.Evidence["lock_mode"] = m
	}
	f.Evidence["lock_source"] = l.Source.String()
	if l.MMPID != 0 {
		// A process's mmap_lock: the key the diagnosis stage joins the
		// locks investigator's holds and the cgroups on.
		f.Evidence["mm_pid"] = l.MMPID
		f.Evidence["lock"] = l.Describe()
	}
	if l.Owner == OwnerReaders {
		f.Evidence["owner_likely"] = true // the owner word names only the latest reader
	}
	// Without CONFIG_KALLSYMS_ALL no data symbol names a global lock, but
	// the waiters' frames can (rtnl_lock -> rtnl_mutex).
	if l.Name == "" && g.site.Global && g.site.Object != "" {
		l.Name = g.site.Object
		f.Evidence["lock_name_from"] = "waiters' stacks (" + g.site.LockFunc + ")"
	}
	where := ""
	if l.Name == "" && g.site.Func != "" {
		where = " in " + g.site.Func
	}
	lockText := l.Describe() + where
	f.Mechanism = fmt.Sprintf("The victims sleep uninterruptibly until the %s is released, and only its owner can release it. Whatever the owner waits for, every victim waits for too.", l.Kind.Noun())

	hops, deadlock := s.chain(l)
	if len(hops) == 0 {
		f.ID = "hung.lock"
		f.Severity = max(f.Severity, finding.Warning)
		why := "its owner could not be decoded"
		if l.Owner == OwnerNone && l.Kind == LockSemaphore {
			why = "semaphores record no owner on this kernel"
		}
		f.Title = fmt.Sprintf("%s hung %s on %s; %s", tasks, human.Duration(maxB), lockText, why)
		f.Summary = fmt.Sprintf("%s wait for %s (%s).", joinLabels(g.victims, 3), l.Describe(), l.Source)
		f.Remediation = []string{"Look for the holder among tasks running or sleeping with this lock in their stacks: echo w > /proc/sysrq-trigger, or `wolf locks`."}
		return
	}
	f.ID = "hung.lock-owner"
	f.Severity = finding.Critical
	off := hops[0]
	f.Subjects = append(f.Subjects, s.withEvidence(subjectFromHop(finding.RoleOffender, off), off))
	var chainText []string
	for i, h := range hops {
		chainText = append(chainText, fmt.Sprintf("%s %s, %s", h.label(), h.what, h.doing))
		if i > 0 {
			f.Subjects = append(f.Subjects, s.withEvidence(subjectFromHop(finding.RoleOwner, h), h))
		}
	}
	f.Evidence["chain"] = chainText
	if off.task != nil {
		f.Evidence["owner_state"] = off.task.StateLetter()
		f.Evidence["owner_pid"] = off.task.TGID
		f.Evidence["owner_tid"] = off.task.TID
	}
	readers := ""
	if l.Owner == OwnerReaders {
		readers = " (reader-owned: the named task is only the latest reader)"
	}
	title := fmt.Sprintf("%s hung %s on %s; owner %s%s", tasks, human.Duration(maxB), lockText, off.label(), readers)
	last := hops[len(hops)-1]
	switch {
	case deadlock:
		f.ID = "hung.deadlock"
		title += " — a deadlock: the chain of owners leads back to a waiter"
	case len(hops) > 1 && last.task == nil:
		title += fmt.Sprintf(" is itself waiting for %s %s", last.what, last.label())
	case len(hops) > 1:
		title += fmt.Sprintf(" is itself waiting for %s, who is %s", last.label(), last.doing)
	default:
		title += " is " + off.doing
	}
	f.Title = title
	f.Summary = fmt.Sprintf("%s wait for %s. Its owner %s is %s.", joinLabels(g.victims, 3), l.Describe(), off.label(), off.doing)
	f.Remediation = []string{
		fmt.Sprintf("Look at what the owner is doing: cat /proc/%d/task/%d/stack (the stack is below).", ownerPID(off), ownerTID(off)),
	}
	if last.task == nil && last.what == "FUSE daemon" {
		f.Remediation = append(fuseRemedies(), f.Remediation...)
	}
	if deadlock {
		f.Remediation = append([]string{"A lock-order deadlock does not resolve by itself: the tasks in the chain must be killed (if killable) or the host rebooted; report the stacks upstream."}, f.Remediation...)
	}
}

func fuseRemedies() []string {
	return []string{
		"Make the FUSE daemon answer (restart or debug it); its pending requests are in /sys/fs/fuse/connections/*/waiting.",
		"To unblock the host now: echo 1 > /sys/fs/fuse/connections/<N>/abort fails the pending requests (the mount then returns ENOTCONN); umount -l detaches it.",
	}
}

func (s *Snapshot) addFuseDaemons(f *finding.Finding, victims []*Task) {
	// The daemons that owe these victims a reply, when their /dev/fuse
	// says so; else every process holding /dev/fuse open.
	seen := map[int]bool{}
	for _, sub := range victims {
		if req := requestOf(s.Fuse, sub.TID); req != nil && !seen[req.DaemonPID] {
			seen[req.DaemonPID] = true
			f.Subjects = append(f.Subjects, finding.Subject{Role: finding.RoleOffender, PID: req.DaemonPID, TID: req.DaemonPID, Comm: req.DaemonComm,
				Detail:   fmt.Sprintf("FUSE daemon: owes %s (tid %d) the reply to its %s request #%d", sub.Comm, sub.TID, req.OpName(), req.Unique),
				Evidence: map[string]any{"fuse_daemon": true, "fuse_conn": req.ConnName()}})
		}
	}
	if len(seen) > 0 || s.FuseDaemons == nil {
		return
	}
	for _, d := range s.FuseDaemons() {
		f.Subjects = append(f.Subjects, finding.Subject{Role: finding.RoleOffender, PID: d.PID, TID: d.PID, Comm: d.Comm, Detail: "FUSE daemon (holds /dev/fuse open)"})
	}
}

func (s *Snapshot) recoveredFinding() (finding.Finding, bool) {
	if len(s.Recovered) == 0 {
		return finding.Finding{}, false
	}
	longest := s.Recovered[0]
	for _, t := range s.Recovered {
		if t.Blocked > longest.Blocked {
			longest = t
		}
	}
	f := finding.Finding{
		ID:           "hung.recovered",
		Investigator: "hung",
		Severity:     finding.Info,
		Title:        fmt.Sprintf("%s blocked over %s during the window, then ran again (longest %s: %s)", human.Plural(len(s.Recovered), "task was", "tasks were"), human.Duration(s.Threshold), human.Duration(longest.Blocked), longest.Label()),
		Summary:      "Long uninterruptible sleeps that ended by themselves: a slow resource rather than a hang, worth watching if it repeats.",
		Evidence:     map[string]any{"tasks": len(s.Recovered), "blocked_s": human.Round(longest.Blocked.Seconds(), 1)},
	}
	for _, t := range s.Recovered {
		f.Subjects = append(f.Subjects, subject(finding.RoleTask, t, fmt.Sprintf("was D for %s in %s", human.Duration(t.Blocked), kstack.Classify(t.Stack).Func)))
	}
	return f, true
}

func (s *Snapshot) khungtaskdReported(victims []*Task) int {
	n := 0
	for _, h := range s.Hangs {
		for _, v := range victims {
			if v.TID == h.TID {
				n++
				break
			}
		}
	}
	return n
}

// unmatchedHangs covers khungtaskd reports about tasks wolf no longer sees
// blocked: they happened in the window and belong in the report.
func (s *Snapshot) unmatchedHangs() (finding.Finding, bool) {
	known := map[int]bool{}
	for _, v := range s.Victims {
		known[v.TID] = true
	}
	var left []hangReport
	for _, h := range s.Hangs {
		if !known[h.TID] {
			left = append(left, h)
		}
	}
	if len(left) == 0 {
		return finding.Finding{}, false
	}
	f := finding.Finding{
		ID:           "hung.khungtaskd",
		Investigator: "hung",
		Severity:     finding.Warning,
		Title:        fmt.Sprintf("khungtaskd reported %s during the window", human.Plural(len(left), "hung task", "hung tasks")),
		Summary:      "The kernel's hung-task detector reported these tasks (sched_process_hang); they were no longer blocked, or below wolf's threshold, when wolf looked. The kernel log has their stacks: `wolf analyze` reads it.",
		Evidence:     map[string]any{"reports": len(left)},
		Remediation:  []string{"dmesg > kernel.log && wolf analyze kernel.log"},
	}
	for _, h := range left {
		f.Subjects = append(f.Subjects, finding.Subject{Role: finding.RoleVictim, PID: h.TGID, TID: h.TID, Comm: h.Comm, Detail: "reported by khungtaskd"})
	}
	return f, true
}

func (s *Snapshot) comm(tid int) string {
	if t, ok := s.Owners[tid]; ok {
		return t.Comm
	}
	for _, v := range s.Victims {
		if v.TID == tid {
			return v.Comm
		}
	}
	if s.Comm != nil {
		return s.Comm(tid)
	}
	return ""
}

// sleepsOn says in one word what a task sleeps on, for the diagnosis
// stage: "lock", "fuse" (in a FUSE request), "folio" (a page-cache folio),
// "io", "running", or "site" (a wait wolf did not place).
func sleepsOn(t *Task) string {
	switch {
	case t.State == ^uint32(0):
		return ""
	case t.StateLetter() == "R":
		return "running"
	case t.Lock != nil:
		return "lock"
	}
	switch kstack.Classify(t.Stack).Kind {
	case kstack.Fuse:
		return "fuse"
	case kstack.PageLock:
		return "folio"
	case kstack.IO, kstack.Writeback:
		return "io"
	}
	if pageCacheWait(t.Stack) {
		return "folio"
	}
	return "site"
}

// taskEvidence is a task's own numbers: what it sleeps on, where, and
// where its time went between its first and last records in the window.
func (s *Snapshot) taskEvidence(t *Task) map[string]any {
	ev := map[string]any{}
	if on := sleepsOn(t); on != "" {
		ev["sleeps_on"] = on
	}
	if fn := kstack.Classify(t.Stack).Func; fn != "" {
		ev["wait_site"] = fn
	}
	if f := s.FirstSeen[t.TID]; f != nil && t.At > f.At && t.SumExec >= f.SumExec && t.RunDelay >= f.RunDelay {
		ev["window_ms"] = ms(t.At - f.At)
		ev["on_cpu_ms"] = ms(t.SumExec - f.SumExec)
		ev["runnable_ms"] = ms(t.RunDelay - f.RunDelay)
	}
	if req := requestOf(s.Fuse, t.TID); req != nil && fuseWait(t) {
		ev["fuse_opcode"] = req.OpName()
		ev["fuse_unique"] = req.Unique
		ev["fuse_conn"] = req.ConnName()
		ev["fuse_request_from_task"] = true
		ev["fuse_waiting"] = req.Waiting
		if req.Age > 0 {
			ev["fuse_age_s"] = human.Round(req.Age.Seconds(), 1)
		}
	}
	return ev
}

// withEvidence adds a chain hop's numbers to its subject.
func (s *Snapshot) withEvidence(sub finding.Subject, h hop) finding.Subject {
	if h.task == nil {
		if h.what == "FUSE daemon" {
			sub.Evidence = map[string]any{"fuse_daemon": true}
			if h.req != nil {
				sub.Evidence["fuse_conn"] = h.req.ConnName()
			}
		}
		return sub
	}
	sub.Evidence = s.taskEvidence(h.task)
	if h.held != nil {
		switch {
		case h.held.Owner == OwnerReaders:
			sub.Evidence["mode"] = "read"
		case h.held.Kind == LockRWSemRead || h.held.Kind == LockRWSemWrite:
			sub.Evidence["mode"] = "write"
		}
	}
	if l := h.task.Lock; l != nil {
		sub.Lock, sub.LockAddr = l.Describe(), fmt.Sprintf("0x%x", l.Addr)
	}
	return sub
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func subject(role string, t *Task, detail string) finding.Subject {
	return finding.Subject{Role: role, PID: t.TGID, TID: t.TID, Comm: t.Comm, State: t.StateLetter(), Detail: detail, Stack: t.Stack}
}

func subjectFromHop(role string, h hop) finding.Subject {
	if h.task == nil {
		return finding.Subject{Role: role, PID: h.proc.PID, TID: h.proc.PID, Comm: h.proc.Comm, Detail: h.what + ", " + h.doing}
	}
	st := h.task.StateLetter()
	if h.task.State == ^uint32(0) {
		st = ""
	}
	return finding.Subject{Role: role, PID: h.task.TGID, TID: h.task.TID, Comm: h.task.Comm, State: st, Detail: h.what + ", " + h.doing, Stack: h.task.Stack}
}

func ownerPID(h hop) int {
	if h.task != nil {
		return h.task.TGID
	}
	return h.proc.PID
}

func ownerTID(h hop) int {
	if h.task != nil {
		return h.task.TID
	}
	return h.proc.PID
}

func joinLabels(ts []*Task, limit int) string {
	var parts []string
	for i, t := range ts {
		if i == limit {
			parts = append(parts, fmt.Sprintf("and %d more", len(ts)-limit))
			break
		}
		parts = append(parts, t.Label())
	}
	return strings.Join(parts, ", ")
}

// Profile is the kernel stacks of the tasks blocked at least Threshold in
// the window (still blocked or recovered), one count per task: the flame
// graph of where a host's D-state tasks sleep, as a `echo w >
// /proc/sysrq-trigger` dump would show them, folded. Nil when none were.
func (s *Snapshot) Profile() *finding.Profile {
	p := &finding.Profile{Name: "blocked_stacks", Unit: "tasks"}
	for _, ts := range [][]*Task{s.Victims, s.Recovered} {
		for _, t := range ts {
			frames := make([]string, 0, len(t.Stack)+1)
			frames = append(frames, "["+t.StateLetter()+" state]")
			for i := len(t.Stack) - 1; i >= 0; i-- {
				frames = append(frames, t.Stack[i])
			}
			p.Stacks = append(p.Stacks, finding.StackCount{Frames: frames, Value: 1})
		}
	}
	if len(p.Stacks) == 0 {
		return nil
	}
	return p
}
