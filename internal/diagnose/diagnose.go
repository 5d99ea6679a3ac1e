// Package diagnose joins what the investigators measured into diagnoses:
// root-cause chains from the tasks that lose time (the victims) to the
// cause a person can act on, across investigators. "cat (pid 9) waits
// 600 ms for the mmap_lock of x (pid 5), held by x's thread 7, which
// spends 39% of its holds reclaiming memory and 44% waiting for CPUs that
// its own cgroup's reclaim keeps busy, because the cgroup sits at its
// 192 MiB limit."
//
// It reads typed facts only (internal/fact: waits, holds with where the
// holder's time went, consumers of a resource, resources at their limit),
// which each investigator makes from the same snapshot as its findings;
// never a finding's JSON evidence. Every hop is one of five relations
// between facts that share a key (a tid, a lock, a cgroup, a device),
// each with the kernel mechanism that makes it a cause (relations.go):
// waits_on, held_by, spends_hold, constrained_by and used_by.
//
// Any victim starts a chain (a lock wait, a D-state task, a run-queue
// wait, throttled time, a reclaim stall, an I/O wait, delayed softirq
// work) and any resource can end one (a lock's holder, a FUSE daemon, the
// host's CPUs and their consumers, a cgroup's CPU quota or memory limit,
// a device or its throttle, softirq time). Where a victim's time goes
// several ways, the root is decided by measured attribution: a holder's
// hold is split by where its time went, a saturated resource's time by
// its consumers and what they spent it on (CPU burned in reclaim for a
// memory limit counts for the limit), and the shares are summed per
// root. The largest is the root; the runner-up is said in one line.
//
// A window with nothing that loses time (a healthy host, or a busy one
// whose tasks wait for nobody) has no diagnosis.
package diagnose

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
)

// Thresholds of what is worth a diagnosis.
const (
	// A task waiting on something that blocks it (a lock, a FUSE reply,
	// I/O, a D-state wait) is a victim when its longest wait reaches
	// victimMaxWait or its waits add up to victimTotalWait; hung tasks
	// always are.
	victimMaxWait   = 200 * time.Millisecond
	victimTotalWait = time.Second
	// A task that lost a tenth of the window (at least a second) waiting
	// for a CPU, throttled, or in reclaim is a victim too.
	victimShareOfWindow = 0.1
	runqShareOfWindow   = 0.25
	runqShareOfWanted   = 1.0 / 3
	// A single wait this long makes a diagnosis critical: no ordinary
	// pattern blocks a task for a second.
	criticalWait = time.Second
	// A softirq run this long on top of a task is a stall (the 23 ms
	// NET_RX run of "The story of one latency spike"), critical however
	// rare.
	softirqStall = 20 * time.Millisecond
	// A softirq run five times the kernel's own budget for one
	// (MAX_SOFTIRQ_TIME and netdev_budget_usecs: 2 ms, after which it
	// hands the rest to ksoftirqd) delayed the task it ran on top of: a
	// victim, a warning below softirqStall.
	softirqVictim = 10 * time.Millisecond
	// A device this busy (its utilisation) makes the tasks that wait
	// behind others' requests victims.
	deviceBusy = 0.9
	// Rivals below this share of the victims' time are not worth a line.
	rivalMinShare = 0.05
	// A victim whose largest roots nobody can act on (wolf's own work)
	// goes to the next root when that carries this share of its wait.
	actionableMinShare = 0.1
	maxVictimHops      = 4 // victims drawn as hops; the rest are subjects
	maxDepth           = 6
	maxConsumers       = 3 // consumers of a saturated resource named in its hop
	// defaultWindow stands in for a fact set that does not say its window.
	defaultWindow = 10 * time.Second
)

// Apply diagnoses the report from facts: it sets r.Diagnoses and marks
// each finding a diagnosis explains (Finding.ExplainedBy).
func Apply(r *finding.Report, facts *fact.Set) {
	for i := range r.Findings {
		r.Findings[i].ExplainedBy = nil
	}
	ds, explained := diagnose(r.Findings, facts)
	for i, refs := range explained {
		r.Findings[i].ExplainedBy = refs
	}
	r.Diagnoses = ds
}

