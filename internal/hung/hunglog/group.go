package hunglog

import (
	"sort"
	"strconv"
	"strings"

	"github.com/wolf-investigator/wolf/internal/kstack"
)

// buildGroups classifies every report, works out from lockdep which lock
// each waits for, puts the reports that wait on the same thing together
// and looks for who holds it.
func buildGroups(a *Analysis, p *parser) {
	a.Reports = make([]Report, len(p.order))
	for i, r := range p.order {
		a.Reports[i] = *r
		a.Reports[i].Site = siteOf(r)
	}
	byPID := map[int]*Report{}
	for i := range a.Reports {
		if pid := a.Reports[i].PID; pid > 0 {
			byPID[pid] = &a.Reports[i]
		}
	}
	// Tasks in other states (a sysrq-t dump) can be owners too.
	stateOf := map[int]*Report{}
	for pid, r := range byPID {
		stateOf[pid] = r
	}
	for _, o := range p.others {
		if _, ok := stateOf[o.PID]; !ok && o.PID > 0 {
			o.Site = kstack.Classify(o.Stack)
			stateOf[o.PID] = o
		}
	}
	ix := newLockIndex(a.Held, stateOf)
	waits := map[*Report]string{} // report -> lock id it waits for, from lockdep
	for i := range a.Reports {
		r := &a.Reports[i]
		if id := ix.waitedLock(r); id != "" {
			waits[r] = id
		}
	}
	index := map[string]int{}
	for i := range a.Reports {
		r := &a.Reports[i]
		key := groupKey(r, waits[r])
		gi, ok := index[key]
		if !ok {
			gi = len(a.Groups)
			index[key] = gi
			a.Groups = append(a.Groups, Group{Key: key, Site: r.Site, lockID: waits[r]})
		}
		a.Groups[gi].Victims = append(a.Groups[gi].Victims, r)
	}
	for i := range a.Groups {
		g := &a.Groups[i]
		if g.lockID != "" {
			g.LockName = ix.className(g)
		}
		if blockerOwner(g, stateOf) {
			continue
		}
		if g.lockID != "" {
			ix.owner(g, stateOf)
		}
	}
	buildChains(a, byPID)
}

// siteOf classifies a report's stack, letting the kernel's own words win
// over inference: "Blocked by coredump." and a blocker line say more than
// a stack that may be missing (the Cloudflare write-up's reports had none).
func siteOf(r *Report) kstack.Site {
	s := kstack.Classify(r.Stack)
	if s.Func == "" && s.Kind == kstack.Other && len(r.Stack) > 0 {
		// Every frame is marked "?" (old kernels, some unwinders): the
		// guesses are better than nothing.
		var all []string
		for _, f := range r.Stack {
			if !staleNoise(kstack.FuncName(f)) {
				all = append(all, stripUnreliable(f))
			}
		}
		if g := kstack.Classify(all); g.Func != "" || g.Kind != kstack.Other {
			s = g
			s.Describe += " (from frames the unwinder marked unreliable)"
		}
	}
	if len(r.Stack) == 0 && s.Kind == kstack.Other {
		s.Describe = "is blocked; the log does not include its stack"
	}
	if r.Coredump && s.Kind != kstack.Coredump {
		s = kstack.Site{Kind: kstack.Coredump, Func: s.Func, Frame: s.Frame, LockFunc: "coredump_task_exit",
			Describe: `is blocked by coredump (the report says "Blocked by coredump.")`}
	}
	if b := r.Blocker; b != nil && !s.Kind.IsLock() && s.Kind != kstack.Coredump {
		s.Kind = blockerKind(b)
		s.Describe = "waits for " + article(b.Lock) + " (the kernel's blocker report)"
		if s.Func != "" {
			s.Describe += " in " + s.Func
		}
	}
	return s
}

func blockerKind(b *Blocker) kstack.Kind {
	switch b.Lock {
	case "mutex":
		return kstack.Mutex
	case "semaphore":
		return kstack.Semaphore
	}
	if b.As == "reader" {
		return kstack.RwsemRead
	}
	return kstack.RwsemWrite
}

func article(noun string) string {
	if noun == "rw-semaphore" {
		return "an " + noun
	}
	return "a " + noun
}

