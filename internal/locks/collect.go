package locks

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/bpfrec"
	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/probekit"
)

// Symbolizer turns kernel addresses into "func+0x1f [module]".
type Symbolizer interface {
	Symbolize(addr uint64) string
}

// stackCache symbolizes each stack id once.
type stackCache struct {
	p    *probe
	syms Symbolizer
	memo map[int32][]string
}

func (c *stackCache) get(id int32) []string {
	if id == -1 {
		return nil
	}
	if s, ok := c.memo[id]; ok {
		return s
	}
	var f locksFrames
	var err error
	if uint32(id)&0x80000000 != 0 {
		err = c.p.maps.OwnerFrames.Lookup(uint32(id), &f)
	} else if id >= 0 {
		err = c.p.maps.Stacks.Lookup(uint32(id), &f)
	} else {
		return nil
	}
	var out []string
	if err == nil {
		for _, ip := range f.Ip {
			if ip == 0 {
				break
			}
			out = append(out, c.syms.Symbolize(ip))
		}
	}
	c.memo[id] = out
	return out
}

// sampleQueues reads the waiting readers and writers of every lock with
// waiters now, for the queue-depth time series.
func (p *probe) sampleQueues(at time.Duration, into map[uint64][]QueueSample) (busy bool) {
	var k uint64
	var q locksQueue
	it := p.maps.Queues.Iterate()
	for it.Next(&k, &q) {
		if q.Readers > 0 || q.Writers > 0 {
			into[k] = append(into[k], QueueSample{At: at, Readers: q.Readers, Writers: q.Writers})
			busy = true
		}
	}
	return busy
}

// reading is what locks has seen of lock waits at one Collect, keyed as
// the maps are: the waits the programs folded into their aggregations
// (cumulative since Start) plus the waits they have not folded yet, folded
// here as account() in locks.bpf.c would: those over but not yet folded
// (the programs fold a wait at its waiter's next one, see struct pending)
// and those still going, counted with their time so far. A wait moves from
// one to the other without changing the sum, and a wait still going only
// adds time to it: so the sum only grows, and a window is what it grew by
// (see windows). Maxima, gauges and names are the ended window's.
type reading struct {
	waits   map[locksWaitKey]*waitSum
	waiters map[locksTaskKey]*waiterSum
	owners  map[locksOwnerKey]*ownerSum
	// hists and the mm waits have the waits that ended only: a wait still
	// going is not a value of a histogram yet.
	hists map[locksLockKey]hist.Log2
	// histUnfolded are the histograms a wait not folded yet is in.
	histUnfolded map[locksLockKey]bool
	mm           map[locksMmKey]*mmSum
	prof         map[locksProfKey]uint64
	queues       map[uint64]*queueSum
}

// The sums' unfolded says a wait not folded yet is in them: their key must
// stay in the programs' maps (see windows.evict).
type waitSum struct {
	count, totalNs, ownerReaders, writerHead uint64 // cumulative
	maxNs                                    uint64 // the window's
	maxTID                                   int
	ongoing                                  uint64 // still going now
	unfolded                                 bool
}

type waiterSum struct {
	count, totalNs uint64
	maxNs          uint64
	tgid           int
	comm           string
	ongoing        bool
	unfolded       bool
}

type ownerSum struct {
	count, totalNs uint64
	maxNs          uint64
	tgid           int
	comm           string // "" when the programs could not name it
	unfolded       bool
	// first and last are the window's first and last waits that found
	// it owning the lock, with its clocks then (ns 0: none).
	first, last ownerClock
}

// ownerClock is an owner's CPU and run-queue time at a wait's start.
type ownerClock struct{ ns, rt, rd uint64 }

// note widens the owner's span to a wait that began at c.
func (o *ownerSum) note(c ownerClock) {
	if c.ns == 0 {
		return
	}
	if o.first.ns == 0 || c.ns < o.first.ns {
		o.first = c
	}
	if c.ns > o.last.ns {
		o.last = c
	}
}

