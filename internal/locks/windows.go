package locks

import (
	"time"

	"github.com/wolf-investigator/wolf/internal/bpfrec"
	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/probekit"
)

// windows keeps, key by key, the largest reading of each sum so far, to
// turn readings (see reading) into windows.
//
// Each sum only grows: the programs' aggregations are cumulative, a wait
// they have not folded yet is added as they would fold it, and a wait
// still going adds its time so far. So a window is what each sum grew by
// since the previous reading, and:
//   - a wait is counted once, in the window it is first seen in (still
//     going, over but not folded, or folded), whatever happens to it next;
//   - its time is split between the windows it spans: a wait still going
//     at Collect gives the window its time so far, and the next windows
//     the rest;
//   - a wait over but not folded at one Collect, and folded by the next,
//     moves from one part of the sum to the other: the window sees no
//     change (the Go fold is not counted again);
//   - a wait folded between the reading of the aggregations and that of
//     the waits not folded is in neither: the reading comes short, the
//     window is not negative (the largest reading is kept), and the wait
//     shows in the next reading, counted once then.
//
// A wait still going is not a value of a histogram yet: histograms have
// the waits that ended. Maxima are the window's (the programs keep them
// per window, wolf.h's struct wolf_max, and a wait that ends in one window
// and is folded in a later one gives its maximum to the window it ended
// in); Ongoing and the queues' depth are gauges, read at Collect.
//
// A key a reading does not have (never one of the programs' maps, which
// only grow; a wait not folded yet, folded between the two reads) is kept
// one reading more, then forgotten (its thread's entry was evicted, or a
// lost end replaced the wait).
//
// The programs' maps are bounded and their keys (locks, threads, stacks)
// come and go over hours: a key that has not changed for evictAfter
// readings, and has no wait in it that the programs have not folded, is
// deleted from its map (evict), and forgotten here, so that it counts
// from zero if it comes back.
type windows struct {
	waits   map[locksWaitKey]waitSum
	waiters map[locksTaskKey]waiterSum
	owners  map[locksOwnerKey]ownerSum
	hists   map[locksLockKey]hist.Log2
	mm      map[locksMmKey]mmSum
	prof    map[locksProfKey]uint64
	queues  map[uint64]queueSum
	missed  missed
	idle    idle
}

// evictAfter is how many readings in a row a key of the programs' maps
// must stay unchanged before it is deleted from them: three windows, a
// few minutes of wolf watch, without a wait on that lock, of that thread.
const evictAfter = 3

// idle counts, per key, the readings in a row it did not change.
type idle struct {
	waits   map[locksWaitKey]int
	waiters map[locksTaskKey]int
	owners  map[locksOwnerKey]int
	hists   map[locksLockKey]int
	mm      map[locksMmKey]int
	prof    map[locksProfKey]int
	queues  map[uint64]int
}

// evict are the keys to delete from the programs' maps.
type evict struct {
	waits   []locksWaitKey
	waiters []locksTaskKey
	owners  []locksOwnerKey
	hists   []locksLockKey
	mm      []locksMmKey
	prof    []locksProfKey
	queues  []uint64
}

// idleStep notes whether key k changed in this reading, in next (the
// counts to keep), and says whether it has now been idle long enough to
// evict; then it is forgotten, in next and in keep.
func idleStep[K comparable, V any](prev, next map[K]int, keep map[K]V, k K, changed bool, out *[]K) {
	n := 0
	if !changed {
		n = prev[k] + 1
	}
	if n >= evictAfter {
		*out = append(*out, k)
		delete(keep, k)
		return
	}
	next[k] = n
}

// missed are the keys kept one reading more, per map.
type missed struct {
	waits   map[locksWaitKey]bool
	waiters map[locksTaskKey]bool
	owners  map[locksOwnerKey]bool
	hists   map[locksLockKey]bool
	mm      map[locksMmKey]bool
}

