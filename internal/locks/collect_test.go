package locks

import (
	"os"
	"testing"
)

func comm16(s string) (c [16]int8) {
	for i := range min(len(s), 15) {
		c[i] = int8(s[i])
	}
	return c
}

func TestPendingWait(t *testing.T) {
	for _, c := range []struct {
		name           string
		start, end     uint64
		d              uint64
		ongoing, valid bool
	}{
		{"empty", 0, 0, 0, false, false},
		{"over, not folded", 100, 350, 250, false, true},
		{"going on", 100, 0, 900, true, true},
		{"begun after now (clock read before)", 2000, 0, 0, false, false},
		{"end before start (torn)", 300, 200, 0, false, false},
	} {
		pe := locksPending{StartNs: c.start, EndNs: c.end}
		d, ongoing, ok := pendingWait(&pe, 1000)
		if d != c.d || ongoing != c.ongoing || ok != c.valid {
			t.Errorf("%s: got %d %v %v, want %d %v %v", c.name, d, ongoing, ok, c.d, c.ongoing, c.valid)
		}
	}
}

// A wait the programs left unfolded is added as account() would have:
// per lock, in the histogram, to the waiter it merges with, to the owner,
// and for a thread's own mmap_lock to its wait histogram; a spin wait only
// per lock; a wait still going everywhere but in the histograms.
func TestAddWaitFoldsLikeBPF(t *testing.T) {
	r := newReading()
	r.waiters[locksTaskKey{Lock: 0x10, Tid: 7}] = &waiterSum{count: 2, totalNs: 300, maxNs: 200, tgid: 5, comm: "w"}
	pe := locksPending{Lock: 0x10, Type: uint32(RwsemWrite), StackId: -1, OwnerStackId: -1, OwnerTid: 9,
		OwnerKind: uint32(OwnerTask), MmTgid: 5, Tgid: 5, Comm: comm16("w")}
	r.addWait(&pe, 7, 500, false)

	wk := locksWaitKey{Lock: 0x10, Type: uint32(RwsemWrite), StackId: -1, MmTgid: 5}
	if w := r.waits[wk]; w == nil || w.count != 1 || w.totalNs != 500 || w.ongoing != 0 || w.maxTID != 7 {
		t.Errorf("waits %+v", r.waits)
	}
	if h := r.hists[locksLockKey{Lock: 0x10, Type: uint32(RwsemWrite)}]; h.Count != 1 || h.Max != 500 {
		t.Errorf("histogram %+v", h)
	}
	if w := r.waiters[locksTaskKey{Lock: 0x10, Tid: 7}]; w.count != 3 || w.totalNs != 800 || w.maxNs != 500 || w.ongoing {
		t.Errorf("waiter %+v", w)
	}
	ok := locksOwnerKey{Lock: 0x10, OwnerTid: 9, OwnerStackId: -1, OwnerKind: uint32(OwnerTask)}
	if o := r.owners[ok]; o == nil || o.count != 1 || o.totalNs != 500 || o.comm != "" {
		t.Errorf("owners %+v", r.owners)
	}
	if m := r.mm[locksMmKey{Tgid: 5, Tid: 7, MmTgid: 5, Write: 1}]; m == nil || m.wait.Count != 1 || m.wait.Sum != 500 {
		t.Errorf("mmap_lock waits %+v", r.mm)
	}

	// Still going: counted as ongoing, and in no histogram.
	pe2 := pe
	pe2.Comm = comm16("new")
	r.addWait(&pe2, 8, 4000, true)
	if w := r.waiters[locksTaskKey{Lock: 0x10, Tid: 8}]; w == nil || w.comm != "new" || !w.ongoing || w.totalNs != 4000 {
		t.Errorf("new waiter %+v", w)
	}
	if w := r.waits[wk]; w.ongoing != 1 || w.count != 2 {
		t.Errorf("ongoing wait %+v", w)
	}
	if h := r.hists[locksLockKey{Lock: 0x10, Type: uint32(RwsemWrite)}]; h.Count != 1 || len(r.mm) != 1 {
		t.Errorf("a wait still going in a histogram: %+v, mm %+v", h, r.mm)
	}

	// A spin wait: per lock and histogram only.
	spin := locksPending{Lock: 0x20, Type: uint32(Spinlock), StackId: -1, Tgid: 3}
	nw, no := len(r.waiters), len(r.owners)
	r.addWait(&spin, 3, 50, false)
	if len(r.waits) != 2 || len(r.hists) != 2 || len(r.waiters) != nw || len(r.owners) != no {
		t.Errorf("spin wait: %d waits %d hists %d waiters %d owners", len(r.waits), len(r.hists), len(r.waiters), len(r.owners))
	}
}