type mmSum struct {
	comm       string
	hold, wait hist.Log2
	unfolded   bool
}

type queueSum struct {
	busyTotalNs, busyPeriods          uint64 // cumulative
	maxReaders, maxWriters, busyMaxNs uint64 // the window's
	readers, writers                  int64  // waiting now
}

func newReading() *reading {
	return &reading{
		waits: map[locksWaitKey]*waitSum{}, waiters: map[locksTaskKey]*waiterSum{}, owners: map[locksOwnerKey]*ownerSum{},
		hists: map[locksLockKey]hist.Log2{}, histUnfolded: map[locksLockKey]bool{},
		mm: map[locksMmKey]*mmSum{}, prof: map[locksProfKey]uint64{},
		queues: map[uint64]*queueSum{},
	}
}

// read reads every aggregation map, then the waits not folded yet, with
// window w's maxima. The aggregations first: a wait folded between the two
// reads is in neither, and counted in the next window; read the other way
// it would be in both.
func (p *probe) read(w uint32) (*reading, error) {
	r := newReading()
	var wk locksWaitKey
	var wvs []locksWaitVal
	it := p.maps.Waits.Iterate()
	for it.Next(&wk, &wvs) {
		s := &waitSum{}
		for i := range wvs {
			v := &wvs[i]
			s.count += v.Count
			s.totalNs += v.TotalNs
			s.ownerReaders += uint64(v.OwnerReaders)
			s.writerHead += v.WriterHead
			if m, tid := probekit.WindowMaxTag(v.Max.V, v.Max.Win, v.Max.Tag, w); m > s.maxNs {
				s.maxNs, s.maxTID = m, int(tid)
			}
		}
		r.waits[wk] = s
	}
	if err := it.Err(); err != nil {
		return nil, err
	}

	var tk locksTaskKey
	var tvs []locksTaskVal
	it = p.maps.Waiters.Iterate()
	for it.Next(&tk, &tvs) {
		s := &waiterSum{}
		for i := range tvs {
			v := &tvs[i]
			s.count += v.Count
			s.totalNs += v.TotalNs
			s.maxNs = max(s.maxNs, probekit.WindowMax(v.MaxNs.V, v.MaxNs.Win, w))
			if s.tgid == 0 && v.Tgid != 0 {
				s.tgid, s.comm = int(v.Tgid), bpfrec.CString(v.Comm[:])
			}
		}
		r.waiters[tk] = s
	}
	if err := it.Err(); err != nil {
		return nil, err
	}

	var ok locksOwnerKey
	var ovs []locksOwnerVal
	it = p.maps.Owners.Iterate()
	for it.Next(&ok, &ovs) {
		s := &ownerSum{}
		for i := range ovs {
			v := &ovs[i]
			s.count += v.Count
			s.totalNs += v.TotalNs
			s.maxNs = max(s.maxNs, probekit.WindowMax(v.MaxNs.V, v.MaxNs.Win, w))
			if s.tgid == 0 && v.OwnerTgid != 0 {
				s.tgid, s.comm = int(v.OwnerTgid), bpfrec.CString(v.OwnerComm[:])
			}
			// The first and last waits, across CPUs, with the owner's
			// clocks: the window's slot.
			if sl := w & 1; v.Span.Win[sl] == w {
				f, l := v.Span.First[sl], v.Span.Last[sl]
				s.note(ownerClock{f.Ns, f.Rt, f.Rd})
				s.note(ownerClock{l.Ns, l.Rt, l.Rd})
			}
		}
		r.owners[ok] = s
	}
	if err := it.Err(); err != nil {
		return nil, err
	}

	var lk uint64
	var q locksQueue
	it = p.maps.Queues.Iterate()
	for it.Next(&lk, &q) {
		r.queues[lk] = &queueSum{
			busyTotalNs: q.BusyTotalNs, busyPeriods: q.BusyPeriods,
			maxReaders: probekit.WindowMax(q.MaxReaders.V, q.MaxReaders.Win, w),
			maxWriters: probekit.WindowMax(q.MaxWriters.V, q.MaxWriters.Win, w),
			busyMaxNs:  probekit.WindowMax(q.BusyMaxNs.V, q.BusyMaxNs.Win, w),
			readers:    q.Readers, writers: q.Writers,
		}
	}
	if err := it.Err(); err != nil {
		return nil, err
	}

	var hk locksLockKey
	var hvs []locksWolfHist
	it = p.maps.LockHist.Iterate()
	for it.Next(&hk, &hvs) {
		var h hist.Log2
		for i := range hvs {
			x := hist.FromBPF(&hvs[i], w)
			h.Merge(&x)
		}
		r.hists[hk] = h
	}
	if err := it.Err(); err != nil {
		return nil, err
	}

	var mk locksMmKey
	var mv locksMmVal
	it = p.maps.MmStats.Iterate()
	for it.Next(&mk, &mv) {
		r.mm[mk] = &mmSum{comm: bpfrec.CString(mv.Comm[:]), hold: hist.FromBPF(&mv.Hold, w), wait: hist.FromBPF(&mv.Wait, w)}
	}
	if err := it.Err(); err != nil {
		return nil, err
	}

	var pk locksProfKey
	var pc uint64
	it = p.maps.UnderLock.Iterate()
	for it.Next(&pk, &pc) {
		r.prof[pk] = pc
	}
	if err := it.Err(); err != nil {
		return nil, err
	}

	if err := p.readFolds(r, w); err != nil {
		return nil, err
	}
	if err := p.readPending(r, w); err != nil {
		return nil, err
	}
	return r, nil
}

