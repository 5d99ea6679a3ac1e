package locks

import (
	"cmp"
	"fmt"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
)

// maxFactLocks bounds the locks whose waits and holds become facts: the
// most waited-on, as many as Conclude may report and as many again.
const maxFactLocks = 2 * DefaultTop

// ConcludeFacts is Conclude and the window's facts for the diagnosis
// stage, from the same snapshot: every contended lock's waiters (waits),
// its owners and measured holders (holds, with where their time went),
// and every long mmap_lock hold. Locks and holds that are wolf's own are
// left out.
func ConcludeFacts(s *Snapshot) ([]finding.Finding, []finding.Histogram, *fact.Set) {
	fs, hs := Conclude(s)
	return fs, hs, s.facts()
}

// lockKey is the key a lock's facts use: a process's mmap_lock by its
// process, any other lock by its address.
func lockKey(addr uint64, mm int) string {
	if mm != 0 {
		return fact.MMLockKey(mm)
	}
	return fact.LockKey(fmt.Sprintf("0x%x", addr))
}

func (s *Snapshot) facts() *fact.Set {
	set := &fact.Set{Window: s.Window}
	for i, a := range s.aggregate() {
		if i >= maxFactLocks || s.wolfsOwn(a) || a.mainType.Spins() {
			continue
		}
		k := lockKey(a.addr, a.mmTGID)
		set.Resource(fact.Resource{Kind: fact.Lock, Key: k, Name: a.name, LockAddr: fmt.Sprintf("0x%x", a.addr), MMPID: a.mmTGID, LockType: a.mainType.Noun(), CPU: -1})
		ref := s.contRefs[a.addr]
		for _, w := range a.waiters {
			mode := s.waitMode(a.mmTGID, w.TID)
			if mode == "" {
				mode = a.modeOf(w.TID)
			}
			set.Waits = append(set.Waits, fact.Wait{Task: fact.Task{PID: w.TGID, TID: w.TID, Comm: w.Comm}, Kind: fact.WaitLock, On: k,
				Total: time.Duration(w.TotalNs), Max: time.Duration(w.MaxNs), Count: int(w.Count), Ongoing: w.Ongoing, Mode: mode,
				Finding: ref.id, FindingTitle: ref.title})
		}
		for _, o := range a.owners {
			if o.TID == 0 && o.TGID == 0 {
				continue // exited before wolf could name it
			}
			h := fact.Hold{On: k, Holder: fact.Task{PID: o.TGID, TID: o.TID, Comm: o.Comm}, Exact: o.Kind != OwnerReaders,
				Charged: time.Duration(o.TotalNs), Finding: ref.id, FindingTitle: ref.title}
			switch {
			case o.Kind == OwnerReaders:
				h.Mode = "read"
			case a.mainType == RwsemRead || a.mainType == RwsemWrite:
				h.Mode = "write"
			}
			if o.SpanNs > 0 {
				// Where the owner's time went between the first and the
				// last wait that found it owning the lock.
				h.Split = &fact.Split{Span: time.Duration(o.SpanNs), OnCPU: time.Duration(o.OnCPUNs), Runnable: time.Duration(o.RunnableNs),
					ThrottleKnown: s.TaskThrottle, Bounded: true, Finding: ref.id, FindingTitle: ref.title}
			}
			set.Holds = append(set.Holds, h)
		}
		if a.mmTGID != 0 {
			// An mmap_lock's long readers, as wolf saw them hold it.
			for _, x := range s.Holds {
				if x.MMTGID == a.mmTGID && !x.Write {
					hr := s.holdRefs[[2]int{x.TGID, x.MMTGID}]
					set.Holds = append(set.Holds, s.holdFact(k, x, []Hold{x}, hr))
				}
			}
		}
	}
	// Long mmap_lock holds per holding process (and whose mm), summed.
	type procKey struct{ tgid, mm int }
	byProc := map[procKey][]Hold{}
	var keys []procKey
	for _, h := range s.Holds {
		pk := procKey{h.TGID, h.MMTGID}
		if _, ok := byProc[pk]; !ok {
			keys = append(keys, pk)
		}
		byProc[pk] = append(byProc[pk], h)
	}
	for _, pk := range keys {
		mm := cmp.Or(pk.mm, pk.tgid)
		if mm == 0 || (s.SelfTGID != 0 && mm == s.SelfTGID) {
			continue
		}
		hs := byProc[pk]
		k := fact.MMLockKey(mm)
		r := fact.Resource{Kind: fact.Lock, Key: k, MMPID: mm, LockType: "rw-semaphore", CPU: -1}
		if l := longest(hs); l.Lock != 0 {
			r.LockAddr = fmt.Sprintf("0x%x", l.Lock)
		}
		if c := s.comm(mm); c != "" {
			r.Name = fmt.Sprintf("mmap_lock of %s (pid %d)", c, mm)
		}
		set.Resource(r)
		set.Holds = append(set.Holds, s.holdFact(k, longest(hs), hs, s.holdRefs[[2]int{pk.tgid, pk.mm}]))
	}
	return set
}

// holdFact is a thread's mmap_lock holds as one hold: the longest names
// the holder, and where the time of all of them went is summed.
func (s *Snapshot) holdFact(k string, h Hold, all []Hold, ref findingRef) fact.Hold {
	sp := &fact.Split{ThrottleKnown: s.ThrottleSeen, Finding: ref.id, FindingTitle: ref.title}
	var total time.Duration
	for _, x := range all {
		total += time.Duration(x.HoldNs)
		sp.OnCPU += time.Duration(x.RuntimeNs)
		sp.Runnable += time.Duration(x.RunnableNs)
		sp.Throttled += time.Duration(x.ThrottledNs)
		sp.Reclaim += time.Duration(x.ReclaimNs)
		sp.PagesScanned += x.PagesScanned
		sp.PagesReclaimed += x.PagesReclaimed
	}
	sp.Span = total
	mode := "read"
	if h.Write {
		mode = "write"
	}
	return fact.Hold{On: k, Holder: fact.Task{PID: h.TGID, TID: h.TID, Comm: h.Comm}, Exact: true, Mode: mode,
		Max: time.Duration(h.HoldNs), Total: total, Holds: len(all), Split: sp, Finding: ref.id, FindingTitle: ref.title}
}
