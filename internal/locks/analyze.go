package locks

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/human"
	"github.com/wolf-investigator/wolf/internal/kallsyms"
	"github.com/wolf-investigator/wolf/internal/kstack"
	"github.com/wolf-investigator/wolf/internal/pace"
)

// Snapshot is everything wolf locks saw in one window; Conclude turns it
// into findings without touching the kernel, so it is tested with
// hand-made snapshots.
type Snapshot struct {
	Window    time.Duration
	Waits     []Wait
	Waiters   []Waiter
	Owners    []Owner
	Queues    []Queue
	Hists     []LockHist
	MM        []MMStat
	Holds     []Hold
	HoldsLost uint64
	// ThrottleSeen: sched_switch was watched, or TaskThrottle says no
	// holder can be throttled, so Hold.ThrottledNs is a measurement (0
	// means the holders were not throttled), not unknown.
	ThrottleSeen bool
	// TaskThrottle: this kernel throttles tasks only on their way back to
	// user space (6.18+), so no owner of a kernel lock is throttled while
	// it owns it.
	TaskThrottle  bool
	Profile       []ProfileStack
	HoldThreshold time.Duration
	// Slowdown is how many times slower than an ordinary machine this one
	// runs (pace.Slowdown; 0 or 1: ordinary): waits and holds are graded
	// as an ordinary machine would take them (pace.Ordinary).
	Slowdown float64
	// SelfTGID is wolf's own process (0: unknown). Its threads' waits are
	// left out by the programs; a lock that is wolf's own mmap_lock, or
	// whose owners were all wolf's threads, is wolf's doing, not the
	// host's (loading its programs reads tens of megabytes of kernel
	// types, faulting under its own mmap_lock while khugepaged waits).
	SelfTGID int
	Top      int    // locks reported; 0 means DefaultTop
	LockName string // --lock given as a name no symbol resolves: keep only this lock
	// Symbol names a kernel address ("rtnl_mutex+0x0"); nil or "" when
	// unknown. Comm names a process by pid, for mmap_lock owners.
	Symbol func(addr uint64) string
	Comm   func(pid int) string
	// TGID finds a thread's process, for waits still going at the end
	// (nil or 0: unknown).
	TGID func(tid int) int

	// aggs caches aggregate(): Conclude and Profiles both walk the locks,
	// and naming them reads /proc (mmap_lock owners' comm).
	aggs []*lockAgg
	// refs are the findings Conclude made, by lock address (contention)
	// and by holding process and mm (mmap_lock holds), for the facts.
	contRefs map[uint64]findingRef
	holdRefs map[[2]int]findingRef
}

// findingRef names a finding: its id and title.
type findingRef struct{ id, title string }

// DefaultTop is how many contended locks a report names.
const DefaultTop = 5

// lockAgg is one lock's contention, all types and stacks together.
type lockAgg struct {
	addr          uint64
	types         map[Type]uint64 // wait ns per type
	mainType      Type
	name          string
	nameFrom      string
	count         uint64
	totalNs       uint64
	maxNs         uint64
	maxTID        int
	readerOwned   uint64
	behindWriter  uint64
	mmTGID        int
	ongoing       uint64
	waits         []Wait
	waiters       []Waiter
	owners        []Owner
	queue         *Queue
	hist          hist.Log2
	topWaitStack  []string
	topWaitSiteFn string
	lru           bool // a memory cgroup's or node's lruvec lock, taken by reclaim
}

// lruFuncs take a lruvec's lru_lock: reclaim (classic and MGLRU) and the
// folio batches that move pages between LRU lists.
var lruFuncs = []string{"evict_folios", "shrink_inactive_list", "shrink_active_list", "isolate_lru_folios",
	"folio_lruvec_lock", "move_folios_to_lru", "folio_batch_move_lru", "lru_add_drain", "lru_gen_", "scan_folios",
	"isolate_folios", "folio_isolate_lru", "shrink_lruvec", "try_to_shrink_lruvec"}

// lruFrame is the first frame of a spinning waiter's stack that takes an
// LRU lock, "" if none does.
func lruFrame(stack []string) string {
	for _, fr := range stack {
		fn := kstack.FuncName(fr)
		for _, l := range lruFuncs {
			if fn == l || (strings.HasSuffix(l, "_") && strings.HasPrefix(fn, l)) || strings.HasPrefix(fn, l+".") {
				return fn
			}
		}
	}
	return ""
}

// Conclude aggregates the snapshot per lock and turns the worst into
// findings, with histograms for the locks it names.
func Conclude(s *Snapshot) ([]finding.Finding, []finding.Histogram) {
	top := s.Top
	if top <= 0 {
		top = DefaultTop
	}
	aggs := s.aggregate()
	var out []finding.Finding
	var hists []finding.Histogram
	n := 0
	for _, a := range aggs {
		if s.LockName != "" && a.name != s.LockName {
			continue
		}
		if n >= top {
			break
		}
		n++
		hists = append(hists, a.hist.Report("lock_wait_us", "us",
			map[string]string{"lock": a.name, "type": a.mainType.String()}, 1000))
		// Everyday contention (a pipe's mutex, a runqueue lock) is not
		// worth a line: below 1% of the window waited and nothing worse
		// than info, the histogram is enough.
		if s.severity(a) == finding.Info && a.totalNs*100 < uint64(s.Window) {
			continue
		}
		cf := s.contentionFinding(a)
		out = append(out, cf)
		if s.contRefs == nil {
			s.contRefs = map[uint64]findingRef{}
		}
		s.contRefs[a.addr] = findingRef{cf.ID, cf.Title}
		if f, ok := s.starvationFinding(a); ok {
			out = append(out, f)
		}
	}
	fs, hs := s.mmapFindings()
	out = append(out, fs...)
	hists = append(hists, hs...)
	return out, hists
}

