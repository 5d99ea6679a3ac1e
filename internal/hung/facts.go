package hung

import (
	"fmt"
	"strconv"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
	"github.com/wolf-investigator/wolf/internal/kstack"
)

// ConcludeFacts is Conclude and the window's facts for the diagnosis
// stage, from the same snapshot: every hung task's wait (on a lock, a
// FUSE connection, a wait site), every owner the chains followed and
// what it is doing now, and the FUSE daemons that owe a reply.
func ConcludeFacts(s *Snapshot) ([]finding.Finding, *fact.Set) {
	set := &fact.Set{}
	var out []finding.Finding
	for _, g := range groupVictims(s.Victims, func(tid int) bool { return requestOf(s.Fuse, tid) != nil }) {
		f := s.groupFinding(g)
		out = append(out, f)
		s.groupFacts(set, g, &f)
	}
	rec, hasRec := s.recoveredFinding()
	if hasRec {
		out = append(out, rec)
	}
	s.endedFacts(set, rec, hasRec)
	if f, ok := s.unmatchedHangs(); ok {
		out = append(out, f)
	}
	finding.Sort(out)
	return out, set
}

func factTask(t *Task) fact.Task { return fact.Task{PID: t.TGID, TID: t.TID, Comm: t.Comm} }

// lockKeyOf is the key of a lock: a process's mmap_lock by its process,
// any other by its address.
func lockKeyOf(l *Lock) string {
	if l.MMPID != 0 {
		return fact.MMLockKey(l.MMPID)
	}
	return fact.LockKey(fmt.Sprintf("0x%x", l.Addr))
}

func lockResource(l *Lock) fact.Resource {
	return fact.Resource{Kind: fact.Lock, Key: lockKeyOf(l), Name: l.Describe(), LockAddr: fmt.Sprintf("0x%x", l.Addr), MMPID: l.MMPID, LockType: l.Kind.Noun(), CPU: -1}
}

// fuseOf is the FUSE connection a task waits on, and whether its request
// was found on the daemon's queue (else the task only sleeps where FUSE
// requests sleep); nil when it does not wait on FUSE.
func (s *Snapshot) fuseOf(t *Task) (req *FuseReq, key string, ok bool) {
	if r := requestOf(s.Fuse, t.TID); r != nil && fuseWait(t) {
		return r, fact.FUSEKey(r.ConnName()), true
	}
	if kstack.Classify(t.Stack).Kind == kstack.Fuse {
		return nil, fact.FUSEKey(""), true
	}
	return nil, "", false
}

// ongoing is what a task is doing now and where its time went since wolf
// first saw it in the window.
func (s *Snapshot) ongoing(t *Task, ref *finding.Finding) *fact.Split {
	if t.State == ^uint32(0) {
		return nil
	}
	sp := &fact.Split{State: t.StateLetter(), Site: kstack.Classify(t.Stack).Func, Still: true, Finding: ref.ID, FindingTitle: ref.Title}
	if f := s.FirstSeen[t.TID]; f != nil && t.At > f.At && t.SumExec >= f.SumExec && t.RunDelay >= f.RunDelay {
		sp.Span, sp.OnCPU, sp.Runnable = t.At-f.At, t.SumExec-f.SumExec, t.RunDelay-f.RunDelay
	}
	switch {
	case sp.State == "R":
	case t.Lock != nil && t.Lock.Owner != OwnerNone:
		sp.SleepsOn = lockKeyOf(t.Lock)
	default:
		if _, k, ok := s.fuseOf(t); ok {
			sp.SleepsOn = k
		}
	}
	return sp
}

// fuseWaitFact is a task's wait for a FUSE daemon's reply.
func (s *Snapshot) fuseWaitFact(set *fact.Set, t *Task, ref *finding.Finding) {
	req, k, ok := s.fuseOf(t)
	if !ok {
		return
	}
	w := fact.Wait{Task: factTask(t), Kind: fact.WaitFUSE, On: k, Max: t.Blocked, Total: t.Blocked, Ongoing: true,
		Finding: ref.ID, FindingTitle: ref.Title, Numbers: map[string]any{}}
	w.Hung = s.Threshold > 0 && t.Blocked >= s.Threshold
	if pageCacheWait(t.Stack) || kstack.Classify(t.Stack).Kind == kstack.PageLock {
		w.Numbers["sleeps_on"] = "folio"
	}
	res := fact.Resource{Kind: fact.FUSE, Key: k, CPU: -1}
	if req != nil {
		w.Numbers["fuse_opcode"] = req.OpName()
		w.Numbers["fuse_unique"] = req.Unique
		w.Numbers["fuse_waiting"] = req.Waiting
		if req.Age > 0 {
			w.Numbers["fuse_age_s"] = human.Round(req.Age.Seconds(), 1)
			w.Max = max(w.Max, req.Age)
		}
		w.Detail = fuseRequestText(req)
		res.Conn, res.Name = req.ConnName(), "FUSE connection "+req.ConnName()
		set.Holds = append(set.Holds, fact.Hold{On: k, Holder: fact.Task{PID: req.DaemonPID, TID: req.DaemonPID, Comm: req.DaemonComm}, Exact: true,
			Finding: ref.ID, FindingTitle: ref.Title})
	} else {
		w.Likely = true
		w.Detail = "asleep where FUSE requests wait for their daemon"
		if s.FuseDaemons != nil {
			for _, d := range s.FuseDaemons() {
				set.Holds = append(set.Holds, fact.Hold{On: k, Holder: fact.Task{PID: d.PID, TID: d.PID, Comm: d.Comm}, Finding: ref.ID, FindingTitle: ref.Title})
			}
		}
	}
	set.Resource(res)
	set.Waits = append(set.Waits, w)
}