// readFolds adds the waits (and mmap_lock holds) the programs folded into their per-CPU
// cache (fold_cache in locks.bpf.c) but not yet into the maps: read after
// the maps, so that a slot flushed between the two reads is missed for
// one window rather than counted twice, and marked unfolded, so that its
// keys stay in the maps (the slot's next flush goes there).
func (p *probe) readFolds(r *reading, w uint32) error {
	if p.maps.FoldCache == nil {
		return nil
	}
	var per []locksFoldSlots
	if err := p.maps.FoldCache.Lookup(uint32(0), &per); err != nil {
		return fmt.Errorf("folded spin waits: %w", err)
	}
	for c := range per {
		for i := range per[c].S {
			sl := &per[c].S[i]
			if sl.Val.Count == 0 {
				continue
			}
			ws := r.waits[sl.Key]
			if ws == nil {
				ws = &waitSum{}
				r.waits[sl.Key] = ws
			}
			ws.count += sl.Val.Count
			ws.totalNs += sl.Val.TotalNs
			ws.ownerReaders += uint64(sl.Val.OwnerReaders)
			ws.writerHead += sl.Val.WriterHead
			ws.unfolded = true
			if m, tid := probekit.WindowMaxTag(sl.Val.Max.V, sl.Val.Max.Win, sl.Val.Max.Tag, w); m > ws.maxNs {
				ws.maxNs, ws.maxTID = m, int(tid)
			}
			lk := locksLockKey{Lock: sl.Key.Lock, Type: sl.Key.Type}
			h := r.hists[lk]
			x := hist.FromBPF(&sl.Hist, w)
			h.Merge(&x)
			r.hists[lk] = h
			r.histUnfolded[lk] = true
		}
	}
	// mmap_lock holds, folded per CPU by thread the same way (mm_fold).
	if p.maps.MmFold == nil {
		return nil
	}
	var mper []locksMmFoldSlots
	if err := p.maps.MmFold.Lookup(uint32(0), &mper); err != nil {
		return fmt.Errorf("folded mmap_lock holds: %w", err)
	}
	for c := range mper {
		for i := range mper[c].S {
			sl := &mper[c].S[i]
			if sl.Hold.Count == 0 {
				continue
			}
			m := r.mm[sl.Key]
			if m == nil {
				m = &mmSum{comm: bpfrec.CString(sl.Comm[:])}
				r.mm[sl.Key] = m
			}
			x := hist.FromBPF(&sl.Hold, w)
			m.hold.Merge(&x)
			m.unfolded = true
		}
	}
	return nil
}

