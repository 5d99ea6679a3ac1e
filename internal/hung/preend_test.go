package hung

import (
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
)

// An end is a sleeping lock's when its stack has that lock's slow path:
// a spin lock's end, or one with no slow path, names nothing.
func TestEndKind(t *testing.T) {
	tracing := []string{"bpf_trace_run2+0x85", "__bpf_trace_contention_end+0xd"}
	for _, c := range []struct {
		stack []string
		want  LockKind
	}{
		{append(tracing, "__mutex_lock.constprop.0+0x3a1", "fuse_lock_inode+0x33"), LockMutex},
		{append(tracing, "rwsem_down_write_slowpath+0x24c", "down_write+0x5b"), LockRWSemWrite},
		{append(tracing, "rwsem_down_read_slowpath+0x1e2", "down_read+0x48"), LockRWSemRead},
		{append(tracing, "rt_mutex_slowlock.constprop.0+0x50"), LockRTMutex},
		{append(tracing, "queued_spin_lock_slowpath+0x1e2", "_raw_spin_lock+0x29"), LockUnknown},
		{nil, LockUnknown},
	} {
		if got := endKind(c.stack); got != c.want {
			t.Errorf("%q: %v, want %v", c.stack, got, c.want)
		}
	}
}

// An end names the lock only if it came after the mark, from a sleeping
// lock's slow path; the ended wait is then a fact on that lock, with no
// owner (unknown without task->blocker).
func TestPreEndNamesTheEndedWait(t *testing.T) {
	s := time.Second
	last := rec(7, 0, 41*s, nil)
	mutex := []string{"__mutex_lock.constprop.0+0x3a1"}
	if l := preEndLock(last, 40*s, 0, 42*s, mutex, fakeSyms{}); l != nil {
		t.Errorf("no end, lock %+v", l)
	}
	if l := preEndLock(last, 40*s, 0xa0, 40*s, mutex, fakeSyms{}); l != nil {
		t.Errorf("an end before the mark, lock %+v", l)
	}
	if l := preEndLock(last, 40*s, 0xa0, 42*s, []string{"_raw_spin_lock+0x29"}, fakeSyms{}); l != nil {
		t.Errorf("a spin lock's end, lock %+v", l)
	}
	l := preEndLock(last, 40*s, 0xa0, 42*s, mutex, fakeSyms{})
	if l == nil || l.Addr != 0xa0 || l.Kind != LockMutex || l.Source != SourcePreEnd || l.Owner != OwnerNone {
		t.Fatalf("lock %+v", l)
	}
	mm := rec(8, 0, 41*s, nil)
	mm.MMLockAddr = 0xb0
	if l := preEndLock(mm, 40*s, 0xb0, 42*s, []string{"rwsem_down_read_slowpath+0x1e2"}, fakeSyms{}); l == nil || l.MMPID != 8 || l.Kind != LockRWSemRead {
		t.Errorf("mmap_lock %+v", l)
	}

	seen := map[int]*tracked{}
	track(seen, rec(7, 0, 40*s, nil), 1)
	track(seen, last, 2)
	track(seen, rec(9, 0, 40*s, nil), 1) // ran again, no end named
	if ended, _ := endedEarly(seen, 3, 0); len(ended) != 0 {
		t.Fatalf("ended without a lock: %+v", ended)
	}
	seen[7].ended = l
	ended, _ := endedEarly(seen, 3, 0)
	if len(ended) != 1 || ended[0].TID != 7 || ended[0].Lock != l || ended[0].Blocked != 41*s {
		t.Fatalf("ended %+v", ended)
	}
	if seen[7].last.Lock != nil {
		t.Errorf("the walk's record changed: %+v", seen[7].last.Lock)
	}
	snap := &Snapshot{Ended: ended, Threshold: 5 * s}
	_, set := ConcludeFacts(snap)
	if set == nil || len(set.Waits) != 1 || len(set.Holds) != 0 {
		t.Fatalf("facts %+v", set)
	}
	w := set.Waits[0]
	if w.Kind != fact.WaitLock || !w.AtLeast || w.Max != 41*s || w.On != fact.LockKey("0xa0") {
		t.Errorf("wait %+v", w)
	}
}
