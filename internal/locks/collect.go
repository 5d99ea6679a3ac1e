package locks

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/bpfrec"
	"github.com/wolf-investigator/wolf/internal/hist"
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
func (p *probe) sampleQueues(at time.Duration, into map[uint64][]QueueSample) {
	var k uint64
	var q locksQueue
	it := p.maps.Queues.Iterate()
	for it.Next(&k, &q) {
		if q.Readers > 0 || q.Writers > 0 {
			into[k] = append(into[k], QueueSample{At: at, Readers: q.Readers, Writers: q.Writers})
		}
	}
}

// collect reads every aggregation map into a snapshot.
func (p *probe) collect(syms Symbolizer, s *Snapshot) error {
	sc := &stackCache{p: p, syms: syms, memo: map[int32][]string{}}

	var wk locksWaitKey
	var wvs []locksWaitVal
	it := p.maps.Waits.Iterate()
	for it.Next(&wk, &wvs) {
		wv := sumWaits(wvs)
		s.Waits = append(s.Waits, Wait{
			Lock: wk.Lock, Type: Type(wk.Type), Stack: sc.get(wk.StackId), MMTGID: int(wk.MmTgid),
			Count: wv.Count, TotalNs: wv.TotalNs, MaxNs: wv.MaxNs, MaxTID: int(wv.MaxTid),
			ReaderOwned: uint64(wv.OwnerReaders), BehindWriter: wv.WriterHead,
		})
	}
	if err := it.Err(); err != nil {
		return err
	}

	var tk locksTaskKey
	var tvs []locksTaskVal
	it = p.maps.Waiters.Iterate()
	for it.Next(&tk, &tvs) {
		tv := sumTasks(tvs)
		s.Waiters = append(s.Waiters, Waiter{
			Lock: tk.Lock, TID: int(tk.Tid), TGID: int(tv.Tgid), Comm: bpfrec.CString(tv.Comm[:]),
			Count: tv.Count, TotalNs: tv.TotalNs, MaxNs: tv.MaxNs,
		})
	}
	if err := it.Err(); err != nil {
		return err
	}

	var ok locksOwnerKey
	var ovs []locksOwnerVal
	it = p.maps.Owners.Iterate()
	for it.Next(&ok, &ovs) {
		ov := sumOwners(ovs)
		tgid, comm := int(ov.OwnerTgid), bpfrec.CString(ov.OwnerComm[:])
		if comm == "" {
			// The programs name an owner when they fold its first wait,
			// if its task is still the one seen at begin (owner_name in
			// locks.bpf.c); otherwise /proc names it if the tid lives.
			tgid, comm = s.tgidOf(int(ok.OwnerTid)), s.comm(int(ok.OwnerTid))
		}
		s.Owners = append(s.Owners, Owner{
			Lock: ok.Lock, TID: int(ok.OwnerTid), TGID: tgid, Comm: comm,
			Kind: OwnerKind(ok.OwnerKind), Stack: sc.get(ok.OwnerStackId),
			Count: ov.Count, TotalNs: ov.TotalNs, MaxNs: ov.MaxNs,
		})
		if o := &s.Owners[len(s.Owners)-1]; ov.LastNs > ov.FirstNs && ov.LastRt >= ov.FirstRt && ov.LastRd >= ov.FirstRd {
			o.SpanNs, o.OnCPUNs, o.RunnableNs = ov.LastNs-ov.FirstNs, ov.LastRt-ov.FirstRt, ov.LastRd-ov.FirstRd
		}
	}
	if err := it.Err(); err != nil {
		return err
	}

	var lk uint64
	var q locksQueue
	it = p.maps.Queues.Iterate()
	for it.Next(&lk, &q) {
		if q.MaxReaders+q.MaxWriters == 0 {
			continue
		}
		s.Queues = append(s.Queues, Queue{
			Lock: lk, MaxReaders: q.MaxReaders, MaxWriters: q.MaxWriters, Readers: q.Readers, Writers: q.Writers,
			BusyMaxNs: q.BusyMaxNs, BusyTotalNs: q.BusyTotalNs, BusyPeriods: q.BusyPeriods,
		})
	}
	if err := it.Err(); err != nil {
		return err
	}

	var hk locksLockKey
	var hvs []locksWolfHist
	it = p.maps.LockHist.Iterate()
	for it.Next(&hk, &hvs) {
		var h hist.Log2
		for i := range hvs {
			x := hist.FromBPF(&hvs[i])
			h.Merge(&x)
		}
		s.Hists = append(s.Hists, LockHist{Lock: hk.Lock, Type: Type(hk.Type), Hist: h})
	}
	if err := it.Err(); err != nil {
		return err
	}

	var mk locksMmKey
	var mv locksMmVal
	it = p.maps.MmStats.Iterate()
	for it.Next(&mk, &mv) {
		s.MM = append(s.MM, MMStat{
			TGID: int(mk.Tgid), TID: int(mk.Tid), MMTGID: int(mk.MmTgid), Write: mk.Write != 0,
			Comm: bpfrec.CString(mv.Comm[:]), Hold: hist.FromBPF(&mv.Hold), Wait: hist.FromBPF(&mv.Wait),
		})
	}
	if err := it.Err(); err != nil {
		return err
	}

	var pk locksProfKey
	var pc uint64
	it = p.maps.UnderLock.Iterate()
	for it.Next(&pk, &pc) {
		s.Profile = append(s.Profile, ProfileStack{
			TGID: int(pk.Tgid), TID: int(pk.Tid), Write: pk.Write != 0, Stack: sc.get(pk.StackId), Count: pc,
		})
	}
	if err := it.Err(); err != nil {
		return err
	}

	if err := p.collectPending(sc, s); err != nil {
		return err
	}

	events, lost := p.holdEvents()
	for _, e := range events {
		h := Hold{
			TGID: int(e.Tgid), TID: int(e.Tid), MMTGID: int(e.MmTgid), Comm: bpfrec.CString(e.Comm[:]),
			Write: e.Write != 0, Start: time.Duration(e.StartNs), HoldNs: e.HoldNs,
			RuntimeNs: e.RuntimeNs, CSW: e.Csw, Stack: sc.get(e.StackId),
			ReclaimNs: e.ReclaimNs, ReclaimCalls: e.ReclaimCalls, PagesScanned: e.PagesScanned,
			PagesReclaimed: e.PagesReclaimed, PagesActivated: e.PagesActivated, PagesRefKeep: e.PagesRefKeep,
			RunnableNs: e.RunnableNs, ThrottledNs: e.ThrottledNs, Lock: e.Lock,
		}
		s.Holds = append(s.Holds, h)
	}
	s.HoldsLost = lost
	return nil
}