// readPending adds the waits the programs have not folded into the
// aggregation maps: those still going (the worst contention, a lock whose
// owner never lets go, never reaches contention_end and would otherwise be
// invisible), those over but not yet folded in, and a thread's waits
// folded in its entry but not yet into its waiters entry (acc_*), with
// window w's maximum.
func (p *probe) readPending(r *reading, w uint32) error {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return fmt.Errorf("clock: %w", err)
	}
	now := uint64(ts.Nano())
	var tid uint32
	var pe locksPending
	it := p.maps.PendingTask.Iterate()
	for it.Next(&tid, &pe) {
		if d, ongoing, ok := pendingWait(&pe, now); ok {
			// A storm's timed wait that is over stands for those its
			// CPU skipped before it (WOLF_STORM), as when folded.
			n := uint32(1)
			if !ongoing {
				n = max(pe.Weight, 1)
			}
			for range n {
				r.addWait(&pe, tid, d, ongoing)
			}
		}
		r.addAccumulated(&pe, tid, w)
	}
	if err := it.Err(); err != nil {
		return err
	}
	// Spin waits, one per CPU at most; only their end is awaited (a spin
	// wait in progress lasts microseconds).
	var zero uint32
	var pcs []locksPending
	if err := p.maps.PendingCpu.Lookup(zero, &pcs); err != nil {
		return fmt.Errorf("pending spin waits: %w", err)
	}
	for i := range pcs {
		if d, ongoing, ok := pendingWait(&pcs[i], now); ok && !ongoing {
			// A storm's timed spin wait stands for those its CPU
			// skipped before it (WOLF_STORM), as when folded.
			for range max(pcs[i].Weight, 1) {
				r.addWait(&pcs[i], pcs[i].Tid, d, false)
			}
		}
	}
	return nil
}

// addAccumulated adds the waits of tid's that its pending entry has
// folded for its waiters entry (account() in locks.bpf.c).
func (r *reading) addAccumulated(pe *locksPending, tid uint32, w uint32) {
	if pe.AccCount == 0 {
		return
	}
	tk := locksTaskKey{Lock: pe.AccLock, Tid: tid}
	t := r.waiters[tk]
	if t == nil {
		t = &waiterSum{tgid: int(pe.Tgid), comm: bpfrec.CString(pe.Comm[:])}
		r.waiters[tk] = t
	}
	t.count += pe.AccCount
	t.totalNs += pe.AccTotalNs
	t.maxNs = max(t.maxNs, probekit.WindowMax(pe.AccMax.V, pe.AccMax.Win, w))
	t.unfolded = true
}

// pendingWait is how long pe's wait lasted, or has lasted by now if it is
// still going; ok is false if pe holds no wait.
func pendingWait(pe *locksPending, now uint64) (d uint64, ongoing, ok bool) {
	switch {
	case pe.StartNs == 0:
		return 0, false, false
	case pe.EndNs != 0:
		if pe.EndNs < pe.StartNs {
			return 0, false, false
		}
		return pe.EndNs - pe.StartNs, false, true
	case pe.StartNs > now:
		return 0, false, false
	}
	return now - pe.StartNs, true, true
}