func fuseRequestText(r *FuseReq) string {
	text := fmt.Sprintf("%s request #%d", r.OpName(), r.Unique)
	if r.Age > 0 {
		text += " unanswered for " + human.Duration(r.Age)
	} else {
		text += " unanswered"
	}
	text += ", sent by this task and found on the daemon's /dev/fuse queue"
	if r.Waiting > 0 {
		text += fmt.Sprintf("; %d request(s) waiting on the connection", r.Waiting)
	}
	return text
}

// groupFacts are the facts of one group of victims and its finding.
func (s *Snapshot) groupFacts(set *fact.Set, g *group, f *finding.Finding) {
	victim := func(t *Task, kind fact.WaitKind, on string) {
		w := fact.Wait{Task: factTask(t), Kind: kind, On: on, Max: t.Blocked, Total: t.Blocked, Hung: true, Ongoing: true,
			BehindWriter: t.BehindWriter, Finding: f.ID, FindingTitle: f.Title}
		if t.Lock != nil {
			w.Mode = t.Lock.Kind.Mode()
		}
		set.Waits = append(set.Waits, w)
	}
	switch g.kind {
	case "lock":
		for _, v := range g.victims {
			l := v.Lock
			set.Resource(lockResource(l))
			victim(v, fact.WaitLock, lockKeyOf(l))
		}
		hops, _ := s.chain(g.lock)
		for _, h := range hops {
			if h.task != nil && h.held != nil {
				set.Resource(lockResource(h.held))
				hold := fact.Hold{On: lockKeyOf(h.held), Holder: factTask(h.task), Exact: h.held.Owner != OwnerReaders,
					Split: s.ongoing(h.task, f), Finding: f.ID, FindingTitle: f.Title}
				switch {
				case h.held.Owner == OwnerReaders:
					hold.Mode = "read"
				case h.held.Kind == LockRWSemRead || h.held.Kind == LockRWSemWrite:
					hold.Mode = "write"
				}
				set.Holds = append(set.Holds, hold)
				if h.task.StateLetter() != "R" {
					// Its own wait for a FUSE daemon, with the daemon that
					// owes the reply (the chain's next hop).
					s.fuseWaitFact(set, h.task, f)
				}
			}
		}
	case "fuse":
		for _, v := range g.victims {
			s.fuseWaitFact(set, v, f)
		}
	case "io":
		for _, v := range g.victims {
			victim(v, fact.WaitIO, fact.SiteKey(g.site.Func))
		}
	default:
		for _, v := range g.victims {
			victim(v, fact.WaitBlocked, fact.SiteKey(g.site.Func))
		}
	}
}

// endedFacts are the facts of the lock waits that began before wolf
// attached and ended in the window (Snapshot.Ended): the lock
// investigator times a wait from its begin and drops an end whose begin
// it never saw, so without these a task blocked 40 s before wolf started
// whose wait ends while wolf watches counts for nothing. Each is a wait
// of at least what the walks saw (AtLeast), and the lock's owner as the
// last walk that found the task waiting saw it, with what it was doing
// then.
func (s *Snapshot) endedFacts(set *fact.Set, rec finding.Finding, hasRec bool) {
	inRec := map[int]bool{}
	if hasRec {
		for _, t := range s.Recovered {
			inRec[t.TID] = true
		}
	}
	held := map[string]bool{} // lock and owner: said once, however many waited
	for _, t := range s.Ended {
		l := t.Lock
		ref := &finding.Finding{}
		if inRec[t.TID] {
			ref = &rec
		}
		set.Resource(lockResource(l))
		k := lockKeyOf(l)
		set.Waits = append(set.Waits, fact.Wait{Task: factTask(t), Kind: fact.WaitLock, On: k, Max: t.Blocked, Total: t.Blocked, Count: 1,
			AtLeast: true, Mode: l.Kind.Mode(), BehindWriter: t.BehindWriter, Finding: ref.ID, FindingTitle: ref.Title})
		if l.Owner == OwnerNone || l.OwnerTID == 0 || held[k+"\x00"+strconv.Itoa(l.OwnerTID)] {
			continue
		}
		held[k+"\x00"+strconv.Itoa(l.OwnerTID)] = true
		hold := fact.Hold{On: k, Holder: fact.Task{PID: l.OwnerTGID, TID: l.OwnerTID, Comm: l.OwnerComm}, Exact: l.Owner != OwnerReaders,
			Finding: ref.ID, FindingTitle: ref.Title}
		switch {
		case l.Owner == OwnerReaders:
			hold.Mode = "read"
		case l.Kind == LockRWSemRead || l.Kind == LockRWSemWrite:
			hold.Mode = "write"
		}
		if o := s.EndedOwners[l.OwnerTID]; o != nil {
			then := *s
			if s.EndedFuse != nil {
				then.Fuse = s.EndedFuse // the requests as they were then
			}
			hold.Holder = factTask(o)
			if sp := then.ongoing(o, ref); sp != nil {
				sp.Still = false // what it was doing then: the hold has ended since
				hold.Split = sp
			}
			if o.StateLetter() != "R" {
				// Its own wait then, ended since as well.
				n := len(set.Waits)
				then.fuseWaitFact(set, o, ref)
				for i := n; i < len(set.Waits); i++ {
					set.Waits[i].Ongoing, set.Waits[i].Hung, set.Waits[i].AtLeast = false, false, true
				}
			}
		}
		set.Holds = append(set.Holds, hold)
	}
}
