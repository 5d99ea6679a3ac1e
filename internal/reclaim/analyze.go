package reclaim

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/human"
	"github.com/wolf-investigator/wolf/internal/memcg"
)

// Snapshot is everything Conclude reasons from: what the BPF maps, cgroupfs
// and /proc said over one window. Run builds it; tests build it by hand.
type Snapshot struct {
	Window  time.Duration
	Cgroups []*Cgroup // cgroups whose tasks reclaimed (or were scanned for)
	Kswapd  Kswapd
	System  System
	// Samples is the CPU sampler's window (Hz 0: not attached).
	Samples Samples
	// Rereads says the re-reads of evicted pages were measured (the
	// page-cache programs attached for the whole window).
	Rereads bool
	// Reclaim done while holding an mmap_lock (the per-hold table of "The case of the vanishing CPU")
	// is the locks investigator's: it times the holds (locks.mmap-hold).

	// refs are the findings Conclude made per cgroup, for the facts.
	refs map[*Cgroup]*finding.Finding
}

// Cgroup is one memory cgroup: its state at the end of the window, what
// changed during it, the reclaim its tasks did and its processes.
type Cgroup struct {
	ID      uint64
	Path    string        // within the memory hierarchy; "" when it is gone
	State   *memcg.State  // at the end of the window; nil when unreadable
	Before  *memcg.State  // at its start; nil when the cgroup was new
	PSISome float64       // v2 memory.pressure over the window, percent
	PSIFull float64       // (0 on v1)
	Reclaim Reclaim       // by its tasks
	Procs   []Proc        // its processes, busiest reclaimers first
	Window  time.Duration // copied from the snapshot for the helpers
	// CPU is its tasks' CPU samples: where their time on CPU went.
	CPU CPUSamples
	// Rereads are the pages its tasks read back after reclaim had evicted
	// them, measured (a sample, scaled: rereads.go), whether or not the
	// kernel still had their shadow entries.
	Rereads uint64
}

// Reclaim is the reclaim a cgroup's tasks did in the window.
type Reclaim struct {
	Calls [numKinds]uint64        // completed reclaim calls, by kind
	Time  [numKinds]time.Duration // their wall time
	CPU   [numKinds]time.Duration // their time on CPU
	Max   [numKinds]time.Duration // the longest
	// CtxSwitches inside reclaim calls.
	CtxSwitches uint64
	// Page counts from lru_shrink_inactive: scanned, reclaimed, and the
	// reasons the rest stayed.
	Scanned, Reclaimed, FileScanned               uint64
	RefKeep, ActivateAnon, ActivateFile           uint64
	Dirty, Writeback, Congested, Immediate, Unmap uint64
	ActiveTaken, ActiveKept, Deactivated          uint64
	Throttled                                     [4]uint64 // writeback, isolated, noprogress, congested
	ThrottledFor                                  time.Duration
	MaxCallScanned                                uint64
	Worst                                         *Call  // the longest completed call
	InFlight                                      []Call // calls still running when the window closed
	UnmatchedEnds                                 uint64 // calls that began before wolf attached
	Durations                                     [numKinds]hist.Log2
	ScannedPerCall                                hist.Log2
}

// Call is one reclaim call.
type Call struct {
	TID, PID int
	Comm     string
	Kind     string
	Duration time.Duration // so far, for calls in flight
	// Before is, of a call in flight, the time an earlier window counted
	// already (it was in flight then too): the window's part is Duration
	// minus Before.
	Before             time.Duration
	Scanned, Reclaimed uint64
	InFlight           bool
}

// Proc is one process of a cgroup: what pidstat would show for the window,
// and the reclaim its threads did.
type Proc struct {
	PID        int
	Comm       string
	Threads    int
	StatKnown  bool    // /proc deltas are available
	UserPct    float64 // of one CPU, as pidstat's %usr
	SysPct     float64 // as pidstat's %system
	Faults     uint64  // minor + major faults in the window
	MajFaults  uint64
	Calls      uint64
	InReclaim  time.Duration // wall time its threads spent in reclaim
	ReclaimCPU time.Duration
	MaxReclaim time.Duration
	Scanned    uint64
	Reclaimed  uint64
}

// Kswapd is background reclaim, host-wide.
type Kswapd struct {
	Wakes, Sleeps, Requests uint64
	Awake                   time.Duration
	Scanned, Reclaimed      uint64
	AwakeHist               hist.Log2
}

