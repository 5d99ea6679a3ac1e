package reclaim

import (
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/probekit"
)

// One memcg reclaim call of thread 10 in cgroup 7, from 1 s to 6 s,
// scanning 400 pages, seen across windows: in flight at the first two
// Collects, ended at the third. Each window gets the part of its time and
// pages that fell in it; together they are the call, once.
func TestWindowsSplitACallInFlight(t *testing.T) {
	const s = time.Second
	type reading struct {
		now      time.Duration
		flying   bool   // the call is in the inflight map
		scanned  uint64 // so far
		ended    bool   // the cgroup and task maps have it
		wantDone time.Duration
		wantFly  time.Duration // the window's part of the call in flight
	}
	var w windows
	var total time.Duration
	var scanned uint64
	for i, r := range []reading{
		{now: 3 * s, flying: true, scanned: 100, wantFly: 2 * s},
		{now: 5 * s, flying: true, scanned: 300, wantFly: 2 * s},
		// The call ended between the reading of the completed calls and
		// that of the calls in flight: in neither, so nothing this window.
		{now: 6500 * time.Millisecond},
		{now: 8 * s, ended: true, wantDone: 1 * s},
		{now: 9 * s, ended: true},
	} {
		cur := &raw{cgroups: map[uint64]*cgRead{7: {}}, tasks: map[uint32]reclaimWolfReclaimTask{},
			inflight: map[uint32]reclaimInflight{}, now: r.now}
		if r.flying {
			cur.inflight[10] = reclaimInflight{StartNs: uint64(s), Cgid: 7, Kind: kindMemcg, Tgid: 10, Scanned: r.scanned}
		}
		if r.ended {
			cur.cgroups[7].sum.Ns[kindMemcg] = uint64(5 * s)
			cur.cgroups[7].sum.Calls[kindMemcg] = 1
			cur.tasks[10] = reclaimWolfReclaimTask{Cgid: 7, Tgid: 10, Calls: 1, Ns: uint64(5 * s), Scanned: 400}
		}
		win, _ := w.step(cur)
		done := time.Duration(win.cgroups[7].sum.Ns[kindMemcg])
		var fly time.Duration
		if f, ok := win.inflight[10]; ok {
			c := Call{Duration: r.now - time.Duration(f.StartNs), Before: win.before[10].elapsed}
			fly = c.inWindow()
			scanned += f.Scanned - win.before[10].scanned
		}
		if ts, ok := win.tasks[10]; ok {
			scanned += ts.Scanned
			if time.Duration(ts.Ns) != done {
				t.Errorf("window %d: thread's completed time %v, cgroup's %v", i+1, time.Duration(ts.Ns), done)
			}
		}
		if done != r.wantDone || fly != r.wantFly {
			t.Errorf("window %d: completed %v, in flight %v; want %v, %v", i+1, done, fly, r.wantDone, r.wantFly)
		}
		total += done + fly
	}
	if total != 5*s || scanned != 400 {
		t.Errorf("the windows add up to %v and %d pages, the call took 5s and scanned 400", total, scanned)
	}
}