// collectPending adds the waits the BPF programs have not folded into the
// aggregation maps: those still going when wolf stopped (the worst
// contention, a lock whose owner never lets go, never reaches
// contention_end and would otherwise be invisible), and those over but not
// yet folded in (the programs fold a wait at its waiter's next one, see
// struct pending).
func (p *probe) collectPending(sc *stackCache, s *Snapshot) error {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return fmt.Errorf("clock: %w", err)
	}
	now := uint64(ts.Nano())
	waiterAt := map[[2]uint64]int{}
	for i, w := range s.Waiters {
		waiterAt[[2]uint64{w.Lock, uint64(w.TID)}] = i
	}
	var tid uint32
	var pe locksPending
	it := p.maps.PendingTask.Iterate()
	for it.Next(&tid, &pe) {
		d, ongoing, ok := pendingWait(&pe, now)
		if !ok {
			continue
		}
		s.addWait(sc, &pe, tid, d, ongoing, waiterAt)
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
			s.addWait(sc, &pcs[i], pcs[i].Tid, d, false, waiterAt)
		}
	}
	return nil
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
// (account() in locks.bpf.c): per lock and stack, in the lock's
// histogram, and for sleeping locks per waiter and owner.
func (s *Snapshot) addWait(sc *stackCache, pe *locksPending, tid uint32, d uint64, ongoing bool, waiterAt map[[2]uint64]int) {
	w := Wait{
		Lock: pe.Lock, Type: Type(pe.Type), Stack: sc.get(pe.StackId), MMTGID: int(pe.MmTgid),
		Count: 1, TotalNs: d, MaxNs: d, MaxTID: int(tid),
	}
	if ongoing {
		w.Ongoing = 1
	}
	if OwnerKind(pe.OwnerKind) == OwnerReaders {
		w.ReaderOwned = 1
	}
	if pe.BehindWriter != 0 {
		w.BehindWriter = 1
	}
	s.Waits = append(s.Waits, w)
	var h hist.Log2
	h.Add(d)
	s.Hists = append(s.Hists, LockHist{Lock: pe.Lock, Type: Type(pe.Type), Hist: h})
	if Type(pe.Type).Spins() {
		return
	}
	if pe.MmTgid != 0 && !ongoing { // as in BPF: the wait histogram has the waits that ended
		s.addMMWait(int(pe.Tgid), int(tid), int(pe.MmTgid), bpfrec.CString(pe.Comm[:]), Type(pe.Type) == RwsemWrite, d)
	}
	k := [2]uint64{pe.Lock, uint64(tid)}
	if i, ok := waiterAt[k]; ok {
		w := &s.Waiters[i]
		w.Count++
		w.TotalNs += d
		w.MaxNs = max(w.MaxNs, d)
		w.Ongoing = w.Ongoing || ongoing
	} else {
		waiterAt[k] = len(s.Waiters)
		s.Waiters = append(s.Waiters, Waiter{
			Lock: pe.Lock, TID: int(tid), TGID: int(pe.Tgid), Comm: bpfrec.CString(pe.Comm[:]),
			Count: 1, TotalNs: d, MaxNs: d, Ongoing: ongoing,
		})
	}
	if OwnerKind(pe.OwnerKind) != OwnerNone {
		s.Owners = append(s.Owners, Owner{
			Lock: pe.Lock, TID: int(pe.OwnerTid), TGID: s.tgidOf(int(pe.OwnerTid)), Comm: s.comm(int(pe.OwnerTid)),
			Kind: OwnerKind(pe.OwnerKind), Stack: sc.get(pe.OwnerStackId), Count: 1, TotalNs: d, MaxNs: d,
		})
	}
}