// System is host-wide context.
type System struct {
	PSISome, PSIFull float64 // /proc/pressure/memory over the window, percent
	HasPSI           bool
	OOMKills         uint64 // /proc/vmstat oom_kill delta
	SwapTotalBytes   uint64
	MGLRU            MGLRU
}

// Thresholds of the verdicts, in the terms of "The case of the vanishing CPU".
const (
	// The livelock: a cgroup at its limit whose reclaim frees under 1 % of
	// what it scans, with calls lasting a second or more, no OOM kill, and
	// its tasks in the kernel.
	livelockEfficiencyPct = 1.0
	livelockMinScanned    = 10000
	livelockMaxCall       = time.Second
	livelockSysShare      = 0.5 // of their CPU time, when /proc says
	// Reclaim that costs: on average a quarter of a thread stalled in
	// reclaim, or single calls of 100 ms.
	stallThreads = 0.25
	slowCall     = 100 * time.Millisecond
	// Poor efficiency worth a warning on its own.
	poorEfficiencyPct = 10.0
	poorMinScanned    = 10000
	// Near the limit: usage within this fraction of it.
	nearLimit = 0.9
	// Host-wide memory pressure worth a warning.
	psiFullWarnPct  = 5.0
	psiSomeWarnPct  = 20.0
	maxProcSubjects = 8
)

const storyRef = "https://clickhouse.com/blog/a-case-of-the-vanishing-cpu-a-linux-kernel-debugging-story"

// Conclude turns a snapshot into findings.
func Conclude(s *Snapshot) []finding.Finding {
	var out []finding.Finding
	s.refs = map[*Cgroup]*finding.Finding{}
	for _, c := range s.Cgroups {
		c.Window = s.Window
		if f, ok := s.cgroupFinding(c); ok {
			out = append(out, f)
			s.refs[c] = &f
		}
	}
	if f, ok := s.directFinding(); ok {
		out = append(out, f)
	}
	if f, ok := s.throttleFinding(); ok {
		out = append(out, f)
	}
	if f, ok := s.kswapdFinding(); ok {
		out = append(out, f)
	}
	if f, ok := s.pressureFinding(); ok {
		out = append(out, f)
	}
	finding.Sort(out)
	return out
}

// Efficiency is reclaimed per scanned, percent; -1 when nothing was scanned.
func (r *Reclaim) Efficiency() float64 {
	if r.Scanned == 0 {
		return -1
	}
	return 100 * float64(r.Reclaimed) / float64(r.Scanned)
}

// memcgTime is the window's wall time in reclaim calls of the
// cgroup-driven kinds (memcg, soft limit): completed calls and the calls
// still in flight.
func (r *Reclaim) memcgTime() time.Duration {
	t := r.Time[kindMemcg] + r.Time[kindSoftlimit]
	for _, f := range r.InFlight {
		if f.Kind == kindNames[kindMemcg] || f.Kind == kindNames[kindSoftlimit] {
			t += f.inWindow()
		}
	}
	return t
}

// inWindow is the part of a call in flight that falls in the window.
func (c *Call) inWindow() time.Duration {
	return max(c.Duration-c.Before, 0)
}

func (r *Reclaim) memcgCalls() uint64 {
	return r.Calls[kindMemcg] + r.Calls[kindSoftlimit]
}

// longest is the longest call, completed or in flight, of the given kinds.
func (r *Reclaim) longest(kinds ...int) (time.Duration, *Call) {
	var d time.Duration
	var c *Call
	for _, k := range kinds {
		d = max(d, r.Max[k])
	}
	if r.Worst != nil && slices.Contains(kinds, kindIndex(r.Worst.Kind)) && r.Worst.Duration >= d {
		d, c = r.Worst.Duration, r.Worst
	}
	for i := range r.InFlight {
		f := &r.InFlight[i]
		if slices.Contains(kinds, kindIndex(f.Kind)) && f.Duration > d {
			d, c = f.Duration, f
		}
	}
	return d, c
}

func kindIndex(name string) int {
	for i, n := range kindNames {
		if n == name {
			return i
		}
	}
	return -1
}

