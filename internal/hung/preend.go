package hung

import (
	"fmt"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/wolf-investigator/wolf/internal/kstack"
)

// SourcePreEnd: the lock was named by the contention_end of a wait that
// began before wolf attached (pre_ends in hung.bpf.c), on a kernel without
// task->blocker (user space only, not a BPF value).
const SourcePreEnd LockSource = 101

// maxPreEnds is pre_ends' size in hung.bpf.c.
const maxPreEnds = 256

// slowKind is the type of the sleeping lock whose slow path fn is, and
// LockUnknown when it is none.
func slowKind(fn string) LockKind {
	switch {
	case fn == "rwsem_down_read_slowpath":
		return LockRWSemRead
	case fn == "rwsem_down_write_slowpath":
		return LockRWSemWrite
	case fn == "__mutex_lock" || fn == "__mutex_lock_common" || strings.HasPrefix(fn, "__mutex_lock_") || fn == "__ww_mutex_lock":
		return LockMutex
	case strings.HasPrefix(fn, "rt_mutex_slowlock") || fn == "__rt_mutex_slowlock_locked":
		return LockRTMutex
	case fn == "__down_common":
		return LockSemaphore
	case fn == "percpu_rwsem_wait":
		return LockPercpuRWSem
	}
	return LockUnknown
}

// funcOf is a frame's function without a compiler clone's suffix.
func funcOf(frame string) string {
	fn, _, _ := strings.Cut(kstack.Func(frame), ".") // __mutex_lock.constprop.0
	return fn
}

// sleepEnd is the type of the lock whose end was raised on stack
// (innermost first) if that end is the one of the sleep a walk saw on
// slept (innermost first; the walks' stacks leave out the __sched lock
// functions), and LockUnknown otherwise. Past the tracing frames, the
// first must be a sleeping lock's slow path (not a spin lock's, such as
// the wait_lock contended inside that slow path), and past the lock's
// own functions the callers must be the sleep's: the same call site.
func sleepEnd(stack, slept []string) LockKind {
	i := 0
	for i < len(stack) && tracingFrame(stack[i]) {
		i++
	}
	if i >= len(stack) {
		return LockUnknown
	}
	kind := slowKind(funcOf(stack[i]))
	if kind == LockUnknown || len(slept) == 0 {
		return LockUnknown
	}
	i++
	for n := 0; n < 3 && i < len(stack) && lockFunc(funcOf(stack[i])); n++ {
		i++
	}
	rest := stack[i:]
	for j := 0; j < 2 && j < len(slept); j++ {
		if j >= len(rest) || rest[j] != slept[j] {
			return LockUnknown
		}
	}
	return kind
}

// tracingFrame is a frame of the tracepoint's own call into BPF.
func tracingFrame(frame string) bool {
	fn := funcOf(frame)
	return strings.HasPrefix(fn, "0x") || strings.HasPrefix(fn, "bpf_") || strings.HasPrefix(fn, "__bpf_") ||
		strings.HasPrefix(fn, "__traceiter_") || strings.HasPrefix(fn, "trace_")
}

// lockFunc is a sleeping lock's entry (mutex_lock, down_write): frames the
// walks' stacks leave out.
func lockFunc(fn string) bool {
	return strings.Contains(fn, "mutex_lock") || strings.HasPrefix(fn, "down_") || strings.HasPrefix(fn, "__down") ||
		strings.Contains(fn, "rwsem") || strings.HasPrefix(fn, "rt_mutex")
}

// preEnd is a preAttach task's mark in pre_ends.
type preEnd struct {
	scan     int           // the walk that put it in
	at       time.Duration // when that walk read the task (ktime)
	switches uint64        // its switch count then
	proved   bool          // a later walk found it asleep with that same count
}

// markPreEnds runs after each walk. A task marked in pre_ends that ran
// again since the walk before has its end read (joinPreEnd) and its mark
// taken out, so that marks live only while their sleep does and
// contention_end stops looking when none is left. A task asleep since
// before attach whose lock (if any) the walk could not name is put in; a
// later walk that finds it asleep with its switch count unchanged proves
// its mark; and one no longer in that sleep (or whose count moved) is
// taken out. Where task->blocker names every sleeping lock's waiter, no
// task is marked: the walks already name those locks.
func (s *session) markPreEnds() {
	for tid, tr := range s.seen {
		if tr.pre == nil && (s.p.namesAll || tr.lastScan != s.scanNo) {
			continue
		}
		switch {
		case tr.lastScan != s.scanNo:
			// A task woken just before the walk may not have run to its
			// end yet: the next walk (or Collect) looks again.
			if !s.joinPreEnd(tid, tr) && tr.lastScan == s.scanNo-1 {
				continue
			}
			s.unmarkPreEnd(tid, tr)
		case !tr.preAttach || tr.last.Lock != nil:
			s.unmarkPreEnd(tid, tr)
		case tr.pre == nil:
			if len(s.preMarked) >= maxPreEnds {
				s.preDropped++
				continue
			}
			if err := s.p.maps.PreEnds.Update(uint32(tid), hungPreEnd{}, ebpf.UpdateNoExist); err != nil {
				s.preDropped++
				continue
			}
			s.preMarked[tid] = true
			tr.pre = &preEnd{scan: s.scanNo, at: tr.last.At, switches: tr.last.NrSwitches}
		case tr.last.NrSwitches != tr.pre.switches:
			s.unmarkPreEnd(tid, tr) // it ran: put in anew if still in that sleep
		case s.scanNo > tr.pre.scan:
			tr.pre.proved = true
		}
	}
	s.armPreEnds()
}