// aggregate folds waits, waiters, owners, queues and histograms per lock
// address and names each lock, worst (most time waited) first.
func (s *Snapshot) aggregate() []*lockAgg {
	if s.aggs != nil {
		return s.aggs
	}
	byAddr := map[uint64]*lockAgg{}
	get := func(addr uint64) *lockAgg {
		a := byAddr[addr]
		if a == nil {
			a = &lockAgg{addr: addr, types: map[Type]uint64{}}
			byAddr[addr] = a
		}
		return a
	}
	for _, w := range s.Waits {
		a := get(w.Lock)
		a.waits = append(a.waits, w)
		a.types[w.Type] += w.TotalNs
		a.count += w.Count
		a.totalNs += w.TotalNs
		if w.MaxNs > a.maxNs {
			a.maxNs, a.maxTID = w.MaxNs, w.MaxTID
		}
		a.readerOwned += w.ReaderOwned
		a.behindWriter += w.BehindWriter
		a.ongoing += w.Ongoing
		if w.MMTGID != 0 {
			a.mmTGID = w.MMTGID
		}
	}
	for _, w := range s.Waiters {
		if a := byAddr[w.Lock]; a != nil {
			a.waiters = append(a.waiters, w)
		}
	}
	for _, o := range s.Owners {
		if a := byAddr[o.Lock]; a != nil {
			a.owners = append(a.owners, o)
		}
	}
	for i := range s.Queues {
		if a := byAddr[s.Queues[i].Lock]; a != nil {
			a.queue = &s.Queues[i]
		}
	}
	for _, h := range s.Hists {
		if a := byAddr[h.Lock]; a != nil {
			a.hist.Merge(&h.Hist)
		}
	}
	// A lock whose waiters are all other processes (/proc readers) is not
	// named by their own mm; a hold of it says whose mmap_lock it is.
	holdMM := map[uint64]int{}
	for _, h := range s.Holds {
		if h.Lock != 0 {
			if mm := cmp.Or(h.MMTGID, h.TGID); mm != 0 {
				holdMM[h.Lock] = mm
			}
		}
	}
	aggs := slices.Collect(maps.Values(byAddr))
	for _, a := range aggs {
		if a.mmTGID == 0 {
			a.mmTGID = holdMM[a.addr]
		}
		var best uint64
		for t, ns := range a.types {
			if ns > best || (ns == best && t < a.mainType) {
				a.mainType, best = t, ns
			}
		}
		slices.SortFunc(a.waits, func(x, y Wait) int { return cmp.Compare(y.TotalNs, x.TotalNs) })
		slices.SortFunc(a.waiters, func(x, y Waiter) int { return cmp.Compare(y.TotalNs, x.TotalNs) })
		slices.SortFunc(a.owners, func(x, y Owner) int { return cmp.Compare(y.TotalNs, x.TotalNs) })
		// The costliest waits that have a stack: under a storm the
		// stacks are a sample (the detail budget), and the waits
		// filed without one say nothing of where the lock is taken.
		for _, w := range a.waits {
			if len(w.Stack) > 0 {
				a.topWaitStack = waiterFrames(w.Stack)
				break
			}
		}
		a.name, a.nameFrom = s.nameLock(a)
	}
	slices.SortFunc(aggs, func(x, y *lockAgg) int {
		if c := cmp.Compare(y.totalNs, x.totalNs); c != 0 {
			return c
		}
		return cmp.Compare(x.addr, y.addr)
	})
	s.aggs = aggs
	return aggs
}