// sysShare is the share of its processes' CPU time spent in the kernel;
// ok is false when /proc gave nothing.
func (c *Cgroup) sysShare() (share float64, ok bool) {
	var usr, sys float64
	for _, p := range c.Procs {
		if p.StatKnown {
			usr += p.UserPct
			sys += p.SysPct
			ok = true
		}
	}
	if !ok || usr+sys == 0 {
		return 0, false
	}
	return sys / (usr + sys), true
}

func (c *Cgroup) cpuAndFaults() (usrPct, sysPct, faultsPerS float64, ok bool) {
	var faults uint64
	for _, p := range c.Procs {
		if p.StatKnown {
			usrPct += p.UserPct
			sysPct += p.SysPct
			faults += p.Faults
			ok = true
		}
	}
	if c.Window > 0 {
		faultsPerS = float64(faults) / c.Window.Seconds()
	}
	return usrPct, sysPct, faultsPerS, ok
}

func (c *Cgroup) name() string {
	if c.Path == "" {
		return fmt.Sprintf("cgroup id %d (removed)", c.ID)
	}
	return c.Path
}

// atLimit says whether the cgroup sits at its limit: usage near it at the
// end, or the limit hit during the window.
func (c *Cgroup) atLimit() bool {
	if c.State == nil {
		return false
	}
	if c.Before != nil && (c.State.LimitHits > c.Before.LimitHits || c.State.HighHits > c.Before.HighHits) {
		return true
	}
	l := c.State.EffectiveLimitBytes
	return l > 0 && float64(c.State.UsageBytes) >= nearLimit*float64(l)
}

func (c *Cgroup) oomKills() uint64 {
	if c.State == nil || c.Before == nil || c.State.OOMKills < c.Before.OOMKills {
		return 0
	}
	return c.State.OOMKills - c.Before.OOMKills
}

func (c *Cgroup) limitHits() (uint64, bool) {
	if c.State == nil || c.Before == nil || c.State.LimitHits < c.Before.LimitHits {
		return 0, false
	}
	return c.State.LimitHits - c.Before.LimitHits, true
}

// cgroupFinding judges the reclaim a cgroup's tasks did against its own
// limit (memcg and soft-limit reclaim); direct reclaim is the host's
// shortage and gets a finding of its own.
func (s *Snapshot) cgroupFinding(c *Cgroup) (finding.Finding, bool) {
	r := &c.Reclaim
	calls := r.memcgCalls()
	inFlight := 0
	for _, f := range r.InFlight {
		if k := kindIndex(f.Kind); k == kindMemcg || k == kindSoftlimit {
			inFlight++
		}
	}
	if calls == 0 && inFlight == 0 && r.UnmatchedEnds == 0 {
		return finding.Finding{}, false
	}
	total := r.memcgTime()
	longest, worst := r.longest(kindMemcg, kindSoftlimit)
	stall := 0.0
	if s.Window > 0 {
		stall = total.Seconds() / s.Window.Seconds()
	}
	eff := r.Efficiency()
	oom := c.oomKills()
	share, shareKnown := c.sysShare()
	atLimit := c.atLimit()

	livelock := atLimit && oom == 0 && eff >= 0 && eff < livelockEfficiencyPct && r.Scanned >= livelockMinScanned &&
		longest >= livelockMaxCall && (!shareKnown || share >= livelockSysShare)
	costly := stall >= stallThreads || longest >= slowCall || (eff >= 0 && eff < poorEfficiencyPct && r.Scanned >= poorMinScanned)

	f := finding.Finding{
		Investigator: "reclaim",
		Subjects:     s.cgroupSubjects(c, worst),
		Evidence:     s.cgroupEvidence(c, total, longest, stall),
		References:   []string{storyRef},
	}
	effText := "nothing scanned"
	if eff >= 0 {
		effText = fmt.Sprintf("%s efficiency (%s pages reclaimed of %s scanned)", human.Percent(eff), human.Count(r.Reclaimed), human.Count(r.Scanned))
	}
	switch {
	case livelock:
		f.ID, f.Severity = "reclaim.memcg-livelock", finding.Critical
		f.Title = fmt.Sprintf("Reclaim livelock in cgroup %s: calls last up to %s and free %s of what they scan, no OOM kill",
			c.name(), human.Duration(longest), human.Percent(eff))
		f.Summary = fmt.Sprintf("The cgroup is at its memory limit and its tasks spent %s in %d reclaim calls over %s (%.1f threads stalled on average) at %s. ",
			human.Duration(total), calls+uint64(inFlight), human.Duration(s.Window), stall, effText) + cpuSentence(c) +
			" This is the livelock of ClickHouse's \"The case of the vanishing CPU\": the cgroup is frozen doing nothing but reclaim, and it will not OOM because each call frees a little."
		f.Mechanism = "Every charge in a cgroup at its limit makes the charging task reclaim synchronously from the cgroup's own LRU lists, and a page is only freed if it was not referenced since the last scan. " +
			"When the cgroup's threads keep touching nearly every page, scans find them referenced and keep or activate them, so each call scans the whole LRU again and again, waiting for the CPU behind the other threads at every cond_resched, until it finds a few pages to free."
		f.Remediation = livelockRemediation(s.System.MGLRU)
	case atLimit && costly:
		f.ID, f.Severity = "reclaim.memcg-pressure", finding.Warning
		f.Title = fmt.Sprintf("cgroup %s is reclaiming at its memory limit: %.1f threads stalled in reclaim on average, calls up to %s, %s efficiency",
			c.name(), stall, human.Duration(longest), pctOrDash(eff))
		f.Summary = fmt.Sprintf("Its tasks made %d reclaim calls over %s, %s in all, at %s. ", calls+uint64(inFlight), human.Duration(s.Window), human.Duration(total), effText) + cpuSentence(c)
		if oom > 0 {
			f.Summary += fmt.Sprintf(" The kernel OOM-killed %d task(s) in it meanwhile.", oom)
		}
		f.Mechanism = "Each charge beyond the limit is paid for by the charging task, which reclaims from the cgroup's own LRU lists before its allocation (a page fault, a page-cache read) can go on. " +
			"Pages found referenced are kept or activated rather than freed, so the lower the efficiency the more each charge costs; the tasks' time goes to the kernel instead of their work."
		f.Remediation = pressureRemediation(c, s.System.MGLRU)
	default:
		f.ID, f.Severity = "reclaim.memcg-activity", finding.Info
		f.Title = fmt.Sprintf("cgroup %s reclaimed at its limit: %d calls, %s in all, %s efficiency", c.name(), calls+uint64(inFlight), human.Duration(total), pctOrDash(eff))
		f.Summary = fmt.Sprintf("Over %s its tasks made %d reclaim calls (longest %s) at %s; cheap enough not to matter.", human.Duration(s.Window), calls+uint64(inFlight), human.Duration(longest), effText)
	}
	return f, true
}