// groupKey refines Site.Key with what the log adds to the stack: the lock
// lockdep shows the task acquiring, the owner the kernel's blocker line
// names, the kworker's workqueue.
func groupKey(r *Report, lockID string) string {
	s := r.Site
	if lockID != "" && s.Kind.IsLock() {
		// Waiters of one lock instance, whatever called the lock.
		return "lock:" + lockID
	}
	if b := r.Blocker; b != nil && !b.NotFound && b.OwnerPID > 0 && s.Kind.IsLock() && !(s.Global && s.Object != "") {
		// Waiters the kernel says are behind the same owner wait on the
		// same lock far more likely than their callers suggest apart.
		return "owned:" + b.Lock + ":" + strconv.Itoa(b.OwnerPID)
	}
	if r.Workqueue != "" {
		switch s.Kind {
		case kstack.Other, kstack.IO, kstack.PageLock, kstack.Writeback, kstack.Completion,
			kstack.WorkqueueFlush:
			// For a kworker the workqueue names the subsystem better than
			// a generic wait does: xfs-sync/dm-6 xfs_log_worker.
			return "wq:" + r.Workqueue + ":" + r.WorkFunc + "|" + s.Key()
		}
	}
	return s.Key()
}

// blockerOwner takes the owner from the kernel's blocker lines. When the
// victims name different owners (a lock handed over between checks), the
// one named most often wins and the others are listed as holders.
func blockerOwner(g *Group, stateOf map[int]*Report) bool {
	type cand struct {
		b     *Blocker
		count int
	}
	var order []int
	cands := map[int]*cand{}
	for _, v := range g.Victims {
		b := v.Blocker
		if b == nil || b.NotFound || b.OwnerPID <= 0 {
			continue
		}
		c, ok := cands[b.OwnerPID]
		if !ok {
			c = &cand{b: b}
			cands[b.OwnerPID] = c
			order = append(order, b.OwnerPID)
		}
		c.count++
		if len(b.OwnerStack) > len(c.b.OwnerStack) {
			c.b = b
		}
	}
	if len(order) == 0 {
		return false
	}
	best := order[0]
	for _, pid := range order[1:] {
		if cands[pid].count > cands[best].count {
			best = pid
		}
	}
	for _, pid := range order {
		b := cands[pid].b
		o := &Owner{Comm: b.OwnerComm, PID: pid, TGID: b.OwnerTGID, State: b.OwnerState, Stack: b.OwnerStack,
			Source: "the kernel's hung-task blocker report", Certain: true}
		completeOwner(o, stateOf)
		if pid == best {
			g.Owner = o
		} else {
			g.Holders = append(g.Holders, o)
		}
	}
	return true
}

// completeOwner fills in the owner's stack from its own report when the
// kernel skipped the dump (6.17+ skips owners that are hung themselves),
// and classifies what the owner waits on.
func completeOwner(o *Owner, stateOf map[int]*Report) {
	r := stateOf[o.PID]
	if r != nil {
		if len(r.Stack) > len(o.Stack) {
			o.Stack = r.Stack
		}
		if o.State == "" {
			o.State = r.State
		}
		if o.TGID == 0 {
			o.TGID = r.TGID
		}
		o.hung = r.Source != ""
	}
	if r != nil && len(o.Stack) == len(r.Stack) && r.Site.Kind != "" {
		s := r.Site
		o.Site = &s
		return
	}
	if len(o.Stack) > 0 {
		s := kstack.Classify(o.Stack)
		o.Site = &s
	}
}

// lockIndex finds lockdep entries by lock without scanning the whole dump
// for every group: a log can hold thousands of both.
type lockIndex struct {
	heldBy  map[int]*HeldLocks
	byID    map[string][]lockRef // lock id -> tasks listing it
	byAt    map[string][]lockRef // function an entry was taken at -> tasks
	stateOf map[int]*Report
}

// lockRef is one task's entry for a lock.
type lockRef struct {
	held *HeldLocks
	idx  int // position in held.Locks
}

func (r lockRef) entry() HeldLock { return r.held.Locks[r.idx] }
func (r lockRef) last() bool      { return r.idx == len(r.held.Locks)-1 }

// maxRefs bounds the tasks indexed per lock. A storm on one global lock
// (rtnl_mutex) can list hundreds of tasks; the few that hold it are found
// among them, the rest only add work.
const maxRefs = 1024

func newLockIndex(held []HeldLocks, stateOf map[int]*Report) *lockIndex {
	ix := &lockIndex{heldBy: map[int]*HeldLocks{}, byID: map[string][]lockRef{}, byAt: map[string][]lockRef{}, stateOf: stateOf}
	for i := range held {
		h := &held[i]
		ix.heldBy[h.PID] = h
		for j, l := range h.Locks {
			ref := lockRef{held: h, idx: j}
			if id := lockID(l); len(ix.byID[id]) < maxRefs {
				ix.byID[id] = append(ix.byID[id], ref)
			}
			if l.At != "" && len(ix.byAt[l.At]) < maxRefs {
				ix.byAt[l.At] = append(ix.byAt[l.At], ref)
			}
		}
	}
	return ix
}