// Diagnose returns the diagnoses of a window's facts, worst first; fs are
// the window's findings, which the diagnoses name as explained.
func Diagnose(fs []finding.Finding, facts *fact.Set) []finding.Diagnosis {
	ds, _ := diagnose(fs, facts)
	return ds
}

func diagnose(fs []finding.Finding, facts *fact.Set) ([]finding.Diagnosis, map[int][]string) {
	if facts == nil {
		return nil, nil
	}
	e := newEngine(facts)
	built := e.build()
	var out []finding.Diagnosis
	explained := map[int][]string{}
	for i, d := range built {
		ref := "D" + strconv.Itoa(i+1)
		diag := d.finish(e, ref)
		for fi := range fs {
			if d.explainsFinding(&fs[fi]) {
				explained[fi] = append(explained[fi], ref)
				if !slices.Contains(diag.Explains, fs[fi].ID) {
					diag.Explains = append(diag.Explains, fs[fi].ID)
				}
			}
		}
		slices.Sort(diag.Explains)
		out = append(out, diag)
	}
	return out, explained
}

// victim is one task's lost time on one resource, and where it traces.
type victim struct {
	w        *fact.Wait
	key      string // the resource, canonical
	branches []*branch
	top      string // the root its time traces to most
	share    float64
}

// lost is the victim's lost time: its waits summed, or how long it has
// been blocked.
func (v *victim) lost() time.Duration { return max(v.w.Total, v.w.Max) }

// build finds the victims, traces each to its roots, and groups them into
// diagnoses by root, worst first.
func (e *engine) build() []*draft {
	var victims []*victim
	pools := e.victimPools()
	for i := range e.set.Waits {
		w := &e.set.Waits[i]
		if e.selfInflicted(w) {
			continue
		}
		if !e.significant(w) {
			// A process that lost little alone may belong to a pool that
			// lost much: a loop that starts a short-lived dd per file, a
			// pool of workers each waiting a little.
			if !pools[e.poolOf(w)] {
				continue
			}
		}
		victims = append(victims, &victim{w: w, key: e.on(w)})
	}
	victims = dedupeVictims(victims)
	byRoot := map[string]*draft{}
	var order []*draft
	for _, v := range victims {
		v.branches = e.fromVictim(v)
		if len(v.branches) == 0 {
			continue
		}
		shares := rootShares(v.branches)
		v.top, v.share = topRoot(e.actionable(shares, v.branches))
		d := byRoot[v.top]
		if d == nil {
			d = &draft{root: v.top, shares: map[string]float64{}, refs: map[ref]bool{}}
			byRoot[v.top] = d
			order = append(order, d)
		}
		d.add(v, shares)
	}
	var out []*draft
	for _, d := range order {
		d.settle(e)
		if d.worthIt(e) {
			out = append(out, d)
		}
	}
	slices.SortStableFunc(out, func(a, b *draft) int {
		if c := cmp.Compare(b.severity, a.severity); c != 0 {
			return c
		}
		if c := cmp.Compare(b.weight, a.weight); c != 0 {
			return c
		}
		return cmp.Compare(a.root, b.root)
	})
	return out
}

// selfInflicted says whether a wait is wolf's own threads contending with
// each other: wolf's process waiting on a lock that only its own threads
// held in the window (its investigators attaching or detaching their
// programs at once, under the kernel's tracepoint mutex). The host did
// not do that; wolf waiting on anyone else's lock is still a victim.
func (e *engine) selfInflicted(w *fact.Wait) bool {
	if e.set.Self == 0 || w.Task.PID != e.set.Self || w.Kind != fact.WaitLock {
		return false
	}
	hs := e.holds[e.on(w)]
	if len(hs) == 0 {
		return false
	}
	for _, h := range hs {
		if !e.isSelf(h.Holder) {
			return false
		}
	}
	return true
}

// isSelf says whether a task is one of wolf's own threads: its process,
// or a thread id that one of wolf's own waits names (a holder known only
// by its thread id).
func (e *engine) isSelf(t fact.Task) bool {
	if t.PID == e.set.Self {
		return true
	}
	tid := cmp.Or(t.TID, t.PID)
	for i := range e.set.Waits {
		if w := &e.set.Waits[i]; w.Task.PID == e.set.Self && w.Task.TID == tid {
			return true
		}
	}
	return false
}