func cpuSentence(c *Cgroup) string {
	usr, sys, fps, ok := c.cpuAndFaults()
	if !ok {
		return ""
	}
	return fmt.Sprintf("Its processes ran %.0f%% usr and %.0f%% sys (pidstat's %%usr/%%system, summed) with %.0f page faults/s.", usr, sys, fps)
}

func (s *Snapshot) cgroupEvidence(c *Cgroup, total, longest time.Duration, stall float64) map[string]any {
	r := &c.Reclaim
	ev := map[string]any{
		"cgroup":                      c.name(),
		"window_s":                    human.Round(s.Window.Seconds(), 3),
		"reclaim_calls":               r.memcgCalls(),
		"reclaim_calls_in_flight":     len(r.InFlight),
		"reclaim_s_total":             human.Round(total.Seconds(), 3),
		"reclaim_cpu_s_total":         human.Round((r.CPU[kindMemcg] + r.CPU[kindSoftlimit]).Seconds(), 3),
		"max_reclaim_ms":              human.Round(float64(longest)/float64(time.Millisecond), 1),
		"reclaim_stalled_threads":     human.Round(stall, 2),
		"pages_scanned":               r.Scanned,
		"pages_reclaimed":             r.Reclaimed,
		"pages_ref_kept":              r.RefKeep,
		"pages_activated":             r.ActivateAnon + r.ActivateFile,
		"pages_deactivated":           r.Deactivated,
		"max_pages_scanned_per_call":  r.MaxCallScanned,
		"context_switches_in_reclaim": r.CtxSwitches,
	}
	if e := r.Efficiency(); e >= 0 {
		ev["efficiency_pct"] = human.Round(e, 2)
	}
	if h := r.Durations[kindMemcg]; h.Count > 0 {
		ev["p50_reclaim_ms"] = human.Round(float64(h.Quantile(0.5))/1e6, 2)
		ev["p99_reclaim_ms"] = human.Round(float64(h.Quantile(0.99))/1e6, 2)
	}
	if r.Worst != nil {
		ev["longest_call_pages_scanned"] = r.Worst.Scanned
		ev["longest_call_pages_reclaimed"] = r.Worst.Reclaimed
	}
	if r.UnmatchedEnds > 0 {
		ev["calls_begun_before_wolf"] = r.UnmatchedEnds
	}
	if r.Dirty+r.Writeback > 0 {
		ev["pages_dirty"] = r.Dirty
		ev["pages_writeback"] = r.Writeback
	}
	if st := c.State; st != nil {
		ev["cgroup_version"] = st.Version
		if st.EffectiveLimitBytes != memcg.Unlimited {
			ev["limit_bytes"] = st.EffectiveLimitBytes
		}
		ev["usage_bytes"] = st.UsageBytes
		for _, k := range []string{"active_file", "inactive_file", "active_anon", "inactive_anon"} {
			if v, ok := st.Stat[k]; ok {
				ev[k+"_bytes"] = v
			}
		}
	}
	if n, ok := c.limitHits(); ok {
		ev["limit_hits"] = n
	}
	if c.Before != nil {
		ev["oom_kills"] = c.oomKills()
	}
	if usr, sys, fps, ok := c.cpuAndFaults(); ok {
		ev["usr_pct"] = human.Round(usr, 1)
		ev["sys_pct"] = human.Round(sys, 1)
		ev["faults_per_s"] = human.Round(fps, 1)
	}
	// Where its tasks' CPU went, sampled (samples.go).
	if cs := c.CPU; s.Samples.Hz > 0 && cs.Busy > 0 {
		ev["cpu_samples"] = cs.Busy
		ev["kernel_cpu_pct"] = human.Round(100*float64(cs.Kernel)/float64(cs.Busy), 1)
		if s.Samples.Classified {
			ev["miss_path_cpu_pct"] = human.Round(100*float64(cs.Miss)/float64(cs.Busy), 1)
			ev["reclaim_sampled_cpu_pct"] = human.Round(100*float64(cs.Reclaim)/float64(cs.Busy), 1)
		}
	}
	if c.State != nil && c.State.Pressure != nil {
		ev["psi_some_pct"] = human.Round(c.PSISome, 2)
		ev["psi_full_pct"] = human.Round(c.PSIFull, 2)
	}
	// Its processes and its id: the keys the diagnosis stage joins a
	// lock's holder to its memory cgroup on.
	ev["cgroup_id"] = c.ID
	ev["controller"] = "memory"
	if len(c.Procs) > 0 {
		pids := make([]int, 0, len(c.Procs))
		for _, p := range c.Procs {
			pids = append(pids, p.PID)
		}
		ev["pids"] = pids
	}
	return ev
}