// pending is one wait as struct pending holds it, with its thread.
type pending struct {
	pe  locksPending
	tid uint32
}

// readingOf builds a reading the way read does: the programs' folded
// waits (accounted as account() would, into the maps' sums), then the
// waits not folded yet, over or still going at now.
func readingOf(folded []pending, unfolded []pending, now uint64) *reading {
	r := newReading()
	for _, f := range folded {
		d, _, _ := pendingWait(&f.pe, now)
		r.addWait(&f.pe, f.tid, d, false)
	}
	// Those are the maps' now, not waits still to fold.
	for _, v := range r.waits {
		v.unfolded = false
	}
	for _, v := range r.waiters {
		v.unfolded = false
	}
	for _, v := range r.owners {
		v.unfolded = false
	}
	for _, v := range r.mm {
		v.unfolded = false
	}
	clear(r.histUnfolded)
	for _, u := range unfolded {
		if d, ongoing, ok := pendingWait(&u.pe, now); ok {
			r.addWait(&u.pe, u.tid, d, ongoing)
		}
	}
	return r
}

// One thread's wait on one mutex, 1 s to 6 s, seen by four Collects: still
// going at 3 s and 5 s, over but not folded at 7 s, folded by 9 s. The
// windows count it once, in the first; split its 5 s between the windows
// it spans; put it in the histogram once, when it has ended; and do not
// count the programs' fold of a wait user space folded already.
func TestWindowsOfOneWait(t *testing.T) {
	const s = 1_000_000_000
	going := pending{locksPending{StartNs: 1 * s, Lock: 0x10, Type: uint32(Mutex), StackId: -1, OwnerStackId: -1}, 7}
	over := going
	over.pe.EndNs = 6 * s
	var w windows
	type want struct {
		count, totalNs, ongoing, histCount uint64
	}
	var total want
	for i, c := range []struct {
		now              uint64
		folded, unfolded []pending
		want             want
	}{
		{3 * s, nil, []pending{going}, want{1, 2 * s, 1, 0}},
		{5 * s, nil, []pending{going}, want{0, 2 * s, 1, 0}},
		{7 * s, nil, []pending{over}, want{0, 1 * s, 0, 1}},
		{9 * s, []pending{over}, nil, want{}},
	} {
		win, _ := w.step(readingOf(c.folded, c.unfolded, c.now))
		var got want
		for _, v := range win.waits {
			got.count += v.count
			got.totalNs += v.totalNs
			got.ongoing += v.ongoing
		}
		for _, h := range win.hists {
			got.histCount += h.Count
		}
		if got != c.want {
			t.Errorf("window %d: %+v, want %+v", i+1, got, c.want)
		}
		total.count += got.count
		total.totalNs += got.totalNs
		total.histCount += got.histCount
	}
	if total.count != 1 || total.totalNs != 5*s || total.histCount != 1 {
		t.Errorf("the windows add up to %+v: one wait of 5 s", total)
	}
}

// The programs fold a wait between the reading of their aggregations and
// that of the waits not folded: the reading has it in neither. The window
// is not negative, and the wait is not counted again when it shows.
func TestWindowsShortReading(t *testing.T) {
	wait := pending{locksPending{StartNs: 100, EndNs: 300, Lock: 0x10, Type: uint32(Mutex), StackId: -1}, 7}
	other := pending{locksPending{StartNs: 400, EndNs: 450, Lock: 0x10, Type: uint32(Mutex), StackId: -1}, 8}
	var w windows
	var count uint64
	for i, c := range []struct {
		folded, unfolded []pending
		want             uint64
	}{
		{nil, []pending{wait}, 1},              // over, not folded
		{nil, nil, 0},                          // folded in between: in neither
		{[]pending{wait}, []pending{other}, 1}, // shows folded; another wait
		{[]pending{wait, other}, nil, 0},       // the other one folded
	} {
		win, _ := w.step(readingOf(c.folded, c.unfolded, 1000))
		var got uint64
		for _, v := range win.waits {
			got += v.count
		}
		if got != c.want {
			t.Errorf("window %d: %d waits, want %d", i+1, got, c.want)
		}
		count += got
	}
	if count != 2 {
		t.Errorf("%d waits counted in all, 2 were made", count)
	}
}