// addWait adds one wait of tid's as the BPF programs would have folded it
// (account() in locks.bpf.c): per lock and stack, in the lock's histogram
// once it has ended, and for sleeping locks per waiter and owner, and in
// the waiter's own mmap_lock wait histogram.
func (r *reading) addWait(pe *locksPending, tid uint32, d uint64, ongoing bool) {
	wk := locksWaitKey{Lock: pe.Lock, Type: pe.Type, StackId: pe.StackId, MmTgid: pe.MmTgid}
	w := r.waits[wk]
	if w == nil {
		w = &waitSum{}
		r.waits[wk] = w
	}
	w.count++
	w.totalNs += d
	w.unfolded = true
	if d > w.maxNs {
		w.maxNs, w.maxTID = d, int(tid)
	}
	if ongoing {
		w.ongoing++
	}
	if OwnerKind(pe.OwnerKind) == OwnerReaders {
		w.ownerReaders++
	}
	if pe.BehindWriter != 0 {
		w.writerHead++
	}
	if !ongoing {
		lk := locksLockKey{Lock: pe.Lock, Type: pe.Type}
		h := r.hists[lk]
		h.Add(d)
		r.hists[lk] = h
		r.histUnfolded[lk] = true
	}
	if Type(pe.Type).Spins() {
		return
	}
	if pe.MmTgid != 0 && !ongoing {
		mk := locksMmKey{Tgid: pe.Tgid, Tid: tid, MmTgid: pe.MmTgid}
		if Type(pe.Type) == RwsemWrite {
			mk.Write = 1
		}
		m := r.mm[mk]
		if m == nil {
			m = &mmSum{comm: bpfrec.CString(pe.Comm[:])}
			r.mm[mk] = m
		}
		m.wait.Add(d)
		m.unfolded = true
	}
	tk := locksTaskKey{Lock: pe.Lock, Tid: tid}
	t := r.waiters[tk]
	if t == nil {
		t = &waiterSum{tgid: int(pe.Tgid), comm: bpfrec.CString(pe.Comm[:])}
		r.waiters[tk] = t
	}
	t.count++
	t.totalNs += d
	t.maxNs = max(t.maxNs, d)
	t.ongoing = t.ongoing || ongoing
	t.unfolded = true
	if OwnerKind(pe.OwnerKind) == OwnerNone {
		return
	}
	ok := locksOwnerKey{Lock: pe.Lock, OwnerTid: pe.OwnerTid, OwnerStackId: pe.OwnerStackId, OwnerKind: pe.OwnerKind}
	o := r.owners[ok]
	if o == nil {
		o = &ownerSum{} // named from /proc, as an owner the programs could not name
		r.owners[ok] = o
	}
	o.count++
	o.totalNs += d
	o.maxNs = max(o.maxNs, d)
	o.unfolded = true
	o.note(ownerClock{pe.StartNs, pe.OwnerRt, pe.OwnerRd})
}

// holdEvents returns the long holds the ring buffer delivered since the
// previous call, and how many it could not keep.
func (p *probe) holdEvents() ([]locksHoldEvent, uint64, error) {
	return p.holds.Take()
}