// A call's batches reach its cgroup's counters at its end; until then the
// window adds the call's batches in flight to its cgroup. Across windows,
// with the call ending between the readings of the two maps (in neither
// reading), the cgroup's pages add up to the call's, once.
func TestWindowsCgroupBatchesInFlight(t *testing.T) {
	const s = time.Second
	var w windows
	var scanned, batches, dirty uint64
	for i, r := range []struct {
		flying           bool
		batches, scanned uint64 // the call's so far
		ended            bool   // its cgroup's entry has it
		want             uint64 // pages scanned this window
	}{
		{flying: true, batches: 2, scanned: 100, want: 100},
		{flying: true, batches: 5, scanned: 300, want: 200},
		{want: 0}, // ended between the two readings
		{ended: true, want: 100},
		{ended: true, want: 0},
	} {
		cur := &raw{cgroups: map[uint64]*cgRead{}, tasks: map[uint32]reclaimWolfReclaimTask{},
			inflight: map[uint32]reclaimInflight{}, now: time.Duration(i+2) * s}
		if r.flying {
			cur.inflight[10] = reclaimInflight{StartNs: uint64(s), Cgid: 7, Kind: kindMemcg, Tgid: 10,
				Batches: r.batches, Scanned: r.scanned, Dirty: r.batches}
		}
		if r.ended {
			c := &cgRead{}
			c.sum.Calls[kindMemcg] = 1
			c.sum.Batches, c.sum.Scanned, c.sum.Dirty = 6, 400, 6
			cur.cgroups[7] = c
		}
		win, _ := w.step(cur)
		var got uint64
		if c := win.cgroups[7]; c != nil {
			got = c.sum.Scanned
			batches += c.sum.Batches
			dirty += c.sum.Dirty
		}
		if got != r.want {
			t.Errorf("window %d: %d pages scanned, want %d", i+1, got, r.want)
		}
		scanned += got
	}
	if scanned != 400 || batches != 6 || dirty != 6 {
		t.Errorf("the windows add up to %d pages in %d batches (%d dirty), the call scanned 400 in 6 (6)", scanned, batches, dirty)
	}
}

// Counters are the reading minus the previous one; a window's maxima are
// its own (the programs keep them per window).
func TestWindowsCounters(t *testing.T) {
	var w windows
	step := func(scanned uint64, maxNs uint64) *cgRead {
		cur := &raw{cgroups: map[uint64]*cgRead{3: {max: [numKinds]uint64{maxNs}}}}
		cur.cgroups[3].sum.Scanned = scanned
		win, _ := w.step(cur)
		return win.cgroups[3]
	}
	if c := step(1000, 50); c.sum.Scanned != 1000 || c.max[0] != 50 {
		t.Errorf("first window %+v", c)
	}
	if c := step(1500, 7); c.sum.Scanned != 500 || c.max[0] != 7 {
		t.Errorf("second window %+v", c)
	}
}

// A cgroup, a thread and a histogram that stop changing are evicted after
// probekit.IdleAfter readings without change, unless a call is in flight.
func TestWindowsEvictIdle(t *testing.T) {
	var w windows
	reading := func(flying bool) *raw {
		cur := &raw{cgroups: map[uint64]*cgRead{7: {}}, tasks: map[uint32]reclaimWolfReclaimTask{10: {Cgid: 7, Calls: 2, Ns: 50}},
			inflight: map[uint32]reclaimInflight{}, hists: map[reclaimHistKey]hist.Log2{{Cgid: 7}: {Count: 2}}, now: 100}
		cur.cgroups[7].sum.Calls[kindMemcg] = 2
		if flying {
			cur.inflight[10] = reclaimInflight{StartNs: 50, Cgid: 7, Kind: kindMemcg}
		}
		return cur
	}
	for i := 1; i <= probekit.IdleAfter+1; i++ {
		_, ev := w.step(reading(false))
		n := len(ev.cgroups) + len(ev.tasks) + len(ev.hists)
		if (i <= probekit.IdleAfter && n != 0) || (i == probekit.IdleAfter+1 && n != 3) {
			t.Errorf("reading %d: evict %+v", i, ev)
		}
	}
	// Gone from the maps and forgotten: back, it counts from zero.
	win, _ := w.step(reading(false))
	if win.cgroups[7].sum.Calls[kindMemcg] != 2 || win.tasks[10].Calls != 2 {
		t.Errorf("after eviction: %+v %+v", win.cgroups[7].sum.Calls, win.tasks[10])
	}
	var f windows
	for range probekit.IdleAfter + 2 {
		if _, ev := f.step(reading(true)); len(ev.cgroups)+len(ev.tasks) != 0 {
			t.Fatalf("evicted %+v with a call in flight", ev)
		}
	}
}