// poolable are the waits a pool loses together: blocked, each member a
// little. Time without a CPU is not pooled: every process of a busy
// build waits for one now and then, and a pool of them is no victim of
// what the machine is doing besides.
var poolable = map[fact.WaitKind]bool{fact.WaitIO: true, fact.WaitReclaim: true, fact.WaitDirty: true, fact.WaitJournal: true, fact.WaitLock: true, fact.WaitFUSE: true, fact.WaitBlocked: true}

// poolOf keys a wait by its pool: its kind and resource, and its
// process's name and cgroups.
func (e *engine) poolOf(w *fact.Wait) string {
	t := w.Task
	return strings.Join([]string{string(w.Kind), e.on(w), t.Comm, e.cgroupOf(t, fact.Memory), e.cgroupOf(t, fact.CPUQuota), t.IOCgroup}, "\x00")
}

// victimPools are the pools (keyed by poolOf) whose members are victims
// together: two processes or more whose waits, summed as one task's, are
// significant and add up to at least a window. Much is a window between
// them: ten long-lived browser processes that each waited a third of a
// second behind someone's stream are not.
func (e *engine) victimPools() map[string]bool {
	sums := map[string]*fact.Wait{}
	pids := map[string]map[int]bool{}
	for i := range e.set.Waits {
		w := &e.set.Waits[i]
		if w.Task.PID == 0 || w.Hung || e.selfInflicted(w) || !poolable[w.Kind] {
			continue
		}
		k := e.poolOf(w)
		p := sums[k]
		if p == nil {
			t := w.Task
			t.MemCgroup, t.CPUCgroup = e.cgroupOf(w.Task, fact.Memory), e.cgroupOf(w.Task, fact.CPUQuota)
			t.PID = 0 // the pool, for waitsBehindOthers: all its members' use is its own
			p = &fact.Wait{Task: t, Kind: w.Kind, On: w.On, Numbers: map[string]any{}}
			sums[k], pids[k] = p, map[int]bool{}
		}
		pids[k][w.Task.PID] = true
		p.Total += w.Total
		p.Max = max(p.Max, w.Max)
		p.Count += w.Count
		if cpu, ok := finding.Number(w.Numbers["on_cpu_ms"]); ok {
			sum, _ := finding.Number(p.Numbers["on_cpu_ms"])
			p.Numbers["on_cpu_ms"] = sum + cpu
		}
	}
	out := map[string]bool{}
	for k, p := range sums {
		if len(pids[k]) >= 2 && p.Total >= e.window && e.significant(p) {
			out[k] = true
		}
	}
	return out
}

// significant says whether a wait makes its task a victim.
func (e *engine) significant(w *fact.Wait) bool {
	if w.Hung {
		return true
	}
	switch w.Kind {
	case fact.WaitSoftirq:
		return w.Max >= softirqVictim || w.Total >= max(time.Second, time.Duration(victimShareOfWindow*float64(e.window)))
	case fact.WaitRunQueue, fact.WaitThrottled, fact.WaitReclaim:
		// Time lost a little at a time: worth it as a share of the
		// window. Waiting for a CPU is what every busy task does now
		// and then: a quarter of the window, as with more runnable tasks
		// than CPUs by half (3 on 2 CPUs waits a third).
		share := victimShareOfWindow
		if w.Kind == fact.WaitRunQueue {
			// A task is a victim of the CPUs when it waited for a third
			// of the time it wanted one: 2 hogs on 2 CPUs that others
			// disturb now and then are not, 3 on 2 CPUs are. Without its
			// CPU time, a quarter of the window.
			if cpu, ok := finding.Number(w.Numbers["on_cpu_ms"]); ok {
				if wait := msOf(w.Total); wait < runqShareOfWanted*(wait+cpu) {
					return false
				}
			} else {
				share = runqShareOfWindow
			}
		}
		floor := max(time.Second, time.Duration(share*float64(e.window)))
		return w.Total >= floor || (w.Kind == fact.WaitReclaim && w.Max >= victimMaxWait)
	case fact.WaitRefault:
		return false // refaults are counted, not timed: they weigh a device's use
	case fact.WaitIO:
		if kindOfKey(e.on(w)) == fact.Device {
			return w.Max >= victimMaxWait || (w.Total >= victimTotalWait && e.waitsBehindOthers(w))
		}
	}
	return w.Max >= victimMaxWait || w.Total >= victimTotalWait
}