// lockID names one lock: a kernel-wide lock by its name (lockdep and the
// stack classifier agree on those), any other by its address, or by its
// class on old kernels that do not print addresses.
func lockID(l HeldLock) string {
	if globalLocks[l.Name] {
		return "obj:" + l.Name
	}
	if l.Addr != "" {
		return "addr:" + l.Addr
	}
	return "class:" + l.Name
}

// globalLocks are lockdep classes with a single instance in the kernel.
var globalLocks = map[string]bool{
	"rtnl_mutex": true, "pernet_ops_rwsem": true, "cgroup_mutex": true, "cpu_hotplug_lock": true,
	"genl_mutex": true, "system_transition_mutex": true, "tty_mutex": true, "event_mutex": true,
	"rcu_state.barrier_mutex": true, "rcu_state.exp_mutex": true, "rcu_sched_state.exp_mutex": true,
	"cgroup_threadgroup_rwsem": true, "dup_mmap_sem": true, "console_lock": true, "kernfs_mutex": true,
	"device_hotplug_lock": true, "namespace_sem": true, "sb_lock": true, "module_mutex": true,
	"pcpu_alloc_mutex": true, "slab_mutex": true, "text_mutex": true, "wq_pool_mutex": true,
}

// waitedLock returns the lock a report's task waits for, from lockdep: the
// task's last entry when its stack is acquiring it (lockdep records a lock
// before the wait), or, for a task lockdep does not list, the one lock the
// others hold at the function the task waits in.
func (ix *lockIndex) waitedLock(r *Report) string {
	if !r.Site.Kind.IsLock() || r.PID <= 0 {
		return ""
	}
	if h := ix.heldBy[r.PID]; h != nil && len(h.Locks) > 0 {
		l := h.Locks[len(h.Locks)-1]
		if acquiring(r, l) {
			return lockID(l)
		}
		return ""
	}
	if r.Site.Global && r.Site.Object != "" && globalLocks[r.Site.Object] {
		return "obj:" + r.Site.Object
	}
	id := ""
	for _, ref := range ix.byAt[r.Site.Func] {
		e := ref.entry()
		if r.Site.Object != "" && !sameObject(r.Site.Object, e.Name) {
			continue
		}
		if got := lockID(e); id == "" {
			id = got
		} else if got != id {
			return "" // several locks are taken there: cannot tell which
		}
	}
	return id
}

// acquiring reports whether a task's stack shows it blocked taking lock l:
// a lock wait whose primitives, or the function that called them, include
// the function lockdep says took l, and not a wait on another named lock.
func acquiring(r *Report, l HeldLock) bool {
	if r == nil || !r.Site.Kind.IsLock() || l.At == "" {
		return false
	}
	if r.Site.Object != "" && !sameObject(r.Site.Object, l.Name) {
		return false
	}
	// When every frame is a "?" guess, the guesses are all there is.
	onlyGuesses := true
	for _, f := range r.Stack {
		onlyGuesses = onlyGuesses && kstack.Unreliable(f)
	}
	for _, f := range r.Stack {
		if kstack.Unreliable(f) && !onlyGuesses {
			continue
		}
		n := kstack.FuncName(f)
		if n == l.At {
			return true
		}
		if n == r.Site.Func && !onlyGuesses {
			break // past the wait: the rest is the task's history
		}
	}
	return r.Site.Func == l.At || r.Site.LockFunc == l.At
}

// sameObject reports whether kstack's name for a lock and lockdep's
// class can be the same lock: "rtnl_mutex" and "rtnl_mutex", "mmap_lock"
// and "&mm->mmap_lock", "i_rwsem" and "&sb->s_type->i_mutex_key#8".
func sameObject(object, class string) bool {
	switch {
	case object == class:
		return true
	case object == "mmap_lock":
		return containsFold(class, "mmap_lock") || containsFold(class, "mmap_sem")
	case object == "i_rwsem":
		return containsFold(class, "i_mutex") || containsFold(class, "i_rwsem")
	case object == "sb_writers":
		return containsFold(class, "sb_writers")
	case object == "console_sem":
		return containsFold(class, "console")
	}
	return !globalLocks[class] && !globalLocksByObject[object]
}