// joinPreEnd names the lock of a proved mark whose task ran again: the
// first end in its entry that is the sleep's own (preEndLock). It says
// whether the entry holds any end yet.
func (s *session) joinPreEnd(tid int, tr *tracked) bool {
	if !tr.pre.proved || !tr.preAttach || tr.last.Lock != nil {
		return true
	}
	var pe hungPreEnd
	if err := s.p.maps.PreEnds.Lookup(uint32(tid), &pe); err != nil {
		if s.preErr == nil {
			s.preErr = fmt.Errorf("hung: the end of tid %d's wait from before attach: %w", tid, err)
		}
		return true
	}
	for i := 0; i < int(pe.N) && i < len(pe.Slots); i++ {
		sl := &pe.Slots[i]
		stack := endStack(sl.Ips[:], sl.StackBytes, s.syms)
		if l := preEndLock(tr.last, tr.pre.at, sl.LockAddr, time.Duration(sl.EndKtime), stack, s.syms); l != nil {
			tr.ended = l
			break
		}
	}
	return pe.N > 0
}

// finishPreEnds runs at Collect, after its walk: the marks of tasks that
// ran since the walk before but had raised no end yet get one more look,
// a moment later (a task woken just before the walk), and are taken out.
func (s *session) finishPreEnds() {
	waited := false
	for tid, tr := range s.seen {
		if tr.pre == nil || tr.lastScan == s.scanNo {
			continue
		}
		if !waited {
			time.Sleep(preEndGrace)
			waited = true
		}
		s.joinPreEnd(tid, tr)
		s.unmarkPreEnd(tid, tr)
	}
	s.armPreEnds()
}

// preEndGrace is how long Collect waits for a just-woken task's end.
const preEndGrace = 20 * time.Millisecond

// endStack symbolizes the stack an end was raised on.
func endStack(ips []uint64, bytes int64, sym Symbolizer) []string {
	var out []string
	for i, a := range ips {
		if int64(i*8) >= bytes || a == 0 {
			break
		}
		out = append(out, sym.Symbolize(a))
	}
	return out
}

// preEndLock is the lock an end (lock, at, raised on stack) names for
// last, the latest record of a task asleep since before attach, marked
// by a walk that read it at marked; nil when there was no end, when it
// is older than the mark (not one the entry can hold: a sanity check),
// or when no sleeping lock's slow path raised it (the sleep was not a
// lock wait, and the task ran before this end), or when its callers are
// not the sleep's (sleepEnd). The proof (a later walk,
// the same switch count) is what makes it this sleep's end; the last
// walk's time is no bound: it reads the clock after the task's state,
// and a task woken in between may have raised its end before it.
func preEndLock(last *Task, marked time.Duration, lock uint64, at time.Duration, stack []string, sym Symbolizer) *Lock {
	kind := sleepEnd(stack, last.Stack)
	if lock == 0 || at <= marked || kind == LockUnknown {
		return nil
	}
	l := &Lock{Addr: lock, Kind: kind, Source: SourcePreEnd, Name: globalName(sym, lock)}
	t := *last
	t.Lock = l
	nameMMLocks([]*Task{&t})
	return l
}

// unmarkPreEnd takes tid out of pre_ends.
func (s *session) unmarkPreEnd(tid int, tr *tracked) {
	if tr.pre == nil {
		return
	}
	tr.pre = nil
	delete(s.preMarked, tid)
	_ = s.p.maps.PreEnds.Delete(uint32(tid))
}

// armPreEnds tells contention_end whether any tid awaits its end.
func (s *session) armPreEnds() {
	n := uint32(len(s.preMarked))
	if n == s.preArmed {
		return
	}
	if err := s.p.maps.PreArmed.Update(uint32(0), n, ebpf.UpdateAny); err == nil {
		s.preArmed = n
	}
}