// waitsBehindOthers says whether a task's I/O waits on a device are time
// lost rather than its own work: a task streaming I/O to a device it has
// to itself waits for each of its requests, as a CPU-bound task runs, and
// is no victim. It is one when the device is slow by itself (AtLimit: the
// I/O investigator's verdict), when the device's time went to use made
// for another resource (reads that are refaults, for the memory limit
// that evicted the pages), or when the device was busy with others.
func (e *engine) waitsBehindOthers(w *fact.Wait) bool {
	k := e.on(w)
	s := e.saturation(k)
	if s != nil && s.AtLimit {
		return true
	}
	total, _ := e.used(k)
	if total <= 0 {
		return false
	}
	for _, d := range e.directedUse(k) {
		if d.frac(total) >= 0.3 {
			return true
		}
	}
	if s == nil || s.Level < deviceBusy {
		return false
	}
	// Its own use: the task's, its cgroup's, or its pool's (the
	// processes of its name in its cgroups: a pool of streamers does not
	// wait behind itself).
	mine, pool := 0.0, 0.0
	memcg := e.cgroupOf(w.Task, fact.Memory)
	for _, u := range e.usage[k] {
		if u.For != "" {
			continue
		}
		if (w.Task.PID != 0 && u.By.PID == w.Task.PID) || (u.By.PID == 0 && u.By.IOCgroup != "" && u.By.IOCgroup == w.Task.IOCgroup) {
			mine = max(mine, u.Amount)
		}
		if u.By.PID != 0 && u.By.Comm == w.Task.Comm && e.cgroupOf(u.By, fact.Memory) == memcg {
			pool += u.Amount
		}
	}
	return max(mine, pool)/total < 0.5
}

// dedupeVictims keeps one wait per task and resource (the worst), and
// orders victims: hung first, then the longest lost.
func dedupeVictims(vs []*victim) []*victim {
	type k struct {
		id  int
		key string
	}
	best := map[k]*victim{}
	var order []k
	for _, v := range vs {
		id := v.w.Task.TID
		if id == 0 {
			id = -v.w.Task.PID
		}
		kk := k{id, v.key}
		if o, ok := best[kk]; ok {
			if v.lost() > o.lost() {
				best[kk] = v
			}
			continue
		}
		best[kk] = v
		order = append(order, kk)
	}
	out := make([]*victim, 0, len(order))
	for _, kk := range order {
		out = append(out, best[kk])
	}
	slices.SortStableFunc(out, func(a, b *victim) int {
		if a.w.Hung != b.w.Hung {
			if a.w.Hung {
				return -1
			}
			return 1
		}
		return cmp.Compare(b.lost(), a.lost())
	})
	return out
}

// rootShares sums a victim's branches per root.
func rootShares(bs []*branch) map[string]float64 {
	m := map[string]float64{}
	for _, b := range bs {
		m[b.root] += b.share
	}
	return m
}

// actionable drops from a victim's shares the roots nobody on the host
// can act on, when another remains: wolf's own work on the CPUs, and the
// CPUs themselves when they were short only with wolf (discountSelf).
// What remains must carry a tenth of the wait (actionableMinShare): a
// victim that waited almost wholly for wolf is no victim of the host.
// Where wolf is costly (qemu without KVM, where it took half of two
// CPUs), those can be most of a victim's wait for a CPU; the rest, the
// CPU time a memory cgroup's thrashing took, is then the victim's root,
// with its share as measured, rather than the victim going unexplained.
func (e *engine) actionable(shares map[string]float64, bs []*branch) map[string]float64 {
	out := make(map[string]float64, len(shares))
	for _, b := range bs {
		if b.kind == "wolf" || (b.kind == "host-cpu" && e.selfShort) || shares[b.root] < actionableMinShare {
			continue
		}
		out[b.root] = shares[b.root]
	}
	if len(out) == 0 {
		return shares
	}
	return out
}

// topRoot is the root with the largest share; ties go to the root that
// sorts first, so that the same facts always give the same answer.
func topRoot(m map[string]float64) (string, float64) {
	best, share := "", -1.0
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] > share+1e-9 {
			best, share = k, m[k]
		}
	}
	return best, share
}