func (s *Snapshot) cgroupSubjects(c *Cgroup, worst *Call) []finding.Subject {
	detail := ""
	if st := c.State; st != nil {
		limit := "no limit"
		if st.EffectiveLimitBytes != memcg.Unlimited {
			limit = "limit " + human.MiB(st.EffectiveLimitBytes)
		}
		detail = fmt.Sprintf("cgroup v%d, %s, usage %s; file %s active / %s inactive, anon %s active / %s inactive",
			st.Version, limit, human.MiB(st.UsageBytes), human.MiB(int64(st.Stat["active_file"])), human.MiB(int64(st.Stat["inactive_file"])), human.MiB(int64(st.Stat["active_anon"])), human.MiB(int64(st.Stat["inactive_anon"])))
		if n, ok := c.limitHits(); ok {
			detail += fmt.Sprintf("; hit its limit %d times", n)
		}
		if c.Before != nil {
			detail += fmt.Sprintf("; %d OOM kills", c.oomKills())
		}
	}
	subs := []finding.Subject{{Role: finding.RoleCgroup, Cgroup: c.name(), CgroupID: c.ID, Detail: detail}}
	procs := slices.Clone(c.Procs)
	slices.SortStableFunc(procs, func(a, b Proc) int { return cmp.Compare(b.InReclaim, a.InReclaim) })
	for i, p := range procs {
		if i == maxProcSubjects {
			break
		}
		var parts []string
		if p.StatKnown {
			parts = append(parts, fmt.Sprintf("%.0f%% usr %.0f%% sys, %d faults (%d major)", p.UserPct, p.SysPct, p.Faults, p.MajFaults))
		}
		if p.Calls > 0 {
			eff := "-"
			if p.Scanned > 0 {
				eff = human.Percent(100 * float64(p.Reclaimed) / float64(p.Scanned))
			}
			parts = append(parts, fmt.Sprintf("%d reclaim calls, %s in reclaim (%s on CPU), longest %s, %s pages scanned, %s reclaimed (%s)",
				p.Calls, human.Duration(p.InReclaim), human.Duration(p.ReclaimCPU), human.Duration(p.MaxReclaim), human.Count(p.Scanned), human.Count(p.Reclaimed), eff))
		}
		if p.Threads > 1 {
			parts = append(parts, fmt.Sprintf("%d threads", p.Threads))
		}
		subs = append(subs, finding.Subject{Role: finding.RoleTask, PID: p.PID, Comm: p.Comm, Cgroup: c.name(), Detail: strings.Join(parts, "; ")})
	}
	if worst != nil {
		state := "longest reclaim call"
		if worst.InFlight {
			state = "longest reclaim call, still running"
		}
		subs = append(subs, finding.Subject{Role: finding.RoleTask, PID: worst.PID, TID: worst.TID, Comm: worst.Comm, Cgroup: c.name(),
			Detail: fmt.Sprintf("%s: %s %s reclaim, %s pages scanned, %s reclaimed", state, human.Duration(worst.Duration), worst.Kind, human.Count(worst.Scanned), human.Count(worst.Reclaimed))})
	}
	return subs
}