// carry adds to next the keys of prev it lacks, unless they were carried
// once already, and returns the keys it carried.
func carry[K comparable, V any](next, prev map[K]V, was map[K]bool) map[K]bool {
	now := map[K]bool{}
	for k, v := range prev {
		if _, ok := next[k]; !ok && !was[k] {
			next[k] = v
			now[k] = true
		}
	}
	return now
}

// forget drops evicted keys from a reading and from the keys carried.
func forget[K comparable, V any](keys []K, cur map[K]V, was map[K]bool) {
	for _, k := range keys {
		delete(cur, k)
		delete(was, k)
	}
}

// envHist is the window of a cumulative histogram whose readings can come
// short (probekit.Envelope, slot by slot), with the reading's maximum.
func envHist(cur, largest hist.Log2) (window, keep hist.Log2) {
	window.Max, keep.Max = cur.Max, cur.Max
	for i := range cur.Slots {
		window.Slots[i], keep.Slots[i] = probekit.Envelope(cur.Slots[i], largest.Slots[i])
	}
	window.Count, keep.Count = probekit.Envelope(cur.Count, largest.Count)
	window.Sum, keep.Sum = probekit.Envelope(cur.Sum, largest.Sum)
	return window, keep
}

// step returns the window of a reading, and the keys to evict from the
// programs' maps, and keeps the reading for the next.
func (w *windows) step(cur *reading) (*reading, *evict) {
	out := newReading()
	env := probekit.Envelope
	ev := &evict{}
	nidle := idle{
		waits: map[locksWaitKey]int{}, waiters: map[locksTaskKey]int{}, owners: map[locksOwnerKey]int{},
		hists: map[locksLockKey]int{}, mm: map[locksMmKey]int{}, prof: map[locksProfKey]int{}, queues: map[uint64]int{},
	}

	waits := make(map[locksWaitKey]waitSum, len(cur.waits))
	for k, c := range cur.waits {
		p := w.waits[k]
		d := &waitSum{maxNs: c.maxNs, maxTID: c.maxTID, ongoing: c.ongoing}
		var keep waitSum
		d.count, keep.count = env(c.count, p.count)
		d.totalNs, keep.totalNs = env(c.totalNs, p.totalNs)
		d.ownerReaders, keep.ownerReaders = env(c.ownerReaders, p.ownerReaders)
		d.writerHead, keep.writerHead = env(c.writerHead, p.writerHead)
		waits[k] = keep
		if d.count+d.totalNs+d.ongoing > 0 {
			out.waits[k] = d
		}
		idleStep(w.idle.waits, nidle.waits, waits, k, d.count+d.totalNs > 0 || c.unfolded, &ev.waits)
	}

	waiters := make(map[locksTaskKey]waiterSum, len(cur.waiters))
	for k, c := range cur.waiters {
		p := w.waiters[k]
		d := &waiterSum{maxNs: c.maxNs, tgid: c.tgid, comm: c.comm, ongoing: c.ongoing}
		var keep waiterSum
		d.count, keep.count = env(c.count, p.count)
		d.totalNs, keep.totalNs = env(c.totalNs, p.totalNs)
		waiters[k] = keep
		if d.count+d.totalNs > 0 || d.ongoing {
			out.waiters[k] = d
		}
		idleStep(w.idle.waiters, nidle.waiters, waiters, k, d.count+d.totalNs > 0 || c.unfolded, &ev.waiters)
	}

	owners := make(map[locksOwnerKey]ownerSum, len(cur.owners))
	for k, c := range cur.owners {
		p := w.owners[k]
		d := &ownerSum{maxNs: c.maxNs, tgid: c.tgid, comm: c.comm, first: c.first, last: c.last}
		var keep ownerSum
		d.count, keep.count = env(c.count, p.count)
		d.totalNs, keep.totalNs = env(c.totalNs, p.totalNs)
		owners[k] = keep
		if d.count+d.totalNs > 0 {
			out.owners[k] = d
		}
		idleStep(w.idle.owners, nidle.owners, owners, k, d.count+d.totalNs > 0 || c.unfolded, &ev.owners)
	}

	hists := make(map[locksLockKey]hist.Log2, len(cur.hists))
	for k, c := range cur.hists {
		var d hist.Log2
		d, hists[k] = envHist(c, w.hists[k])
		if d.Count > 0 {
			out.hists[k] = d
		}
		idleStep(w.idle.hists, nidle.hists, hists, k, d.Count > 0 || cur.histUnfolded[k], &ev.hists)
	}

	mm := make(map[locksMmKey]mmSum, len(cur.mm))
	for k, c := range cur.mm {
		p := w.mm[k]
		d := &mmSum{comm: c.comm}
		keep := mmSum{comm: c.comm}
		d.hold, keep.hold = envHist(c.hold, p.hold)
		d.wait, keep.wait = envHist(c.wait, p.wait)
		mm[k] = keep
		if d.hold.Count+d.wait.Count > 0 {
			out.mm[k] = d
		}
		idleStep(w.idle.mm, nidle.mm, mm, k, d.hold.Count+d.wait.Count > 0 || c.unfolded, &ev.mm)
	}

	prof := make(map[locksProfKey]uint64, len(cur.prof))
	for k, c := range cur.prof {
		var d uint64
		d, prof[k] = env(c, w.prof[k])
		if d > 0 {
			out.prof[k] = d
		}
		idleStep(w.idle.prof, nidle.prof, prof, k, d > 0, &ev.prof)
	}

	queues := make(map[uint64]queueSum, len(cur.queues))
	for k, c := range cur.queues {
		p := w.queues[k]
		d := *c
		var keep queueSum
		d.busyTotalNs, keep.busyTotalNs = env(c.busyTotalNs, p.busyTotalNs)
		d.busyPeriods, keep.busyPeriods = env(c.busyPeriods, p.busyPeriods)
		// Waiters queued since an earlier window, and still there, are
		// this window's too.
		d.maxReaders = max(d.maxReaders, uint64(max(c.readers, 0)))
		d.maxWriters = max(d.maxWriters, uint64(max(c.writers, 0)))
		queues[k] = keep
		if d.maxReaders+d.maxWriters > 0 {
			out.queues[k] = &d
		}
		idleStep(w.idle.queues, nidle.queues, queues, k, d.busyPeriods+d.maxReaders+d.maxWriters > 0 || c.readers+c.writers != 0, &ev.queues)
	}

	w.missed = missed{
		waits:   carry(waits, w.waits, w.missed.waits),
		waiters: carry(waiters, w.waiters, w.missed.waiters),
		owners:  carry(owners, w.owners, w.missed.owners),
		hists:   carry(hists, w.hists, w.missed.hists),
		mm:      carry(mm, w.mm, w.missed.mm),
	}
	// Evicted keys are not carried: they are gone from the maps too.
	forget(ev.waits, waits, w.missed.waits)
	forget(ev.waiters, waiters, w.missed.waiters)
	forget(ev.owners, owners, w.missed.owners)
	forget(ev.hists, hists, w.missed.hists)
	forget(ev.mm, mm, w.missed.mm)
	w.waits, w.waiters, w.owners, w.hists, w.mm, w.prof, w.queues = waits, waiters, owners, hists, mm, prof, queues
	w.idle = nidle
	return out, ev
}