// traceFrames are the tracepoint and BPF frames above the lock's slow path
// in a stack taken at contention_begin.
func traceFrame(fn string) bool {
	for _, p := range []string{"bpf_trace_run", "__bpf_trace_", "__traceiter_", "trace_contention_", "bpf_prog_", "__probestub_"} {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

// waiterFrames drops the tracing frames from the top of a waiter's stack.
func waiterFrames(stack []string) []string {
	for i := len(stack) - 1; i >= 0; i-- {
		if traceFrame(kstack.FuncName(stack[i])) {
			return stack[i+1:]
		}
	}
	return stack
}

// spinPlumbing is the spinlock and rwlock machinery under a spinning
// waiter's caller.
func spinPlumbing(fn string) bool {
	for _, p := range []string{"_raw_spin_", "_raw_read_", "_raw_write_", "queued_", "native_queued_",
		"__pv_queued_", "pv_queued_", "do_raw_spin_", "do_raw_read_", "do_raw_write_", "__raw_spin_",
		"rwsem_", "__down_", "down_", "__mutex_", "mutex_", "up_", "osq_lock", "rt_spin_", "_raw_"} {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

// siteFunc is the first frame of a waiter's stack outside the locking
// machinery: where it asked for the lock.
func siteFunc(frames []string, t Type) (fn, object string, global bool) {
	if !t.Spins() {
		site := kstack.Classify(frames)
		if site.Func != "" || site.Object != "" {
			return site.Func, site.Object, site.Global
		}
	}
	for _, f := range frames {
		name := kstack.FuncName(f)
		if name != "" && !spinPlumbing(name) && !kstack.Unreliable(f) {
			return name, "", false
		}
	}
	return "", "", false
}

// nameLock names a lock for people: a process's mmap_lock, a kernel
// global by symbol or by its waiters' wrapper (rtnl_lock), otherwise by
// type and the function its waiters called from.
func (s *Snapshot) nameLock(a *lockAgg) (name, from string) {
	if a.mmTGID != 0 {
		comm := s.comm(a.mmTGID)
		if comm == "" {
			return fmt.Sprintf("mmap_lock of pid %d", a.mmTGID), "the waiters' own mm"
		}
		return fmt.Sprintf("mmap_lock of %s (pid %d)", comm, a.mmTGID), "the waiters' own mm"
	}
	if s.Symbol != nil {
		if g := kallsyms.GlobalName(s.Symbol(a.addr)); g != "" {
			return g, "kernel symbol"
		}
	}
	fn, object, global := siteFunc(a.topWaitStack, a.mainType)
	a.topWaitSiteFn = fn
	if a.mainType.Spins() {
		if lru := lruFrame(a.topWaitStack); lru != "" {
			a.lru = true
			return "lru_lock in " + lru, "waiters' stacks (LRU reclaim functions)"
		}
	}
	if object != "" && global {
		return object, "waiters' stacks"
	}
	noun := a.mainType.Noun()
	if object != "" {
		noun = object
	}
	if fn != "" {
		return noun + " in " + fn, "waiters' stacks"
	}
	return fmt.Sprintf("%s %x", noun, a.addr), "address"
}

// nsToMs is an evidence value in ms, unrounded.
func nsToMs(ns uint64) float64 { return float64(ns) / 1e6 }

// severity grades contention: sleeping waits by how long tasks were stuck
// (the longest as an ordinary machine would take it), spinning waits by
// the CPU they burned. Contention wolf caused itself is a note.
func (s *Snapshot) severity(a *lockAgg) finding.Severity {
	if s.wolfsOwn(a) {
		return finding.Info
	}
	return s.severityOf(a, uint64(pace.Ordinary(time.Duration(a.maxNs), s.Slowdown)))
}

// wolfsOwn: the lock is wolf's own mmap_lock, or every owner its waits
// were charged to is one of wolf's threads.
func (s *Snapshot) wolfsOwn(a *lockAgg) bool {
	if s.SelfTGID == 0 {
		return false
	}
	if a.mmTGID == s.SelfTGID {
		return true
	}
	for _, o := range a.owners {
		if o.TGID != s.SelfTGID {
			return false
		}
	}
	return len(a.owners) > 0
}

// causeWolf is the evidence cause of a finding about wolf's own doing,
// which the diagnosis stage does not join.
const causeWolf = "wolf"

// severityOf grades contention whose longest wait is maxNs.
func (s *Snapshot) severityOf(a *lockAgg, maxNs uint64) finding.Severity {
	window := uint64(max(s.Window, time.Second))
	if a.mainType.Spins() {
		// A single long spin is more often the hypervisor preempting the
		// holder's vCPU than the kernel misbehaving; CPU burned is what
		// matters.
		switch {
		case a.totalNs >= window/2:
			return finding.Critical
		case a.totalNs >= window/20:
			return finding.Warning
		}
		return finding.Info
	}
	switch {
	case maxNs >= uint64(time.Second) || a.totalNs >= window:
		return finding.Critical
	case maxNs >= uint64(waitWarning) || a.totalNs >= window/10:
		return finding.Warning
	}
	return finding.Info
}

// waitWarning is the longest sleeping wait on a lock that is a warning;
// holdWarning, the longest mmap_lock hold.
const (
	waitWarning = 100 * time.Millisecond
	holdWarning = 100 * time.Millisecond
)

// p99 is the 99th percentile of the window's waits: of those that ended
// (the histogram), or, when all are still going, their longest.
func (a *lockAgg) p99() uint64 {
	if a.hist.Count == 0 {
		return a.maxNs
	}
	return a.hist.Quantile(0.99)
}

func (s *Snapshot) contentionFinding(a *lockAgg) finding.Finding {
	waiters := len(a.waiters)
	f := finding.Finding{
		ID:           "locks.contention",
		Investigator: "locks",
		Severity:     s.severity(a),
		Evidence: map[string]any{
			"lock":           a.name,
			"lock_addr":      fmt.Sprintf("0x%x", a.addr),
			"lock_type":      a.mainType.String(),
			"lock_name_from": a.nameFrom,
			"contentions":    a.count,
			"wait_ns_total":  a.totalNs,
			"max_wait_ns":    a.maxNs,
			"p99_wait_ns":    a.p99(),
			"waiters":        waiters,
			"window_s":       human.Round(s.Window.Seconds(), 2),
		},
	}
	if a.mainType.Spins() {
		delete(f.Evidence, "waiters") // spinning waiters are not tracked per task
	}
	if a.mmTGID != 0 {
		f.Evidence["mm_pid"] = a.mmTGID // whose mmap_lock: the join key for holds and cgroups
	}
	who := ""
	switch {
	case a.mainType.Spins():
		who = fmt.Sprintf(" spinning, in %d waits", a.count)
	case waiters == 1:
		who = " by 1 task"
	default:
		who = fmt.Sprintf(" by %d tasks", waiters)
	}
	f.Title = fmt.Sprintf("%s: %s waited%s", a.name, human.Duration(time.Duration(a.totalNs)), who)
	if len(a.owners) > 0 {
		o := a.owners[0]
		switch o.Kind {
		case OwnerTask:
			f.Title += fmt.Sprintf("; owner %s (pid %d)", o.Comm, o.TGID)
		case OwnerReaders:
			f.Title += "; held by readers"
		}
	}
	f.Summary = fmt.Sprintf("%d contentions on %s (%s) in %s; the longest wait was %s (tid %d), p99 %s.",
		a.count, a.name, a.mainType.Noun(), human.Duration(s.Window), human.Duration(time.Duration(a.maxNs)), a.maxTID,
		human.Duration(time.Duration(a.p99())))
	switch {
	case s.wolfsOwn(a):
		f.Evidence["cause"] = causeWolf
		f.Title += "; wolf's own"
		f.Summary += fmt.Sprintf(" The lock is wolf's own (pid %d): its mmap_lock, or held by its threads only. Loading wolf's programs reads tens of megabytes of the kernel's type information and faults under wolf's mmap_lock, and kernel threads that scan or compact memory (khugepaged) then wait for it: wolf's doing, not the host's.", s.SelfTGID)
		f.Remediation = []string{"Nothing to do about the host; a longer --duration makes wolf's start-up a smaller part of the window."}
	case f.Severity < s.severityOf(a, a.maxNs):
		f.Evidence["machine_slowdown"] = human.Round(s.Slowdown, 1)
		f.Summary += " " + pace.SlowNote("the longest wait", time.Duration(a.maxNs), s.Slowdown)
	}
	if a.lru {
		f.Mechanism = "Each memory cgroup and NUMA node has one lruvec whose lru_lock guards its page lists; every thread reclaiming that cgroup takes it to isolate and put back batches of pages, so many concurrent reclaimers spin on it instead of reclaiming."
	} else if a.mainType.Spins() {
		f.Mechanism = "Waiters spin on the CPU with preemption off until the holder releases the lock, so every waiting nanosecond is CPU time lost. Long holds or many CPUs taking the same lock make it a scalability wall."
	} else {
		f.Mechanism = fmt.Sprintf("Tasks that find the %s held sleep until its owner releases it, so whatever the owner does while holding it (I/O, reclaim, waiting for another lock) is added to every waiter's latency.", a.mainType.Noun())
	}

	// Owners, most waited-for first, with what they were doing.
	var ownerTotal uint64
	for _, o := range a.owners {
		ownerTotal += o.TotalNs
	}
	for i, o := range a.owners {
		if i >= 3 {
			break
		}
		if o.Comm == "" {
			o.Comm = "(exited)" // an owner whose task was gone when wolf named it
		}
		detail := fmt.Sprintf("held it while others waited %s (%d waits)", human.Duration(time.Duration(o.TotalNs)), o.Count)
		ev := map[string]any{"owner": "exact", "waited_ms": nsToMs(o.TotalNs), "waits": o.Count}
		if o.SpanNs > 0 {
			// Where the owner's time went between the first and the last
			// wait that found it owning the lock.
			ev["span_ms"], ev["on_cpu_ms"], ev["runnable_ms"] = nsToMs(o.SpanNs), nsToMs(o.OnCPUNs), nsToMs(o.RunnableNs)
			if s.TaskThrottle {
				ev["throttled_ms"] = 0.0 // not measured per owner: known to be none on this kernel
			}
			detail += fmt.Sprintf("; over the %s between the first and the last of those waits it ran %s and waited for a CPU %s", human.Duration(time.Duration(o.SpanNs)), human.Duration(time.Duration(o.OnCPUNs)), human.Duration(time.Duration(o.RunnableNs)))
		}
		if o.Kind == OwnerReaders {
			detail = fmt.Sprintf("latest reader holding it while others waited %s (%d waits); other readers may hold it too", human.Duration(time.Duration(o.TotalNs)), o.Count)
			ev["owner"], ev["mode"] = "latest_reader", "read"
		} else if a.mainType == RwsemRead || a.mainType == RwsemWrite {
			ev["mode"] = "write" // an rw-semaphore owned by a task is writer-owned
		}
		f.Subjects = append(f.Subjects, finding.Subject{
			Role: finding.RoleOwner, PID: o.TGID, TID: o.TID, Comm: o.Comm, Detail: detail, Stack: o.Stack, Evidence: ev,
		})
	}
	if a.mmTGID != 0 {
		// An mmap_lock's readers are known when wolf saw them hold it.
		var readers []Hold
		for _, h := range s.Holds {
			if h.MMTGID == a.mmTGID && !h.Write {
				readers = append(readers, h)
			}
		}
		slices.SortFunc(readers, func(x, y Hold) int { return cmp.Compare(y.HoldNs, x.HoldNs) })
		for i, h := range readers {
			if i >= 3 {
				break
			}
			f.Subjects = append(f.Subjects, finding.Subject{
				Role: finding.RoleHolder, PID: h.TGID, TID: h.TID, Comm: h.Comm,
				Detail:   fmt.Sprintf("held it for reading %s (on CPU %s of that)", human.Duration(time.Duration(h.HoldNs)), human.Duration(time.Duration(h.RuntimeNs))),
				Evidence: s.holdEvidence(&h),
			})
		}
		if len(readers) > 0 {
			f.Evidence["long_read_holds"] = len(readers)
		}
	}
	if len(a.owners) > 0 {
		f.Evidence["owners"] = len(a.owners)
		f.Evidence["owner_wait_ns_total"] = ownerTotal
	}
	others := 0
	for i, w := range a.waiters {
		// The five who waited most, and up to three waiters from other
		// processes of an mmap_lock: a ps or monitoring agent reading
		// /proc/PID/cmdline, the victim people notice first.
		other := a.mmTGID != 0 && w.TGID != a.mmTGID
		if i >= 5 && (!other || others >= 3) {
			continue
		}
		if other {
			others++
		}
		sub := finding.Subject{
			Role: finding.RoleWaiter, PID: w.TGID, TID: w.TID, Comm: w.Comm,
			Detail:   fmt.Sprintf("waited %s in %d waits, longest %s", human.Duration(time.Duration(w.TotalNs)), w.Count, human.Duration(time.Duration(w.MaxNs))),
			Evidence: map[string]any{"wait_ms_total": nsToMs(w.TotalNs), "wait_ms_max": nsToMs(w.MaxNs), "waits": w.Count},
		}
		if w.Ongoing {
			sub.Detail += ", still waiting"
			sub.Evidence["ongoing"] = true
		}
		if m := s.waitMode(a.mmTGID, w.TID); m != "" {
			sub.Evidence["mode"] = m
		} else if m := a.modeOf(w.TID); m != "" {
			sub.Evidence["mode"] = m // a wait still going: its type, from the wait itself
		}
		if other {
			sub.Detail += fmt.Sprintf("; another process, reading pid %d's memory map (/proc/%d/cmdline, maps, …)", a.mmTGID, a.mmTGID)
		}
		if i == 0 {
			sub.Stack = a.topWaitStack
		}
		f.Subjects = append(f.Subjects, sub)
	}
	if q := a.queue; q != nil {
		if a.mainType == RwsemRead || a.mainType == RwsemWrite {
			f.Evidence["max_waiting_readers"] = q.MaxReaders
			f.Evidence["max_waiting_writers"] = q.MaxWriters
		} else {
			f.Evidence["max_waiters"] = q.MaxReaders + q.MaxWriters
		}
		if q.BusyPeriods > 0 {
			f.Evidence["queue_drain_ms_max"] = nsToMs(q.BusyMaxNs)
		}
		if q.Readers+q.Writers > 0 {
			f.Evidence["waiting_at_end"] = q.Readers + q.Writers
		}
		if series := queueSeries(q.Samples, 60); len(series) > 0 {
			f.Evidence["queue_over_time"] = series
		}
	}
	if a.readerOwned > 0 {
		f.Evidence["reader_owned_waits"] = a.readerOwned
	}
	if a.ongoing > 0 {
		f.Evidence["still_waiting"] = a.ongoing
		f.Summary += fmt.Sprintf(" %d still waiting at the end of the window.", a.ongoing)
	}
	f.Remediation = s.remediation(a)
	return f
}

// waitMode says how a thread waited for an mmap_lock: "read", "write" or
// "read+write", from its per-mode wait histograms; "" when unknown.
func (s *Snapshot) waitMode(mmTGID, tid int) string {
	if mmTGID == 0 {
		return ""
	}
	var r, w bool
	for _, m := range s.MM {
		if m.TID != tid || m.Wait.Count == 0 || (m.MMTGID != 0 && m.MMTGID != mmTGID) {
			continue
		}
		if m.Write {
			w = true
		} else {
			r = true
		}
	}
	switch {
	case r && w:
		return "read+write"
	case w:
		return "write"
	case r:
		return "read"
	}
	return ""
}

// modeOf is how a waiter of an rw-semaphore wanted it, from the waits it
// was the longest waiter of; "" when unknown.
func (a *lockAgg) modeOf(tid int) string {
	for _, w := range a.waits {
		if w.MaxTID != tid {
			continue
		}
		switch w.Type {
		case RwsemRead:
			return "read"
		case RwsemWrite:
			return "write"
		}
	}
	return ""
}

// holdEvidence is one hold's split, for its holder subject: where the
// holder's wall time went while it held the lock.
func (s *Snapshot) holdEvidence(h *Hold) map[string]any {
	ev := map[string]any{
		"hold_ms":     nsToMs(h.HoldNs),
		"on_cpu_ms":   nsToMs(h.RuntimeNs),
		"runnable_ms": nsToMs(h.RunnableNs),
		"reclaim_ms":  nsToMs(h.ReclaimNs),
		"mode":        map[bool]string{true: "write", false: "read"}[h.Write],
	}
	if s.ThrottleSeen {
		ev["throttled_ms"] = nsToMs(h.ThrottledNs)
	}
	if h.PagesScanned > 0 {
		ev["pages_scanned"], ev["pages_reclaimed"] = h.PagesScanned, h.PagesReclaimed
	}
	return ev
}

// QueuePoint is one sample of a lock's wait queue, for the report: when
// (ms into the window) and how many readers and writers waited.
type QueuePoint struct {
	TMs     int64 `json:"t_ms"`
	Readers int64 `json:"readers"`
	Writers int64 `json:"writers"`
}

// queueSeries keeps at most n samples, evenly spread, always the deepest.
func queueSeries(samples []QueueSample, n int) []QueuePoint {
	if len(samples) == 0 {
		return nil
	}
	deepest := 0
	for i, q := range samples {
		if q.Readers+q.Writers > samples[deepest].Readers+samples[deepest].Writers {
			deepest = i
		}
	}
	step := max(1, (len(samples)+n-1)/n)
	var out []QueuePoint
	for i, q := range samples {
		if i%step == 0 || i == deepest {
			out = append(out, QueuePoint{TMs: q.At.Milliseconds(), Readers: q.Readers, Writers: q.Writers})
		}
	}
	return out
}

func (s *Snapshot) remediation(a *lockAgg) []string {
	var r []string
	if len(a.owners) > 0 && a.owners[0].Kind == OwnerTask {
		o := a.owners[0]
		r = append(r, fmt.Sprintf("Look at what the owner does while holding it: cat /proc/%d/task/%d/stack, or wolf hung --pid %d if it is stuck.", o.TGID, o.TID, o.TGID))
	}
	switch {
	case strings.HasPrefix(a.name, "mmap_lock"):
		r = append(r, "mmap_lock: find the writers (mmap, munmap, mprotect, madvise, uprobe registration) and the long readers (page faults falling back from per-VMA locks, /proc/PID/maps or cmdline readers, mincore); wolf locks --pid PID shows the holds.")
	case a.name == "rtnl_mutex":
		r = append(r, "rtnl_mutex serialises all network configuration: look for a daemon reconfiguring links or routes in a loop (ip monitor, the owner's stack).")
	case a.lru:
		r = append(r, "lru_lock contention comes from many threads reclaiming the same memory cgroup at once (the MGLRU epilogue of \"The case of the vanishing CPU\": evict_folios takes the lock per batch): give the cgroup memory headroom or fewer threads; wolf reclaim shows its reclaim; check MGLRU (/sys/kernel/mm/lru_gen/enabled) and the kernel version.")
	case a.mainType.Spins():
		r = append(r, "Spinlock contention is a scalability limit: fewer CPUs taking the same lock (RPS/RFS, per-CPU data, sharding) or a kernel with the lock split.")
	}
	r = append(r, fmt.Sprintf("Narrow it down: wolf locks --lock 0x%x --duration 30s", a.addr))
	return r
}

// starvationFinding reports the rw-semaphore pattern of the Datadog talk (uprobe_register vs mmap_lock): readers queued
// behind a waiting writer while the lock is reader-owned, so one long
// reader stalls every newcomer.
func (s *Snapshot) starvationFinding(a *lockAgg) (finding.Finding, bool) {
	if a.behindWriter == 0 || (a.mainType != RwsemRead && a.mainType != RwsemWrite) {
		return finding.Finding{}, false
	}
	// As severe as the contention on the lock, no more: a reader that
	// waited a millisecond behind a writer (an mmap, a THP collapse) is
	// what every busy process sees.
	if s.wolfsOwn(a) {
		return finding.Finding{}, false // said by the contention finding
	}
	sev := s.severity(a)
	f := finding.Finding{
		ID:           "locks.writer-starvation",
		Investigator: "locks",
		Severity:     sev,
		Title:        fmt.Sprintf("%s: %d reader waits queued behind a waiting writer", a.name, a.behindWriter),
		Summary: fmt.Sprintf("Readers of %s found a writer at the head of its wait queue %d times while readers held it; the longest wait was %s.",
			a.name, a.behindWriter, human.Duration(time.Duration(a.maxNs))),
		Mechanism: "An rw-semaphore admits no new reader once a writer waits at the head of its queue (to keep writers from starving), so a single long-running reader holds back the writer and, behind it, every reader that arrives later: reads that should run in parallel are serialised behind the slowest one.",
		Evidence: map[string]any{
			"lock":                a.name,
			"lock_addr":           fmt.Sprintf("0x%x", a.addr),
			"behind_writer_waits": a.behindWriter,
			"reader_owned_waits":  a.readerOwned,
			"max_wait_ns":         a.maxNs,
		},
		Remediation: []string{
			"Find the long reader (owners below, or wolf locks --pid for mmap_lock holds) and what it does under the lock.",
			"For mmap_lock: reduce writers (mmap/munmap churn from allocators: raise the allocator's trim threshold; uprobe registration), and readers that hold it long.",
		},
	}
	if q := a.queue; q != nil {
		f.Evidence["max_waiting_readers"] = q.MaxReaders
		f.Evidence["max_waiting_writers"] = q.MaxWriters
	}
	for i, o := range a.owners {
		if i >= 3 {
			break
		}
		f.Subjects = append(f.Subjects, finding.Subject{Role: finding.RoleOwner, PID: o.TGID, TID: o.TID, Comm: o.Comm, Stack: o.Stack})
	}
	return f, true
}

// holdSeverity grades an mmap_lock hold of d as an ordinary machine would
// take it.
func holdSeverity(d time.Duration, slowdown float64) finding.Severity {
	switch d = pace.Ordinary(d, slowdown); {
	case d >= time.Second:
		return finding.Critical
	case d >= holdWarning:
		return finding.Warning
	}
	return finding.Info
}

// mmapFindings reports long mmap_lock holds per holder process, with the
// stacks sampled under the lock, and the hold/wait histograms.
func (s *Snapshot) mmapFindings() ([]finding.Finding, []finding.Histogram) {
	var out []finding.Finding
	var hists []finding.Histogram

	type procKey struct{ tgid, mmTGID int }
	byProc := map[procKey][]Hold{}
	for _, h := range s.Holds {
		k := procKey{h.TGID, h.MMTGID}
		byProc[k] = append(byProc[k], h)
	}
	keys := slices.Collect(maps.Keys(byProc))
	slices.SortFunc(keys, func(x, y procKey) int {
		return cmp.Compare(longest(byProc[y]).HoldNs, longest(byProc[x]).HoldNs)
	})
	top := s.Top
	if top <= 0 {
		top = DefaultTop
	}
	for i, k := range keys {
		if i >= top {
			break
		}
		hf := s.holdFinding(k.tgid, k.mmTGID, byProc[k])
		out = append(out, hf)
		if s.holdRefs == nil {
			s.holdRefs = map[[2]int]findingRef{}
		}
		s.holdRefs[[2]int{k.tgid, k.mmTGID}] = findingRef{hf.ID, hf.Title}
	}

	// Histograms: per process and mode, threads merged, the processes with
	// the longest holds first.
	type hk struct {
		tgid  int
		write bool
	}
	holdH, waitH := map[hk]*hist.Log2{}, map[hk]*hist.Log2{}
	comms := s.processNames()
	for _, m := range s.MM {
		k := hk{m.TGID, m.Write}
		if holdH[k] == nil {
			holdH[k], waitH[k] = &hist.Log2{}, &hist.Log2{}
		}
		holdH[k].Merge(&m.Hold)
		waitH[k].Merge(&m.Wait)
	}
	hks := slices.Collect(maps.Keys(holdH))
	slices.SortFunc(hks, func(x, y hk) int {
		if c := cmp.Compare(holdH[y].Max, holdH[x].Max); c != 0 {
			return c
		}
		return cmp.Compare(x.tgid, y.tgid)
	})
	for i, k := range hks {
		if i >= 2*top {
			break
		}
		mode := "read"
		if k.write {
			mode = "write"
		}
		labels := map[string]string{"pid": strconv.Itoa(k.tgid), "comm": comms[k.tgid], "mode": mode}
		hists = append(hists, holdH[k].Report("mmap_lock_hold_us", "us", labels, 1000))
		if waitH[k].Count > 0 {
			hists = append(hists, waitH[k].Report("mmap_lock_wait_us", "us", maps.Clone(labels), 1000))
		}
	}
	// And per thread, for the threads with the longest holds.
	threads := slices.Clone(s.MM)
	slices.SortFunc(threads, func(x, y MMStat) int {
		if c := cmp.Compare(y.Hold.Max, x.Hold.Max); c != 0 {
			return c
		}
		return cmp.Compare(x.TID, y.TID)
	})
	for i, m := range threads {
		if i >= top || m.Hold.Count == 0 {
			break
		}
		mode := "read"
		if m.Write {
			mode = "write"
		}
		labels := map[string]string{"pid": strconv.Itoa(m.TGID), "tid": strconv.Itoa(m.TID), "comm": comms[m.TGID], "mode": mode}
		hists = append(hists, m.Hold.Report("mmap_lock_thread_hold_us", "us", labels, 1000))
	}
	return out, hists
}

// processNames names every process in s.MM the way ps does, by its main
// thread: today's name from /proc while the process lives, else the name
// the main thread had at its first mmap_lock hold, else the lowest thread's.
// Not any thread's: threads name themselves (a Go runtime thread keeps the
// exec name while a worker renames itself), and which of them held the lock
// first is chance.
func (s *Snapshot) processNames() map[int]string {
	names := map[int]string{}
	from := map[int]int{} // tgid -> the tid whose recorded name is in names; 0 from /proc
	for _, m := range s.MM {
		t, seen := from[m.TGID]
		if !seen {
			if c := s.comm(m.TGID); c != "" {
				names[m.TGID], from[m.TGID] = c, 0
				continue
			}
		}
		if m.Comm == "" || (seen && (t == 0 || t == m.TGID)) {
			continue
		}
		if !seen || m.TID == m.TGID || m.TID < t {
			names[m.TGID], from[m.TGID] = m.Comm, m.TID
		}
	}
	return names
}

func (s *Snapshot) comm(pid int) string {
	if s.Comm == nil {
		return ""
	}
	return s.Comm(pid)
}

func (s *Snapshot) tgidOf(tid int) int {
	if s.TGID != nil {
		if g := s.TGID(tid); g > 0 {
			return g
		}
	}
	return tid
}

// maxHoldRecords bounds the holds listed in one finding.
const maxHoldRecords = 50

// HoldRecord is one long mmap_lock hold as the JSON report lists it.
type HoldRecord struct {
	TID        int     `json:"tid"`
	Write      bool    `json:"write"`
	HoldMs     float64 `json:"hold_ms"`
	RuntimeMs  float64 `json:"runtime_ms"`
	CSW        uint64  `json:"context_switches"`
	ReleasedIn string  `json:"released_in,omitempty"`
	// Where the rest went: waiting on a run queue (throttled included),
	// throttled by its cgroup's CPU quota, in memory reclaim.
	RunnableMs  float64 `json:"runnable_ms"`
	ThrottledMs float64 `json:"throttled_ms,omitempty"`
	ReclaimMs   float64 `json:"reclaim_ms,omitempty"`
	// Reclaim under the lock, when there was any.
	ReclaimCalls   uint64 `json:"reclaim_calls,omitempty"`
	PagesScanned   uint64 `json:"pages_scanned,omitempty"`
	PagesReclaimed uint64 `json:"pages_reclaimed,omitempty"`
}

func longest(hs []Hold) Hold {
	var best Hold
	for _, h := range hs {
		if h.HoldNs > best.HoldNs {
			best = h
		}
	}
	return best
}

// stillHeld says "at least " for a hold wolf saw begin but not end.
func stillHeld(h Hold) string {
	if h.Ongoing {
		return "at least "
	}
	return ""
}

func (s *Snapshot) holdFinding(tgid, mmTGID int, holds []Hold) finding.Finding {
	h := longest(holds)
	mode := "reading"
	if h.Write {
		mode = "writing"
	}
	whose := "its own mmap_lock"
	lockName := "mmap_lock"
	if mmTGID != 0 && mmTGID != tgid {
		comm := s.comm(mmTGID)
		whose = fmt.Sprintf("the mmap_lock of %s (pid %d)", comm, mmTGID)
		lockName = fmt.Sprintf("mmap_lock of %s (pid %d)", comm, mmTGID)
	} else if mmTGID != 0 {
		proc := s.comm(tgid) // the process's name, not the holding thread's
		if proc == "" {
			proc = h.Comm
		}
		lockName = fmt.Sprintf("mmap_lock of %s (pid %d)", proc, tgid)
	}
	sev := holdSeverity(time.Duration(h.HoldNs), s.Slowdown)
	own := s.SelfTGID != 0 && cmp.Or(mmTGID, tgid) == s.SelfTGID
	if own {
		sev = finding.Info
	}
	var total, runtime, runnable, throttled, reclaim, scanned, reclaimed uint64
	for _, x := range holds {
		total += x.HoldNs
		runtime += x.RuntimeNs
		runnable += x.RunnableNs
		throttled += x.ThrottledNs
		reclaim += x.ReclaimNs
		scanned += x.PagesScanned
		reclaimed += x.PagesReclaimed
	}
	f := finding.Finding{
		ID:           "locks.mmap-hold",
		Investigator: "locks",
		Severity:     sev,
		Title:        fmt.Sprintf("%s held %s%s for %s by %s (tid %d)", lockName, stillHeld(h), human.Duration(time.Duration(h.HoldNs)), mode, h.Comm, h.TID),
		Summary: fmt.Sprintf("%d holds of %s over %s by %s (pid %d); the longest, %s for %s, got %s of CPU and %d context switches while holding it.",
			len(holds), whose, s.HoldThreshold, h.Comm, tgid, human.Duration(time.Duration(h.HoldNs)), mode, human.Duration(time.Duration(h.RuntimeNs)), h.CSW),
		Mechanism: "While a thread holds a process's mmap_lock, writers (mmap, munmap, mprotect) wait, and once a writer waits, so do new readers: page faults that fall back from per-VMA locks, and anything reading /proc/PID/cmdline or maps (ps, top, perf). A hold that is mostly off-CPU means the holder is starved of CPU or blocked, not busy.",
		Evidence: map[string]any{
			"hold_ms_max":          nsToMs(h.HoldNs),
			"hold_ms_total":        nsToMs(total),
			"holds_over_threshold": len(holds),
			"hold_threshold_ms":    float64(s.HoldThreshold) / 1e6,
			"runtime_ms":           nsToMs(h.RuntimeNs),
			"context_switches":     h.CSW,
			"write":                h.Write,
		},
	}
	if h.HoldNs > 0 {
		f.Evidence["on_cpu_pct"] = 100 * float64(h.RuntimeNs) / float64(h.HoldNs)
	}
	switch {
	case own:
		f.Evidence["cause"] = causeWolf
		f.Summary += fmt.Sprintf(" It is wolf's own mmap_lock (pid %d): only wolf's threads wait for it, and what holds it (khugepaged scanning wolf's memory) was brought on by wolf.", s.SelfTGID)
	case sev < holdSeverity(time.Duration(h.HoldNs), 1):
		f.Evidence["machine_slowdown"] = human.Round(s.Slowdown, 1)
		f.Summary += " " + pace.SlowNote("the hold", time.Duration(h.HoldNs), s.Slowdown)
	}
	// Whose mmap_lock, and where the holders' time went over all their
	// holds: what the diagnosis stage joins on and weighs.
	switch {
	case mmTGID != 0:
		f.Evidence["mm_pid"] = mmTGID
	case tgid != 0:
		f.Evidence["mm_pid"] = tgid
	}
	if h.Lock != 0 {
		f.Evidence["lock_addr"] = fmt.Sprintf("0x%x", h.Lock)
	}
	f.Evidence["runtime_ms_total"] = nsToMs(runtime)
	f.Evidence["runnable_ms_total"] = nsToMs(runnable)
	f.Evidence["reclaim_ms_total"] = nsToMs(reclaim)
	if s.ThrottleSeen {
		f.Evidence["throttled_ms_total"] = nsToMs(throttled)
	}
	if scanned > 0 {
		f.Evidence["pages_scanned_total"] = scanned
		f.Evidence["pages_reclaimed_total"] = reclaimed
	}
	if h.ThrottledNs > 0 {
		f.Summary += fmt.Sprintf(" It was throttled by its cgroup's CPU quota for %s of that hold.", human.Duration(time.Duration(h.ThrottledNs)))
	}
	if h.ReclaimCalls > 0 {
		// As in "The case of the vanishing CPU": the cgroup's reclaim ran under the process's mmap_lock.
		f.Evidence["reclaim_calls"] = h.ReclaimCalls
		f.Evidence["reclaim_ms"] = nsToMs(h.ReclaimNs)
		f.Evidence["pages_scanned"] = h.PagesScanned
		f.Evidence["pages_reclaimed"] = h.PagesReclaimed
		f.Evidence["pages_activated"] = h.PagesActivated
		f.Evidence["pages_ref_keep"] = h.PagesRefKeep
		if h.PagesScanned > 0 {
			f.Evidence["efficiency_pct"] = 100 * float64(h.PagesReclaimed) / float64(h.PagesScanned)
		}
		f.Summary += fmt.Sprintf(" It reclaimed memory %d times under the lock (%s): %d pages scanned, %d reclaimed.",
			h.ReclaimCalls, human.Duration(time.Duration(h.ReclaimNs)), h.PagesScanned, h.PagesReclaimed)
		f.Remediation = append(f.Remediation, "Memory reclaim ran while the mmap_lock was held (the memory cgroup is at its limit): raise the cgroup's limit or shrink its page cache; kernels since about 6.1 drop the lock before reclaiming in the fault path, and MGLRU changes which pages are scanned.")
	}
	// Every hold over the threshold, longest first (JSON; capped).
	sorted := slices.Clone(holds)
	slices.SortFunc(sorted, func(x, y Hold) int { return cmp.Compare(y.HoldNs, x.HoldNs) })
	var list []HoldRecord
	for i, x := range sorted {
		if i >= maxHoldRecords {
			break
		}
		top := ""
		if fr := waiterFrames(x.Stack); len(fr) > 1 {
			top = fr[1] // under __mmap_lock_do_trace_released: the releasing function
		}
		list = append(list, HoldRecord{TID: x.TID, Write: x.Write, HoldMs: nsToMs(x.HoldNs), RuntimeMs: nsToMs(x.RuntimeNs), CSW: x.CSW, ReleasedIn: top,
			RunnableMs: nsToMs(x.RunnableNs), ThrottledMs: nsToMs(x.ThrottledNs), ReclaimMs: nsToMs(x.ReclaimNs),
			ReclaimCalls: x.ReclaimCalls, PagesScanned: x.PagesScanned, PagesReclaimed: x.PagesReclaimed})
	}
	f.Evidence["holds"] = list
	holder := finding.Subject{
		Role: finding.RoleHolder, PID: tgid, TID: h.TID, Comm: h.Comm,
		Detail: "stack at release", Stack: waiterFrames(h.Stack), Evidence: s.holdEvidence(&h),
	}
	f.Subjects = append(f.Subjects, holder)
	// What the holders of this process did under the lock.
	var prof []ProfileStack
	var samples uint64
	for _, p := range s.Profile {
		if p.TGID == tgid {
			prof = append(prof, p)
			samples += p.Count
		}
	}
	if samples > 0 {
		slices.SortFunc(prof, func(x, y ProfileStack) int { return cmp.Compare(y.Count, x.Count) })
		f.Evidence["samples_under_lock"] = samples
		f.Subjects = append(f.Subjects, finding.Subject{
			Role: finding.RoleHolder, PID: tgid, TID: prof[0].TID, Comm: h.Comm,
			Detail: fmt.Sprintf("most sampled stack under the lock: %d of %d samples", prof[0].Count, samples),
			Stack:  prof[0].Stack,
		})
		if fn := hotFunction(prof); fn != "" {
			f.Evidence["top_function_under_lock"] = fn
		}
	}
	if h.RuntimeNs*2 < h.HoldNs {
		f.Remediation = append(f.Remediation, "The holder was off CPU for most of the hold: it competes with many runnable threads (check the CPU quota and thread count) or sleeps under the lock (its stack says where).")
	}
	f.Remediation = append(f.Remediation,
		fmt.Sprintf("Profile what runs under the lock: wolf locks --pid %d --folded FILE (flame graph input).", tgid),
		"Avoid reading /proc/PID/cmdline, environ or maps of this process while it happens (ps, top, monitoring agents block on the lock).")
	return f
}

// hotFunction is the function most samples under the lock pass through,
// ignoring the sampling and interrupt frames on top.
func hotFunction(prof []ProfileStack) string {
	counts := map[string]uint64{}
	for _, p := range prof {
		seen := map[string]bool{}
		for _, fr := range p.Stack {
			fn := kstack.FuncName(fr)
			if fn == "" || seen[fn] || irqFrame(fn) {
				continue
			}
			seen[fn] = true
			counts[fn] += p.Count
		}
	}
	// The deepest function present in most samples is too generic
	// (entry_SYSCALL_64); the innermost one above half the samples is
	// what the holder was doing.
	var total uint64
	for _, p := range prof {
		total += p.Count
	}
	for _, p := range prof {
		for _, fr := range p.Stack {
			fn := kstack.FuncName(fr)
			if fn != "" && !irqFrame(fn) && counts[fn]*2 >= total {
				return fn
			}
		}
	}
	return ""
}

func irqFrame(fn string) bool {
	for _, p := range []string{"asm_sysvec_", "sysvec_", "__sysvec_", "hrtimer_", "__hrtimer_", "perf_", "__perf_",
		"bpf_", "__bpf_", "tick_", "update_process_times", "irq_exit", "__irq_exit", "handle_softirqs", "__do_softirq"} {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}