func livelockRemediation(m MGLRU) []string {
	out := []string{mglruAdvice(m)}
	return append(out,
		"Give the cgroup headroom: raise its limit (v1: memory.limit_in_bytes, v2: memory.max), or shrink its page-cache working set (fewer or smaller mmap'd files); with swap off only file pages can be reclaimed.",
		"Cut the thread count: with hundreds of threads per CPU a reclaiming task waits behind all of them at every cond_resched, so one call lasts seconds of wall time for milliseconds of CPU.",
		"On kernels that reclaim with mmap_lock held (the COS 5.10-6.1 kernels of \"The case of the vanishing CPU\"), upgrade: there `ps` and `perf` hang on /proc/PID/cmdline behind the reclaiming thread.",
		"Meanwhile detect and restart: alert when the cgroup's tasks are ~100% %system with page faults crawling (pidstat 1), or on cgroup v2 when memory.pressure full climbs.")
}

func pressureRemediation(c *Cgroup, m MGLRU) []string {
	out := []string{
		fmt.Sprintf("Give cgroup %s headroom: raise its limit (v1: memory.limit_in_bytes, v2: memory.max) or cut its working set.", c.name()),
	}
	if c.Reclaim.Efficiency() >= 0 && c.Reclaim.Efficiency() < 50 {
		out = append(out, mglruAdvice(m))
	}
	if c.Reclaim.Dirty+c.Reclaim.Writeback > c.Reclaim.Scanned/10 {
		out = append(out, "Much of what reclaim meets is dirty or under writeback: lower vm.dirty_ratio / vm.dirty_background_ratio (or the cgroup's dirty share) so that writeback runs ahead of reclaim.")
	}
	return out
}

func mglruAdvice(m MGLRU) string {
	switch m.State {
	case MGLRUOff:
		return "Enable the multi-generational LRU: echo y > /sys/kernel/mm/lru_gen/enabled (immediate, no reboot; it cured the livelock of \"The case of the vanishing CPU\" on COS 109), then watch for lru_lock contention in evict_folios."
	case MGLRUAbsent:
		return "This kernel has no multi-generational LRU (built without CONFIG_LRU_GEN); a kernel with it enabled (echo y > /sys/kernel/mm/lru_gen/enabled) cured the livelock of \"The case of the vanishing CPU\"."
	case MGLRUOn:
		return "MGLRU is already on (" + m.Raw + "): if reclaim still burns CPU, look for lru_lock spinlock contention in evict_folios (the epilogue of \"The case of the vanishing CPU\")."
	}
	return "Check /sys/kernel/mm/lru_gen/enabled: the multi-generational LRU cured the livelock of \"The case of the vanishing CPU\"."
}

