package reclaim

import (
	"slices"
	"time"

	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/probekit"
)

// windows keeps what the previous Collect read, to turn the maps'
// cumulative readings into windows.
//
// Counters, page counts and histograms only grow: a window is the reading
// minus the previous one. Time in reclaim needs more care, because a call
// in flight at Collect is reported with its time so far, and the call's
// whole duration reaches the maps only when it ends, possibly windows
// later. So time is windowed as "completed calls plus calls in flight,
// so far" (per cgroup and kind, and per thread), a sum that only grows as
// time passes: each window gets what it grew by, split into the part of
// calls that ended (Time, a thread's InReclaim) and the part of calls
// still in flight (their Duration minus Before, the time an earlier window
// already counted). A call that ends between the reading of the completed
// calls and that of the calls in flight is in neither; the sum then dips,
// the dip is not taken as negative time (the larger reading is kept), and
// the call is counted whole in the next window.
//
// Entries of cgroups, threads and histograms that have not changed for
// probekit.IdleAfter readings (and, for a cgroup or thread, have no call
// in flight) are deleted from the maps, which are bounded and attached for
// hours, and forgotten here: a key that comes back counts from zero.
type windows struct {
	cg       map[uint64]reclaimCgStats
	cgMissed map[uint64]bool // cg holds the cgroup's reading before the last
	cgTime   map[cgKind]uint64
	tasks    map[uint32]taskSum
	flights  map[flightKey]flight
	hists    map[reclaimHistKey]hist.Log2
	kswapd   hist.Log2

	idleCg    probekit.Idle[uint64]
	idleTasks probekit.Idle[uint32]
	idleHists probekit.Idle[reclaimHistKey]
}

// evict are the keys to delete from the maps.
type evict struct {
	cgroups []uint64
	tasks   []uint32
	hists   []reclaimHistKey
	samples []uint64
	rereads []uint64
}

type cgKind struct {
	cgid uint64
	kind uint32
}

// taskSum is what a thread did: its completed calls, plus its call in
// flight for time and pages.
type taskSum struct {
	calls, ns, cpu, scanned, reclaimed uint64
	// missed counts readings in a row that had nothing of the thread: a
	// call that ended between the two maps' readings, about to show in
	// the completed ones. Its sums are kept one reading more.
	missed int
}

// flightKey names one call: its thread and start.
type flightKey struct {
	tid   uint32
	start uint64
}

// flight is a call in flight as the previous Collect saw it.
type flight struct {
	elapsed            time.Duration
	scanned, reclaimed uint64
}

