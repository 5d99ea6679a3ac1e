package hung

import (
	"errors"
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

// endKind is the type of the sleeping lock whose slow path raised a
// contention_end, from the stack it was raised on (innermost first: the
// tracing frames, then the slow path); LockUnknown when no sleeping
// lock's slow path is among them (a spin lock's, or none).
func endKind(stack []string) LockKind {
	for _, fr := range stack {
		fn, _, _ := strings.Cut(kstack.Func(fr), ".") // __mutex_lock.constprop.0
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
	}
	return LockUnknown
}

// preEnd is a preAttach task's mark in pre_ends.
type preEnd struct {
	scan     int    // the walk that put it in
	switches uint64 // its switch count at that walk
	proved   bool   // a later walk found it asleep with that same count
}

// markPreEnds runs after each walk: it puts in pre_ends the tasks asleep
// since before attach whose lock (if any) the walk could not name, proves the marks a later walk found untouched, and takes out the
// tasks no longer in that sleep.
func (s *session) markPreEnds() {
	for tid, tr := range s.seen {
		if tr.lastScan != s.scanNo {
			continue // ran again, or not seen: kept for Collect
		}
		switch {
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
			tr.pre = &preEnd{scan: s.scanNo, switches: tr.last.NrSwitches}
		case s.scanNo > tr.pre.scan && tr.last.NrSwitches == tr.pre.switches:
			tr.pre.proved = true
		}
	}
	s.armPreEnds()
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

// joinPreEnds names, at Collect, the lock of each proved mark whose task
// ran again: the first contention_end it raised after the mark, if that
// came after the last walk that found it asleep.
func (s *session) joinPreEnds() error {
	var errs []error
	for tid, tr := range s.seen {
		if tr.pre == nil || !tr.pre.proved || tr.lastScan == s.scanNo || tr.ended != nil {
			continue
		}
		var pe hungPreEnd
		if err := s.p.maps.PreEnds.Lookup(uint32(tid), &pe); err != nil {
			errs = append(errs, fmt.Errorf("hung: pre_ends of tid %d: %w", tid, err))
			continue
		}
		if l := preEndLock(tr.last, pe.LockAddr, time.Duration(pe.EndKtime), endStack(&pe, s.syms), s.syms); l != nil {
			tr.ended = l
		}
	}
	return errors.Join(errs...)
}

// endStack symbolizes the stack an end was raised on.
func endStack(pe *hungPreEnd, sym Symbolizer) []string {
	var out []string
	for i, a := range pe.Ips {
		if int64(i*8) >= pe.StackBytes || a == 0 {
			break
		}
		out = append(out, sym.Symbolize(a))
	}
	return out
}

// preEndLock is the lock an end (lock, at, raised on stack) names for
// last, the latest record of a task asleep since before attach; nil when
// there was no end, when it came before that record (it cannot end this
// sleep), or when no sleeping lock's slow path raised it (the sleep was
// not a lock wait, and the task ran before this end).
func preEndLock(last *Task, lock uint64, at time.Duration, stack []string, sym Symbolizer) *Lock {
	kind := endKind(stack)
	if lock == 0 || at <= last.At || kind == LockUnknown {
		return nil
	}
	l := &Lock{Addr: lock, Kind: kind, Source: SourcePreEnd, Name: globalName(sym, lock)}
	t := *last
	t.Lock = l
	nameMMLocks([]*Task{&t})
	return l
}