// ongoingHolds are the holds still in progress that are already longer
// than threshold: begun while wolf watched, not released by the end of
// the window (on a slow or starved machine, one hold can outlast it). They
// have no release, hence no stack and no event; the holder is named from
// /proc. Where its time went so far is what the release would say: CPU
// time and run-queue wait from the thread's schedstat now, minus the
// programs' readings at acquire, and the time throttled, including a
// throttling still going (a holder throttled with its cgroup holds the
// lock until its next period; the hold can last longer than any window).
func (p *probe) ongoingHolds(threshold time.Duration) []Hold {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return nil
	}
	now := uint64(ts.Nano())
	var out []Hold
	var tid uint32
	var m locksMmThread
	it := p.maps.MmThreads.Iterate()
	for it.Next(&tid, &m) {
		if m.HoldStartNs == 0 || now < m.HoldStartNs || now-m.HoldStartNs < uint64(threshold) {
			continue
		}
		tgid := procTgid(int(tid))
		if tgid == 0 {
			// The thread is gone, and a thread that has exited holds no
			// lock: its release was not seen (an entry left behind), not
			// a hold still going.
			continue
		}
		h := Hold{
			TGID: tgid, TID: int(tid), MMTGID: int(m.MmTgid), Comm: procComm(int(tid)),
			Write: m.Write != 0, Start: time.Duration(m.HoldStartNs), HoldNs: now - m.HoldStartNs,
			ReclaimNs: m.ReclaimNs, ReclaimCalls: m.ReclaimCalls, PagesScanned: m.PagesScanned,
			PagesReclaimed: m.PagesReclaimed, PagesActivated: m.PagesActivated, PagesRefKeep: m.PagesRefKeep,
			ThrottledNs: m.ThrottledNs,
			Ongoing:     true,
		}
		h.Lock = m.HoldLock // the contention's join key
		if p.reclaimShared {
			p.sharedReclaimSoFar(tid, &h)
		}
		if m.ThrottledSince != 0 && now > m.ThrottledSince {
			h.ThrottledNs += now - m.ThrottledSince
		}
		if run, delay, ok := procSchedstat(int(tid)); ok {
			h.RuntimeNs = probekit.Sub(run, m.RuntimeNs)
			// A wait on the run queue still going is not in run_delay
			// yet; the throttled part of it is known.
			h.RunnableNs = max(probekit.Sub(delay, m.RunDelay), h.ThrottledNs)
		}
		out = append(out, h)
	}
	return out
}

// sharedReclaimSoFar turns an ongoing hold's reclaim, read from reclaim's
// per-thread totals (reclaim_shared), from the thread's totals at the
// acquire into what it reclaimed since, as the release does in
// hold_reclaim (locks.bpf.c): a thread whose entry was evicted and made
// again in between counts from zero.
func (p *probe) sharedReclaimSoFar(tid uint32, h *Hold) {
	var rt locksWolfReclaimTask
	if err := p.maps.ReclaimTasks.Lookup(&tid, &rt); err != nil {
		h.ReclaimNs, h.ReclaimCalls, h.PagesScanned, h.PagesReclaimed, h.PagesActivated, h.PagesRefKeep = 0, 0, 0, 0, 0, 0
		return
	}
	if rt.Calls < h.ReclaimCalls {
		h.ReclaimNs, h.ReclaimCalls, h.PagesScanned, h.PagesReclaimed, h.PagesActivated, h.PagesRefKeep = rt.Ns, rt.Calls, rt.Scanned, rt.Reclaimed, rt.Activated, rt.RefKeep
		return
	}
	h.ReclaimNs = probekit.Sub(rt.Ns, h.ReclaimNs)
	h.ReclaimCalls = rt.Calls - h.ReclaimCalls
	h.PagesScanned = probekit.Sub(rt.Scanned, h.PagesScanned)
	h.PagesReclaimed = probekit.Sub(rt.Reclaimed, h.PagesReclaimed)
	h.PagesActivated = probekit.Sub(rt.Activated, h.PagesActivated)
	h.PagesRefKeep = probekit.Sub(rt.RefKeep, h.PagesRefKeep)
}

// procSchedstat reads a thread's CPU time and run-queue wait, in ns
// (/proc/TID/schedstat: se.sum_exec_runtime and sched_info.run_delay, what
// the programs read at acquire; it takes no mmap_lock).
func procSchedstat(tid int) (run, delay uint64, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", tid))
	if err != nil {
		return 0, 0, false
	}
	return parseSchedstat(string(b))
}

func parseSchedstat(s string) (run, delay uint64, ok bool) {
	f := strings.Fields(s)
	if len(f) < 2 {
		return 0, 0, false
	}
	run, err1 := strconv.ParseUint(f[0], 10, 64)
	delay, err2 := strconv.ParseUint(f[1], 10, 64)
	return run, delay, err1 == nil && err2 == nil
}

// procComm and procTgid read a thread's name and process from /proc
// (comm and status take no mmap_lock); "" and 0 when it is gone.
func procComm(tid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", tid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func procTgid(tid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Tgid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