// directFinding: tasks reclaiming because the host itself is short.
func (s *Snapshot) directFinding() (finding.Finding, bool) {
	var calls uint64
	var total, longest time.Duration
	var worst *Call
	var names []string
	var subs []finding.Subject
	for _, c := range s.Cgroups {
		r := &c.Reclaim
		calls += r.Calls[kindDirect] + r.Calls[kindNode]
		total += r.Time[kindDirect] + r.Time[kindNode]
		for _, f := range r.InFlight {
			if k := kindIndex(f.Kind); k == kindDirect || k == kindNode {
				total += f.inWindow()
				calls++
			}
		}
		if d, w := r.longest(kindDirect, kindNode); d > longest {
			longest = d
			if w != nil {
				worst = w
			}
		}
		if r.Calls[kindDirect]+r.Calls[kindNode] > 0 {
			names = append(names, c.name())
			subs = append(subs, finding.Subject{Role: finding.RoleCgroup, Cgroup: c.name(),
				Detail: fmt.Sprintf("%d direct reclaim calls, %s", r.Calls[kindDirect]+r.Calls[kindNode], human.Duration(r.Time[kindDirect]+r.Time[kindNode]))})
		}
	}
	if calls == 0 {
		return finding.Finding{}, false
	}
	if worst != nil {
		subs = append(subs, finding.Subject{Role: finding.RoleTask, PID: worst.PID, TID: worst.TID, Comm: worst.Comm,
			Detail: fmt.Sprintf("longest direct reclaim: %s, %s pages scanned, %s reclaimed", human.Duration(worst.Duration), human.Count(worst.Scanned), human.Count(worst.Reclaimed))})
	}
	sev := finding.Info
	if total >= slowCall || longest >= slowCall {
		sev = finding.Warning
	}
	return finding.Finding{
		ID: "reclaim.direct", Investigator: "reclaim", Severity: sev,
		Title:   fmt.Sprintf("The host is short of memory: %d direct reclaim calls stalled tasks for %s (longest %s)", calls, human.Duration(total), human.Duration(longest)),
		Summary: fmt.Sprintf("Allocations outside any cgroup limit found too little free memory and reclaimed themselves, in cgroups %s; kswapd did not keep up.", strings.Join(names, ", ")),
		Mechanism: "When free memory falls below the min watermark, an allocating task reclaims synchronously (direct reclaim) before it may allocate. " +
			"kswapd is meant to keep free memory above the low watermark so that this never happens.",
		Subjects: subs,
		Evidence: map[string]any{"direct_reclaim_calls": calls, "reclaim_s_total": human.Round(total.Seconds(), 3), "max_reclaim_ms": human.Round(float64(longest)/1e6, 1),
			"kswapd_wakes": s.Kswapd.Wakes, "kswapd_pages_scanned": s.Kswapd.Scanned, "kswapd_pages_reclaimed": s.Kswapd.Reclaimed},
		Remediation: []string{
			"Raise vm.min_free_kbytes or vm.watermark_scale_factor so that kswapd starts earlier and direct reclaim stays rare.",
			"Find the memory's owners (the cgroups above) and bound them with cgroup limits.",
		},
	}, true
}

var throttleReasons = [4]string{"writeback", "isolated", "noprogress", "congested"}

func (s *Snapshot) throttleFinding() (finding.Finding, bool) {
	var n [4]uint64
	var delay time.Duration
	var subs []finding.Subject
	for _, c := range s.Cgroups {
		var cn uint64
		for i, v := range c.Reclaim.Throttled {
			n[i] += v
			cn += v
		}
		delay += c.Reclaim.ThrottledFor
		if cn > 0 {
			subs = append(subs, finding.Subject{Role: finding.RoleCgroup, Cgroup: c.name(), Detail: fmt.Sprintf("throttled %d times, %s", cn, human.Duration(c.Reclaim.ThrottledFor))})
		}
	}
	total := n[0] + n[1] + n[2] + n[3]
	if total == 0 {
		return finding.Finding{}, false
	}
	var parts []string
	ev := map[string]any{"throttled_total": total, "throttled_s_total": human.Round(delay.Seconds(), 3)}
	for i, v := range n {
		if v > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", v, throttleReasons[i]))
			ev["throttled_"+throttleReasons[i]] = v
		}
	}
	sev := finding.Info
	if delay >= slowCall {
		sev = finding.Warning
	}
	return finding.Finding{
		ID: "reclaim.throttled", Investigator: "reclaim", Severity: sev,
		Title:     fmt.Sprintf("Reclaimers were throttled %d times for %s (%s)", total, human.Duration(delay), strings.Join(parts, ", ")),
		Summary:   "Reclaim put the reclaiming tasks to sleep because it could not make progress right away.",
		Mechanism: "reclaim_throttle() sleeps a reclaimer when too many pages are under writeback (WRITEBACK), too many are isolated by concurrent reclaimers (ISOLATED), or reclaim made no progress (NOPROGRESS). Each sleep is a stall of the allocating task.",
		Subjects:  subs,
		Evidence:  ev,
		Remediation: []string{
			"ISOLATED: fewer concurrent reclaimers (fewer threads charging one cgroup); WRITEBACK: lower vm.dirty_ratio so that reclaim meets clean pages; NOPROGRESS: the cgroup needs more memory.",
		},
	}, true
}