// step turns a reading into its window (a raw of deltas: cgroups' and
// threads' counts of the window, their Ns[k] and Ns the completed calls'
// part of the window's time; before tells each call in flight what earlier
// windows counted of it), keeps the reading for the next, and says which
// keys to evict.
func (w *windows) step(cur *raw) (*raw, *evict) {
	ev := &evict{}
	out := &raw{
		cgroups:  map[uint64]*cgRead{},
		tasks:    map[uint32]reclaimWolfReclaimTask{},
		taskMax:  cur.taskMax,
		inflight: cur.inflight,
		before:   map[uint32]flight{},
		hists:    map[reclaimHistKey]hist.Log2{},
		now:      cur.now,
	}
	// Calls in flight: their time so far goes into the sums, and the part
	// of it in this window is set apart from the completed calls'.
	flights := map[flightKey]flight{}
	cgFlying := map[uint64]bool{}
	cgSum := map[cgKind]uint64{}
	cgInFlight := map[cgKind]uint64{}
	tasks := map[uint32]taskSum{}
	taskInFlight := map[uint32]taskSum{}
	for tid, f := range cur.inflight {
		if f.Kind >= numKinds || time.Duration(f.StartNs) > cur.now {
			continue
		}
		e := cur.now - time.Duration(f.StartNs)
		k := flightKey{tid, f.StartNs}
		was := w.flights[k]
		flights[k] = flight{elapsed: e, scanned: f.Scanned, reclaimed: f.Reclaimed}
		out.before[tid] = was
		ck := cgKind{f.Cgid, f.Kind}
		cgFlying[f.Cgid] = true
		cgSum[ck] += uint64(e)
		cgInFlight[ck] += probekit.Sub(uint64(e), uint64(was.elapsed))
		t := tasks[tid]
		t.ns += uint64(e)
		t.scanned += f.Scanned
		t.reclaimed += f.Reclaimed
		tasks[tid] = t
		tf := taskInFlight[tid]
		tf.ns += probekit.Sub(uint64(e), uint64(was.elapsed))
		tf.scanned += probekit.Sub(f.Scanned, was.scanned)
		tf.reclaimed += probekit.Sub(f.Reclaimed, was.reclaimed)
		taskInFlight[tid] = tf
	}

	// A call's batches reach its cgroup's counters at its end (the BPF
	// side sums them in the call meanwhile): the calls in flight are
	// added to their cgroups' readings, which can then dip as the time
	// sums do (a call that ends between the two maps' readings is in
	// neither), and are enveloped the same way.
	readings := map[uint64]*cgRead{}
	for id, c := range cur.cgroups {
		readings[id] = c
	}
	for _, f := range cur.inflight {
		if f.Kind >= numKinds {
			continue
		}
		c := readings[f.Cgid]
		if c == nil {
			c = &cgRead{}
		} else {
			cp := *c
			c = &cp
		}
		addBatches(&c.sum, &f)
		readings[f.Cgid] = c
	}
	cg := map[uint64]reclaimCgStats{}
	for id, c := range readings {
		prev := w.cg[id]
		d := &cgRead{max: c.max, maxCallScanned: c.maxCallScanned, worst: c.worst}
		var keep reclaimCgStats
		cgFields(&d.sum, &c.sum, &prev, probekit.Sub)
		cgFields(&keep, &c.sum, &prev, maxOf)
		keep.UnmatchedLastNs = c.sum.UnmatchedLastNs
		cg[id] = keep
		if d.sum.UnmatchedEnds > 0 {
			d.sum.UnmatchedLastNs = c.sum.UnmatchedLastNs
		}
		for k := range uint32(numKinds) {
			cgSum[cgKind{id, k}] += c.sum.Ns[k]
		}
		out.cgroups[id] = d
	}
	cgTime := map[cgKind]uint64{}
	for ck, sum := range cgSum {
		var win uint64
		win, cgTime[ck] = probekit.Envelope(sum, w.cgTime[ck])
		if d := out.cgroups[ck.cgid]; d != nil {
			d.sum.Ns[ck.kind] = probekit.Sub(win, cgInFlight[ck])
		}
	}

	for tid, ts := range cur.tasks {
		t := tasks[tid]
		t.calls += ts.Calls
		t.ns += ts.Ns
		t.cpu += ts.CpuNs
		t.scanned += ts.Scanned
		t.reclaimed += ts.Reclaimed
		tasks[tid] = t
	}
	keep := map[uint32]taskSum{}
	for tid, t := range tasks {
		prev := w.tasks[tid]
		var d taskSum
		d.calls, t.calls = probekit.Envelope(t.calls, prev.calls)
		d.ns, t.ns = probekit.Envelope(t.ns, prev.ns)
		d.cpu, t.cpu = probekit.Envelope(t.cpu, prev.cpu)
		d.scanned, t.scanned = probekit.Envelope(t.scanned, prev.scanned)
		d.reclaimed, t.reclaimed = probekit.Envelope(t.reclaimed, prev.reclaimed)
		keep[tid] = t
		ts, ok := cur.tasks[tid]
		if !ok {
			continue // only in flight so far: reported from the call
		}
		f := taskInFlight[tid]
		ts.Calls, ts.CpuNs = d.calls, d.cpu
		ts.Ns = probekit.Sub(d.ns, f.ns)
		ts.Scanned = probekit.Sub(d.scanned, f.scanned)
		ts.Reclaimed = probekit.Sub(d.reclaimed, f.reclaimed)
		out.tasks[tid] = ts
	}
	for tid, prev := range w.tasks {
		if _, ok := keep[tid]; !ok && prev.missed == 0 {
			prev.missed++
			keep[tid] = prev
		}
	}

	hists := map[reclaimHistKey]hist.Log2{}
	for k, h := range cur.hists {
		prev := w.hists[k]
		d := h.Sub(&prev)
		out.hists[k] = d
		hists[k] = h
		if w.idleHists.Step(k, d.Count > 0) {
			ev.hists = append(ev.hists, k)
			delete(hists, k)
		}
	}
	out.kswapd = cur.kswapd.Sub(&w.kswapd)

	for id, d := range out.cgroups {
		if w.idleCg.Step(id, d.sum != (reclaimCgStats{}) || cgFlying[id]) {
			ev.cgroups = append(ev.cgroups, id)
			delete(cg, id)
			for k := range uint32(numKinds) {
				delete(cgTime, cgKind{id, k})
			}
		}
	}
	for tid, t := range out.tasks {
		_, flying := cur.inflight[tid]
		if w.idleTasks.Step(tid, t.Calls+t.Ns+t.Scanned+t.Reclaimed > 0 || flying) {
			ev.tasks = append(ev.tasks, tid)
			delete(keep, tid)
		}
	}
	w.idleCg.End()
	w.idleTasks.End()
	w.idleHists.End()

	// A cgroup whose only reading was a call in flight that then ended
	// between the two maps' readings is in no reading at all: its last
	// one is kept one reading more, as a thread's is.
	cgMissed := map[uint64]bool{}
	for id, prev := range w.cg {
		if _, ok := cg[id]; !ok && !w.cgMissed[id] && !slices.Contains(ev.cgroups, id) {
			cg[id] = prev
			cgMissed[id] = true
		}
	}
	w.cg, w.cgMissed, w.cgTime, w.tasks, w.flights = cg, cgMissed, cgTime, keep, flights
	w.hists, w.kswapd = hists, cur.kswapd
	return out, ev
}

// addBatches adds a call's batches in flight to its cgroup's counters, as
// its end will (batches_add in reclaim.bpf.c).
func addBatches(s *reclaimCgStats, f *reclaimInflight) {
	s.Batches += f.Batches
	s.Scanned += f.Scanned
	s.Reclaimed += f.Reclaimed
	s.FileScanned += f.FileScanned
	s.RefKeep += f.RefKeep
	s.ActivateAnon += f.ActivateAnon
	s.ActivateFile += f.ActivateFile
	s.Dirty += f.Dirty
	s.Writeback += f.Writeback
	s.Congested += f.Congested
	s.Immediate += f.Immediate
	s.UnmapFail += f.UnmapFail
}

func maxOf(x, y uint64) uint64 { return max(x, y) }

// evict deletes idle keys from the maps. A call accounted to one of them
// between its reading and now is lost with it: after three idle windows,
// rare.
func (p *probe) evict(ev *evict) {
	probekit.Evict(p.maps.Cgroups, ev.cgroups)
	probekit.Evict(p.maps.ReclaimTasks, ev.tasks)
	probekit.Evict(p.maps.Hists, ev.hists)
	probekit.Evict(p.maps.Samples, ev.samples)
	probekit.Evict(p.maps.Rereads, ev.rereads)
}
