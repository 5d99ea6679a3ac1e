package hung

import (
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
)

// An end is the sleep's when, past the tracing frames, a sleeping lock's
// slow path raised it from the call site the walks saw the task asleep
// at: not the wait_lock contended inside that slow path, not a later wait
// from elsewhere.
func TestSleepEnd(t *testing.T) {
	tracing := []string{"0xffffffffc0001e5e", "bpf_trace_run2+0x16a"}
	slept := []string{"fuse_lock_inode+0x33", "fuse_lookup+0x93", "__lookup_slow+0x87"}
	with := func(frames ...string) []string { return append(append([]string{}, tracing...), frames...) }
	for _, c := range []struct {
		stack, slept []string
		want         LockKind
	}{
		{with("__mutex_lock.constprop.0+0x762", "fuse_lock_inode+0x33", "fuse_lookup+0x93"), slept, LockMutex},
		{with("__mutex_lock.constprop.0+0x762", "mutex_lock+0x1d", "fuse_lock_inode+0x33", "fuse_lookup+0x93"), slept, LockMutex},
		{with("rwsem_down_write_slowpath+0x24c", "down_write+0x5b", "do_truncate+0x70", "x+0x1"), []string{"do_truncate+0x70", "x+0x1"}, LockRWSemWrite},
		{with("rwsem_down_read_slowpath+0x1e2", "down_read+0x48", "f+0x10"), []string{"f+0x10"}, LockRWSemRead},
		// The mutex's wait_lock, contended inside its slow path.
		{with("native_queued_spin_lock_slowpath+0x2a", "_raw_spin_lock_irqsave+0x3f", "__mutex_lock.constprop.0+0x300", "fuse_lock_inode+0x33"), slept, LockUnknown},
		// A later wait on a mutex from elsewhere.
		{with("__mutex_lock.constprop.0+0x762", "other_site+0x20", "fuse_lookup+0x93"), slept, LockUnknown},
		{with("__mutex_lock.constprop.0+0x762", "fuse_lock_inode+0x33"), nil, LockUnknown},
		{nil, slept, LockUnknown},
	} {
		if got := sleepEnd(c.stack, c.slept); got != c.want {
			t.Errorf("%q on %q: %v, want %v", c.stack, c.slept, got, c.want)
		}
	}
}

// An end names the lock only if it came after the mark, from a sleeping
// lock's slow path; the ended wait is then a fact on that lock, with no
// owner (unknown without task->blocker).
func TestPreEndNamesTheEndedWait(t *testing.T) {
	s := time.Second
	last := rec(7, 0, 41*s, nil)
	last.Stack = []string{"fuse_lock_inode+0x33", "fuse_lookup+0x93"}
	mutex := []string{"bpf_trace_run2+0x16a", "__mutex_lock.constprop.0+0x3a1", "fuse_lock_inode+0x33", "fuse_lookup+0x93"}
	if l := preEndLock(last, 40*s, 0, 42*s, mutex, fakeSyms{}); l != nil {
		t.Errorf("no end, lock %+v", l)
	}
	if l := preEndLock(last, 40*s, 0xa0, 40*s, mutex, fakeSyms{}); l != nil {
		t.Errorf("an end before the mark, lock %+v", l)
	}
	if l := preEndLock(last, 40*s, 0xa0, 42*s, []string{"native_queued_spin_lock_slowpath+0x2a", "_raw_spin_lock_irqsave+0x3f", "__mutex_lock.constprop.0+0x300", "fuse_lock_inode+0x33"}, fakeSyms{}); l != nil {
		t.Errorf("a spin lock's end, lock %+v", l)
	}
	l := preEndLock(last, 40*s, 0xa0, 42*s, mutex, fakeSyms{})
	if l == nil || l.Addr != 0xa0 || l.Kind != LockMutex || l.Source != SourcePreEnd || l.Owner != OwnerNone {
		t.Fatalf("lock %+v", l)
	}
	mm := rec(8, 0, 41*s, nil)
	mm.MMLockAddr = 0xb0
	mm.Stack = []string{"f+0x10"}
	if l := preEndLock(mm, 40*s, 0xb0, 42*s, []string{"rwsem_down_read_slowpath+0x1e2", "down_read+0x48", "f+0x10"}, fakeSyms{}); l == nil || l.MMPID != 8 || l.Kind != LockRWSemRead {
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