func (s *Snapshot) kswapdFinding() (finding.Finding, bool) {
	k := &s.Kswapd
	if k.Wakes == 0 && k.Scanned == 0 {
		return finding.Finding{}, false
	}
	eff := "-"
	if k.Scanned > 0 {
		eff = human.Percent(100 * float64(k.Reclaimed) / float64(k.Scanned))
	}
	return finding.Finding{
		ID: "reclaim.kswapd", Investigator: "reclaim", Severity: finding.Info,
		Title:   fmt.Sprintf("kswapd woke %d times, awake %s, reclaimed %s of %s pages scanned (%s)", k.Wakes, human.Duration(k.Awake), human.Count(k.Reclaimed), human.Count(k.Scanned), eff),
		Summary: fmt.Sprintf("Background reclaim ran; %d allocations asked for it. kswapd keeps the host's free memory above the watermarks; it does not enforce cgroup limits.", k.Requests),
		Evidence: map[string]any{"kswapd_wakes": k.Wakes, "kswapd_awake_s": human.Round(k.Awake.Seconds(), 3), "pages_scanned": k.Scanned, "pages_reclaimed": k.Reclaimed,
			"kswapd_requests": k.Requests},
	}, true
}

func (s *Snapshot) pressureFinding() (finding.Finding, bool) {
	sys := &s.System
	if !sys.HasPSI || (sys.PSIFull < psiFullWarnPct && sys.PSISome < psiSomeWarnPct) {
		return finding.Finding{}, false
	}
	return finding.Finding{
		ID: "reclaim.psi", Investigator: "reclaim", Severity: finding.Warning,
		Title:     fmt.Sprintf("Memory pressure: tasks stalled on memory %.1f%% of the time (all of them %.1f%%)", sys.PSISome, sys.PSIFull),
		Summary:   fmt.Sprintf("/proc/pressure/memory over the last %s: some %.1f%%, full %.1f%%. Stalls count reclaim, refaults of evicted pages and waits for swap.", human.Duration(s.Window), sys.PSISome, sys.PSIFull),
		Mechanism: "Pressure stall information counts the time tasks could have run but waited on memory: in reclaim, in refaulting a page evicted shortly before (thrashing), or on swap-in.",
		Evidence:  map[string]any{"psi_some_pct": human.Round(sys.PSISome, 2), "psi_full_pct": human.Round(sys.PSIFull, 2), "window_s": human.Round(s.Window.Seconds(), 3)},
		Remediation: []string{
			"The reclaim findings name the cgroups that stall; on cgroup v2 each has its own memory.pressure to alert on.",
		},
	}, true
}

// Histograms turns the snapshot's distributions into the report's.
func (s *Snapshot) Histograms() []finding.Histogram {
	var out []finding.Histogram
	for _, c := range s.Cgroups {
		for k := range numKinds {
			if h := c.Reclaim.Durations[k]; h.Count > 0 {
				out = append(out, h.Report("reclaim_duration_us", "us", map[string]string{"kind": kindNames[k], "cgroup": c.name()}, 1000))
			}
		}
		if h := c.Reclaim.ScannedPerCall; h.Count > 0 {
			out = append(out, h.Report("reclaim_scanned_pages", "pages", map[string]string{"cgroup": c.name()}, 1))
		}
	}
	if s.Kswapd.AwakeHist.Count > 0 {
		out = append(out, s.Kswapd.AwakeHist.Report("kswapd_awake_us", "us", nil, 1000))
	}
	return out
}

// pctOrDash is an efficiency, or "-" when nothing was scanned (-1).
func pctOrDash(v float64) string {
	if v < 0 {
		return "-"
	}
	return human.Percent(v)
}
