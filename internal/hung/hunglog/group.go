package hunglog

import (
	"strconv"

	"github.com/wolf-investigator/wolf/internal/kstack"
)

// buildGroups classifies every report and puts the ones that wait on the
// same thing together, then looks for who holds it.
func buildGroups(a *Analysis, p *parser) {
	a.Reports = make([]Report, len(p.order))
	for i, r := range p.order {
		a.Reports[i] = *r
		a.Reports[i].Site = siteOf(r)
	}
	index := map[string]int{}
	for i := range a.Reports {
		r := &a.Reports[i]
		key := groupKey(r)
		gi, ok := index[key]
		if !ok {
			gi = len(a.Groups)
			index[key] = gi
			a.Groups = append(a.Groups, Group{Key: key, Site: r.Site})
		}
		a.Groups[gi].Victims = append(a.Groups[gi].Victims, r)
	}
	byPID := map[int]*Report{}
	for i := range a.Reports {
		if pid := a.Reports[i].PID; pid > 0 {
			byPID[pid] = &a.Reports[i]
		}
	}
	for _, o := range p.others {
		if _, ok := byPID[o.PID]; !ok && o.PID > 0 {
			o.Site = kstack.Classify(o.Stack)
			byPID[o.PID] = o
		}
	}
	var ix *lockIndex
	for i := range a.Groups {
		g := &a.Groups[i]
		if !blockerOwner(g, byPID) && g.Site.Kind.IsLock() && len(a.Held) > 0 {
			if ix == nil {
				ix = newLockIndex(a.Held)
			}
			lockdepOwner(g, ix, byPID)
		}
	}
}

// siteOf classifies a report's stack, letting the kernel's own words win
// over inference: "Blocked by coredump." and a blocker line say more than
// a stack that may be missing (the seed's reports had none).
func siteOf(r *Report) kstack.Site {
	s := kstack.Classify(r.Stack)
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

// groupKey refines Site.Key with what the log adds to the stack.
func groupKey(r *Report) string {
	s := r.Site
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
func blockerOwner(g *Group, byPID map[int]*Report) bool {
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
		o := &Owner{Comm: b.OwnerComm, PID: pid, State: b.OwnerState, Stack: b.OwnerStack,
			Source: "the kernel's hung-task blocker report"}
		completeOwner(o, byPID)
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
func completeOwner(o *Owner, byPID map[int]*Report) {
	if r := byPID[o.PID]; r != nil && len(r.Stack) > len(o.Stack) {
		o.Stack = r.Stack
		if o.State == "" {
			o.State = r.State
		}
	}
	if r := byPID[o.PID]; r != nil && len(o.Stack) == 0 && r.Site.Kind != "" {
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
	heldBy map[int]*HeldLocks
	byID   map[string][]lockRef // lockID -> tasks listing it
	byName map[string][]lockRef // class name -> tasks listing it
}

// lockRef is one task's entry for a lock; last marks the task's final
// entry, which may be a lock it is still waiting for.
type lockRef struct {
	held *HeldLocks
	last bool
}

// maxRefs bounds the tasks indexed per lock: a lock listed by more tasks
// than this has too many candidates to name an owner anyway.
const maxRefs = 64

func newLockIndex(held []HeldLocks) *lockIndex {
	ix := &lockIndex{heldBy: map[int]*HeldLocks{}, byID: map[string][]lockRef{}, byName: map[string][]lockRef{}}
	for i := range held {
		h := &held[i]
		ix.heldBy[h.PID] = h
		for j, l := range h.Locks {
			ref := lockRef{held: h, last: j == len(h.Locks)-1}
			if id := lockID(l); len(ix.byID[id]) < maxRefs {
				ix.byID[id] = append(ix.byID[id], ref)
			}
			if len(ix.byName[l.Name]) < maxRefs {
				ix.byName[l.Name] = append(ix.byName[l.Name], ref)
			}
		}
	}
	return ix
}

// lockdepOwner finds the owner in a lockdep "locks held" dump. Lockdep
// lists a lock as held from the moment a task starts acquiring it, so each
// waiter's last entry is the lock it waits for; any other task listing that
// lock holds it — certainly if it is not its last entry, likely otherwise
// unless that task is itself reported waiting for it.
func lockdepOwner(g *Group, ix *lockIndex, byPID map[int]*Report) {
	victims := map[int]bool{}
	var refs []lockRef
	seenID := map[string]bool{}
	for _, v := range g.Victims {
		victims[v.PID] = true
		h := ix.heldBy[v.PID]
		if h == nil || len(h.Locks) == 0 {
			continue
		}
		last := h.Locks[len(h.Locks)-1]
		if id := lockID(last); stackHas(v.Stack, last.At) && !seenID[id] && len(seenID) < 4 {
			seenID[id] = true
			g.LockName = last.Name
			refs = append(refs, ix.byID[id]...)
		}
	}
	if len(seenID) == 0 && g.Site.Global && g.Site.Object != "" {
		// No victim is in the dump: fall back to the lock's known name.
		refs = ix.byName[g.Site.Object]
		if len(refs) > 0 {
			g.LockName = g.Site.Object
		}
	}
	var certain, likely []*HeldLocks
	seen := map[int]bool{}
	for _, r := range refs {
		h := r.held
		if victims[h.PID] || seen[h.PID] {
			continue
		}
		seen[h.PID] = true
		switch {
		case !r.last:
			certain = append(certain, h)
		case !waitsOnAny(byPID[h.PID], h):
			likely = append(likely, h)
		}
	}
	owner := func(h *HeldLocks) *Owner {
		o := &Owner{Comm: h.Comm, PID: h.PID, Source: "lockdep (locks held)"}
		completeOwner(o, byPID)
		return o
	}
	var holders []*HeldLocks
	switch {
	case len(certain) == 1:
		g.Owner = owner(certain[0])
		holders = likely
	case len(certain) == 0 && len(likely) == 1:
		g.Owner = owner(likely[0])
	default:
		holders = append(certain, likely...)
	}
	for i, h := range holders {
		if i == 8 {
			break
		}
		g.Holders = append(g.Holders, owner(h))
	}
}

// waitsOnAny reports whether a task's own report shows it blocked
// acquiring its last listed lock.
func waitsOnAny(r *Report, h *HeldLocks) bool {
	return r != nil && len(h.Locks) > 0 && waitsOn(r, h.Locks[len(h.Locks)-1])
}

func lockID(l HeldLock) string {
	if l.Addr != "" {
		return "addr:" + l.Addr
	}
	return "name:" + l.Name
}

// waitsOn reports whether a task's own report shows it blocked acquiring l.
func waitsOn(r *Report, l HeldLock) bool {
	return r != nil && r.Site.Kind.IsLock() && stackHas(r.Stack, l.At)
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