// globalLocksByObject are kstack objects that are kernel-wide: a
// lockdep class other than theirs is certainly another lock.
var globalLocksByObject = map[string]bool{
	"rtnl_mutex": true, "pernet_ops_rwsem": true, "cgroup_mutex": true, "cpu_hotplug_lock": true,
	"genl_mutex": true, "system_transition_mutex": true, "console_sem": true,
	"cgroup_threadgroup_rwsem": true, "dup_mmap_sem": true,
}

func containsFold(s, sub string) bool {
	return len(s) >= len(sub) && indexFold(s, sub) >= 0
}

func indexFold(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// className returns lockdep's class of the lock a group waits for.
func (ix *lockIndex) className(g *Group) string {
	for _, v := range g.Victims {
		if h := ix.heldBy[v.PID]; h != nil && len(h.Locks) > 0 {
			return h.Locks[len(h.Locks)-1].Name
		}
	}
	if refs := ix.byID[g.lockID]; len(refs) > 0 {
		return refs[0].entry().Name
	}
	return ""
}

// owner names who holds the lock a group waits for. A task listing the
// lock holds it when the lock is not its last entry (it took more after),
// or when its own stack waits for something else; a task whose stack is
// acquiring it is a waiter. A task lockdep lists but the log shows no
// stack of may be either: such candidates are named only when no task is
// certainly the holder, as "likely" with one, as candidates with several.
func (ix *lockIndex) owner(g *Group, stateOf map[int]*Report) {
	refs := ix.byID[g.lockID]
	var certain, likely []*HeldLocks
	seen := map[int]bool{}
	for _, ref := range refs {
		h := ref.held
		if seen[h.PID] {
			continue
		}
		r := stateOf[h.PID]
		switch {
		case !ref.last():
			// Taken before another lock: held, even by a victim of this
			// very group (a task waiting for a lock it holds).
			seen[h.PID] = true
			certain = append(certain, h)
		case r != nil && len(r.Stack) > 0 && acquiring(r, ref.entry()):
			// Waiting for it.
		case r != nil && hasReliable(r.Stack):
			seen[h.PID] = true
			certain = append(certain, h)
		case r != nil && r.Source != "":
			// Reported blocked without a stack: waiting for something,
			// probably this lock.
		default:
			seen[h.PID] = true
			likely = append(likely, h)
		}
	}
	// A task both certain (it holds the lock) and reported waiting for it
	// again is a self-deadlock; keep it.
	owner := func(h *HeldLocks, certain bool) *Owner {
		src := "lockdep (locks held)"
		if !certain {
			src = "lockdep (locks held; the log does not show this task's own state)"
		}
		o := &Owner{Comm: h.Comm, PID: h.PID, Source: src, Certain: certain}
		completeOwner(o, stateOf)
		return o
	}
	sort.SliceStable(certain, func(i, j int) bool { return certain[i].PID < certain[j].PID })
	switch {
	case len(certain) >= 1:
		g.Owner = owner(certain[0], true)
		for i, h := range certain[1:] {
			if i == 8 {
				break
			}
			// Several certain holders: readers of an rw-semaphore.
			g.Holders = append(g.Holders, owner(h, true))
		}
	case len(likely) == 1:
		g.Owner = owner(likely[0], false)
	default:
		for i, h := range likely {
			if i == 8 {
				break
			}
			g.Holders = append(g.Holders, owner(h, false))
		}
	}
}

func stackHas(stack []string, fn string) bool {
	if fn == "" {
		return false
	}
	for _, f := range stack {
		if kstack.FuncName(f) == fn {
			return true
		}
	}
	return false
}

// hasReliable reports a stack with at least one frame not marked "?":
// only such a stack says for sure what the task waits for.
func hasReliable(stack []string) bool {
	for _, f := range stack {
		if !kstack.Unreliable(f) {
			return true
		}
	}
	return false
}

// staleNoise reports functions that fill the stale part of a stack with
// return addresses of debugging and instrumentation code (lockdep, KASAN,
// KCOV, irq tracing) and of the scheduler's own section start: in a trace
// made of "?" guesses only, they are never what the task waits in.
func staleNoise(fn string) bool {
	switch fn {
	case "__sched_text_start", "lock_acquire", "lock_release", "find_held_lock", "mark_held_locks",
		"rwsem_mark_wake", "__lock_acquire", "check_memory_region", "memset", "memcpy":
		return true
	}
	for _, p := range []string{"lockdep_", "trace_hardirqs_", "_raw_spin_", "kasan_", "__kasan_", "__sanitizer_cov", "__asan_", "debug_", "__might_"} {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

// stripUnreliable removes the unwinder's "?" mark from a frame.
func stripUnreliable(f string) string {
	return strings.Replace(f, "? ", "", 1)
}