// fill turns a window into the snapshot's lists, symbolizing stacks and
// naming, from /proc, owners the programs could not name.
func (r *reading) fill(sc *stackCache, s *Snapshot) {
	for k, v := range r.waits {
		s.Waits = append(s.Waits, Wait{
			Lock: k.Lock, Type: Type(k.Type), Stack: sc.get(k.StackId), MMTGID: int(k.MmTgid),
			Count: v.count, TotalNs: v.totalNs, MaxNs: v.maxNs, MaxTID: v.maxTID,
			ReaderOwned: v.ownerReaders, BehindWriter: v.writerHead, Ongoing: v.ongoing,
		})
	}
	for k, v := range r.waiters {
		s.Waiters = append(s.Waiters, Waiter{
			Lock: k.Lock, TID: int(k.Tid), TGID: v.tgid, Comm: v.comm,
			Count: v.count, TotalNs: v.totalNs, MaxNs: v.maxNs, Ongoing: v.ongoing,
		})
	}
	for k, v := range r.owners {
		tgid, comm := v.tgid, v.comm
		if comm == "" {
			// The programs name an owner when they fold its first wait,
			// if its task is still the one seen at begin (owner_name in
			// locks.bpf.c); otherwise /proc names it if the tid lives.
			tgid, comm = s.tgidOf(int(k.OwnerTid)), s.comm(int(k.OwnerTid))
		}
		o := Owner{
			Lock: k.Lock, TID: int(k.OwnerTid), TGID: tgid, Comm: comm,
			Kind: OwnerKind(k.OwnerKind), Stack: sc.get(k.OwnerStackId),
			Count: v.count, TotalNs: v.totalNs, MaxNs: v.maxNs,
		}
		if f, l := v.first, v.last; l.ns > f.ns && l.rt >= f.rt && l.rd >= f.rd {
			o.SpanNs, o.OnCPUNs, o.RunnableNs = l.ns-f.ns, l.rt-f.rt, l.rd-f.rd
		}
		s.Owners = append(s.Owners, o)
	}
	for k, v := range r.queues {
		s.Queues = append(s.Queues, Queue{
			Lock: k, MaxReaders: v.maxReaders, MaxWriters: v.maxWriters, Readers: v.readers, Writers: v.writers,
			BusyMaxNs: v.busyMaxNs, BusyTotalNs: v.busyTotalNs, BusyPeriods: v.busyPeriods,
		})
	}
	for k, h := range r.hists {
		s.Hists = append(s.Hists, LockHist{Lock: k.Lock, Type: Type(k.Type), Hist: h})
	}
	for k, v := range r.mm {
		s.MM = append(s.MM, MMStat{
			TGID: int(k.Tgid), TID: int(k.Tid), MMTGID: int(k.MmTgid), Write: k.Write != 0,
			Comm: v.comm, Hold: v.hold, Wait: v.wait,
		})
	}
	for k, n := range r.prof {
		s.Profile = append(s.Profile, ProfileStack{
			TGID: int(k.Tgid), TID: int(k.Tid), Write: k.Write != 0, Stack: sc.get(k.StackId), Count: n,
		})
	}
}