// addMMWait files a wait for a thread's own mmap_lock under the thread,
// as account_mm_wait does.
func (s *Snapshot) addMMWait(tgid, tid, mmTGID int, comm string, write bool, d uint64) {
	for i := range s.MM {
		m := &s.MM[i]
		if m.TGID == tgid && m.TID == tid && m.MMTGID == mmTGID && m.Write == write {
			m.Wait.Add(d)
			return
		}
	}
	m := MMStat{TGID: tgid, TID: tid, MMTGID: mmTGID, Write: write, Comm: comm}
	m.Wait.Add(d)
	s.MM = append(s.MM, m)
}

// The aggregation maps are per CPU: each CPU's counts add up; a maximum
// is the largest; names and pids come from whichever CPU saw them first.
func sumWaits(vs []locksWaitVal) locksWaitVal {
	var t locksWaitVal
	for _, v := range vs {
		t.Count += v.Count
		t.TotalNs += v.TotalNs
		if v.MaxNs > t.MaxNs {
			t.MaxNs, t.MaxTid = v.MaxNs, v.MaxTid
		}
		t.OwnerReaders += v.OwnerReaders
		t.WriterHead += v.WriterHead
	}
	return t
}

func sumTasks(vs []locksTaskVal) locksTaskVal {
	var t locksTaskVal
	for _, v := range vs {
		t.Count += v.Count
		t.TotalNs += v.TotalNs
		t.MaxNs = max(t.MaxNs, v.MaxNs)
		if t.Tgid == 0 && v.Tgid != 0 {
			t.Tgid, t.Comm = v.Tgid, v.Comm
		}
	}
	return t
}

func sumOwners(vs []locksOwnerVal) locksOwnerVal {
	var t locksOwnerVal
	for _, v := range vs {
		t.Count += v.Count
		t.TotalNs += v.TotalNs
		t.MaxNs = max(t.MaxNs, v.MaxNs)
		// The first and last waits, across CPUs, with the owner's clocks.
		if v.FirstNs != 0 && (t.FirstNs == 0 || v.FirstNs < t.FirstNs) {
			t.FirstNs, t.FirstRt, t.FirstRd = v.FirstNs, v.FirstRt, v.FirstRd
		}
		if v.LastNs > t.LastNs {
			t.LastNs, t.LastRt, t.LastRd = v.LastNs, v.LastRt, v.LastRd
		}
		if t.OwnerTgid == 0 && v.OwnerTgid != 0 {
			t.OwnerTgid, t.OwnerComm = v.OwnerTgid, v.OwnerComm
		}
	}
	return t
}

// statNames name enum lock_stat's counters, in order.
var statNames = []string{"begin", "end", "pending_full", "nested", "unmatched_end", "waits_full",
	"tasks_full", "owners_full", "queue_full", "stack_err", "mm_events", "mm_holds_full",
	"mm_stats_full", "mm_unmatched", "hold_drops", "samples", "samples_under_lock", "profile_full", "stale", "throttled_holds"}

// stats reads the per-CPU counters, summed, by name; nil if unreadable
// (the report then has no event and drop counts, nothing else is lost).
func (p *probe) stats() map[string]uint64 {
	out, _ := bpfrec.Counters(p.maps.Stats, statNames)
	return out
}