// A key that stops changing is evicted from the programs' maps after
// evictAfter readings without change, and forgotten: if the lock is waited on again, the
// new entry counts from zero.
func TestWindowsEvictIdleKeys(t *testing.T) {
	wait := pending{locksPending{StartNs: 100, EndNs: 300, Lock: 0x10, Type: uint32(Mutex), StackId: -1}, 7}
	var w windows
	// Reading 1 has the wait; readings 2 to evictAfter+1 see no change.
	for i := 1; i <= evictAfter+1; i++ {
		win, ev := w.step(readingOf([]pending{wait}, nil, 1000))
		if i <= evictAfter && len(ev.waits)+len(ev.waiters) != 0 {
			t.Fatalf("reading %d: evicted %+v early", i, ev)
		}
		if i == evictAfter+1 && (len(ev.waits) != 1 || len(ev.waiters) != 1 || len(ev.hists) != 1) {
			t.Fatalf("reading %d: evicted %+v, want the wait's keys", i, ev)
		}
		if n := len(win.waits); (i == 1) != (n == 1) {
			t.Errorf("reading %d: %d waits in the window", i, n)
		}
	}
	// Deleted from the map, the key comes back with a new wait: one.
	win, _ := w.step(readingOf([]pending{wait}, nil, 1000))
	var count uint64
	for _, v := range win.waits {
		count += v.count
	}
	if count != 1 {
		t.Errorf("the wait after eviction counts %d, want 1", count)
	}
	// A wait not folded yet keeps its keys in the maps.
	var u windows
	for range evictAfter + 1 {
		if _, ev := u.step(readingOf(nil, []pending{wait}, 1000)); len(ev.waits)+len(ev.waiters)+len(ev.hists) != 0 {
			t.Fatalf("evicted %+v with a wait not folded in them", ev)
		}
	}
}

func TestParseSchedstat(t *testing.T) {
	if run, delay, ok := parseSchedstat("2216591883 14077651393 4121\n"); !ok || run != 2216591883 || delay != 14077651393 {
		t.Errorf("%d %d %v", run, delay, ok)
	}
	if _, _, ok := parseSchedstat("\n"); ok {
		t.Error("empty schedstat parsed")
	}
	// This thread's own: it has run.
	if run, _, ok := procSchedstat(os.Getpid()); !ok || run == 0 {
		t.Errorf("own schedstat: %d %v", run, ok)
	}
}

// A thread's waits its pending entry folded for its waiters entry count
// there, with the window's maximum, and keep the key (unfolded).
func TestAddAccumulated(t *testing.T) {
	r := newReading()
	r.waiters[locksTaskKey{Lock: 0x10, Tid: 7}] = &waiterSum{count: 2, totalNs: 300, maxNs: 200, tgid: 5, comm: "w"}
	pe := locksPending{Lock: 0x20, Tgid: 5, Comm: comm16("w"), AccLock: 0x10, AccCount: 3, AccTotalNs: 900}
	pe.AccMax.V = [2]uint64{0, 600} // window 3's slot is 1
	pe.AccMax.Win = [2]uint32{0, 3}
	r.addAccumulated(&pe, 7, 3)
	if w := r.waiters[locksTaskKey{Lock: 0x10, Tid: 7}]; w.count != 5 || w.totalNs != 1200 || w.maxNs != 600 || !w.unfolded {
		t.Errorf("waiter %+v", w)
	}
	if _, ok := r.waiters[locksTaskKey{Lock: 0x20, Tid: 7}]; ok {
		t.Error("the pending wait's own lock got the accumulated waits")
	}
	// A new key: named from the entry; nothing folded, nothing added.
	r.addAccumulated(&locksPending{Tgid: 6, Comm: comm16("x"), AccLock: 0x30, AccCount: 1, AccTotalNs: 50}, 8, 4)
	if w := r.waiters[locksTaskKey{Lock: 0x30, Tid: 8}]; w == nil || w.count != 1 || w.comm != "x" || w.tgid != 6 || w.maxNs != 0 {
		t.Errorf("new waiter %+v", w)
	}
	r.addAccumulated(&locksPending{AccLock: 0x40}, 9, 4)
	if _, ok := r.waiters[locksTaskKey{Lock: 0x40, Tid: 9}]; ok {
		t.Error("an entry with nothing accumulated added a waiter")
	}
}