// holds turns the window's long mmap_lock holds into the snapshot's.
func holds(sc *stackCache, evs []locksHoldEvent) []Hold {
	out := make([]Hold, 0, len(evs))
	for _, e := range evs {
		out = append(out, Hold{
			TGID: int(e.Tgid), TID: int(e.Tid), MMTGID: int(e.MmTgid), Comm: bpfrec.CString(e.Comm[:]),
			Write: e.Write != 0, Start: time.Duration(e.StartNs), HoldNs: e.HoldNs,
			RuntimeNs: e.RuntimeNs, CSW: e.Csw, Stack: sc.get(e.StackId),
			ReclaimNs: e.ReclaimNs, ReclaimCalls: e.ReclaimCalls, PagesScanned: e.PagesScanned,
			PagesReclaimed: e.PagesReclaimed, PagesActivated: e.PagesActivated, PagesRefKeep: e.PagesRefKeep,
			RunnableNs: e.RunnableNs, ThrottledNs: e.ThrottledNs, Lock: e.Lock,
		})
	}
	return out
}

// evict deletes keys from the programs' maps. A wait folded into one of
// them between its reading and now is lost with it: the key had not
// changed for evictAfter windows, so that is one event in a blue moon.
func (p *probe) evict(ev *evict) {
	probekit.Evict(p.maps.Waits, ev.waits)
	probekit.Evict(p.maps.Waiters, ev.waiters)
	probekit.Evict(p.maps.Owners, ev.owners)
	probekit.Evict(p.maps.LockHist, ev.hists)
	probekit.Evict(p.maps.MmStats, ev.mm)
	probekit.Evict(p.maps.UnderLock, ev.prof)
	probekit.Evict(p.maps.Queues, ev.queues)
}
